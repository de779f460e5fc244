/**
 * The mobile backend and its socket.io events through a real server on both engines: agents, sessions,
 * messages and history over HTTP (Bearer API key), and join-conversation / bot-typing / message-streaming /
 * message-complete with a real socket.io-client.
 */
import crypto from "node:crypto";
import { io, type Socket } from "socket.io-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNode } from "../../../gateway/main.ts";
import { issueUserToken } from "../../../gateway/assistant/user-tokens.ts";
import { Keyring } from "../../../runtime/secrets.ts";
import { engineConfig, ENGINES, readZuliprc, startTestServer, type TestServer } from "../../support/server.ts";
import { call, holdRecords, operatorKey, publishedAgent } from "./support.ts";

function connect(server: TestServer, token?: string, transports = ["websocket"]): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = io(server.url, { transports, auth: token === undefined ? {} : { token }, reconnection: false, forceNew: true });
    socket.once("connect", () => resolve(socket));
    socket.once("connect_error", (err) => {
      socket.close();
      reject(err);
    });
  });
}

describe.each(ENGINES)("mobile backend on %s", (engine) => {
  let server: TestServer;
  let key: string;
  let agent: Awaited<ReturnType<typeof publishedAgent>>;

  beforeAll(async () => {
    server = await startTestServer(engine);
    key = await operatorKey(server);
    agent = await publishedAgent(server, key);
  });
  afterAll(async () => server?.close());

  it("lists agents, creates sessions, answers messages and returns the history oldest first", async () => {
    const agents = await call(server, "GET", "/chat/agents", { key });
    expect(agents.status).toBe(200);
    expect(agents.body.agents).toContainEqual({ agent_id: agent.agent_id, name: "Helper" });

    const created = await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id, user_id: "mobile-user" } });
    expect(created.status).toBe(201);
    const sessionId = created.body.session_id;
    expect(sessionId).toMatch(/^[0-9a-f-]{36}$/);

    const sent = await call(server, "POST", "/chat/message", { key, body: { session_id: sessionId, content: "Where do you ship?" } });
    expect(sent.status).toBe(200);
    expect(sent.body).toMatchObject({
      session_id: sessionId,
      message: { id: expect.any(String), role: "user", content: "Where do you ship?" },
      reply: { id: expect.any(String), role: "assistant", content: expect.stringContaining("worldwide"), sources: [expect.objectContaining({ title: "Shipping" })] },
    });
    await call(server, "POST", "/chat/message", { key, body: { session_id: sessionId, content: "When are you open?" } });

    const history = await call(server, "GET", `/chat/sessions/${sessionId}/messages`, { key });
    expect(history.status).toBe(200);
    expect(history.body.messages.map((m: any) => [m.role, m.content.slice(0, 18)])).toEqual([
      ["user", "Where do you ship?"],
      ["assistant", sent.body.reply.content.slice(0, 18)],
      ["user", "When are you open?"],
      ["assistant", expect.any(String)],
    ]);
    expect(history.body.messages[0]).toEqual({ id: sent.body.message.id, role: "user", content: "Where do you ship?", created_at: expect.stringMatching(/^\d{4}-/) });

    const sessions = await call(server, "GET", `/chat/agents/${agent.agent_id}/sessions`, { key });
    expect(sessions.status).toBe(200);
    expect(sessions.body.sessions).toContainEqual(expect.objectContaining({ session_id: sessionId, created_at: expect.any(String) }));
  });

  it("refuses unknown agents and sessions, bad bodies, and missing credentials", async () => {
    expect((await call(server, "POST", "/chat/sessions", { key, body: { agent_id: crypto.randomUUID() } })).status).toBe(404);
    expect((await call(server, "POST", "/chat/message", { key, body: { session_id: crypto.randomUUID(), content: "hi" } })).status).toBe(404);
    expect((await call(server, "POST", "/chat/message", { key, body: { session_id: crypto.randomUUID(), content: "" } })).status).toBe(400);
    expect((await call(server, "GET", `/chat/sessions/${crypto.randomUUID()}/messages`, { key })).status).toBe(404);
    expect((await call(server, "GET", `/chat/sessions/not-a-uuid/messages`, { key })).status).toBe(404);
    expect((await call(server, "GET", `/chat/agents/${crypto.randomUUID()}/sessions`, { key })).status).toBe(404);
    expect((await call(server, "POST", "/chat/sessions", { body: { agent_id: agent.agent_id } })).status).toBe(401);
  });

  describe("user tokens", () => {
    const hash = (secret: string, userId: string) => crypto.createHmac("sha256", secret).update(userId).digest("hex");
    const tokenFor = async (a: { agent_id: string; secret: string }, userId: string) => {
      const res = await call(server, "POST", "/chat/auth/token", { body: { agent_id: a.agent_id, user_id: userId, user_hash: hash(a.secret, userId) } });
      expect(res.status).toBe(201);
      return res.body.token as string;
    };

    it("are issued for a user_hash that verifies, and refused otherwise", async () => {
      const res = await call(server, "POST", "/chat/auth/token", { body: { agent_id: agent.agent_id, user_id: "alice", user_hash: hash(agent.secret, "alice") } });
      expect(res.status).toBe(201);
      expect(res.headers.get("cache-control")).toBe("no-store");
      expect(res.body).toEqual({ token: expect.stringMatching(/^cut_/), token_type: "Bearer", expires_at: expect.any(String), expires_in: 3600, agent_id: agent.agent_id, user_id: "alice" });
      expect(Date.parse(res.body.expires_at) - Date.now()).toBeGreaterThan(3500_000);
      const refused = await call(server, "POST", "/chat/auth/token", { body: { agent_id: agent.agent_id, user_id: "alice", user_hash: hash(agent.secret, "bob") } });
      expect(refused.status).toBe(401);
      expect(refused.body.error.code).toBe("INVALID_USER_HASH");
      expect((await call(server, "POST", "/chat/auth/token", { body: { agent_id: crypto.randomUUID(), user_id: "alice", user_hash: "00" } })).status).toBe(404);
      expect((await call(server, "POST", "/chat/auth/token", { body: { agent_id: agent.agent_id, user_id: "alice" } })).body.error).toEqual({ code: "VALIDATION_ERROR", message: "user_hash: is required" });
    });

    it("are rate limited per agent and client address, as guesses of user_hash", async () => {
      const limited = await publishedAgent(server, key, { rate_limit_per_minute: 2 });
      const attempt = (userHash: string) => call(server, "POST", "/chat/auth/token", { body: { agent_id: limited.agent_id, user_id: "alice", user_hash: userHash } });
      expect((await attempt("00")).status).toBe(401);
      expect((await attempt(hash(limited.secret, "alice"))).status).toBe(201);
      const refused = await attempt(hash(limited.secret, "alice"));
      expect(refused.status).toBe(429);
      expect(refused.body.error.code).toBe("RATE_LIMITED");
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    });

    it("see their agent and only their own sessions", async () => {
      const alice = await tokenFor(agent, "alice");
      const bob = await tokenFor(agent, "bob");
      const other = await publishedAgent(server, key);

      expect((await call(server, "GET", "/chat/agents", { key: alice })).body).toEqual({ agents: [{ agent_id: agent.agent_id, name: "Helper" }] });
      const mine = await call(server, "POST", "/chat/sessions", { key: alice, body: { agent_id: agent.agent_id } });
      expect(mine.status).toBe(201);
      const sessionId = mine.body.session_id;
      const row = await server.node.store.db.selectFrom("assistant_sessions").select("user_id").where("id", "=", sessionId).executeTakeFirstOrThrow();
      expect(row.user_id).toBe("alice");
      expect((await call(server, "POST", "/chat/sessions", { key: alice, body: { agent_id: agent.agent_id, user_id: "bob" } })).status).toBe(403);
      expect((await call(server, "POST", "/chat/sessions", { key: alice, body: { agent_id: other.agent_id } })).status).toBe(404);

      const sent = await call(server, "POST", "/chat/message", { key: alice, body: { session_id: sessionId, content: "Is shipping free?" } });
      expect(sent.status).toBe(200);
      expect(sent.body.reply.content).toContain("free");
      expect((await call(server, "GET", `/chat/sessions/${sessionId}/messages`, { key: alice })).body.messages).toHaveLength(2);

      // bob, and alice for sessions that are not hers, find nothing there
      const operatorsSession = (await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id, user_id: "carol" } })).body.session_id;
      for (const [token, id] of [[bob, sessionId], [alice, operatorsSession]] as const) {
        expect((await call(server, "POST", "/chat/message", { key: token, body: { session_id: id, content: "hi" } })).status).toBe(404);
        expect((await call(server, "GET", `/chat/sessions/${id}/messages`, { key: token })).status).toBe(404);
      }
      const listed = await call(server, "GET", `/chat/agents/${agent.agent_id}/sessions`, { key: alice });
      expect(listed.body.sessions.map((x: any) => x.session_id)).toEqual([sessionId]);
      expect((await call(server, "GET", `/chat/agents/${agent.agent_id}/sessions`, { key })).body.sessions.map((x: any) => x.session_id)).toContain(operatorsSession);
      expect((await call(server, "GET", `/chat/agents/${other.agent_id}/sessions`, { key: alice })).status).toBe(404);
    });

    it("are refused when forged, expired, or used for the operator's endpoints", async () => {
      const token = await tokenFor(agent, "alice");
      const [payload, mac] = token.slice(4).split(".");
      const claims = JSON.parse(Buffer.from(payload!, "base64url").toString());
      const forged = `cut_${Buffer.from(JSON.stringify({ ...claims, u: "bob" })).toString("base64url")}.${mac}`;
      const expired = issueUserToken(new Keyring("test-secret"), agent.agent_id, "alice", Date.now() - 2 * 3600_000).token;
      for (const bad of [forged, expired, "cut_garbage", `${token}x`]) {
        const res = await call(server, "GET", "/chat/agents", { key: bad });
        expect(res.status, bad).toBe(401);
        expect(res.body.error.code).toBe("UNAUTHORIZED");
      }
      expect((await call(server, "GET", "/chat/agents", { key: issueUserToken(new Keyring("test-secret"), agent.agent_id, "alice").token })).status).toBe(200);
      expect((await call(server, "POST", "/api/internal/rag/agents", { key: token, body: { name: "mine now" } })).status).toBe(401);
      expect((await call(server, "POST", "/api/internal/api-keys", { key: token, body: {} })).status).toBe(401);
    });

    it("open sockets that may join only their own sessions", async () => {
      const alice = await tokenFor(agent, "alice");
      const mine = (await call(server, "POST", "/chat/sessions", { key: alice, body: { agent_id: agent.agent_id } })).body.session_id;
      const theirs = (await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id, user_id: "bob" } })).body.session_id;
      await expect(connect(server, "cut_forged.token")).rejects.toThrow(/unauthorized/);
      const socket = await connect(server, alice);
      try {
        expect(await socket.timeout(3000).emitWithAck("join-conversation", { session_id: theirs })).toEqual({ error: { code: "NOT_FOUND", message: "Session not found" } });
        expect(await socket.timeout(3000).emitWithAck("join-conversation", { session_id: mine })).toEqual({ ok: true, session_id: mine });
        const complete = new Promise<any>((resolve) => socket.once("message-complete", resolve));
        const sent = await call(server, "POST", "/chat/message", { key: alice, body: { session_id: mine, content: "How long do refunds take?" } });
        expect((await complete).content).toBe(sent.body.reply.content);
      } finally {
        socket.close();
      }
    });
  });

  describe("socket.io events", () => {
    it("streams bot-typing, message-streaming and message-complete to sockets that joined the session", async () => {
      const created = await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
      const sessionId = created.body.session_id;
      const socket = await connect(server, key);
      const outsider = await connect(server, key);
      try {
        const ack = await socket.timeout(3000).emitWithAck("join-conversation", { session_id: sessionId });
        expect(ack).toEqual({ ok: true, session_id: sessionId });
        const events: Array<[string, any]> = [];
        for (const name of ["bot-typing", "message-streaming", "message-complete"]) socket.on(name, (data) => events.push([name, data]));
        const strayed: unknown[] = [];
        outsider.onAny((...args) => strayed.push(args));
        const complete = new Promise<any>((resolve) => socket.once("message-complete", resolve));

        const sent = await call(server, "POST", "/chat/message", { key, body: { session_id: sessionId, content: "How long do refunds take?" } });
        expect(sent.status).toBe(200);
        const done = await complete;
        expect(done).toMatchObject({ session_id: sessionId, message_id: sent.body.reply.id, content: sent.body.reply.content, sources: sent.body.reply.sources });
        expect(events[0]).toEqual(["bot-typing", { session_id: sessionId }]);
        const deltas = events.filter(([n]) => n === "message-streaming").map(([, d]) => d);
        expect(deltas.length).toBeGreaterThan(1);
        expect(deltas.map((d) => d.seq)).toEqual(deltas.map((_, i) => i + 1));
        for (const d of deltas) expect(d.session_id).toBe(sessionId);
        expect(deltas.map((d) => d.delta).join("")).toBe(sent.body.reply.content);
        expect(events.at(-1)![0]).toBe("message-complete");
        expect(strayed).toEqual([]);
      } finally {
        socket.close();
        outsider.close();
      }
    });

    it("streams the first pieces before the answer is committed", async () => {
      const created = await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
      const socket = await connect(server, key);
      const held = holdRecords(server);
      try {
        await socket.timeout(3000).emitWithAck("join-conversation", created.body.session_id);
        const firstDelta = new Promise<any>((resolve) => socket.once("message-streaming", resolve));
        const sent = call(server, "POST", "/chat/message", { key, body: { session_id: created.body.session_id, content: "How long do refunds take?" } });
        expect(await firstDelta).toMatchObject({ seq: 1, delta: expect.stringMatching(/^Refunds/) });
        const stored = await server.node.store.db.selectFrom("assistant_messages").select("id").where("session_id", "=", created.body.session_id).execute();
        expect(stored).toEqual([]);
        held.release();
        expect((await sent).status).toBe(200);
      } finally {
        held.restore();
        socket.close();
      }
    });

    it("works over HTTP long-polling too (socket.io's fallback through the same uWS app)", async () => {
      const created = await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
      const socket = await connect(server, key, ["polling"]);
      try {
        expect(await socket.timeout(3000).emitWithAck("join-conversation", created.body.session_id)).toEqual({ ok: true, session_id: created.body.session_id });
        const complete = new Promise<any>((resolve) => socket.once("message-complete", resolve));
        const sent = await call(server, "POST", "/chat/message", { key, body: { session_id: created.body.session_id, content: "Is shipping free?" } });
        expect((await complete).content).toBe(sent.body.reply.content);
      } finally {
        socket.close();
      }
    });

    it("refuses sockets without a valid API key and joins of unknown sessions", async () => {
      await expect(connect(server)).rejects.toThrow(/unauthorized/);
      await expect(connect(server, "chorus_wrong")).rejects.toThrow(/unauthorized/);
      const socket = await connect(server, key);
      try {
        const unknown = await socket.timeout(3000).emitWithAck("join-conversation", { session_id: crypto.randomUUID() });
        expect(unknown).toEqual({ error: { code: "NOT_FOUND", message: "Session not found" } });
        const bad = await socket.timeout(3000).emitWithAck("join-conversation", { session_id: "nope" });
        expect(bad.error.code).toBe("BAD_REQUEST");
      } finally {
        socket.close();
      }
    });
  });
});

