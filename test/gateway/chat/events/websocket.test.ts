/**
 * GET /api/v1/events/ws: a queue over a WebSocket, read by a real WebSocket client (ws). Each text frame is a
 * GET /events answer (checked against Zulip's schema); a client that reconnects with last_event_id resumes after
 * that event; refusals are Zulip's error envelope before the upgrade.
 */
import WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "../../../support/messages.ts";
import { api, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { componentValidator, expectZulipResponse } from "../../../support/openapi.ts";

const basic = (as: Credentials) => `Basic ${Buffer.from(`${as.email}:${as.key}`).toString("base64")}`;

/** A WebSocket on the queue: every frame it receives, parsed, and how it ended. */
function openSocket(server: TestServer, as: Credentials, queueId: string, lastEventId?: number) {
  const query = `queue_id=${encodeURIComponent(queueId)}${lastEventId === undefined ? "" : `&last_event_id=${lastEventId}`}`;
  const socket = new WebSocket(`${server.url.replace("http", "ws")}/api/v1/events/ws?${query}`, { headers: { authorization: basic(as) } });
  const frames: any[] = [];
  let closed: { code: number } | undefined;
  socket.on("message", (data, isBinary) => {
    expect(isBinary).toBe(false);
    frames.push(JSON.parse(String(data)));
  });
  socket.on("close", (code) => (closed = { code }));
  const opened = new Promise<void>((resolve, reject) => {
    socket.on("open", () => resolve());
    socket.on("error", reject);
  });
  return {
    socket,
    frames,
    opened,
    get closed() {
      return closed;
    },
    /** The message events received, in order. */
    messages: () => frames.flatMap((f) => (f.events ?? []).filter((e: any) => e.type === "message")),
  };
}

/** The refusal of an upgrade: its status and its body (parsed), as the client saw them before any WebSocket. */
function refusal(server: TestServer, path: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`${server.url.replace("http", "ws")}/api/v1${path}`, { headers });
    socket.on("open", () => reject(new Error("upgraded")));
    socket.on("unexpected-response", (_req, res) => {
      let text = "";
      res.on("data", (chunk) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) }));
    });
    socket.on("error", () => {}); // the unexpected response is the error
  });
}

describe.each(ENGINES)("the WebSocket event stream on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine, { heartbeatSeconds: 1 });
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "ws" }] } });
  });
  afterAll(async () => server?.close());
  const send = (content: string) =>
    api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: "ws", topic: "t", content } }).then((r) => r.body.id as number);
  const register = async () => (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id as string;

  it("sends each batch as a GET /events answer, every message once and in order, with heartbeats between", async () => {
    const queue = await register();
    const ws = openSocket(server, server.owner, queue);
    await ws.opened;
    const sent: number[] = [];
    for (let i = 0; i < 5; i++) sent.push(await send(`one by one ${i}`));
    sent.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => send(`together ${i}`)))).sort((a, b) => a - b));
    await until(() => ws.messages().length >= sent.length);
    expect(ws.messages().map((e: any) => e.message.id)).toEqual(sent);
    const ids = ws.frames.flatMap((f) => f.events.map((e: any) => e.id as number));
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    await until(() => ws.frames.some((f) => f.events.some((e: any) => e.type === "heartbeat")), 5000);
    for (const frame of ws.frames) {
      expect(frame.queue_id).toBe(queue);
      expectZulipResponse("GET", "/events", 200, frame);
    }
    ws.socket.close();
  });

  it("resumes after last_event_id when the client reconnects: nothing it did not see is lost", async () => {
    const queue = await register();
    const first = openSocket(server, server.owner, queue);
    await first.opened;
    const m1 = await send("one");
    await until(() => first.messages().length === 1);
    const m2 = await send("two");
    await until(() => first.messages().length === 2);
    first.socket.close();
    await until(() => first.closed !== undefined);
    const m3 = await send("three");
    // As if the frame with m2 had been lost with the connection: resume after m1.
    const resumed = openSocket(server, server.owner, queue, first.messages()[0].id);
    await resumed.opened;
    await until(() => resumed.messages().length === 2);
    expect(resumed.messages().map((e: any) => e.message.id)).toEqual([m2, m3]);
    expect(m1).toBeLessThan(m2);
    resumed.socket.close();
  });

  it("refuses bad credentials, an unknown queue and a request that is not an upgrade with Zulip's envelope", async () => {
    const queue = await register();
    const wrongKey = await refusal(server, `/events/ws?queue_id=${queue}`, { authorization: basic({ email: server.owner.email, key: "wrong" }) });
    expect(wrongKey.status).toBe(401);
    expect(wrongKey.headers["www-authenticate"]).toBe('Basic realm="zulip"');
    expect(wrongKey.body).toMatchObject({ result: "error", code: "UNAUTHORIZED" });
    const none = await refusal(server, `/events/ws?queue_id=${queue}`, {});
    expect(none.status).toBe(401);
    const unknown = await refusal(server, "/events/ws?queue_id=nope", { authorization: basic(server.owner) });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ result: "error", code: "BAD_EVENT_QUEUE_ID", queue_id: "nope" });
    const missing = await refusal(server, "/events/ws", { authorization: basic(server.owner) });
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe("REQUEST_VARIABLE_MISSING");
    for (const answer of [wrongKey, none, unknown, missing]) {
      const { queue_id: _queueId, var_name: _varName, ...coded } = answer.body;
      expect(componentValidator("CodedError")(coded)).toEqual([]);
    }
    const plain = await api(server, "GET", "/events/ws", { as: server.owner, params: { queue_id: queue } });
    expect(plain.status).toBe(400);
    expect(plain.body.code).toBe("BAD_REQUEST");
  });

  it("closes the socket when its queue is deleted, after a frame that says so", async () => {
    const queue = await register();
    const ws = openSocket(server, server.owner, queue);
    await ws.opened;
    await api(server, "DELETE", "/events", { as: server.owner, params: { queue_id: queue } });
    await until(() => ws.closed !== undefined);
    expect(ws.closed!.code).toBe(1000);
    expect(ws.frames.at(-1)).toMatchObject({ result: "error", code: "BAD_EVENT_QUEUE_ID", queue_id: queue });
  });

  it("lets go of the queue as soon as the client goes: its parked poll is finished, not left for the heartbeat", async () => {
    const queue = await register();
    const before = server.node.system.waitingAsks;
    const ws = openSocket(server, server.owner, queue);
    await ws.opened;
    await until(() => server.node.system.waitingAsks === before + 1);
    ws.socket.terminate();
    await until(() => server.node.system.waitingAsks === before, 3000);
  });
});
