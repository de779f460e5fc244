/**
 * Webhooks through a real server on both engines, delivered to a local receiver on 127.0.0.1 (allowed through
 * WEBHOOK_ALLOW_HOSTS) and verified with the `standardwebhooks` package: the three conversation events, retries
 * with the same webhook-id, 410 disabling the endpoint, the mobile manifest sync, and the address guard.
 */
import crypto from "node:crypto";
import { Webhook } from "standardwebhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkWebhookUrl, isForbiddenAddress, postWebhook, signWebhook } from "../../../actors/assistant/webhooks.ts";
import { expectedUserHash } from "../../../gateway/assistant/embed.ts";
import { ENGINES, startTestServer, type TestServer } from "../../support/server.ts";
import { call, createAgent, eventually, operatorKey, publishedAgent, startReceiver } from "./support.ts";

type Receiver = Awaited<ReturnType<typeof startReceiver>>;

const ENV = { WEBHOOK_ALLOW_HOSTS: "127.0.0.1", WEBHOOK_POLL_MS: "50", WEBHOOK_RETRY_BASE_MS: "40", WEBHOOK_MAX_ATTEMPTS: "3" };

describe.each(ENGINES)("webhooks on %s", (engine) => {
  let server: TestServer;
  let key: string;
  let receiver: Receiver;
  /** Per path: statuses to answer, in turn (then 200). */
  const script = new Map<string, number[]>();
  const saved: Record<string, string | undefined> = {};

  beforeAll(async () => {
    for (const [k, v] of Object.entries(ENV)) (saved[k] = process.env[k]), (process.env[k] = v);
    receiver = await startReceiver((hook) => script.get(hook.path)?.shift() ?? 200);
    server = await startTestServer(engine);
    key = await operatorKey(server);
  });
  afterAll(async () => {
    await server?.close();
    await receiver?.close();
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  });

  const addWebhook = (agentId: string, path: string, events = ["conversation.created", "message.received", "message.sent"]) =>
    call(server, "POST", `/api/internal/rag/agents/${agentId}/webhooks`, { key, body: { url: `${receiver.url}${path}`, events } });

  it("delivers conversation.created, message.received and message.sent, signed per Standard Webhooks", async () => {
    const agent = await publishedAgent(server, key);
    const path = `/hooks/${crypto.randomUUID()}`;
    const hook = await addWebhook(agent.agent_id, path);
    expect(hook.status).toBe(201);
    expect(hook.body.secret).toMatch(/^whsec_[A-Za-z0-9+/=]+$/);

    const asked = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "How long do refunds take?", user_id: "u-7", user_hash: expectedUserHash(agent.secret, "u-7") } });
    expect(asked.status).toBe(200);
    const hooks = await receiver.until((all) => all.filter((h) => h.path === path).length >= 3);
    const mine = hooks.filter((h) => h.path === path);
    const verifier = new Webhook(hook.body.secret);
    const events = mine.map((h) => verifier.verify(h.body, h.headers) as any);
    const byType = Object.fromEntries(events.map((e) => [e.type, e]));
    expect(Object.keys(byType).sort()).toEqual(["conversation.created", "message.received", "message.sent"]);
    expect(byType["conversation.created"].data).toMatchObject({ session_id: asked.body.session_id, agent_id: agent.agent_id, user_id: "u-7" });
    expect(byType["message.received"].data.message).toMatchObject({ role: "user", content: "How long do refunds take?" });
    expect(byType["message.sent"].data.message).toMatchObject({ role: "assistant", content: asked.body.answer });
    for (const h of mine) {
      expect(h.headers["webhook-id"]).toMatch(/^msg_/);
      expect(Math.abs(Number(h.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(30);
      expect(h.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/=]+$/);
    }
    // a tampered body or a replayed (old) timestamp does not verify
    expect(() => verifier.verify(mine[0]!.body + " ", mine[0]!.headers)).toThrow();
    const old = Math.floor(Date.now() / 1000) - 3600;
    const replay = { ...mine[0]!.headers, "webhook-timestamp": String(old), "webhook-signature": signWebhook(hook.body.secret, mine[0]!.headers["webhook-id"]!, old, mine[0]!.body) };
    expect(() => verifier.verify(mine[0]!.body, replay)).toThrow(/timestamp/i);
  });

  it("sends only the subscribed events", async () => {
    const agent = await publishedAgent(server, key);
    const path = `/hooks/${crypto.randomUUID()}`;
    await addWebhook(agent.agent_id, path, ["message.sent"]);
    await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "shipping" } });
    await receiver.until((all) => all.some((h) => h.path === path));
    await new Promise((r) => setTimeout(r, 200));
    expect(receiver.received.filter((h) => h.path === path).map((h) => JSON.parse(h.body).type)).toEqual(["message.sent"]);
  });

  it("retries a failed delivery with the same webhook-id and a fresh signature", async () => {
    const agent = await publishedAgent(server, key);
    const path = `/hooks/${crypto.randomUUID()}`;
    script.set(path, [500, 503]);
    const hook = await addWebhook(agent.agent_id, path, ["conversation.created"]);
    await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
    const hooks = (await receiver.until((all) => all.filter((h) => h.path === path).length >= 3)).filter((h) => h.path === path);
    expect(new Set(hooks.map((h) => h.headers["webhook-id"])).size).toBe(1);
    const verifier = new Webhook(hook.body.secret);
    for (const h of hooks) expect(() => verifier.verify(h.body, h.headers)).not.toThrow();
    const row = await eventually(
      () => server.node.store.db.selectFrom("webhook_outbox").selectAll().where("msg_id", "=", hooks[0]!.headers["webhook-id"]!).executeTakeFirstOrThrow(),
      (r) => r.status !== "pending",
    );
    expect(row).toMatchObject({ status: "delivered", attempts: 3, last_status: 200 });
  });

  it("signs a retry made an hour later with its own time, so receivers refusing replayed timestamps accept it", async () => {
    const agent = await publishedAgent(server, key);
    const path = `/hooks/${crypto.randomUUID()}`;
    const hook = await addWebhook(agent.agent_id, path, ["conversation.created"]);
    await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
    const [first] = (await receiver.until((all) => all.some((h) => h.path === path))).filter((h) => h.path === path);
    // the same delivery, as if its first attempts had failed an hour ago and it were due again now
    const hourAgo = Date.now() - 3600_000;
    await eventually(
      () => server.node.store.db.selectFrom("webhook_outbox").select("status").where("msg_id", "=", first!.headers["webhook-id"]!).executeTakeFirstOrThrow(),
      (r) => r.status === "delivered",
    );
    await server.node.store.db
      .updateTable("webhook_outbox")
      .set({ status: "pending", attempts: 2, next_attempt_at: Date.now(), created_at: Math.floor(hourAgo / 1000) })
      .where("msg_id", "=", first!.headers["webhook-id"]!)
      .execute();
    const again = (await receiver.until((all) => all.filter((h) => h.path === path).length >= 2)).filter((h) => h.path === path)[1]!;
    expect(again.headers["webhook-id"]).toBe(first!.headers["webhook-id"]);
    expect(again.body).toBe(first!.body);
    expect(() => new Webhook(hook.body.secret).verify(again.body, again.headers)).not.toThrow();
    // while the first request, replayed later with its old timestamp, would be refused by the receiver
    const then = Math.floor(hourAgo / 1000);
    const replayed = { ...first!.headers, "webhook-timestamp": String(then), "webhook-signature": signWebhook(hook.body.secret, first!.headers["webhook-id"]!, then, first!.body) };
    expect(() => new Webhook(hook.body.secret).verify(first!.body, replayed)).toThrow(/timestamp/i);
  });

  it("gives up after the last attempt", async () => {
    const agent = await publishedAgent(server, key);
    const path = `/hooks/${crypto.randomUUID()}`;
    script.set(path, [500, 500, 500, 500, 500]);
    await addWebhook(agent.agent_id, path, ["conversation.created"]);
    await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
    await receiver.until((all) => all.filter((h) => h.path === path).length >= 3);
    const row = await eventually(
      () => server.node.store.db.selectFrom("webhook_outbox").selectAll().where("url", "=", `${receiver.url}${path}`).executeTakeFirstOrThrow(),
      (r) => r.status !== "pending",
    );
    expect(row).toMatchObject({ status: "failed", attempts: 3, last_status: 500 });
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.received.filter((h) => h.path === path)).toHaveLength(3);
  });

  it("disables an endpoint that answers 410 Gone", async () => {
    const agent = await publishedAgent(server, key);
    const path = `/hooks/${crypto.randomUUID()}`;
    script.set(path, [410]);
    const hook = await addWebhook(agent.agent_id, path, ["conversation.created"]);
    await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
    await receiver.until((all) => all.some((h) => h.path === path));
    const endpoint = await eventually(
      () => server.node.store.db.selectFrom("webhook_endpoints").selectAll().where("id", "=", hook.body.webhook_id).executeTakeFirstOrThrow(),
      (e) => e.disabled,
    );
    expect(endpoint.disabled).toBe(true);
    await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
    await new Promise((r) => setTimeout(r, 300));
    expect(receiver.received.filter((h) => h.path === path)).toHaveLength(1);
  });

  it("delivers the runtime manifest to the mobile backend on sync, signed with the agent's mobile secret", async () => {
    const path = `/mobile/${crypto.randomUUID()}`;
    const agent = await publishedAgent(server, key, { mobile_webhook_url: `${receiver.url}${path}` });
    expect(agent.mobile_webhook_secret).toMatch(/^whsec_/);
    const res = await call(server, "POST", "/api/internal/rag/sync/mobile", { key, body: { agent_id: agent.agent_id } });
    expect(res.status).toBe(202);
    expect(res.body.delivery_id).toMatch(/^msg_/);
    const [hook] = (await receiver.until((all) => all.some((h) => h.path === path))).filter((h) => h.path === path);
    const event = new Webhook(agent.mobile_webhook_secret!).verify(hook!.body, hook!.headers) as any;
    expect(event.type).toBe("agent.runtime_manifest");
    expect(event.data.manifest).toMatchObject({ agent_id: agent.agent_id, version_id: agent.versionId });
    const manifest = await fetch(`${server.url}/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { headers: { authorization: `Bearer ${key}` } });
    expect(event.data.etag).toBe(manifest.headers.get("etag"));
    expect(hook!.headers["webhook-id"]).toBe(res.body.delivery_id);

    const without = await createAgent(server, key);
    expect((await call(server, "POST", "/api/internal/rag/sync/mobile", { key, body: { agent_id: without.agent_id } })).status).toBe(409);
  });

  it("refuses webhook URLs on private addresses and bad schemes", async () => {
    const agent = await createAgent(server, key);
    for (const url of ["http://10.0.0.5/hook", "http://169.254.169.254/latest", "http://[::1]:8080/", "ftp://example.com/", "not a url", "http://user:pw@example.com/"]) {
      const res = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/webhooks`, { key, body: { url, events: ["message.sent"] } });
      expect(res.status, url).toBe(400);
    }
    const badEvent = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/webhooks`, { key, body: { url: "https://example.com/", events: ["nope"] } });
    expect(badEvent.status).toBe(400);
  });
});

describe("the webhook address guard", () => {
  it("classifies loopback, private, link-local and mapped addresses", () => {
    for (const a of ["127.0.0.1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "::", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1"]) {
      expect(isForbiddenAddress(a), a).toBe(true);
    }
    for (const a of ["8.8.8.8", "1.1.1.1", "172.32.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]) expect(isForbiddenAddress(a), a).toBe(false);
  });

  it("refuses the other spellings of loopback and private addresses", () => {
    const spellings = [
      "::127.0.0.1", // IPv4-compatible
      "::ffff:0:7f00:1", // IPv4-translated
      "64:ff9b::7f00:1", // NAT64
      "2002:7f00:1::", // 6to4 of 127.0.0.1
      "2002:a00:1::1", // 6to4 of 10.0.0.1
      "2001:0:4136:e378:8000:63bf:3fff:fdd2", // Teredo
      "0177.0.0.1", // octal
      "2130706433", // decimal
      "0x7f.1", // hex, short form
      "127.1",
      "fe80::1%eth0", // with a zone
      "2001:db8::1", // documentation
      "192.88.99.1", // 6to4 relay anycast
      "not an address",
    ];
    for (const a of spellings) expect(isForbiddenAddress(a), a).toBe(true);
    for (const url of ["http://[::127.0.0.1]/x", "http://[::ffff:0:7f00:1]/x", "http://2130706433/x", "http://0177.0.0.1/x", "http://[2002:7f00:1::]/x"]) {
      expect(() => checkWebhookUrl(url, new Set()), url).toThrow(/not a public address/);
    }
  });

  it("refuses a host name that resolves to loopback at connection time, unless the host is allowed", async () => {
    const receiver = await startReceiver();
    try {
      const url = `http://localhost:${receiver.port}/x`;
      const refused = await postWebhook(url, {}, "{}", { allowHosts: new Set(), timeoutMs: 2000 });
      expect(refused.status).toBeUndefined();
      expect(refused.error).toMatch(/not a public address/);
      expect(receiver.received).toHaveLength(0);
      const literal = await postWebhook(`http://127.0.0.1:${receiver.port}/x`, {}, "{}", { allowHosts: new Set(), timeoutMs: 2000 });
      expect(literal.error).toMatch(/not a public address/);
      const allowed = await postWebhook(url, {}, "{}", { allowHosts: new Set(["localhost"]), timeoutMs: 2000 });
      expect(allowed.status).toBe(200);
      expect(receiver.received).toHaveLength(1);
    } finally {
      await receiver.close();
    }
  });
});
