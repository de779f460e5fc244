/**
 * Edits and moves as Zulip rules them, through a real server on both engines: mention flags and wildcard rules on
 * content edits, topic policies at a move's destination, the undo window of resolving, and who keeps the messages
 * when they move to another channel.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, FLAG_STORAGES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { eventually, ids, messageApi, NOTIFICATION_BOT, type User } from "../../../support/messages.ts";

/** A modern client: deletions come as one event listing every message id. */
const BULK_DELETION = { bulk_message_deletion: true };

describe.each(FLAG_STORAGES)("edits and moves on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let owner: Credentials;
  let ownerId: number;
  let alice: User;
  let bob: User;
  let carol: User;
  let guest: User;
  let crowd: User[];
  const channels: Record<string, number> = {};

  const messages = messageApi(() => server);
  const { toChannel, get, patch, register, events, setRealm } = messages;
  const subscribe = async (names: string[], principals: number[], extra: Record<string, unknown> = {}) =>
    Object.assign(channels, await messages.subscribe(owner, names, { principals, ...extra }));
  /** Channel settings written before the channel's actor first wakes (it reads them once). */
  const setChannelSettings = async (name: string, settings: Record<string, unknown>) => {
    const db = server.node.store.db;
    const stream = await db.selectFrom("streams").select("settings").where("id", "=", channels[name]!).executeTakeFirstOrThrow();
    await db
      .updateTable("streams")
      .set({ settings: JSON.stringify({ ...(stream.settings as object), ...settings }) })
      .where("id", "=", channels[name]!)
      .execute();
  };
  const flagsOf = async (user: User | number, messageId: number) =>
    (
      await server.node.store.db
        .selectFrom("user_messages")
        .select("flags")
        .where("user_id", "=", typeof user === "number" ? user : user.id)
        .where("message_id", "=", messageId)
        .executeTakeFirst()
    )?.flags;
  const botMessages = async (channel: string, topic: string) =>
    (await get(owner, { narrow: [{ operator: "channel", operand: channel }, { operator: "topic", operand: topic }] })).body.messages.filter(
      (m: any) => m.sender_email === NOTIFICATION_BOT,
    );

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    owner = server.owner;
    ownerId = (await api(server, "GET", "/users/me", { as: owner })).body.user_id;
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    guest = await createUser(server, "guest@example.com", "Guest");
    await server.node.store.db.updateTable("users").set({ role: 600 }).where("id", "=", guest.id).execute();
    crowd = await Promise.all(Array.from({ length: 15 }, (_, i) => createUser(server, `crowd${i}@example.com`, `Crowd ${i}`)));
    await subscribe(["general"], [ownerId, alice.id, bob.id, guest.id]);
    await subscribe(["crowded"], [ownerId, alice.id, ...crowd.map((u) => u.id)]);
  });
  afterAll(async () => server?.close());

  it("recomputes mention flags when the content changes, with each user's flags in update_message", async () => {
    const id = await toChannel(alice, "mention edit", "hello");
    const q = await register(bob, ["update_message"]);
    expect((await patch(alice, id, { content: "hello @**Bob**" })).status).toBe(200);
    expect((await get(bob, { narrow: [{ operator: "id", operand: id }] })).body.messages[0].flags).toEqual(["mentioned"]);
    expect(ids(await get(bob, { narrow: [{ operator: "is", operand: "mentioned" }, { operator: "topic", operand: "mention edit" }] }))).toEqual([id]);
    expect((await patch(alice, id, { content: "hello @**all**" })).status).toBe(200);
    expect((await patch(alice, id, { content: "hello again" })).status).toBe(200);
    expect((await events(bob, q)).map((e) => e.flags)).toEqual([["mentioned"], ["stream_wildcard_mentioned", "wildcard_mentioned"], []]);
    expect(await flagsOf(bob, id)).toBe(0);
    // The sender's own read flag survives the rewrite.
    expect(await flagsOf(alice, id)).toBe(1);
  });

  it("refuses channel and topic wildcard mentions on edit where a send would refuse them", async () => {
    const mine = await toChannel(alice, "busy", "plain", "crowded");
    const refused = await patch(alice, mine, { content: "now @**all**" });
    expect(refused.body).toMatchObject({ code: "STREAM_WILDCARD_MENTION_NOT_ALLOWED" });
    expect((await get(alice, { narrow: [{ operator: "id", operand: mine }] })).body.messages[0].content).toBe("plain");
    // Administrators may.
    const owners = await toChannel(owner, "busy", "plain", "crowded");
    expect((await patch(owner, owners, { content: "now @**all**" })).status).toBe(200);
    // Sixteen people in a topic: @**topic** needs the permission too.
    for (const u of crowd) await toChannel(u, "many voices", "here", "crowded");
    const voice = await toChannel(alice, "many voices", "me too", "crowded");
    expect((await patch(alice, voice, { content: "@**topic** look" })).body).toMatchObject({ code: "TOPIC_WILDCARD_MENTION_NOT_ALLOWED" });
    expect((await patch(alice, voice, { content: "@_**all** silent is fine" })).status).toBe(200);
  });

  it("applies the destination's topic policy to moves", async () => {
    await subscribe(["strict", "only general chat"], [ownerId, alice.id]);
    await setChannelSettings("strict", { topics_policy: "disable_empty_topic" });
    await setChannelSettings("only general chat", { topics_policy: "empty_topic_only" });
    const id = await toChannel(alice, "policy", "x");
    expect((await patch(alice, id, { stream_id: channels.strict, topic: "" })).body.msg).toBe("Sending messages to the general chat is not allowed in this channel.");
    expect((await patch(alice, id, { stream_id: channels["only general chat"] })).body.msg).toBe("Only the general chat topic is allowed in this channel.");
    expect((await patch(alice, id, { stream_id: channels["only general chat"], topic: "" })).status).toBe(200);
    // Moving back into a channel that inherits the realm's rules.
    await setRealm({ realm_mandatory_topics: true });
    try {
      expect((await patch(alice, id, { stream_id: channels.general })).body.msg).toBe("Topics are required in this organization.");
      expect((await patch(alice, id, { stream_id: channels.general, topic: "policy" })).status).toBe(200);
      expect((await patch(alice, id, { topic: "(no topic)" })).body.msg).toBe("Topics are required in this organization.");
    } finally {
      await setRealm({ realm_mandatory_topics: false });
    }
  });

  it("deletes the resolve notice when the topic is unresolved within a minute, and notices otherwise", async () => {
    const id = await toChannel(alice, "fix", "broken");
    expect((await patch(alice, id, { topic: "✔ fix", propagate_mode: "change_all" })).status).toBe(200);
    expect(await eventually(async () => (await botMessages("general", "✔ fix")).length === 1)).toBe(true);
    const [notice] = await botMessages("general", "✔ fix");
    const q = await register(bob, ["delete_message"], BULK_DELETION);
    expect((await patch(alice, id, { topic: "fix", propagate_mode: "change_all" })).status).toBe(200);
    expect(await botMessages("general", "fix")).toEqual([]);
    expect(ids(await get(owner, { narrow: [{ operator: "topic", operand: "fix" }] }))).toEqual([id]);
    expect((await events(bob, q))[0]).toMatchObject({ type: "delete_message", message_ids: [notice.id], topic: "fix" });
    expect(await flagsOf(bob, notice.id)).toBeUndefined();

    // Past the grace period the toggle is announced.
    expect((await patch(alice, id, { topic: "✔ fix", propagate_mode: "change_all" })).status).toBe(200);
    expect(await eventually(async () => (await botMessages("general", "✔ fix")).length === 1)).toBe(true);
    await server.node.store.db.updateTable("messages").set({ date_sent: Math.floor(Date.now() / 1000) - 120 }).where("sender_id", "<>", alice.id).where("topic", "=", "✔ fix").execute();
    expect((await patch(alice, id, { topic: "fix", propagate_mode: "change_all" })).status).toBe(200);
    expect(await eventually(async () => (await botMessages("general", "fix")).length === 2)).toBe(true);
    expect((await botMessages("general", "fix")).map((m: any) => m.content)).toEqual([
      `@_**Alice|${alice.id}** has marked this topic as resolved.`,
      `@_**Alice|${alice.id}** has marked this topic as unresolved.`,
    ]);
  });

  it("starts notices read for the mover, and resolve notices unread only for followers (or those who ask)", async () => {
    const id = await toChannel(alice, "tidy", "x");
    await api(server, "POST", "/user_topics", { as: bob, params: { stream_id: channels.general, topic: "tidy", visibility_policy: 3 } });
    expect((await api(server, "PATCH", "/settings", { as: guest, params: { resolved_topic_notice_auto_read_policy: "never" } })).status).toBe(200);
    expect((await patch(alice, id, { topic: "✔ tidy", propagate_mode: "change_all" })).status).toBe(200);
    expect(await eventually(async () => (await botMessages("general", "✔ tidy")).length === 1)).toBe(true);
    const [resolved] = await botMessages("general", "✔ tidy");
    const READ = 1;
    // Alice follows the topic she started, but she resolved it.
    expect([await flagsOf(alice, resolved.id), await flagsOf(bob, resolved.id), await flagsOf(guest, resolved.id), await flagsOf(ownerId, resolved.id)]).toEqual([READ, 0, 0, READ]);
    // A breadcrumb is unread for everyone but the mover.
    expect((await patch(alice, id, { topic: "tidied", propagate_mode: "change_all", send_notification_to_new_thread: true })).status).toBe(200);
    expect(await eventually(async () => (await botMessages("general", "tidied")).length === 2)).toBe(true);
    const crumb = (await botMessages("general", "tidied"))[1];
    expect([await flagsOf(alice, crumb.id), await flagsOf(ownerId, crumb.id)]).toEqual([READ, 0]);
    expect((await api(server, "PATCH", "/settings", { as: guest, params: { resolved_topic_notice_auto_read_policy: "sometimes" } })).status).toBe(400);
  });

  it("moves topic visibility with a whole topic, merging into a topic that has messages", async () => {
    const policies = async (user: User) =>
      (await api(server, "POST", "/register", { as: user, params: { event_types: ["user_topic"] } })).body.user_topics
        .filter((t: any) => ["carry", "carried", "dest", "src"].includes(t.topic_name))
        .map((t: any) => [t.topic_name, t.visibility_policy])
        .sort();
    const setTopic = (user: User, topic: string, visibility_policy: number) =>
      api(server, "POST", "/user_topics", { as: user, params: { stream_id: channels.general, topic, visibility_policy } });
    const first = await toChannel(alice, "carry", "1");
    await toChannel(alice, "carry", "2");
    await setTopic(bob, "carry", 3);
    const q = await register(bob, ["user_topic"]);
    // Moving one message of two moves no policy.
    await patch(alice, first, { topic: "carried", send_notification_to_new_thread: false });
    expect(await policies(bob)).toEqual([["carry", 3]]);
    await patch(alice, first, { topic: "carry", send_notification_to_new_thread: false });
    await patch(alice, first, { topic: "carried", propagate_mode: "change_all", send_notification_to_new_thread: false });
    expect(await policies(bob)).toEqual([["carried", 3]]);
    expect((await events(bob, q)).map((e) => [e.topic_name, e.visibility_policy])).toEqual([
      ["carry", 0],
      ["carried", 3],
    ]);

    // Into a topic with messages: the more visible policy wins (followed over muted).
    const src = await toChannel(bob, "src", "s");
    await toChannel(bob, "dest", "d");
    await setTopic(bob, "src", 3);
    await setTopic(bob, "dest", 1);
    await setTopic(guest, "src", 1);
    await patch(alice, src, { topic: "dest", propagate_mode: "change_all", send_notification_to_new_thread: false });
    expect(await policies(bob)).toEqual([["carried", 3], ["dest", 3]]);
    // The guest's mute meets no policy in a topic that has messages: the merge keeps it visible (inherit).
    expect(await policies(guest)).toEqual([]);
  });

  it("takes moved messages away from those who lose access, and hands read rows to a protected destination", async () => {
    await subscribe(["secret"], [ownerId, alice.id], { invite_only: true });
    await subscribe(["vault"], [ownerId, alice.id, carol.id], { invite_only: true, history_public_to_subscribers: false });
    await subscribe(["open"], [ownerId, alice.id]);
    const qBob = await register(bob, ["update_message", "delete_message"], BULK_DELETION);
    const qAlice = await register(alice, ["update_message", "delete_message"]);

    const [a, b] = [await toChannel(alice, "leak", "1"), await toChannel(alice, "leak", "2")];
    const moved = await patch(alice, a, { stream_id: channels.secret, propagate_mode: "change_all", send_notification_to_new_thread: false });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    const bobs = await events(bob, qBob);
    expect(bobs).toEqual([expect.objectContaining({ type: "delete_message", message_ids: [a, b], message_type: "stream", stream_id: channels.general, topic: "leak" })]);
    expect(await flagsOf(bob, a)).toBeUndefined();
    expect((await get(bob, { narrow: [{ operator: "id", operand: a }] })).body.messages).toEqual([]);
    expect((await events(alice, qAlice)).map((e) => e.type)).toEqual(["update_message"]);

    // Carol never had the messages; the vault's protected history needs her a row, read.
    await patch(alice, a, { stream_id: channels.vault, propagate_mode: "change_all", send_notification_to_new_thread: false });
    expect(await flagsOf(carol, a)).toBe(1);
    expect(ids(await get(carol, { narrow: [{ operator: "channel", operand: "vault" }, { operator: "topic", operand: "leak" }] }))).toEqual([a, b]);

    // Into a public channel, only guests lose access.
    const c = await toChannel(alice, "public move", "3");
    const qGuest = await register(guest, ["delete_message"], BULK_DELETION);
    const qBob2 = await register(bob, ["update_message", "delete_message"]);
    await patch(alice, c, { stream_id: channels.open, send_notification_to_new_thread: false });
    expect((await events(guest, qGuest))[0]).toMatchObject({ type: "delete_message", message_ids: [c] });
    expect((await events(bob, qBob2)).map((e) => e.type)).toEqual(["update_message"]);
    expect(await flagsOf(bob, c)).toBeUndefined();
  });
});
