/**
 * POST /api/embed/{agentKey} through a real server on both engines: JSON answers from retrieval, sessions, the
 * don't-know threshold, the SSE wire format (parsed by the `eventsource` client), user_hash, the origin
 * allowlist with its preflight, rate limits, and bad input.
 */
import crypto from "node:crypto";
import { EventSource } from "eventsource";
import { Redis } from "ioredis";
import { redisKeys } from "../../../runtime/transport/redis-keys.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENGINES, startTestServer, type TestServer } from "../../support/server.ts";
import { call, createAgent, createVersion, holdRecords, operatorKey, publishedAgent } from "./support.ts";
import { AgentSession, type AskQuestion } from "../../../actors/assistant/agent-session.protocol.ts";

interface SseEvent {
  id: string;
  data: any;
}

/** POST a question and collect the events until `done`, with a real EventSource client. */
function streamQuestion(server: TestServer, agentKey: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<SseEvent[]> {
  return new Promise((resolve, reject) => {
    const events: SseEvent[] = [];
    const source = new EventSource(`${server.url}/api/embed/${agentKey}`, {
      fetch: (input, init) =>
        fetch(input, { ...init, method: "POST", headers: { ...init?.headers, ...headers, "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) }),
    });
    const timer = setTimeout(() => (source.close(), reject(new Error(`no done event; got ${JSON.stringify(events)}`))), 5000);
    source.onmessage = (e) => {
      const data = JSON.parse(e.data);
      events.push({ id: e.lastEventId, data });
      if (data.done) {
        clearTimeout(timer);
        source.close();
        resolve(events);
      }
    };
    source.onerror = (e) => {
      clearTimeout(timer);
      source.close();
      reject(new Error(`EventSource error: ${(e as { message?: string }).message}`));
    };
  });
}

describe.each(ENGINES)("embed endpoint on %s", (engine) => {
  let server: TestServer;
  let key: string;
  let agent: Awaited<ReturnType<typeof publishedAgent>>;
  const ask = (agentKey: string, body: unknown, headers: Record<string, string> = {}) => call(server, "POST", `/api/embed/${agentKey}`, { body, headers });

  beforeAll(async () => {
    server = await startTestServer(engine);
    key = await operatorKey(server);
    agent = await publishedAgent(server, key, { allowed_origins: ["shop.example.com", "*.widgets.example.org", "http://localhost:8080"] });
  });
  afterAll(async () => server?.close());

  describe("JSON answers", () => {
    it("answers from the published knowledge, creates a session, and cites the source", async () => {
      const res = await ask(agent.agent_key, { question: "How long do refunds take?" });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(res.body.answer).toContain("Refunds are processed within 14 days");
      expect(res.body.answer).not.toContain("worldwide");
      expect(res.body.session_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(res.body.sources[0]).toMatchObject({ title: "Refund policy" });

      const next = await ask(agent.agent_key, { question: "Is shipping free?", session_id: res.body.session_id });
      expect(next.status).toBe(200);
      expect(next.body.session_id).toBe(res.body.session_id);
      expect(next.body.answer).toContain("free for orders above 50 euros");

      const rows = await server.node.store.db.selectFrom("assistant_messages").select(["role", "content"]).where("session_id", "=", res.body.session_id).orderBy("seq").execute();
      expect(rows.map((r) => r.role)).toEqual(["user", "assistant", "user", "assistant"]);
      expect(rows[2]!.content).toBe("Is shipping free?");
    });

    it("says it does not know when nothing relevant is in the knowledge base", async () => {
      for (const question of ["What is the airspeed velocity of an unladen swallow?", "the of and a"]) {
        const res = await ask(agent.agent_key, { question });
        expect(res.status).toBe(200);
        expect(res.body.answer).toMatch(/don't know/);
        expect(res.body.sources).toEqual([]);
      }
    });

    it("answers from the version now published after a rollback", async () => {
      const a = await createAgent(server, key);
      const v1 = await createVersion(server, key, a.agent_id, [{ title: "Colour", text: "The mascot is purple." }]);
      const v2 = await createVersion(server, key, a.agent_id, [{ title: "Colour", text: "The mascot is orange." }]);
      const unpublished = await ask(a.agent_key, { question: "What colour is the mascot?" });
      expect(unpublished.status).toBe(409);
      await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: a.agent_id, version_id: v1 } });
      await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: a.agent_id, version_id: v2 } });
      expect((await ask(a.agent_key, { question: "What colour is the mascot?" })).body.answer).toContain("orange");
      await call(server, "POST", "/api/internal/rag/rollback", { key, body: { agent_id: a.agent_id } });
      expect((await ask(a.agent_key, { question: "What colour is the mascot?" })).body.answer).toContain("purple");
    });

    it("refuses unknown agents and sessions, and a session of another agent", async () => {
      expect((await ask("ak_nope", { question: "hi" })).status).toBe(404);
      const unknown = await ask(agent.agent_key, { question: "refunds?", session_id: crypto.randomUUID() });
      expect(unknown.status).toBe(404);
      expect(unknown.body).toEqual({ error: { code: "NOT_FOUND", message: "Session not found" } });
      const other = await publishedAgent(server, key);
      const theirs = await ask(other.agent_key, { question: "refunds?" });
      const crossed = await ask(agent.agent_key, { question: "refunds?", session_id: theirs.body.session_id });
      expect(crossed.status).toBe(404);
    });

    it("answers a redelivered ask (same ids, as the at-least-once transport may deliver it) once", async () => {
      const first = await ask(agent.agent_key, { question: "Is shipping free?" });
      const sessionId = first.body.session_id;
      const msg: AskQuestion = { op: "ask", agentId: agent.agent_id, question: "How long do refunds take?", questionId: crypto.randomUUID(), answerId: crypto.randomUUID() };
      const once = await server.node.system.ref(AgentSession, sessionId).ask(msg);
      const twice = await server.node.system.ref(AgentSession, sessionId).ask(msg);
      expect(twice.reply).toEqual(once.reply);
      expect(twice.message).toEqual(once.message);
      const rows = await server.node.store.db.selectFrom("assistant_messages").select("id").where("session_id", "=", sessionId).execute();
      expect(rows).toHaveLength(4);
    });

    it("validates the body: question 1 to 4000 characters, types, JSON, size", async () => {
      expect((await ask(agent.agent_key, { question: "x".repeat(4000) })).status).toBe(200);
      for (const body of [{}, { question: "" }, { question: "x".repeat(4001) }, { question: 5 }, { question: "hi", stream: "yes" }, { question: "hi", session_id: "nope" }]) {
        const res = await ask(agent.agent_key, body);
        expect(res.status, JSON.stringify(body).slice(0, 60)).toBe(400);
        expect(res.body.error.code).toBe("VALIDATION_ERROR");
      }
      const bad = await call(server, "POST", `/api/embed/${agent.agent_key}`, { raw: '{"question":', headers: { "content-type": "application/json" } });
      expect(bad.status).toBe(400);
      expect(bad.body.error.code).toBe("INVALID_JSON");
      const big = await call(server, "POST", `/api/embed/${agent.agent_key}`, { raw: JSON.stringify({ question: "x", pad: "y".repeat(100_000) }), headers: { "content-type": "application/json" } });
      expect(big.status).toBe(413);
      expect(big.body.error.code).toBe("PAYLOAD_TOO_LARGE");
    });
  });

  describe("server-sent events", () => {
    it("streams the answer as data events with ids, then a done event with the session and sources", async () => {
      const plain = await ask(agent.agent_key, { question: "When is the support desk open?" });
      const events = await streamQuestion(server, agent.agent_key, { question: "When is the support desk open?" });
      expect(events.length).toBeGreaterThan(2);
      expect(events.map((e) => e.id)).toEqual(events.map((_, i) => String(i + 1)));
      const chunks = events.slice(0, -1);
      for (const e of chunks) expect(e.data).toEqual({ answer: expect.any(String), done: false });
      expect(chunks.map((e) => e.data.answer).join("")).toBe(plain.body.answer);
      const done = events.at(-1)!.data;
      expect(done).toEqual({ answer: "", done: true, session_id: expect.any(String), sources: [expect.objectContaining({ title: "Opening hours" })] });
      expect(done.session_id).not.toBe(plain.body.session_id);
      const history = await server.node.store.db.selectFrom("assistant_messages").select("role").where("session_id", "=", done.session_id).execute();
      expect(history).toHaveLength(2); // committed before the done event
    });

    it("sends the first sentence before the answer is complete and committed", async () => {
      const db = server.node.store.db;
      const sessions = async () => Number((await db.selectFrom("assistant_sessions").select((eb) => eb.fn.countAll().as("n")).executeTakeFirstOrThrow()).n);
      const before = await sessions();
      const held = holdRecords(server);
      try {
        const res = await fetch(`${server.url}/api/embed/${agent.agent_key}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ question: "When is the support desk open?", stream: true }),
        });
        const reader = res.body!.getReader();
        const first = new TextDecoder().decode((await reader.read()).value);
        expect(first).toMatch(/^id: 1\ndata: \{"answer":"The support desk/);
        expect(await sessions()).toBe(before); // not committed yet: the first event did not wait for it
        held.release();
        let rest = "";
        for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += new TextDecoder().decode(chunk.value);
        const sessionId = /"session_id":"([^"]+)"/.exec(rest)?.[1];
        expect(rest).toContain('"done":true');
        const after = await db.selectFrom("assistant_sessions").select("id").where("id", "=", sessionId!).execute();
        expect(after).toHaveLength(1);
      } finally {
        held.restore();
      }
    });

    it("sends the SSE headers", async () => {
      const res = await fetch(`${server.url}/api/embed/${agent.agent_key}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ question: "refunds", stream: true }),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
      expect(res.headers.get("cache-control")).toBe("no-cache, no-transform");
      expect(res.headers.get("x-accel-buffering")).toBe("no");
      const text = await res.text();
      expect(text).toMatch(/^id: 1\ndata: \{"answer":"[^"]*","done":false\}\n\n/);
      expect(text.endsWith('"done":true,' + text.split('"done":true,')[1])).toBe(true);
    });

    it("answers errors before the stream opens as JSON", async () => {
      const res = await fetch(`${server.url}/api/embed/${agent.agent_key}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ question: "refunds", stream: true, session_id: crypto.randomUUID() }),
      });
      expect(res.status).toBe(404);
      expect(await res.json()).toMatchObject({ error: { code: "NOT_FOUND" } });
    });
  });

  describe("user_hash", () => {
    const hash = (secret: string, userId: string) => crypto.createHmac("sha256", secret).update(userId).digest("hex");

    it("accepts the hex HMAC-SHA256 of user_id under the agent secret and refuses anything else with 401", async () => {
      const ok = await ask(agent.agent_key, { question: "refunds", user_id: "user-42", user_hash: hash(agent.secret, "user-42") });
      expect(ok.status).toBe(200);
      const session = await server.node.store.db.selectFrom("assistant_sessions").select("user_id").where("id", "=", ok.body.session_id).executeTakeFirstOrThrow();
      expect(session.user_id).toBe("user-42");
      for (const user_hash of [hash(agent.secret, "user-43"), hash("other-secret", "user-42"), "abc", ""]) {
        const res = await ask(agent.agent_key, { question: "refunds", user_id: "user-42", user_hash });
        expect(res.status).toBe(401);
        expect(res.body.error.code).toBe("INVALID_USER_HASH");
      }
      const withoutId = await ask(agent.agent_key, { question: "refunds", user_hash: hash(agent.secret, "user-42") });
      expect(withoutId.status).toBe(400);
    });

    it("keeps a session to its user: another verified user or an anonymous caller with its session_id gets 404", async () => {
      const as = (userId: string) => ({ user_id: userId, user_hash: hash(agent.secret, userId) });
      const alices = await ask(agent.agent_key, { question: "refunds", ...as("alice") });
      expect(alices.status).toBe(200);
      const anonymous = await ask(agent.agent_key, { question: "refunds" });
      const messagesOf = async (sessionId: string) =>
        (await server.node.store.db.selectFrom("assistant_messages").select("id").where("session_id", "=", sessionId).execute()).length;

      for (const intruder of [as("bob"), {}, { user_id: "alice" }]) {
        const res = await ask(agent.agent_key, { question: "shipping?", session_id: alices.body.session_id, ...intruder });
        expect(res.status, JSON.stringify(intruder)).toBe(404);
        expect(res.body.error.code).toBe("NOT_FOUND");
        const streamed = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "shipping?", session_id: alices.body.session_id, stream: true, ...intruder } });
        expect(streamed.status).toBe(404);
      }
      const intoAnonymous = await ask(agent.agent_key, { question: "shipping?", session_id: anonymous.body.session_id, ...as("bob") });
      expect(intoAnonymous.status).toBe(404);
      expect(await messagesOf(alices.body.session_id)).toBe(2);
      expect(await messagesOf(anonymous.body.session_id)).toBe(2);

      // Each keeps talking in their own: alice verified, the anonymous caller anonymously.
      expect((await ask(agent.agent_key, { question: "shipping?", session_id: alices.body.session_id, ...as("alice") })).status).toBe(200);
      expect((await ask(agent.agent_key, { question: "shipping?", session_id: anonymous.body.session_id })).status).toBe(200);
      // An unverified user_id is no identity: the session it starts is anonymous, not that user's.
      const claimed = await ask(agent.agent_key, { question: "refunds", user_id: "alice" });
      const row = await server.node.store.db.selectFrom("assistant_sessions").select("user_id").where("id", "=", claimed.body.session_id).executeTakeFirstOrThrow();
      expect(row.user_id).toBeNull();
    });
  });

  describe("origin allowlist", () => {
    it("allows listed hosts and subdomains of wildcard rules, with CORS headers", async () => {
      for (const origin of ["https://shop.example.com", "https://a.widgets.example.org", "https://b.c.widgets.example.org", "http://localhost:8080"]) {
        const res = await ask(agent.agent_key, { question: "refunds" }, { origin });
        expect(res.status, origin).toBe(200);
        expect(res.headers.get("access-control-allow-origin")).toBe(origin);
        expect(res.headers.get("vary")).toBe("Origin");
      }
    });

    it("refuses other origins with 403, falls back to Referer, and lets non-browser clients through", async () => {
      const forged = ["https://evilwidgets.example.org", "https://shop-example.com", "https://localhost:8081", "file://", "not a url"];
      for (const origin of ["https://evil.example", "https://widgets.example.org", "https://shop.example.com.evil.io", "http://localhost:9999", "null", ...forged]) {
        const res = await ask(agent.agent_key, { question: "refunds" }, { origin });
        expect(res.status, origin).toBe(403);
        expect(res.body.error.code).toBe("ORIGIN_NOT_ALLOWED");
      }
      expect((await ask(agent.agent_key, { question: "refunds" }, { referer: "https://evil.example/page" })).status).toBe(403);
      expect((await ask(agent.agent_key, { question: "refunds" }, { referer: "https://shop.example.com/help?x=1" })).status).toBe(200);
      // the browser's Origin wins over a Referer that names an allowed page; user info is not the host
      expect((await ask(agent.agent_key, { question: "refunds" }, { origin: "https://evil.example", referer: "https://shop.example.com/" })).status).toBe(403);
      expect((await ask(agent.agent_key, { question: "refunds" }, { referer: "https://shop.example.com@evil.example/" })).status).toBe(403);
      expect((await ask(agent.agent_key, { question: "refunds" })).status).toBe(200);
    });

    it("answers the CORS preflight for allowed origins and refuses it for others", async () => {
      const ok = await call(server, "OPTIONS", `/api/embed/${agent.agent_key}`, {
        headers: { origin: "https://shop.example.com", "access-control-request-method": "POST", "access-control-request-headers": "content-type" },
      });
      expect(ok.status).toBe(204);
      expect(ok.headers.get("access-control-allow-origin")).toBe("https://shop.example.com");
      expect(ok.headers.get("access-control-allow-methods")).toContain("POST");
      expect(ok.headers.get("access-control-allow-headers")).toContain("content-type");
      const no = await call(server, "OPTIONS", `/api/embed/${agent.agent_key}`, { headers: { origin: "https://evil.example", "access-control-request-method": "POST" } });
      expect(no.status).toBe(403);
      expect(no.headers.get("access-control-allow-origin")).toBeNull();
    });
  });

  describe("rate limits", () => {
    it("answers 429 with Retry-After and RateLimit headers past the agent's limit per IP", async () => {
      const limited = await publishedAgent(server, key, { rate_limit_per_minute: 3 });
      for (let i = 0; i < 3; i++) {
        const res = await ask(limited.agent_key, { question: "refunds" });
        expect(res.status).toBe(200);
        expect(res.headers.get("ratelimit-limit")).toBe("3");
        expect(res.headers.get("ratelimit-remaining")).toBe(String(2 - i));
      }
      const refused = await ask(limited.agent_key, { question: "refunds" });
      expect(refused.status).toBe(429);
      expect(refused.body.error.code).toBe("RATE_LIMITED");
      const retryAfter = Number(refused.headers.get("retry-after"));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect(refused.headers.get("ratelimit-remaining")).toBe("0");
      // another agent has its own budget
      expect((await ask(agent.agent_key, { question: "refunds" })).status).toBe(200);
      if (engine === "redis+postgres") {
        // counted in Redis, so every worker shares the budget
        const redis = new Redis(server.node.config.redisUrl!, { protocol: 2 });
        try {
          expect((await redis.keys(`${redisKeys(server.node.config.redisPrefix).rateLimit("3:60")}:*`)).length).toBeGreaterThan(0);
        } finally {
          redis.disconnect();
        }
      }
    });

    it("counts a verified user separately from the IP", async () => {
      const limited = await publishedAgent(server, key, { rate_limit_per_minute: 2 });
      const as = (userId: string) => ({ question: "refunds", user_id: userId, user_hash: crypto.createHmac("sha256", limited.secret).update(userId).digest("hex") });
      expect((await ask(limited.agent_key, as("u1"))).status).toBe(200);
      const second = await ask(limited.agent_key, as("u1"));
      expect(second.status).toBe(200);
      expect(second.headers.get("ratelimit-remaining")).toBe("0");
      expect((await ask(limited.agent_key, as("u1"))).status).toBe(429);
    });
  });
});
