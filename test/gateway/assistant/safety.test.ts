/**
 * The "bad input and safety" list, end to end on both engines: secrets (agent secrets, mobile webhook
 * secrets, webhook secrets, API keys, user tokens, console cookies) never appear in a response other than the
 * one that creates them, nor in anything the server logs, even when they are used wrongly; a session of another
 * agent is no session; errors are the assistant's JSON envelope, never a 500.
 */
import crypto from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { ENGINES, startTestServer, type TestServer } from "../../support/server.ts";
import { call, createAgent, operatorKey, publishedAgent, type JsonResponse } from "./support.ts";

describe.each(ENGINES)("assistant safety on %s", (engine) => {
  let server: TestServer;
  let key: string;
  const logged: string[] = [];

  beforeAll(async () => {
    process.env.WEBHOOK_ALLOW_HOSTS = "127.0.0.1";
    server = await startTestServer(engine);
    key = await operatorKey(server);
    for (const level of ["log", "info", "warn", "error", "debug"] as const) {
      const original = console[level];
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        logged.push(args.map((a) => (a instanceof Error ? `${a.message} ${a.stack}` : typeof a === "string" ? a : JSON.stringify(a))).join(" "));
        original(...args);
      });
    }
  });
  afterEach(() => void (logged.length = 0));
  afterAll(async () => {
    vi.restoreAllMocks();
    delete process.env.WEBHOOK_ALLOW_HOSTS;
    await server?.close();
  });

  it("never shows or logs a secret after the response that created it", async () => {
    const agent = await publishedAgent(server, key, { mobile_webhook_url: "http://127.0.0.1:9/mobile" });
    const hook = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/webhooks`, { key, body: { url: "http://127.0.0.1:9/hook", events: ["message.sent"] } });
    expect(hook.status).toBe(201);
    const userHash = crypto.createHmac("sha256", agent.secret).update("u-1").digest("hex");
    const token = (await call(server, "POST", "/chat/auth/token", { body: { agent_id: agent.agent_id, user_id: "u-1", user_hash: userHash } })).body.token as string;
    const secrets = { key, token, userHash, secret: agent.secret, mobile: agent.mobile_webhook_secret!, webhook: hook.body.secret as string };

    const responses: JsonResponse[] = [];
    const record = async (r: Promise<JsonResponse>) => {
      const res = await r;
      responses.push(res);
      expect(res.status, JSON.stringify(res.body)).toBeLessThan(500);
      return res;
    };
    const asked = await record(call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "How long do refunds take?", user_id: "u-1", user_hash: userHash } }));
    // used wrongly: a wrong hash, a key or token that is not valid (but close to a real one), a key where a token goes
    await record(call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "refunds", user_id: "u-2", user_hash: userHash } }));
    await record(call(server, "GET", "/chat/agents", { key: `${key}x` }));
    await record(call(server, "GET", "/chat/agents", { key: `${token}x` }));
    await record(call(server, "POST", "/api/internal/rag/agents", { key: token, body: { name: "x" } }));
    await record(call(server, "POST", "/chat/auth/token", { body: { agent_id: agent.agent_id, user_id: "u-1", user_hash: agent.secret } }));
    await record(call(server, "POST", `/api/embed/${agent.agent_key}`, { raw: `{"question": "${agent.secret}"`, headers: { "content-type": "application/json" } }));
    // everything an operator or a user can read about the agent
    await record(call(server, "GET", `/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { key }));
    await record(call(server, "POST", "/api/internal/rag/sync/mobile", { key, body: { agent_id: agent.agent_id } }));
    await record(call(server, "GET", "/chat/agents", { key }));
    await record(call(server, "GET", "/chat/agents", { key: token }));
    await record(call(server, "GET", `/chat/agents/${agent.agent_id}/sessions`, { key }));
    await record(call(server, "GET", `/chat/sessions/${asked.body.session_id}/messages`, { key: token }));
    await record(call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: agent.versionId } }));
    // let the webhook worker try its (failing) deliveries and log what it logs
    await new Promise((r) => setTimeout(r, 300));

    const shown = responses.map((r) => `${JSON.stringify(r.body)} ${JSON.stringify([...r.headers])}`).join("\n");
    const log = logged.join("\n");
    for (const [name, value] of Object.entries(secrets)) {
      expect(shown.includes(value), `${name} in a response`).toBe(false);
      expect(log.includes(value), `${name} in the log`).toBe(false);
    }
    // in the store, only as ciphertext or hashes
    const row = await server.node.store.db.selectFrom("assistant_agents").selectAll().where("id", "=", agent.agent_id).executeTakeFirstOrThrow();
    expect(JSON.stringify(row)).not.toContain(agent.secret);
    expect(JSON.stringify(row)).not.toContain(agent.mobile_webhook_secret);
    const outbox = await server.node.store.db.selectFrom("webhook_outbox").selectAll().where("agent_id", "=", agent.agent_id).execute();
    expect(outbox.length).toBeGreaterThan(0);
    for (const secret of Object.values(secrets)) expect(JSON.stringify(outbox)).not.toContain(secret);
  });

  it("treats a session of another agent as unknown, on every path that takes a session", async () => {
    const mine = await publishedAgent(server, key);
    const theirs = await publishedAgent(server, key);
    const theirSession = (await call(server, "POST", `/api/embed/${theirs.agent_key}`, { body: { question: "refunds?" } })).body.session_id;
    const before = await server.node.store.db.selectFrom("assistant_messages").select("id").where("session_id", "=", theirSession).execute();
    for (const stream of [false, true]) {
      const res = await call(server, "POST", `/api/embed/${mine.agent_key}`, { body: { question: "refunds?", session_id: theirSession, stream } });
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ error: { code: "NOT_FOUND", message: "Session not found" } });
    }
    const hash = crypto.createHmac("sha256", mine.secret).update("u-1").digest("hex");
    const token = (await call(server, "POST", "/chat/auth/token", { body: { agent_id: mine.agent_id, user_id: "u-1", user_hash: hash } })).body.token;
    expect((await call(server, "POST", "/chat/message", { key: token, body: { session_id: theirSession, content: "hi" } })).status).toBe(404);
    expect((await call(server, "GET", `/chat/sessions/${theirSession}/messages`, { key: token })).status).toBe(404);
    const after = await server.node.store.db.selectFrom("assistant_messages").select("id").where("session_id", "=", theirSession).execute();
    expect(after).toEqual(before); // nothing was added to it
  });

  it("answers hostile input with JSON errors, never a 500", async () => {
    const agent = await createAgent(server, key);
    const cases: Array<[string, string, Parameters<typeof call>[3], number]> = [
      ["POST", `/api/embed/${"k".repeat(5000)}`, { body: { question: "hi" } }, 404],
      ["POST", "/api/embed/ak_x", { raw: "[1,2]", headers: { "content-type": "application/json" } }, 404],
      ["POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, { key, body: { documents: [{ title: "t", text: 5 }] } }, 400],
      ["POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, { key, raw: "\u0000\u0001", headers: { "content-type": "application/json" } }, 400],
      ["POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: "' or 1=1 --" } }, 400],
      ["POST", "/api/internal/rag/rollback", { key, body: { agent_id: agent.agent_id } }, 409],
      ["GET", "/api/internal/rag/runtime-manifest?agent_id=%00", { key }, 400],
      ["GET", `/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { key }, 404],
      ["POST", "/chat/sessions", { key, raw: "{}", headers: { "content-type": "text/plain" } }, 415],
      ["POST", "/chat/auth/token", { body: { agent_id: agent.agent_id, user_id: "x".repeat(300), user_hash: "00" } }, 400],
      ["GET", "/chat/agents", { headers: { authorization: "Basic abc" } }, 401],
    ];
    for (const [method, path, opts, status] of cases) {
      const res = await call(server, method, path, opts);
      expect(res.status, `${method} ${path.slice(0, 60)}`).toBe(status);
      expect(res.body, `${method} ${path.slice(0, 60)}`).toEqual({ error: { code: expect.any(String), message: expect.any(String) } });
    }
  });
});
