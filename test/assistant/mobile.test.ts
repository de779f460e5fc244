/**
 * The mobile backend and its socket.io events through a real server on both engines: agents, sessions,
 * messages and history over HTTP (Bearer API key), and join-conversation / bot-typing / message-streaming /
 * message-complete with a real socket.io-client.
 */
import crypto from "node:crypto";
import { io, type Socket } from "socket.io-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startNode } from "../../gateway/main.ts";
import { engineConfig, ENGINES, readZuliprc, startTestServer, type TestServer } from "../support/server.ts";
import { call, operatorKey, publishedAgent } from "./support.ts";

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
