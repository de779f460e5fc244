/**
 * GET /api/v1/events/stream: a queue as server-sent events, read by a real EventSource client; ids are the
 * queue's event ids, and a reconnect with Last-Event-ID resumes after that event.
 */
import { EventSource } from "eventsource";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { until } from "../../../support/messages.ts";
import { api, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { STREAM_ACKNOWLEDGE_EVERY } from "../../../../gateway/chat/events.ts";

function openStream(server: TestServer, queueId: string, lastEventId?: string) {
  const auth = `Basic ${Buffer.from(`${server.owner.email}:${server.owner.key}`).toString("base64")}`;
  const received: Array<{ id: string; data: any }> = [];
  const source = new EventSource(`${server.url}/api/v1/events/stream?queue_id=${queueId}`, {
    fetch: (input, init) =>
      fetch(input, { ...init, headers: { ...init?.headers, authorization: auth, ...(lastEventId ? { "last-event-id": lastEventId } : {}) } }),
  });
  source.onmessage = (e) => received.push({ id: e.lastEventId, data: JSON.parse(e.data) });
  const opened = new Promise<void>((resolve, reject) => {
    source.onopen = () => resolve();
    source.onerror = (e) => reject(e);
  });
  return { source, received, opened };
}

describe.each(ENGINES)("event stream on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine);
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "sse" }] } });
  });
  afterAll(async () => server?.close());
  const send = (content: string) =>
    api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: "sse", topic: "t", content } }).then((r) => r.body.id as number);

  it("streams events with their ids and resumes after Last-Event-ID", async () => {
    const queue = (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id;
    const first = openStream(server, queue);
    await first.opened;
    const m1 = await send("one");
    const m2 = await send("two");
    await until(() => first.received.length === 2);
    expect(first.received.map((e) => e.data.message.id)).toEqual([m1, m2]);
    expect(first.received.map((e) => e.id)).toEqual(first.received.map((e) => String(e.data.id)));
    first.source.close();

    const m3 = await send("three");
    const resumed = openStream(server, queue, first.received[0]!.id);
    await resumed.opened;
    await until(() => resumed.received.length === 2);
    expect(resumed.received.map((e) => e.data.message.id)).toEqual([m2, m3]);
    resumed.source.close();
  });

  it("lets go of a stream as soon as its client does: its parked poll is finished, not left for the heartbeat", async () => {
    const queue = (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id;
    const before = server.node.system.waitingAsks;
    const stream = openStream(server, queue);
    await stream.opened;
    await until(() => server.node.system.waitingAsks === before + 1); // the stream's poll, parked
    stream.source.close();
    await until(() => server.node.system.waitingAsks === before, 3000); // the heartbeat is 50 s away
  });

  it("answers an unknown queue with BAD_EVENT_QUEUE_ID before opening the stream", async () => {
    const res = await api(server, "GET", "/events/stream", { as: server.owner, params: { queue_id: "nope" } });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe("BAD_EVENT_QUEUE_ID");
  });
});

// A stream hears each batch as its user actor pushes it (Poll.stream), acknowledges by subscribing again every
// STREAM_ACKNOWLEDGE_EVERY batches, and its heartbeat timer counts from the last batch rather than being set for each.
describe.each(ENGINES)("a subscribed event stream on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine, { heartbeatSeconds: 1 });
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "sse" }] } });
  });
  afterAll(async () => server?.close());
  const send = (content: string) =>
    api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: "sse", topic: "t", content } }).then((r) => r.body.id as number);
  const messages = (received: Array<{ data: any }>) => received.filter((e) => e.data.type === "message").map((e) => e.data.message.id as number);
  const heartbeats = (received: Array<{ data: any }>) => received.filter((e) => e.data.type === "heartbeat").length;

  it("keeps its heartbeat going between batches and after them", async () => {
    const queue = (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id;
    const stream = openStream(server, queue);
    await stream.opened;
    await until(() => heartbeats(stream.received) === 1);
    const m1 = await send("between heartbeats");
    await until(() => messages(stream.received).length === 1);
    await until(() => heartbeats(stream.received) === 2);
    expect(messages(stream.received)).toEqual([m1]);
    const ids = stream.received.map((e) => Number(e.id));
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    stream.source.close();
  });

  it("acknowledges every STREAM_ACKNOWLEDGE_EVERY batches, one batch behind: the queue keeps only the later ones", async () => {
    const queue = (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id;
    const stream = openStream(server, queue);
    await stream.opened;
    const sent: number[] = [];
    for (let i = 0; i < STREAM_ACKNOWLEDGE_EVERY + 2; i++) {
      sent.push(await send(`batch ${i}`));
      await until(() => messages(stream.received).length === i + 1); // each message a batch of its own
    }
    expect(messages(stream.received)).toEqual(sent);
    // Read the queue from its start while the stream is open (this poll finishes the stream's, which subscribes again).
    const polled = await api(server, "GET", "/events", { as: server.owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } });
    const left = polled.body.events.filter((e: any) => e.type === "message").map((e: any) => e.message.id);
    // Acknowledged at the STREAM_ACKNOWLEDGE_EVERY-th batch: everything before it.
    expect(left).toEqual(sent.slice(STREAM_ACKNOWLEDGE_EVERY - 1));
    stream.source.close();
  });

  it("delivers every event once and in order when a burst fills the socket's buffer (the stream pauses and subscribes again)", async () => {
    const queue = (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id;
    const stream = openStream(server, queue);
    await stream.opened;
    // Sent together, they commit together and reach the stream in one burst of pushes: more than the 64 KiB a stream
    // buffers before it says it is full (STREAM_HIGH_WATER in gateway/http.ts).
    const big = "x".repeat(9000);
    const sent = (await Promise.all(Array.from({ length: 24 }, (_, i) => send(`${i} ${big}`)))).sort((a, b) => a - b);
    await until(() => messages(stream.received).length >= sent.length, 15_000);
    expect(messages(stream.received)).toEqual(sent);
    stream.source.close();
  });
});
