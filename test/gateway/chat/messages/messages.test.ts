/**
 * The message surface through a real server on both engines: direct messages, narrows, flags, edits and moves,
 * deletion, reactions, topics. Every response is checked against Zulip's OpenAPI description by `api()`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import crypto from "node:crypto";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { eventually, ids, messageApi, NOTIFICATION_BOT as BOT, type User } from "../../../support/messages.ts";

describe.each(ENGINES)("messages on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;
  let ownerId: number;
  let alice: User;
  let bob: User;
  let carol: User;
  let general: number;
  let other: number;

  const { send, toChannel, get, patch, register, events, setRealm, subscribe } = messageApi(() => server);

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = server.owner;
    ownerId = (await api(server, "GET", "/users/me", { as: owner })).body.user_id;
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    ({ general, other } = await subscribe(owner, ["general", "other"], { principals: [ownerId, alice.id, bob.id] }));
  });
  afterAll(async () => server?.close());

  describe("direct messages", () => {
    it("sends 1:1 by id and by e-mail into one conversation with one recipient_id", async () => {
      const a = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "hi bob" });
      const b = await send(bob, { type: "private", to: alice.email, content: "hi alice" });
      const c = await send(alice, { type: "direct", to: JSON.stringify([bob.email]), content: "again" });
      expect([a.status, b.status, c.status]).toEqual([200, 200, 200]);
      const res = await get(alice, { narrow: [{ operator: "dm", operand: [bob.id] }] });
      expect(ids(res)).toEqual([a.body.id, b.body.id, c.body.id]);
      const [m1, m2] = res.body.messages;
      expect(m1.recipient_id).toBe(m2.recipient_id);
      expect(m1).toMatchObject({ type: "private", subject: "", content: "hi bob" });
      expect(m1.display_recipient.map((p: any) => p.id)).toEqual([alice.id, bob.id].sort((x, y) => x - y));
      expect(m1.display_recipient[0]).toMatchObject({ is_mirror_dummy: false, email: expect.any(String), full_name: expect.any(String) });
      // The legacy pm-with form, with e-mails, finds the same conversation from the other side.
      const legacy = await get(bob, { narrow: [["pm-with", alice.email]] });
      expect(ids(legacy)).toEqual(ids(res));
      // Channel ids and conversation ids never collide.
      const ch = await get(alice, { narrow: [{ operator: "channel", operand: "general" }], num_before: 1 });
      if (ch.body.messages.length) expect(ch.body.messages[0].recipient_id).not.toBe(m1.recipient_id);
    });

    it("keeps group and self conversations apart, with dm-including and is:dm", async () => {
      const group = await send(alice, { type: "direct", to: JSON.stringify([bob.id, carol.id]), content: "group" });
      const self = await send(alice, { type: "direct", to: JSON.stringify([alice.id]), content: "note to self" });
      const groupRes = await get(carol, { narrow: [{ operator: "dm", operand: [alice.id, bob.id] }] });
      expect(ids(groupRes)).toEqual([group.body.id]);
      expect(groupRes.body.messages[0].display_recipient).toHaveLength(3);
      const selfRes = await get(alice, { narrow: [{ operator: "dm", operand: [alice.id] }] });
      expect(ids(selfRes)).toEqual([self.body.id]);
      expect(selfRes.body.messages[0].display_recipient.map((p: any) => p.id)).toEqual([alice.id]);
      const including = await get(bob, { narrow: [{ operator: "dm-including", operand: carol.id }] });
      expect(ids(including)).toEqual([group.body.id]);
      const allDms = await get(alice, { narrow: [{ operator: "is", operand: "dm" }] });
      expect(ids(allDms)).toContain(group.body.id);
      expect(ids(allDms)).toContain(self.body.id);
      expect(allDms.body.messages.every((m: any) => m.type === "private")).toBe(true);
      // Carol sees neither the self conversation nor the 1:1.
      const carolDms = await get(carol, { narrow: [{ operator: "is", operand: "private" }] });
      expect(ids(carolDms)).toEqual([group.body.id]);
      const notDm = await get(alice, { narrow: [{ operator: "is", operand: "dm", negated: true }] });
      expect(notDm.body.messages.every((m: any) => m.type === "stream")).toBe(true);
    });

    // An is:dm page walks each of the reader's conversations from the anchor (alongConversations in reads/messages.ts).
    it("pages is:dm across the reader's conversations in id order, on both sides of an anchor, another condition beside it", async () => {
      const isDm = { operator: "is", operand: "dm" };
      const to = [[bob.id], [carol.id], [bob.id, carol.id]];
      const sent: number[] = [];
      for (let i = 0; i < 9; i++) sent.push((await send(alice, { type: "direct", to: JSON.stringify(to[i % 3]), content: `round ${i}` })).body.id);
      const newest = await get(alice, { narrow: [isDm], anchor: "newest", num_before: 4, num_after: 0 });
      expect(ids(newest)).toEqual(sent.slice(5));
      const around = await get(alice, { narrow: [isDm], anchor: sent[4], num_before: 2, num_after: 2 });
      expect(ids(around)).toEqual(sent.slice(2, 7));
      expect(around.body).toMatchObject({ found_anchor: true, found_newest: false });
      // Bob's messages lie behind five newer ones of Alice's in the same conversation: the sender is tested in the
      // conversation's walk, not after it has kept its newest two.
      const fromBob: number[] = [];
      for (let i = 0; i < 2; i++) fromBob.push((await send(bob, { type: "direct", to: JSON.stringify([alice.id]), content: `bob ${i}` })).body.id);
      for (let i = 0; i < 5; i++) await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: `alice ${i}` });
      const bobs = await get(alice, { narrow: [isDm, { operator: "sender", operand: bob.id }], anchor: "newest", num_before: 2, num_after: 0 });
      expect(ids(bobs)).toEqual(fromBob);
    });

    // dm-including walks the reader's conversations with the user it names (reads/messages.ts conversationsWith).
    it("pages dm-including across the conversations with that user, on both sides of an anchor, another condition beside it", async () => {
      const dave = await createUser(server, "dave-including@example.com", "Dave");
      const withDave = { operator: "dm-including", operand: dave.id };
      const to = [[dave.id], [bob.id], [bob.id, dave.id], [carol.id]];
      const sent: number[] = [];
      for (let i = 0; i < 12; i++) sent.push((await send(alice, { type: "direct", to: JSON.stringify(to[i % 4]), content: `including ${i}` })).body.id);
      const daves = sent.filter((_, i) => i % 4 === 0 || i % 4 === 2);
      expect(ids(await get(alice, { narrow: [withDave], anchor: "newest", num_before: 100, num_after: 0 }))).toEqual(daves);
      expect(ids(await get(alice, { narrow: [{ operator: "dm-including", operand: dave.email }], anchor: "newest", num_before: 3, num_after: 0 }))).toEqual(daves.slice(-3));
      const around = await get(alice, { narrow: [withDave], anchor: daves[2], num_before: 1, num_after: 1 });
      expect(ids(around)).toEqual(daves.slice(1, 4));
      expect(around.body).toMatchObject({ found_anchor: true, found_newest: false, found_oldest: false });
      // Dave's own message in the group, behind newer ones of Alice's: the sender is tested in each conversation's walk.
      const fromDave = (await send(dave, { type: "direct", to: JSON.stringify([alice.id, bob.id]), content: "dave in the group" })).body.id;
      for (let i = 0; i < 3; i++) await send(alice, { type: "direct", to: JSON.stringify([bob.id, dave.id]), content: `after dave ${i}` });
      const daveSent = await get(alice, { narrow: [withDave, { operator: "sender", operand: dave.id }], anchor: "newest", num_before: 1, num_after: 0 });
      expect(ids(daveSent)).toEqual([fromDave]);
      // Carol is in none of Dave's conversations, and a user in no conversation of the reader's has an empty page.
      expect(ids(await get(carol, { narrow: [withDave], anchor: "newest", num_before: 100, num_after: 0 }))).toEqual([]);
      const erin = await createUser(server, "erin-including@example.com", "Erin");
      expect(ids(await get(alice, { narrow: [{ operator: "dm-including", operand: erin.id }] }))).toEqual([]);
    });

    it("delivers to every participant's queue, with read for the sender", async () => {
      const qb = await register(bob, ["message"]);
      const qa = await register(alice, ["message"]);
      const sent = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "live" });
      const [eb] = await events(bob, qb);
      const [ea] = await events(alice, qa);
      expect(eb).toMatchObject({ type: "message", flags: [], message: { id: sent.body.id, type: "private" } });
      expect(ea).toMatchObject({ flags: ["read"], message: { id: sent.body.id } });
    });

    it("names a participant by their new name in the very next message after a rename", async () => {
      const dave = await createUser(server, "dave@example.com", "Dave");
      const qb = await register(bob, ["message"]);
      const nameOfDave = (e: any) => e.message.display_recipient.find((r: any) => r.id === dave.id).full_name;
      expect((await send(dave, { type: "direct", to: JSON.stringify([bob.id]), content: "before" })).status).toBe(200);
      expect((await api(server, "PATCH", "/settings", { as: dave, params: { full_name: "David" } })).status).toBe(200);
      expect((await send(dave, { type: "direct", to: JSON.stringify([bob.id]), content: "after" })).status).toBe(200);
      const received = await events(bob, qb);
      expect(received.map(nameOfDave)).toEqual(["Dave", "David"]);
      expect(received.map((e) => e.message.sender_full_name)).toEqual(["Dave", "David"]);
    });

    it("answers bad recipients with Zulip's errors", async () => {
      expect((await send(alice, { type: "direct", to: JSON.stringify([999999]), content: "x" })).body).toMatchObject({ code: "BAD_REQUEST", msg: "Invalid user ID 999999" });
      expect((await send(alice, { type: "direct", to: "nobody@example.com", content: "x" })).body.msg).toBe("Invalid email 'nobody@example.com'");
      expect((await send(alice, { type: "direct", to: "[]", content: "x" })).body.msg).toBe("Message must have recipients");
      expect((await get(alice, { narrow: [{ operator: "dm", operand: "nobody@example.com" }] })).body.code).toBe("BAD_NARROW");
    });
  });

  describe("narrows and flags", () => {
    it("filters by sender, id, channels:public and negation, in both forms", async () => {
      const m1 = await toChannel(alice, "narrow", "from alice");
      const m2 = await toChannel(bob, "narrow", "from bob");
      const bySender = await get(owner, { narrow: [["stream", "general"], ["topic", "narrow"], ["sender", alice.email]] });
      expect(ids(bySender)).toEqual([m1]);
      const notSender = await get(owner, { narrow: [{ operator: "topic", operand: "narrow" }, { operator: "sender", operand: alice.id, negated: true }] });
      expect(ids(notSender)).toEqual([m2]);
      const byId = await get(owner, { narrow: [{ operator: "id", operand: m2 }] });
      expect(ids(byId)).toEqual([m2]);
      // Carol is subscribed to nothing: her own history is empty, but channels:public reaches the public channels.
      expect(ids(await get(carol, { narrow: [{ operator: "topic", operand: "narrow" }] }))).toEqual([]);
      const pub = await get(carol, { narrow: [{ operator: "channels", operand: "public" }, { operator: "topic", operand: "narrow" }] });
      expect(ids(pub)).toEqual([m1, m2]);
      expect(pub.body.messages[0].flags).toEqual(["read", "historical"]);
      expect((await get(owner, { narrow: [{ operator: "is", operand: "bogus" }] })).body.code).toBe("BAD_NARROW");
      expect((await get(owner, { narrow: [{ operator: "nope", operand: "x" }] })).body.code).toBe("BAD_NARROW");
    });

    it("searches with Postgres full-text search and highlights the matches", async () => {
      const hit = await toChannel(alice, "Kitchen news", "The **ovens** were cleaned");
      await toChannel(alice, "Kitchen news", "nothing to see");
      const dm = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "oven <secret>" });
      const res = await get(bob, { narrow: [{ operator: "search", operand: "oven" }], apply_markdown: true });
      expect(ids(res)).toEqual([hit, dm.body.id]);
      expect(res.body.messages[0].match_content).toBe('<p>The <strong><span class="highlight">ovens</span></strong> were cleaned</p>');
      expect(res.body.messages[0].match_subject).toBe("Kitchen news");
      const topic = await get(bob, { narrow: [{ operator: "search", operand: "kitchen" }, { operator: "channel", operand: "general" }] });
      expect(ids(topic)).toContain(hit);
      expect(topic.body.messages[0].match_subject).toBe('<span class="highlight">Kitchen</span> news');
      // Carol reads neither the channel's history nor the conversation.
      expect(ids(await get(carol, { narrow: [{ operator: "search", operand: "oven" }] }))).toEqual([]);
    });

    it("fetches by message_ids, only readable ones, and refuses mixing with an anchor", async () => {
      const dm = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "private" });
      const ch = await toChannel(alice, "ids", "public");
      // Without a channel operator only Carol's own history counts (she received neither); with channels:public
      // the public one is found, the direct message never.
      const own = await api(server, "GET", "/messages", { as: carol, params: { message_ids: [dm.body.id, ch] } });
      expect(ids(own)).toEqual([]);
      const pub = [{ operator: "channels", operand: "public" }];
      const res = await api(server, "GET", "/messages", { as: carol, params: { message_ids: [dm.body.id, ch], narrow: pub } });
      expect(ids(res)).toEqual([ch]);
      expect(res.body.anchor).toBeUndefined();
      const bobs = await api(server, "GET", "/messages", { as: bob, params: { message_ids: [dm.body.id, ch] } });
      expect(ids(bobs)).toEqual([dm.body.id, ch]);
      const mixed = await api(server, "GET", "/messages", { as: carol, params: { message_ids: [ch], anchor: "newest" } });
      expect(mixed.status).toBe(400);
    });

    it("stores read and starred durably, with first_unread and update_message_flags events", async () => {
      const q = await register(bob, ["update_message_flags"]);
      const first = await toChannel(alice, "unread", "u1");
      const second = await toChannel(alice, "unread", "u2");
      const narrow = [{ operator: "topic", operand: "unread" }];
      const unread = await get(bob, { narrow: [...narrow, { operator: "is", operand: "unread" }] });
      expect(ids(unread)).toEqual([first, second]);
      expect(unread.body.messages[0].flags).toEqual([]);
      const fu = await get(bob, { anchor: "first_unread", num_before: 0, num_after: 1, narrow });
      expect(fu.body.anchor).toBe(first);
      const legacyFu = await api(server, "GET", "/messages", { as: bob, params: { use_first_unread_anchor: true, num_before: 0, num_after: 0, narrow } });
      expect(legacyFu.body.anchor).toBe(first);
      const mark = await api(server, "POST", "/messages/flags", { as: bob, params: { messages: [first], op: "add", flag: "read" } });
      expect(mark.body.messages).toEqual([first]);
      expect((await get(bob, { anchor: "first_unread", num_before: 0, num_after: 0, narrow })).body.anchor).toBe(second);
      await api(server, "POST", "/messages/flags", { as: bob, params: { messages: [second], op: "add", flag: "starred" } });
      const starred = await get(bob, { narrow: [{ operator: "is", operand: "starred" }] });
      expect(ids(starred)).toEqual([second]);
      expect(starred.body.messages[0].flags).toEqual(["starred"]);
      await api(server, "POST", "/messages/flags", { as: bob, params: { messages: [first], op: "remove", flag: "read" } });
      const evs = await events(bob, q);
      expect(evs.map((e) => [e.op, e.flag, e.messages])).toEqual([
        ["add", "read", [first]],
        ["add", "starred", [second]],
        ["remove", "read", [first]],
      ]);
      expect(evs[2].message_details[first]).toMatchObject({ type: "stream", stream_id: general, topic: "unread" });
      // Alice's own messages start read unless she asks otherwise.
      const unreadByMe = await send(alice, { type: "stream", to: "general", topic: "unread", content: "u3", read_by_sender: false });
      const mine = await get(alice, { narrow: [{ operator: "id", operand: unreadByMe.body.id }] });
      expect(mine.body.messages[0].flags).toEqual([]);
      expect((await get(alice, { narrow: [{ operator: "id", operand: first }] })).body.messages[0].flags).toEqual(["read"]);
    });

    it("flags mentions: named users, wildcards, not silent mentions", async () => {
      const named = await toChannel(alice, "mentions", "hello @**Bob** and @_**Carol**");
      const wildcard = await toChannel(alice, "mentions", "hey @**all**");
      const byId = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: `psst @**Bob|${bob.id}**` });
      const mentioned = await get(bob, { narrow: [{ operator: "is", operand: "mentioned" }] });
      expect(ids(mentioned)).toEqual([named, wildcard, byId.body.id]);
      expect(mentioned.body.messages.map((m: any) => m.flags)).toEqual([["mentioned"], ["stream_wildcard_mentioned", "wildcard_mentioned"], ["mentioned"]]);
      const html = await get(bob, { narrow: [{ operator: "id", operand: named }], apply_markdown: true });
      expect(html.body.messages[0].content).toContain(`data-user-id="${bob.id}"`);
      // Carol is not subscribed: a mention does not deliver the message to her.
      expect(ids(await get(carol, { narrow: [{ operator: "is", operand: "mentioned" }] }))).toEqual([]);
    });

    it("refuses flags Zulip does not let clients set, and unreadable messages", async () => {
      const flags = (params: Record<string, unknown>) => api(server, "POST", "/messages/flags", { as: carol, params });
      const ch = await toChannel(alice, "flags", "x");
      expect((await flags({ messages: [ch], op: "add", flag: "mentioned" })).body.msg).toBe("Flag not editable: 'mentioned'");
      expect((await flags({ messages: [ch], op: "add", flag: "bogus" })).body.msg).toBe("Invalid flag: 'bogus'");
      const dm = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "secret" });
      expect((await flags({ messages: [dm.body.id], op: "add", flag: "starred" })).body.msg).toBe("Invalid message(s)");
      // Starring a public message Carol never received sticks (a historical row).
      await flags({ messages: [ch], op: "add", flag: "starred" });
      const res = await get(carol, { narrow: [{ operator: "channels", operand: "public" }, { operator: "id", operand: ch }] });
      expect(res.body.messages[0].flags).toEqual(["read", "starred", "historical"]);
    });
  });

  describe("edits, moves and deletion", () => {
    it("edits content with prev_content_sha256, edit_history and an update_message event", async () => {
      const id = await toChannel(alice, "edit", "first draft");
      const q = await register(bob, ["update_message"]);
      const wrong = await patch(alice, id, { content: "x", prev_content_sha256: "0".repeat(64) });
      expect(wrong.body).toMatchObject({ code: "EXPECTATION_MISMATCH" });
      const sha = crypto.createHash("sha256").update("first draft").digest("hex");
      const ok = await patch(alice, id, { content: "**final**", prev_content_sha256: sha });
      expect(ok.body).toMatchObject({ result: "success", detached_uploads: [] });
      const back = await get(bob, { narrow: [{ operator: "id", operand: id }], apply_markdown: true });
      const m = back.body.messages[0];
      expect(m.content).toBe("<p><strong>final</strong></p>");
      expect(m.last_edit_timestamp).toEqual(expect.any(Number));
      expect(m.last_moved_timestamp).toBeUndefined();
      expect(m.edit_history[0]).toMatchObject({ user_id: alice.id, prev_content: "first draft" });
      const [ev] = await events(bob, q);
      expect(ev).toMatchObject({ type: "update_message", message_id: id, message_ids: [id], orig_content: "first draft", content: "**final**", stream_id: general, flags: [], rendering_only: false });
    });

    it("refuses edits Zulip refuses", async () => {
      const id = await toChannel(alice, "edit-errors", "mine");
      expect((await patch(bob, id, { content: "hijack" })).body.msg).toBe("You don't have permission to edit this message");
      expect((await patch(alice, id, {})).body.msg).toBe("Nothing to change");
      expect((await patch(alice, id, { content: "x", stream_id: other })).body.msg).toBe("Cannot change message content while changing channel");
      expect((await patch(alice, id, { content: "x", propagate_mode: "change_all" })).body.msg).toBe("Invalid propagate_mode without topic edit");
      expect((await patch(alice, 99999999, { content: "x" })).body.msg).toBe("Invalid message(s)");
      const dm = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "dm" });
      expect((await patch(alice, dm.body.id, { topic: "t" })).body.msg).toBe("Direct messages cannot have topics.");
      expect((await patch(carol, dm.body.id, { content: "x" })).body.msg).toBe("Invalid message(s)");
      // Past the realm's edit window.
      await server.node.store.db.updateTable("messages").set({ date_sent: Math.floor(Date.now() / 1000) - 3600 }).where("id", "=", id).execute();
      expect((await patch(alice, id, { content: "late" })).body.msg).toBe("The time limit for editing this message has passed");
    });

    it("moves a topic with change_later and change_all, and resolves without a moved timestamp", async () => {
      const [a, b, c] = [await toChannel(alice, "move me", "1"), await toChannel(bob, "move me", "2"), await toChannel(alice, "move me", "3")];
      const q = await register(owner, ["update_message"]);
      const later = await patch(bob, b, { topic: "moved", propagate_mode: "change_later", send_notification_to_new_thread: false });
      expect(later.status, JSON.stringify(later.body)).toBe(200);
      expect(ids(await get(owner, { narrow: [{ operator: "topic", operand: "moved" }] }))).toEqual([b, c]);
      expect(ids(await get(owner, { narrow: [{ operator: "topic", operand: "move me" }] }))).toEqual([a]);
      const [ev] = await events(owner, q);
      expect(ev).toMatchObject({ type: "update_message", orig_subject: "move me", subject: "moved", propagate_mode: "change_later", message_ids: [b, c] });
      const moved = (await get(owner, { narrow: [{ operator: "id", operand: c }] })).body.messages[0];
      expect(moved.last_moved_timestamp).toEqual(expect.any(Number));
      expect(moved.edit_history[0]).toMatchObject({ prev_topic: "move me", topic: "moved", user_id: bob.id });
      // Resolving the topic: the ✔ prefix on every message, no last_moved_timestamp of its own.
      const resolve = await patch(alice, a, { topic: "✔ move me", propagate_mode: "change_all" });
      expect(resolve.status).toBe(200);
      const resolved = await get(owner, { narrow: [{ operator: "is", operand: "resolved" }, { operator: "channel", operand: general }] });
      expect(ids({ body: { messages: resolved.body.messages.filter((m: any) => m.sender_email !== BOT) } })).toEqual([a]);
      expect(resolved.body.messages[0].last_moved_timestamp).toBeUndefined();
      const none = await toChannel(alice, "", "empty topic");
      expect((await patch(alice, none, { topic: "✔ ", propagate_mode: "change_all" })).body.msg).toBe("General chat cannot be marked as resolved");
    });

    it("moves between channels and answers MOVE_MESSAGES_TIME_LIMIT_EXCEEDED past the limit", async () => {
      const [a, b] = [await toChannel(alice, "travel", "1"), await toChannel(alice, "travel", "2")];
      const moved = await patch(alice, a, { stream_id: other, propagate_mode: "change_all", send_notification_to_new_thread: false });
      expect(moved.status, JSON.stringify(moved.body)).toBe(200);
      const there = await get(bob, { narrow: [{ operator: "channel", operand: other }, { operator: "topic", operand: "travel" }] });
      expect(ids(there)).toEqual([a, b]);
      expect(there.body.messages[0]).toMatchObject({ display_recipient: "other", stream_id: other });
      expect(there.body.messages[0].edit_history[0]).toMatchObject({ prev_stream: general, stream: other });
      // Sends to the destination keep increasing ids.
      const next = await toChannel(bob, "travel", "3", "other");
      expect(next).toBeGreaterThan(b);

      const old = await toChannel(alice, "old topic", "old");
      const recent = await toChannel(alice, "old topic", "recent");
      await server.node.store.db.updateTable("messages").set({ date_sent: Math.floor(Date.now() / 1000) - 30 * 86400 }).where("id", "=", old).execute();
      const tooLate = await patch(alice, recent, { topic: "renamed", propagate_mode: "change_all", send_notification_to_new_thread: false });
      expect(tooLate.body).toMatchObject({
        code: "MOVE_MESSAGES_TIME_LIMIT_EXCEEDED",
        first_message_id_allowed_to_move: recent,
        total_messages_in_topic: 2,
        total_messages_allowed_to_move: 1,
      });
      expect((await patch(alice, old, { topic: "renamed" })).body.msg).toBe("The time limit for editing this message's topic has passed");
      // Moderators and above are exempt.
      expect((await patch(owner, recent, { topic: "renamed", propagate_mode: "change_all" })).status).toBe(200);
    });

    it("leaves Notification Bot's breadcrumbs after moves and resolves", async () => {
      const botMessages = async (topic: string, channel = "general") =>
        (await get(owner, { narrow: [{ operator: "channel", operand: channel }, { operator: "topic", operand: topic }] })).body.messages
          .filter((m: any) => m.sender_email === BOT)
          .map((m: any) => m.content);
      const a = await toChannel(alice, "crumbs", "1");
      await toChannel(alice, "crumbs", "2");
      expect((await patch(alice, a, { topic: "crumbs moved", propagate_mode: "change_all", send_notification_to_old_thread: true })).status).toBe(200);
      expect(await eventually(async () => (await botMessages("crumbs moved")).length === 1)).toBe(true);
      expect(await botMessages("crumbs moved")).toEqual([`This topic was moved here from #**general>crumbs** by @_**Alice|${alice.id}**.`]);
      expect(await eventually(async () => (await botMessages("crumbs")).length === 1)).toBe(true);
      expect(await botMessages("crumbs")).toEqual([`This topic was moved to #**general>crumbs moved** by @_**Alice|${alice.id}**.`]);
      const one = await toChannel(alice, "half", "1");
      await toChannel(alice, "half", "2");
      await patch(alice, one, { stream_id: other });
      expect(await eventually(async () => (await botMessages("half", "other")).length === 1)).toBe(true);
      expect(await botMessages("half", "other")).toEqual([`A message was moved here from #**general>half** by @_**Alice|${alice.id}**.`]);
      expect((await patch(bob, one, { topic: "✔ half", propagate_mode: "change_all" })).status).toBe(200);
      // The breadcrumb moved with the topic; the resolve notice follows it.
      expect(await eventually(async () => (await botMessages("✔ half", "other")).length === 2)).toBe(true);
      expect((await botMessages("✔ half", "other"))[1]).toBe(`@_**Bob|${bob.id}** has marked this topic as resolved.`);
    });

    it("deletes with permission and a delete_message event", async () => {
      const id = await toChannel(alice, "delete", "bye");
      const q = await register(bob, ["delete_message"]);
      const bulk = await register(bob, ["delete_message"], { bulk_message_deletion: true });
      expect((await api(server, "DELETE", `/messages/${id}`, { as: bob, template: "/messages/{message_id}" })).body.msg).toBe(
        "You don't have permission to delete this message",
      );
      const res = await api(server, "DELETE", `/messages/${id}`, { as: alice, template: "/messages/{message_id}" });
      expect(res.status).toBe(200);
      expect(ids(await get(owner, { narrow: [{ operator: "id", operand: id }] }))).toEqual([]);
      const [ev] = await events(bob, q);
      expect(ev).toMatchObject({ type: "delete_message", message_id: id, message_type: "stream", stream_id: general, topic: "delete" });
      expect(ev).not.toHaveProperty("message_ids");
      const [bulkEvent] = await events(bob, bulk);
      expect(bulkEvent).toMatchObject({ type: "delete_message", message_ids: [id], message_type: "stream", stream_id: general, topic: "delete" });
      expect(bulkEvent).not.toHaveProperty("message_id");
      const again = await api(server, "DELETE", `/messages/${id}`, { as: owner, template: "/messages/{message_id}" });
      expect(again.body.msg).toBe("Invalid message(s)");
    });
  });

  describe("send rules", () => {
    it("applies the realm's topic rules to the empty topic", async () => {
      const empty = await send(alice, { type: "stream", to: "general", topic: "(no topic)", content: "x" });
      expect(empty.status).toBe(200);
      expect((await get(alice, { narrow: [{ operator: "id", operand: empty.body.id }] })).body.messages[0].subject).toBe("general chat");
      const raw = await get(alice, { narrow: [{ operator: "id", operand: empty.body.id }], allow_empty_topic_name: true });
      expect(raw.body.messages[0].subject).toBe("");
      await setRealm({ realm_mandatory_topics: true });
      try {
        expect((await send(alice, { type: "stream", to: "general", topic: "", content: "x" })).body.msg).toBe("Topics are required in this organization.");
        expect((await send(alice, { type: "stream", to: "general", topic: "fine", content: "x" })).status).toBe(200);
      } finally {
        await setRealm({ realm_mandatory_topics: false });
      }
    });

    it("refuses channel wildcard mentions in large channels to members, not to administrators", async () => {
      const crowd = await Promise.all(Array.from({ length: 15 }, (_, i) => createUser(server, `crowd${i}@example.com`)));
      await subscribe(owner, ["crowded"], { principals: [ownerId, alice.id, ...crowd.map((u) => u.id)] });
      const refused = await send(alice, { type: "stream", to: "crowded", topic: "t", content: "hey @**all**" });
      expect(refused.body).toMatchObject({ code: "STREAM_WILDCARD_MENTION_NOT_ALLOWED" });
      expect((await send(alice, { type: "stream", to: "crowded", topic: "t", content: "hey @_**all**" })).status).toBe(200);
      expect((await send(owner, { type: "stream", to: "crowded", topic: "t", content: "hey @**all**" })).status).toBe(200);
    });
  });

  describe("reports", () => {
    const report = (as: Credentials, id: number, params: Record<string, unknown>) =>
      api(server, "POST", `/messages/${id}/report`, { as, params, template: "/messages/{message_id}/report" });

    it("needs a moderation request channel, then posts Notification Bot's notice there", async () => {
      const id = await toChannel(bob, "rude", "something rude");
      const off = await report(alice, id, { report_type: "harassment" });
      expect(off.body).toMatchObject({ code: "BAD_REQUEST", msg: "Moderation request channel must be specified to enable message reporting." });
      const { moderation } = await subscribe(owner, ["moderation"], { invite_only: true });
      await setRealm({ realm_moderation_request_channel_id: moderation });
      expect((await report(alice, id, { report_type: "other" })).body.msg).toBe("For reason=other, an explanation must be provided.");
      expect((await report(alice, id, { report_type: "bogus" })).status).toBe(400);
      expect((await report(alice, id, { report_type: "spam", description: "x".repeat(1001) })).status).toBe(400);
      const dm = await send(bob, { type: "direct", to: JSON.stringify([carol.id]), content: "hidden" });
      expect((await report(alice, dm.body.id, { report_type: "spam" })).body.msg).toBe("Invalid message(s)");
      const ok = await report(alice, id, { report_type: "harassment", description: "not nice" });
      expect(ok.status).toBe(200);
      const notices = await get(owner, { narrow: [{ operator: "channel", operand: "moderation" }] });
      expect(notices.body.messages).toHaveLength(1);
      const notice = notices.body.messages[0];
      expect(notice).toMatchObject({ sender_email: "notification-bot@zulip.com", subject: `User (${bob.id}) reports` });
      expect(notice.content).toContain(`@_**Alice|${alice.id}** reported: #**general>rude@${id}**`);
      expect(notice.content).toContain("something rude");
      expect(notice.content).toContain("- Reason: harassment\n- Explanation: not nice");
    });
  });

  describe("reactions and topics", () => {
    const react = (as: Credentials, id: number, method: "POST" | "DELETE", params: Record<string, unknown>) =>
      api(server, method, `/messages/${id}/reactions`, { as, params, template: "/messages/{message_id}/reactions" });

    it("adds and removes reactions with events, REACTION_ALREADY_EXISTS and REACTION_DOES_NOT_EXIST", async () => {
      const id = await toChannel(alice, "react", "nice");
      const q = await register(alice, ["reaction"]);
      expect((await react(bob, id, "POST", { emoji_name: "thumbs_up" })).status).toBe(200);
      const dup = await react(bob, id, "POST", { emoji_name: "thumbs_up", emoji_code: "1f44d", reaction_type: "unicode_emoji" });
      expect(dup.body).toMatchObject({ code: "REACTION_ALREADY_EXISTS", msg: "Reaction already exists." });
      const m = (await get(alice, { narrow: [{ operator: "id", operand: id }] })).body.messages[0];
      expect(m.reactions).toEqual([expect.objectContaining({ emoji_name: "thumbs_up", emoji_code: "1f44d", reaction_type: "unicode_emoji", user_id: bob.id })]);
      expect(ids(await get(alice, { narrow: [{ operator: "has", operand: "reaction" }, { operator: "topic", operand: "react" }] }))).toEqual([id]);
      expect((await react(bob, id, "DELETE", { emoji_name: "thumbs_up" })).status).toBe(200);
      expect((await react(bob, id, "DELETE", { emoji_name: "thumbs_up" })).body.code).toBe("REACTION_DOES_NOT_EXIST");
      const evs = await events(alice, q);
      expect(evs.map((e) => [e.type, e.op, e.user_id, e.emoji_code])).toEqual([
        ["reaction", "add", bob.id, "1f44d"],
        ["reaction", "remove", bob.id, "1f44d"],
      ]);
      expect((await react(bob, id, "POST", { emoji_name: "thumbs_up", emoji_code: "zzzz" })).body.msg).toBe("Invalid emoji code.");
      expect((await react(bob, id, "POST", { emoji_name: "heart", emoji_code: "1f44d" })).body.msg).toBe("Invalid emoji name.");
      expect((await react(bob, id, "POST", { emoji_name: "no_such_emoji" })).body.msg).toBe("Emoji 'no_such_emoji' does not exist");
      const dm = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "dm" });
      expect((await react(carol, dm.body.id, "POST", { emoji_name: "heart" })).body.msg).toBe("Invalid message(s)");
    });

    it("lists a channel's topics by recency, with access rules", async () => {
      const { topics: channel } = await subscribe(owner, ["topics"]);
      await toChannel(owner, "older", "1", "topics");
      const newer = await toChannel(owner, "newer", "2", "topics");
      // Topics match case-insensitively and show the name of their latest message.
      const last = await toChannel(owner, "OLDER", "3", "topics");
      const res = await api(server, "GET", `/users/me/${channel}/topics`, { as: alice, template: "/users/me/{stream_id}/topics" });
      expect(res.body.topics).toEqual([
        { name: "OLDER", max_id: last },
        { name: "newer", max_id: newer },
      ]);
      const bad = await api(server, "GET", "/users/me/99999/topics", { as: alice, template: "/users/me/{stream_id}/topics" });
      expect(bad.body).toMatchObject({ code: "BAD_REQUEST", msg: "Invalid channel ID" });
    });

    it("sets topic visibility through POST /user_topics and the legacy muted_topics, with user_topic events", async () => {
      const q = await register(alice, ["user_topic"]);
      const follow = await api(server, "POST", "/user_topics", { as: alice, params: { stream_id: general, topic: "Lunch", visibility_policy: 3 } });
      expect(follow.status).toBe(200);
      const mute = (op: string, extra: Record<string, unknown> = { stream_id: general }) =>
        api(server, "PATCH", "/users/me/subscriptions/muted_topics", { as: alice, params: { ...extra, topic: "lunch", op } });
      expect((await mute("add")).status).toBe(200);
      expect((await mute("add", { stream: "general" })).status).toBe(200); // repeating succeeds (feature level 169)
      expect((await mute("remove")).status).toBe(200);
      expect((await mute("remove")).body.msg).toBe("Topic is not muted");
      expect((await mute("add", {})).body.msg).toBe("Please choose one: 'stream' or 'stream_id'.");
      const long = await api(server, "POST", "/user_topics", { as: alice, params: { stream_id: general, topic: "t".repeat(61), visibility_policy: 1 } });
      expect(long.status).toBe(400);
      const badPolicy = await api(server, "POST", "/user_topics", { as: alice, params: { stream_id: general, topic: "x", visibility_policy: 7 } });
      expect(badPolicy.status).toBe(400);
      // The narrows follow. A topic has one policy whatever its case: the mute above replaced the follow. (Alice
      // follows the topics she started herself: Zulip's default automatically_follow_topics_policy.)
      const lunch = await toChannel(bob, "LUNCH", "soup");
      const inLunch = (operand: string) => get(alice, { narrow: [{ operator: "topic", operand: "lunch" }, { operator: "is", operand }] });
      expect(ids(await inLunch("followed"))).toEqual([]);
      await api(server, "POST", "/user_topics", { as: alice, params: { stream_id: general, topic: "Lunch", visibility_policy: 3 } });
      expect(ids(await inLunch("followed"))).toEqual([lunch]);
      expect(ids(await get(alice, { narrow: [{ operator: "is", operand: "muted" }] }))).toEqual([]);
      // Muting nothing, -is:muted is every message she received.
      const everything = ids(await get(alice, { narrow: [] }));
      expect(ids(await get(alice, { narrow: [{ operator: "is", operand: "muted", negated: true }] }))).toEqual(everything);
      await api(server, "POST", "/user_topics", { as: alice, params: { stream_id: general, topic: "lunch", visibility_policy: 1 } });
      expect(ids(await get(alice, { narrow: [{ operator: "is", operand: "muted" }] }))).toEqual([lunch]);
      expect(ids(await get(alice, { narrow: [{ operator: "is", operand: "muted", negated: true }] }))).toEqual(everything.filter((id) => id !== lunch));
      // A muted channel's messages are muted too, but for the topics she unmuted or follows (the followed one above
      // is muted now).
      const setMuted = (value: boolean) =>
        api(server, "POST", "/users/me/subscriptions/properties", { as: alice, params: { subscription_data: JSON.stringify([{ stream_id: general, property: "is_muted", value }]) } });
      expect((await setMuted(true)).status).toBe(200);
      const mutedNow = ids(await get(alice, { narrow: [{ operator: "is", operand: "muted" }] }));
      expect(mutedNow).toContain(lunch);
      expect(mutedNow.length).toBeGreaterThan(1);
      expect((await setMuted(false)).status).toBe(200);
      const evs = await events(alice, q);
      expect(evs.slice(0, 3).map((e) => [e.type, e.stream_id, e.topic_name, e.visibility_policy])).toEqual([
        ["user_topic", general, "Lunch", 3],
        ["user_topic", general, "lunch", 1],
        ["user_topic", general, "lunch", 0],
      ]);
    });
  });
});
