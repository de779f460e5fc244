/**
 * The internal endpoints the operator console is built on, through a real server on both engines: the console
 * session (reload, sign out), agent list/detail/settings, multipart knowledge upload, versions (list, what was
 * ingested, comparison with the published one), webhook endpoints with their delivery log and resend, and
 * conversations (list with filters, read). Each refuses bad input with the assistant's envelope, and another
 * organization's agent is not found.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENGINES, startTestServer, type TestServer } from "../../support/server.ts";
import { call, createAgent, createVersion, eventually, HANDBOOK, OWNER_PASSWORD, operatorKey, startReceiver } from "./support.ts";

const ENV = { WEBHOOK_ALLOW_HOSTS: "127.0.0.1", WEBHOOK_POLL_MS: "50", WEBHOOK_RETRY_BASE_MS: "40", WEBHOOK_MAX_ATTEMPTS: "2" };

function multipart(files: Array<{ name: string; text: string; title?: string; url?: string }>, instructions?: string): FormData {
  const form = new FormData();
  for (const f of files) {
    form.append("file", new Blob([f.text], { type: "application/octet-stream" }), f.name);
    form.append("title", f.title ?? "");
    form.append("url", f.url ?? "");
  }
  if (instructions) form.append("instructions", instructions);
  return form;
}

async function upload(server: TestServer, key: string, agentId: string, form: FormData) {
  const res = await fetch(`${server.url}/api/internal/rag/agents/${agentId}/versions`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: form });
  return { status: res.status, body: (await res.json()) as any };
}

function expectError(res: { status: number; body: any }, status: number, code?: string) {
  expect(res.status).toBe(status);
  expect(res.body).toEqual({ error: { code: code ?? expect.any(String), message: expect.any(String) } });
}

describe.each(ENGINES)("console endpoints on %s", (engine) => {
  let server: TestServer;
  let key: string;
  const saved: Record<string, string | undefined> = {};

  beforeAll(async () => {
    for (const [k, v] of Object.entries(ENV)) (saved[k] = process.env[k]), (process.env[k] = v);
    server = await startTestServer(engine);
    key = await operatorKey(server);
  });
  afterAll(async () => {
    await server?.close();
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  });

  it("tells the signed-in operator with the CSRF token after a reload, and signs out", async () => {
    const login = await call(server, "POST", "/api/internal/auth/login", { body: { email: server.owner.email, password: OWNER_PASSWORD } });
    const cookie = login.headers.get("set-cookie")!.split(";")[0]!;
    const session = await call(server, "GET", "/api/internal/auth/session", { headers: { cookie } });
    expect(session.status).toBe(200);
    expect(session.body).toEqual({ user_id: expect.any(Number), email: server.owner.email, csrf_token: login.body.csrf_token });
    expect((await call(server, "GET", "/api/internal/auth/session", { key })).body.csrf_token).toBeUndefined();

    expectError(await call(server, "POST", "/api/internal/auth/logout", { headers: { cookie } }), 403, "CSRF_FAILED");
    const out = await call(server, "POST", "/api/internal/auth/logout", { headers: { cookie, "x-csrf-token": login.body.csrf_token } });
    expect(out.status).toBe(200);
    expect(out.body).toEqual({ signed_out: true });
    expect(out.headers.get("set-cookie")).toMatch(/^chorus_console=; .*Max-Age=0/);
    expectError(await call(server, "GET", "/api/internal/auth/session", { headers: { cookie } }), 401, "UNAUTHORIZED");
    expectError(await call(server, "GET", "/api/internal/rag/agents"), 401, "UNAUTHORIZED");
  });

  it("lists the organization's agents, shows one, and changes its settings", async () => {
    const agent = await createAgent(server, key, { name: "Listed", allowed_origins: ["shop.example"] });
    const list = await call(server, "GET", "/api/internal/rag/agents", { key });
    expect(list.status).toBe(200);
    const listed = list.body.agents.find((a: any) => a.agent_id === agent.agent_id);
    expect(listed).toMatchObject({ name: "Listed", agent_key: agent.agent_key, allowed_origins: ["shop.example"], published_version_id: null, versions: 0 });
    expect(JSON.stringify(list.body)).not.toContain(agent.secret);

    const changed = await call(server, "PATCH", `/api/internal/rag/agents/${agent.agent_id}`, {
      key,
      body: { name: "Renamed", allowed_origins: ["https://Docs.Example/", "*.example.org"], rate_limit_per_minute: 7 },
    });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({ agent_id: agent.agent_id, name: "Renamed", allowed_origins: ["docs.example", "*.example.org"], rate_limit_per_minute: 7, publish_history: [] });
    const shown = await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}`, { key });
    expect(shown.body.name).toBe("Renamed");

    expectError(await call(server, "PATCH", `/api/internal/rag/agents/${agent.agent_id}`, { key, body: {} }), 400, "VALIDATION_ERROR");
    expectError(await call(server, "PATCH", `/api/internal/rag/agents/${agent.agent_id}`, { key, body: { rate_limit_per_minute: 0 } }), 400, "VALIDATION_ERROR");
    expectError(await call(server, "PATCH", `/api/internal/rag/agents/${agent.agent_id}`, { key, body: { secret: "x" } }), 400, "VALIDATION_ERROR");
    expectError(await call(server, "GET", "/api/internal/rag/agents/00000000-0000-0000-0000-000000000000", { key }), 404, "NOT_FOUND");
    expectError(await call(server, "GET", "/api/internal/rag/agents/not-a-uuid", { key }), 404, "NOT_FOUND");
  });

  it("creates a version from uploaded Markdown, HTML and text files, shows what was ingested, and compares it with the published one", async () => {
    const agent = await createAgent(server, key);
    const first = await createVersion(server, key, agent.agent_id, HANDBOOK.slice(0, 2));
    expect((await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: first } })).status).toBe(200);

    const form = multipart(
      [
        { name: "refunds.md", title: "Refund policy", text: "# Refunds\n\nRefunds are processed within 30 days of the request.\n\nRefunds go back to the card used for the purchase.\n" },
        { name: "hours.html", url: "https://shop.example/hours", text: "<h1>Opening hours</h1><p>The desk is open Monday to Friday.</p>" },
        { name: "notes.txt", title: "", text: "Plain notes about gift cards." },
      ],
      "Answer briefly.",
    );
    const added = await upload(server, key, agent.agent_id, form);
    expect(added.status).toBe(201);
    expect(added.body).toMatchObject({ version_id: expect.any(String), documents: 3 });
    expect(added.body.chunks).toBeGreaterThanOrEqual(3);

    const versions = await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/versions`, { key });
    expect(versions.body.versions.map((v: any) => v.version_id).sort()).toEqual([first, added.body.version_id].sort());
    const ingested = await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/versions/${added.body.version_id}`, { key });
    expect(ingested.status).toBe(200);
    expect(ingested.body.instructions).toBe("Answer briefly.");
    expect(ingested.body.documents.map((d: any) => d.title)).toEqual(["Refund policy", "hours", "notes"]);
    expect(ingested.body.documents[0]).toMatchObject({ characters: expect.any(Number), chunks: expect.any(Number), text: expect.stringContaining("30 days") });

    const diff = await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/versions/${added.body.version_id}/diff`, { key });
    expect(diff.status).toBe(200);
    expect(diff.body).toMatchObject({ base_version_id: first, version_id: added.body.version_id, instructions_changed: true });
    const byTitle = Object.fromEntries(diff.body.documents.map((d: any) => [d.title, d]));
    expect(byTitle["Refund policy"].change).toBe("changed");
    expect(byTitle["Refund policy"].lines_added).toBeGreaterThan(0);
    expect(byTitle["Refund policy"].patch).toContain("+");
    expect(byTitle["Shipping"].change).toBe("removed");
    expect(byTitle["hours"].change).toBe("added");
    const same = await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/versions/${first}/diff?against=${first}`, { key });
    expect(same.body.documents.every((d: any) => d.change === "unchanged")).toBe(true);

    // Bad uploads: no file, an unsupported type, bytes that are not UTF-8, a malformed body.
    expectError(await upload(server, key, agent.agent_id, new FormData()), 400);
    expectError(await upload(server, key, agent.agent_id, multipart([{ name: "slides.pdf", text: "%PDF" }])), 415, "UNSUPPORTED_MEDIA_TYPE");
    const binary = new FormData();
    binary.append("file", new Blob([new Uint8Array([0xff, 0xfe, 0x00, 0xc3])]), "broken.txt");
    expectError(await upload(server, key, agent.agent_id, binary), 400, "BAD_REQUEST");
    const malformed = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, {
      key,
      raw: "not multipart",
      headers: { "content-type": "multipart/form-data; boundary=xyz" },
    });
    expectError(malformed, 400, "INVALID_MULTIPART");
    expectError(await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/versions/00000000-0000-0000-0000-000000000000`, { key }), 404);
    const fresh = await createAgent(server, key);
    const unpublished = await createVersion(server, key, fresh.agent_id);
    expectError(await call(server, "GET", `/api/internal/rag/agents/${fresh.agent_id}/versions/${unpublished}/diff`, { key }), 409, "NOT_PUBLISHED");
    expectError(await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/versions/${first}/diff?against=nope`, { key }), 400, "BAD_REQUEST");
  });

  it("lists webhook endpoints and their deliveries with retries, and resends one", async () => {
    const statuses = [500, 500];
    const receiver = await startReceiver(() => statuses.shift() ?? 200);
    try {
      const agent = await createAgent(server, key);
      const version = await createVersion(server, key, agent.agent_id);
      await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: version } });
      const hook = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/webhooks`, { key, body: { url: `${receiver.url}/hook`, events: ["conversation.created"] } });
      expect(hook.status).toBe(201);
      const hooks = await call(server, "GET", `/api/internal/rag/agents/${agent.agent_id}/webhooks`, { key });
      expect(hooks.body.webhooks).toEqual([
        { webhook_id: hook.body.webhook_id, url: `${receiver.url}/hook`, events: ["conversation.created"], disabled: false, disabled_reason: null, created_at: expect.any(String) },
      ]);
      expect(JSON.stringify(hooks.body)).not.toContain(hook.body.secret);

      await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "How long do refunds take?" } });
      const path = `/api/internal/rag/agents/${agent.agent_id}/webhooks/deliveries`;
      const failed = await eventually(
        () => call(server, "GET", path, { key }),
        (res) => res.body.deliveries[0]?.status === "failed",
      );
      expect(failed.body.deliveries).toHaveLength(1);
      const delivery = failed.body.deliveries[0];
      expect(delivery).toMatchObject({ event_type: "conversation.created", status: "failed", attempts: 2, last_status: 500, webhook_id: hook.body.webhook_id });

      const resent = await call(server, "POST", `${path}/${delivery.delivery_id}/resend`, { key });
      expect(resent.status).toBe(202);
      const after = await eventually(
        () => call(server, "GET", path, { key }),
        (res) => res.body.deliveries[0]?.status === "delivered",
      );
      expect(resent.body).toEqual({ delivery_id: delivery.delivery_id });
      expect(after.body.deliveries).toHaveLength(1);
      expect(after.body.deliveries[0]).toMatchObject({ message_id: delivery.message_id, status: "delivered", attempts: 1, last_status: 200, last_error: null });
      expect(receiver.received).toHaveLength(3);
      const ids = receiver.received.map((h) => h.headers["webhook-id"]);
      expect(new Set(ids)).toEqual(new Set([delivery.message_id]));

      expectError(await call(server, "POST", `${path}/999999999/resend`, { key }), 404, "NOT_FOUND");
      expectError(await call(server, "POST", `${path}/abc/resend`, { key }), 404, "NOT_FOUND");
      expectError(await call(server, "GET", `${path}?limit=0`, { key }), 400, "BAD_REQUEST");
    } finally {
      await receiver.close();
    }
  });

  it("lists conversations by agent and date, and reads one with its sources", async () => {
    const agent = await createAgent(server, key);
    const other = await createAgent(server, key);
    for (const a of [agent, other]) {
      const version = await createVersion(server, key, a.agent_id);
      await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: a.agent_id, version_id: version } });
    }
    const asked = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "How long do refunds take?" } });
    expect(asked.status).toBe(200);
    await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "And where does the money go?", session_id: asked.body.session_id } });
    await call(server, "POST", `/api/embed/${other.agent_key}`, { body: { question: "When is the desk open?" } });

    const mine = await call(server, "GET", `/api/internal/rag/conversations?agent_id=${agent.agent_id}`, { key });
    expect(mine.status).toBe(200);
    expect(mine.body.conversations).toEqual([
      { session_id: asked.body.session_id, agent_id: agent.agent_id, agent_name: "Helper", user_id: null, created_at: expect.any(String), messages: 4, first_question: "How long do refunds take?" },
    ]);
    const today = new Date().toISOString().slice(0, 10);
    const all = await call(server, "GET", `/api/internal/rag/conversations?since=${today}`, { key });
    expect(all.body.conversations.map((c: any) => c.agent_id)).toEqual(expect.arrayContaining([agent.agent_id, other.agent_id]));
    const before = await call(server, "GET", `/api/internal/rag/conversations?until=2000-01-01`, { key });
    expect(before.body.conversations).toEqual([]);

    const read = await call(server, "GET", `/api/internal/rag/conversations/${asked.body.session_id}`, { key });
    expect(read.status).toBe(200);
    expect(read.body.messages.map((m: any) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    expect(read.body.messages[1].sources.length).toBeGreaterThan(0);

    expectError(await call(server, "GET", "/api/internal/rag/conversations?since=yesterday", { key }), 400, "BAD_REQUEST");
    expectError(await call(server, "GET", "/api/internal/rag/conversations?agent_id=x", { key }), 400, "BAD_REQUEST");
    expectError(await call(server, "GET", "/api/internal/rag/conversations?limit=9999", { key }), 400, "BAD_REQUEST");
    expectError(await call(server, "GET", "/api/internal/rag/conversations?agent_id=00000000-0000-0000-0000-000000000000", { key }), 404, "NOT_FOUND");
    expectError(await call(server, "GET", "/api/internal/rag/conversations/00000000-0000-0000-0000-000000000000", { key }), 404, "NOT_FOUND");
  });

  it("lets the server's own pages ask any agent (the console's test box), whatever its allowed origins", async () => {
    const agent = await createAgent(server, key, { allowed_origins: ["shop.example"] });
    const version = await createVersion(server, key, agent.agent_id);
    await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: version } });
    const own = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "Shipping?" }, headers: { origin: server.url } });
    expect(own.status).toBe(200);
    const foreign = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "Shipping?" }, headers: { origin: "https://evil.example" } });
    expectError(foreign, 403, "ORIGIN_NOT_ALLOWED");
  });
});
