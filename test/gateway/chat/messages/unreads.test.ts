/**
 * POST /register's `unread_msgs`, computed from the flag rows, and the topic visibility a send gives its sender
 * (Zulip's automatic follow / unmute settings), through a real server on both engines.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, FLAG_STORAGES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";

describe.each(FLAG_STORAGES)("unreads and automatic topic visibility on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  let general: number;
  let quiet: number;

  const { send, toChannel, register, events, subscribe } = messageApi(() => server);
  const unreads = async (as: Credentials, capabilities: Record<string, unknown> = {}) => {
    const res = await api(server, "POST", "/register", {
      as,
      params: { event_types: ["message", "update_message_flags"], client_capabilities: capabilities },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.unread_msgs;
  };
  const setSettings = async (as: Credentials, params: Record<string, unknown>) =>
    expect((await api(server, "PATCH", "/settings", { as, params })).status).toBe(200);
  const setTopic = (as: Credentials, stream_id: number, topic: string, visibility_policy: number) =>
    api(server, "POST", "/user_topics", { as, params: { stream_id, topic, visibility_policy } });
  const muteChannel = (user: User, streamId: number) =>
    server.node.store.db.updateTable("subscriptions").set({ is_muted: true }).where("user_id", "=", user.id).where("stream_id", "=", streamId).execute();
  const policyOf = async (user: User, streamId: number, topic: string) =>
    (
      await server.node.store.db
        .selectFrom("user_topics")
        .select("visibility_policy")
        .where("user_id", "=", user.id)
        .where("stream_id", "=", streamId)
        .where("topic_key", "=", topic.toLowerCase())
        .executeTakeFirst()
    )?.visibility_policy;

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    ({ general, quiet } = await subscribe(server.owner, ["general", "quiet"], { principals: [alice.id, bob.id, carol.id] }));
  });
  afterAll(async () => server?.close());

  it("starts empty and lists channel, one-on-one, self and group unreads with mentions and a count", async () => {
    expect(await unreads(carol)).toEqual({ count: 0, pms: [], streams: [], huddles: [], mentions: [], old_unreads_missing: false });
    const t1 = await toChannel(alice, "Plans", "first");
    const t2 = await toChannel(bob, "plans", "@**Carol** second");
    const other = await toChannel(alice, "", "general chat message");
    const dm = (await send(alice, { type: "direct", to: JSON.stringify([carol.id]), content: "hi" })).body.id;
    const self = (await send(carol, { type: "direct", to: JSON.stringify([carol.id]), content: "note", read_by_sender: false })).body.id;
    const group = (await send(bob, { type: "direct", to: JSON.stringify([alice.id, carol.id]), content: "all three" })).body.id;
    const mine = await toChannel(carol, "Plans", "my own message is read");

    const state = await unreads(carol);
    expect(state).toEqual({
      count: 6,
      pms: [
        { other_user_id: alice.id, sender_id: alice.id, unread_message_ids: [dm] },
        { other_user_id: carol.id, sender_id: carol.id, unread_message_ids: [self] },
      ].sort((a, b) => a.other_user_id - b.other_user_id),
      // One entry per topic whatever its case, named as its first unread message names it.
      streams: [
        { stream_id: general, topic: "general chat", unread_message_ids: [other] },
        { stream_id: general, topic: "Plans", unread_message_ids: [t1, t2] },
      ],
      huddles: [{ user_ids_string: [alice.id, bob.id, carol.id].sort((a, b) => a - b).join(","), unread_message_ids: [group] }],
      mentions: [t2],
      old_unreads_missing: false,
    });
    expect(state.streams.flatMap((s: any) => s.unread_message_ids)).not.toContain(mine);
    // The empty_topic_name capability shows the empty topic as it is.
    expect((await unreads(carol, { empty_topic_name: true })).streams[0].topic).toBe("");

    await api(server, "POST", "/messages/flags", { as: carol, params: { messages: [t1, t2, other, dm, self, group], op: "add", flag: "read" } });
    expect(await unreads(carol)).toMatchObject({ count: 0, pms: [], streams: [], huddles: [], mentions: [] });
  });

  it("keeps muted messages listed but out of count and wildcard mentions", async () => {
    await setTopic(carol, general, "noise", 1);
    const muted = await toChannel(alice, "noise", "hey @**all**");
    const direct = await toChannel(alice, "noise", "hey @**Carol**");
    await muteChannel(carol, quiet);
    const inMutedChannel = await toChannel(alice, "anything", "psst", "quiet");
    const state = await unreads(carol);
    expect(state.count).toBe(0);
    expect(state.streams).toEqual([
      { stream_id: general, topic: "noise", unread_message_ids: [muted, direct] },
      { stream_id: quiet, topic: "anything", unread_message_ids: [inMutedChannel] },
    ]);
    // A direct mention counts even in a muted topic; a wildcard one does not.
    expect(state.mentions).toEqual([direct]);
    // Unsubscribing hides a channel's unreads (no unsubscribe route yet: the row it would leave).
    await server.node.store.db.updateTable("subscriptions").set({ active: false }).where("user_id", "=", carol.id).where("stream_id", "=", quiet).execute();
    expect((await unreads(carol)).streams.map((s: any) => s.stream_id)).toEqual([general]);
    await api(server, "POST", "/messages/flags", { as: carol, params: { messages: [muted, direct], op: "add", flag: "read" } });
  });

  it("follows a topic the sender starts (the default), with a user_topic event and the send's answer", async () => {
    const q = await register(bob, ["user_topic"]);
    const first = await send(bob, { type: "stream", to: "general", topic: "Bob's idea", content: "start" });
    expect(first.body.automatic_new_visibility_policy).toBe(3);
    expect(await policyOf(bob, general, "bob's idea")).toBe(3);
    const [ev] = await events(bob, q);
    expect(ev).toMatchObject({ type: "user_topic", stream_id: general, topic_name: "Bob's idea", visibility_policy: 3 });
    // Replying to a topic someone else started changes nothing by default.
    const reply = await send(alice, { type: "stream", to: "general", topic: "bob's idea", content: "reply" });
    expect(reply.status).toBe(200);
    expect(reply.body.automatic_new_visibility_policy).toBeUndefined();
    expect(await policyOf(alice, general, "bob's idea")).toBeUndefined();
    // Nor does the starter's next message, already following.
    expect((await send(bob, { type: "stream", to: "general", topic: "Bob's idea", content: "more" })).body.automatic_new_visibility_policy).toBeUndefined();
    // Direct messages have no topics.
    expect((await send(bob, { type: "direct", to: JSON.stringify([alice.id]), content: "dm" })).body.automatic_new_visibility_policy).toBeUndefined();
  });

  it("follows on participation, unmutes in muted channels on send, and never lowers a followed topic", async () => {
    await setSettings(alice, { automatically_follow_topics_policy: 1 });
    await toChannel(bob, "busy", "bob starts");
    const joined = await send(alice, { type: "stream", to: "general", topic: "busy", content: "alice joins" });
    expect(joined.body.automatic_new_visibility_policy).toBe(3);

    // In a muted channel, with following off: sending unmutes (the default ON_SEND).
    await setSettings(alice, { automatically_follow_topics_policy: 4 });
    const { "muted room": room } = await subscribe(alice, ["muted room"]);
    await muteChannel(alice, room);
    const unmuted = await send(alice, { type: "stream", to: "muted room", topic: "t", content: "x" });
    expect(unmuted.body.automatic_new_visibility_policy).toBe(2);
    expect(await policyOf(alice, room, "t")).toBe(2);
    // An unmuted channel is not unmuted topic by topic.
    expect((await send(alice, { type: "stream", to: "general", topic: "plain", content: "x" })).body.automatic_new_visibility_policy).toBeUndefined();

    // Following a topic by hand, then sending with "unmute on send": it stays followed.
    await setTopic(alice, room, "kept", 3);
    expect((await send(alice, { type: "stream", to: "muted room", topic: "kept", content: "x" })).body.automatic_new_visibility_policy).toBeUndefined();
    expect(await policyOf(alice, room, "kept")).toBe(3);
    expect((await api(server, "PATCH", "/settings", { as: alice, params: { automatically_follow_topics_policy: 9 } })).status).toBe(400);
  });

  it("follows on reacting when following on participation, not otherwise", async () => {
    const react = (as: Credentials, id: number) =>
      api(server, "POST", `/messages/${id}/reactions`, { as, params: { emoji_name: "octopus" }, template: "/messages/{message_id}/reactions" });
    const one = await toChannel(alice, "reactions", "react to me");
    expect((await react(bob, one)).status).toBe(200);
    expect(await policyOf(bob, general, "reactions")).toBeUndefined();
    await setSettings(bob, { automatically_follow_topics_policy: 1 });
    const q = await register(bob, ["user_topic"]);
    expect((await react(bob, one)).status).toBe(400); // already there: nothing changes
    const two = await toChannel(alice, "reactions", "and me");
    expect((await react(bob, two)).status).toBe(200);
    expect(await policyOf(bob, general, "reactions")).toBe(3);
    expect((await events(bob, q)).map((e) => [e.topic_name, e.visibility_policy])).toEqual([["reactions", 3]]);
    await setSettings(bob, { automatically_follow_topics_policy: 3 });
  });

  it("gives the start of a topic to one sender only, however close the sends", async () => {
    const sends = await Promise.all([bob, carol, bob, carol].map((u, i) => send(u, { type: "stream", to: "general", topic: "photo finish", content: `${i}` })));
    const starters = sends.filter((r) => r.body.automatic_new_visibility_policy === 3);
    expect(starters.map((r) => r.body.id)).toEqual([Math.min(...sends.map((r) => r.body.id))]);
  });

  it("makes the people mentioned follow the topic, unless they opted out or muted it", async () => {
    const q = await register(carol, ["user_topic"]);
    await toChannel(bob, "call for carol", `@**Carol** please look`);
    expect(await policyOf(carol, general, "call for carol")).toBe(3);
    expect((await events(carol, q)).map((e) => [e.topic_name, e.visibility_policy])).toEqual([["call for carol", 3]]);
    // Silent mentions and wildcards do not count.
    await toChannel(bob, "silent", `@_**Carol** fyi, and @**all**`);
    expect(await policyOf(carol, general, "silent")).toBeUndefined();
    await setTopic(carol, general, "muted call", 1);
    await toChannel(bob, "muted call", `@**Carol** again`);
    expect(await policyOf(carol, general, "muted call")).toBe(1);
    await setSettings(carol, { automatically_follow_topics_where_mentioned: false });
    await toChannel(bob, "opted out", `@**Carol** once more`);
    expect(await policyOf(carol, general, "opted out")).toBeUndefined();
  });
});