describe("socket.io events across two workers (redis+postgres)", () => {
  it("reaches a socket on one worker when the answer is produced through the other", async () => {
    const { config, release } = await engineConfig("redis+postgres", { workers: 2 });
    const first = await startNode(config, { workerIndex: 0 });
    const second = await startNode(config, { workerIndex: 1, prepared: true });
    try {
      const a = { url: `http://127.0.0.1:${first.port}` };
      const b = { url: `http://127.0.0.1:${second.port}` };
      const key = await operatorKey({ ...a, node: first, owner: readZuliprc(`${config.dataDir}/zuliprc`) } as unknown as TestServer);
      const agent = await publishedAgent(b, key);
      const created = await call(b, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
      const socket = await connect(a as TestServer, key);
      try {
        expect(await socket.timeout(3000).emitWithAck("join-conversation", created.body.session_id)).toMatchObject({ ok: true });
        const typing = new Promise((resolve) => socket.once("bot-typing", resolve));
        const complete = new Promise<any>((resolve) => socket.once("message-complete", resolve));
        const sent = await call(b, "POST", "/chat/message", { key, body: { session_id: created.body.session_id, content: "How long do refunds take?" } });
        expect(await typing).toEqual({ session_id: created.body.session_id });
        expect((await complete).content).toBe(sent.body.reply.content);
      } finally {
        socket.close();
      }
    } finally {
      await second.close();
      await first.close();
      await release();
    }
  });
});
