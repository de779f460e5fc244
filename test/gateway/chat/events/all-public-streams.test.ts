/**
 * Queues registered with all_public_streams: they get every public channel's new messages, subscribed or not,
 * including channels whose actor was already running before the queue existed; never a private channel's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("all_public_streams on %s", (engine) => {
  let server: TestServer;
  let alice: Credentials & { id: number };
  let watcher: Credentials & { id: number };

  const subscribe = (name: string, inviteOnly = false) =>
    api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name }], invite_only: inviteOnly } });
  const send = async (channel: string, content: string) =>
    (await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: channel, topic: "t", content } })).body.id as number;
  const register = async (allPublicStreams: boolean) =>
    (await api(server, "POST", "/register", { as: watcher, params: { event_types: ["message"], all_public_streams: allPublicStreams } })).body
      .queue_id as string;
  const messageIds = async (queue: string) =>
    (await api(server, "GET", "/events", { as: watcher, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events
      .filter((e: any) => e.type === "message")
      .map((e: any) => e.message.id);

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    watcher = await createUser(server, "watcher@example.com", "Watcher");
    // The public channel's actor is running (it took a message) before the watcher's queue exists.
    await subscribe("town square");
    await send("town square", "before");
  });
  afterAll(async () => server?.close());

  it("delivers public channels' messages to the queue that asked, not to the user's other queues", async () => {
    const everything = await register(true);
    const ordinary = await register(false);
    await subscribe("secret", true);
    const seen = await send("town square", "hello");
    const hidden = await send("secret", "psst");
    await subscribe("created later");
    const later = await send("created later", "new channel");
    const ids = await messageIds(everything);
    expect(ids).toEqual([seen, later]);
    expect(ids).not.toContain(hidden);
    expect(await messageIds(ordinary)).toEqual([]);
  });

  it("stops once the queue is deleted", async () => {
    const queue = await register(true);
    expect((await api(server, "DELETE", "/events", { as: watcher, params: { queue_id: queue } })).status).toBe(200);
    const other = await register(false);
    await send("town square", "after");
    expect(await messageIds(other)).toEqual([]);
  });
});
