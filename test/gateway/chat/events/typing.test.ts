/**
 * POST /typing and its events: direct and channel typing, the sender left out, the receiving setting honoured.
 * POST /messages/{id}/typing: typing_edit_message to whom the edit would reach, for whoever may edit the message.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("typing on %s", (engine) => {
  let server: TestServer;
  let alice: Credentials & { id: number };
  let bob: Credentials & { id: number };
  let carol: Credentials & { id: number };
  let streamId: number;

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "typing" }], principals: [alice.id, bob.id] } });
    streamId = (await api(server, "GET", "/users/me/subscriptions", { as: alice })).body.subscriptions[0].stream_id;
    // Carol does not want typing notifications (a setting written through PATCH /settings once that exists).
    await server.node.store.db
      .insertInto("actor_snapshots")
      .values({ kind: "user-settings", key: String(carol.id), version: 1, state: JSON.stringify({ receives_typing_notifications: false }), updated_at: 0 })
      .execute();
  });
  afterAll(async () => server?.close());

  const queueOf = async (who: Credentials) => (await api(server, "POST", "/register", { as: who, params: { event_types: ["typing"] } })).body.queue_id as string;
  const eventsOf = async (who: Credentials, queue: string) =>
    (await api(server, "GET", "/events", { as: who, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events;

  it("notifies the other participants of a direct conversation, not the sender", async () => {
    const [qa, qb, qc] = [await queueOf(alice), await queueOf(bob), await queueOf(carol)];
    const res = await api(server, "POST", "/typing", { as: alice, params: { op: "start", to: [bob.id, carol.id] } });
    expect(res.status).toBe(200);
    const [ea, eb, ec] = [await eventsOf(alice, qa), await eventsOf(bob, qb), await eventsOf(carol, qc)];
    expect(ea).toEqual([]);
    expect(eb).toEqual([
      {
        type: "typing",
        op: "start",
        message_type: "direct",
        sender: { user_id: alice.id, email: alice.email },
        recipients: [alice, bob, carol].map((u) => ({ user_id: u.id, email: u.email })),
        id: expect.any(Number),
      },
    ]);
    expect(ec).toEqual([]); // receives_typing_notifications is off
  });

  it("notifies a channel topic's subscribers", async () => {
    const qb = await queueOf(bob);
    await api(server, "POST", "/typing", { as: alice, params: { type: "stream", op: "stop", stream_id: streamId, topic: "lunch" } });
    expect(await eventsOf(bob, qb)).toEqual([
      { type: "typing", op: "stop", message_type: "stream", sender: { user_id: alice.id, email: alice.email }, stream_id: streamId, topic: "lunch", id: expect.any(Number) },
    ]);
  });

  it("refuses bad requests", async () => {
    const typing = (params: Record<string, unknown>) => api(server, "POST", "/typing", { as: alice, params });
    expect((await typing({ to: [bob.id] })).body.code).toBe("REQUEST_VARIABLE_MISSING");
    expect((await typing({ op: "pause", to: [bob.id] })).status).toBe(400);
    expect((await typing({ op: "start", to: [999999] })).status).toBe(400);
    expect((await typing({ op: "start", type: "stream", stream_id: streamId })).body.msg).toBe("Missing 'topic' argument");
    expect((await typing({ op: "start", type: "stream", stream_id: 424242, topic: "x" })).body.code).toBe("STREAM_DOES_NOT_EXIST");
  });

  it("tells a channel's subscribers, the editor too, that a message is being edited", async () => {
    const sent = await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: streamId, topic: "edits", content: "first draft" } });
    const [qa, qb] = [await queueOf(alice), await queueOf(bob)];
    const qae = (await api(server, "POST", "/register", { as: alice, params: { event_types: ["typing_edit_message"] } })).body.queue_id as string;
    const qbe = (await api(server, "POST", "/register", { as: bob, params: { event_types: ["typing_edit_message"] } })).body.queue_id as string;
    const res = await api(server, "POST", `/messages/${sent.body.id}/typing`, { as: alice, params: { op: "start" }, template: "/messages/{message_id}/typing" });
    expect(res.status).toBe(200);
    const expected = { type: "typing_edit_message", op: "start", sender_id: alice.id, message_id: sent.body.id, recipient: { type: "channel", channel_id: streamId, topic: "edits" }, id: expect.any(Number) };
    expect(await eventsOf(bob, qbe)).toEqual([expected]);
    expect(await eventsOf(alice, qae)).toEqual([expected]);
    // A queue that asked for "typing" only does not get them.
    expect(await eventsOf(alice, qa)).toEqual([]);
    expect(await eventsOf(bob, qb)).toEqual([]);
  });

  it("tells a direct conversation's participants who receive typing notifications", async () => {
    const sent = await api(server, "POST", "/messages", { as: alice, params: { type: "direct", to: [bob.id, carol.id], content: "hi both" } });
    const qbe = (await api(server, "POST", "/register", { as: bob, params: { event_types: ["typing_edit_message"] } })).body.queue_id as string;
    const qce = (await api(server, "POST", "/register", { as: carol, params: { event_types: ["typing_edit_message"] } })).body.queue_id as string;
    await api(server, "POST", `/messages/${sent.body.id}/typing`, { as: alice, params: { op: "stop" }, template: "/messages/{message_id}/typing" });
    expect(await eventsOf(bob, qbe)).toEqual([
      { type: "typing_edit_message", op: "stop", sender_id: alice.id, message_id: sent.body.id, recipient: { type: "direct", user_ids: [alice.id, bob.id] }, id: expect.any(Number) },
    ]);
    expect(await eventsOf(carol, qce)).toEqual([]); // receives_typing_notifications is off
  });

  it("refuses who may not edit the message, and messages one cannot read", async () => {
    const sent = await api(server, "POST", "/messages", { as: alice, params: { type: "direct", to: [bob.id], content: "mine" } });
    const editTyping = (as: Credentials, id: number, params: Record<string, unknown> = { op: "start" }) =>
      api(server, "POST", `/messages/${id}/typing`, { as, params, template: "/messages/{message_id}/typing" });
    const notMine = await editTyping(bob, sent.body.id);
    expect([notMine.status, notMine.body.msg]).toEqual([400, "You don't have permission to edit this message"]);
    const unreadable = await editTyping(carol, sent.body.id);
    expect([unreadable.status, unreadable.body.msg]).toEqual([400, "Invalid message(s)"]);
    expect((await editTyping(alice, sent.body.id, {})).body.code).toBe("REQUEST_VARIABLE_MISSING");
    expect((await editTyping(alice, sent.body.id, { op: "pause" })).status).toBe(400);
    expect((await editTyping(alice, 99999999)).body.msg).toBe("Invalid message(s)");
  });
});
