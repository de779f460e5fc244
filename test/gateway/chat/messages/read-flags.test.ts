/**
 * The message endpoints real clients call beside send and fetch, through a real server on both engines: marking a
 * narrow read as the mobile app does (POST /messages/flags/narrow, page by page), the legacy mark-as-read calls of
 * the Python bindings and zulip-terminal, rendering a draft (zulip-js `messages.render`), matching messages against
 * a narrow, read receipts, and the message `client` named from the User-Agent. Flags are kept as rows and as
 * unexpanded recipient lists: every answer must be the same.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, eventQueue, FLAG_STORAGES, setRealmSettings, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, type User } from "../../../support/messages.ts";

describe.each(FLAG_STORAGES)("message flags, rendering and receipts on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  let general: number;

  const { send, toChannel, get, subscribe } = messageApi(() => server);
  const flagsForNarrow = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/messages/flags/narrow", { as, params });
  const unreadIn = async (as: Credentials, narrow: unknown[]) => ids(await get(as, { narrow: [...narrow, { operator: "is", operand: "unread" }] }));
  const readEvents = (events: any[]) => events.filter((e) => e.type === "update_message_flags");

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    ({ general } = await subscribe(server.owner, ["general"], { principals: [alice.id, bob.id, carol.id] }));
  });
  afterAll(async () => server?.close());

  it("marks a narrow read page by page as the mobile app does, and unread again with each message's place", async () => {
    const sent: number[] = [];
    for (let i = 0; i < 5; i++) sent.push(await toChannel(alice, "paging", `message ${i}`));
    const elsewhere = await toChannel(alice, "other", "not in the narrow");
    const narrow = [
      { operator: "channel", operand: "general" },
      { operator: "topic", operand: "paging" },
    ];
    const queue = await eventQueue(server, bob, ["update_message_flags"]);

    // zulip-flutter's markNarrowAsRead: anchor oldest, is:unread added, then on from the last processed id.
    const first = await flagsForNarrow(bob, { anchor: "oldest", num_before: 0, num_after: 2, narrow: [...narrow, { operator: "is", operand: "unread" }], op: "add", flag: "read" });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body).toMatchObject({ processed_count: 2, updated_count: 2, first_processed_id: sent[0], last_processed_id: sent[1], found_oldest: true, found_newest: false });
    const rest = await flagsForNarrow(bob, {
      anchor: String(first.body.last_processed_id),
      include_anchor: false,
      num_before: 0,
      num_after: 1000,
      narrow: [...narrow, { operator: "is", operand: "unread" }],
      op: "add",
      flag: "read",
    });
    expect(rest.body).toMatchObject({ processed_count: 3, updated_count: 3, first_processed_id: sent[2], last_processed_id: sent[4], found_newest: true });
    expect(await unreadIn(bob, narrow)).toEqual([]);
    expect(await unreadIn(bob, [])).toContain(elsewhere);
    expect(readEvents(await queue.events()).map((e) => [e.op, e.flag, e.messages, e.all])).toEqual([
      ["add", "read", sent.slice(0, 2), false],
      ["add", "read", sent.slice(2), false],
    ]);

    // Processed again, nothing changes: counted as processed, not updated, and no event.
    const again = await flagsForNarrow(bob, { anchor: "newest", num_before: 10, num_after: 0, narrow, op: "add", flag: "read" });
    expect(again.body).toMatchObject({ processed_count: 5, updated_count: 0, first_processed_id: sent[0], last_processed_id: sent[4], found_oldest: true, found_newest: true });

    // Marking unread tells the client where each message is.
    const unread = await flagsForNarrow(bob, { anchor: String(sent[4]), num_before: 1, num_after: 0, narrow, op: "remove", flag: "read" });
    expect(unread.body).toMatchObject({ processed_count: 2, updated_count: 2, first_processed_id: sent[3], last_processed_id: sent[4] });
    const removed = readEvents(await queue.events()).at(-1);
    expect(removed).toMatchObject({ op: "remove", flag: "read", messages: [sent[3], sent[4]] });
    expect(removed.message_details[sent[3]!]).toMatchObject({ type: "stream", topic: "paging" });
    expect(await unreadIn(bob, narrow)).toEqual([sent[3], sent[4]]);
  });

  it("answers an empty range with null ids and refuses what Zulip refuses", async () => {
    const empty = await flagsForNarrow(bob, { anchor: "newest", num_before: 0, num_after: 5, narrow: [{ operator: "topic", operand: "nothing here" }], op: "add", flag: "starred" });
    expect(empty.body).toMatchObject({ processed_count: 0, updated_count: 0, first_processed_id: null, last_processed_id: null, found_newest: true });
    const refusals: Array<[Record<string, unknown>, string]> = [
      [{ anchor: "newest", num_before: 1, num_after: 1, include_anchor: false }, "The anchor can only be excluded at an end of the range"],
      [{ anchor: "newest", num_before: 1, num_after: 0, flag: "mentioned" }, "Flag not editable: 'mentioned'"],
      [{ anchor: "newest", num_before: 1, num_after: 0, flag: "bogus" }, "Invalid flag: 'bogus'"],
      [{ anchor: "sideways", num_before: 1, num_after: 0 }, "Invalid anchor"],
    ];
    for (const [params, msg] of refusals) {
      const res = await flagsForNarrow(bob, { narrow: [], op: "add", flag: "read", ...params });
      expect([res.status, res.body.msg]).toEqual([400, msg]);
    }
    const missing = await flagsForNarrow(bob, { narrow: [], op: "add", flag: "read", num_before: 0, num_after: 0 });
    expect([missing.status, missing.body.code]).toEqual([400, "REQUEST_VARIABLE_MISSING"]);
  });

  it("marks a topic, a channel, then everything read as the Python bindings call them", async () => {
    const lunch = [await toChannel(alice, "Lunch", "pizza?"), await toChannel(alice, "lunch", "or soup")];
    const dinner = await toChannel(alice, "dinner", "later");
    const dm = (await send(alice, { type: "direct", to: JSON.stringify([carol.id]), content: "hi" })).body.id as number;
    const queue = await eventQueue(server, carol, ["update_message_flags"]);

    const topic = await api(server, "POST", "/mark_topic_as_read", { as: carol, params: { stream_id: general, topic_name: "LUNCH" } });
    expect(topic.status, JSON.stringify(topic.body)).toBe(200);
    expect(await unreadIn(carol, [{ operator: "channel", operand: "general" }])).not.toContain(lunch[0]);
    expect(await unreadIn(carol, [{ operator: "channel", operand: "general" }])).toContain(dinner);
    const noTopic = await api(server, "POST", "/mark_topic_as_read", { as: carol, params: { stream_id: general, topic_name: "breakfast" } });
    expect([noTopic.status, noTopic.body.msg]).toEqual([400, "No such topic 'breakfast'"]);

    expect((await api(server, "POST", "/mark_stream_as_read", { as: carol, params: { stream_id: general } })).status).toBe(200);
    expect(await unreadIn(carol, [{ operator: "channel", operand: "general" }])).toEqual([]);
    expect(await unreadIn(carol, [])).toEqual([dm]);

    const all = await api(server, "POST", "/mark_all_as_read", { as: carol });
    expect(all.body).toMatchObject({ result: "success", complete: true });
    expect(await unreadIn(carol, [])).toEqual([]);

    const events = readEvents(await queue.events()).map((e) => [e.op, e.flag, e.messages, e.all]);
    expect(events[0]).toEqual(["add", "read", lunch, false]);
    expect(events[1]![2]).toContain(dinner);
    // Everything: no ids, `all` set (the client reloads its unread state).
    expect(events.at(-1)).toEqual(["add", "read", [], true]);
  });

  it("refuses a channel the caller cannot read", async () => {
    const hidden = (await subscribe(alice, ["alice only"], { invite_only: true }))["alice only"]!;
    for (const [path, params] of [
      ["/mark_stream_as_read", { stream_id: hidden }],
      ["/mark_topic_as_read", { stream_id: hidden, topic_name: "x" }],
    ] as const) {
      const res = await api(server, "POST", path, { as: bob, params });
      expect([res.status, res.body.msg]).toEqual([400, "Invalid channel ID"]);
    }
  });

  it("renders a draft with the realm's mentions, storing nothing", async () => {
    const before = ids(await get(alice, {}));
    const res = await api(server, "POST", "/messages/render", { as: alice, params: { content: "**foo** @**Bob** #**general**" } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.rendered).toContain("<strong>foo</strong>");
    expect(res.body.rendered).toContain(`data-user-id="${bob.id}"`);
    expect(res.body.rendered).toContain('class="stream"');
    expect(ids(await get(alice, {}))).toEqual(before);
    const missing = await api(server, "POST", "/messages/render", { as: alice, params: {} });
    expect([missing.status, missing.body.code]).toEqual([400, "REQUEST_VARIABLE_MISSING"]);
  });

  it("tells which messages match a narrow, with the search highlighted", async () => {
    const coffee = await toChannel(alice, "Kitchen <3", "the coffee machine is broken");
    const tea = await toChannel(alice, "Kitchen <3", "tea instead");
    const check = (as: Credentials, narrow: unknown[], msgIds = [coffee, tea]) =>
      api(server, "GET", "/messages/matches_narrow", { as, params: { msg_ids: msgIds, narrow } });

    const search = await check(bob, [{ operator: "search", operand: "coffee" }]);
    expect(search.status, JSON.stringify(search.body)).toBe(200);
    expect(Object.keys(search.body.messages)).toEqual([String(coffee)]);
    expect(search.body.messages[coffee].match_content).toContain('<span class="highlight">coffee</span>');
    expect(search.body.messages[coffee].match_subject).toBe("Kitchen &lt;3");

    const topic = await check(bob, [{ operator: "topic", operand: "kitchen <3" }]);
    expect(topic.body.messages[tea]).toEqual({ match_content: "<p>tea instead</p>", match_subject: "Kitchen &lt;3" });
    expect(Object.keys(topic.body.messages).sort()).toEqual([String(coffee), String(tea)].sort());

    // Only what the caller received: a DM between others matches nothing.
    const privateDm = (await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "coffee for two" })).body.id as number;
    expect((await check(carol, [], [privateDm])).body.messages).toEqual({});
    const bad = await check(bob, [{ operator: "channel", operand: "no such channel" }]);
    expect([bad.status, bad.body.code]).toEqual([400, "BAD_NARROW"]);
  });

  it("lists read receipts as Zulip does: never the sender, never those who do not share them", async () => {
    const id = await toChannel(alice, "receipts", "did you read this?");
    const readReceipts = (as: Credentials, messageId = id) => api(server, "GET", `/messages/${messageId}/read_receipts`, { as, template: "/messages/{message_id}/read_receipts" });
    const markRead = (as: Credentials) => api(server, "POST", "/messages/flags", { as, params: { messages: [id], op: "add", flag: "read" } });
    expect((await readReceipts(alice)).body.user_ids).toEqual([]);

    await markRead(bob);
    expect((await api(server, "PATCH", "/settings", { as: carol, params: { send_read_receipts: false } })).status).toBe(200);
    await markRead(carol);
    const receipts = await readReceipts(alice);
    expect(receipts.status, JSON.stringify(receipts.body)).toBe(200);
    expect(receipts.body.user_ids).toEqual([bob.id]);
    // The requester's own read shows; the sender's never does.
    expect((await readReceipts(bob)).body.user_ids).toEqual([bob.id]);

    const dm = (await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "between us" })).body.id as number;
    const hidden = await readReceipts(carol, dm);
    expect([hidden.status, hidden.body.msg]).toEqual([400, "Invalid message(s)"]);

    await setRealmSettings(server, { realm_enable_read_receipts: false });
    const disabled = await readReceipts(alice);
    expect([disabled.status, disabled.body.msg]).toEqual([400, "Read receipts are disabled in this organization."]);
    await setRealmSettings(server, { realm_enable_read_receipts: true });
  });

  it("names a message's client from the User-Agent's first token, as Zulip does", async () => {
    const agents: Array<[string, string]> = [
      ["ZulipTerminal/0.7.0 Linux-6.1-x86_64 (Ubuntu; 22.04)", "ZulipTerminal"],
      ["ZulipPython/0.9.0 (Linux; 22.04)", "ZulipPython"],
      ["ZulipMobile/flutter", "ZulipMobile"],
      ["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla"],
    ];
    for (const [agent, client] of agents) {
      const sent = await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: "general", topic: "clients", content: agent }, headers: { "user-agent": agent } });
      expect(sent.status, JSON.stringify(sent.body)).toBe(200);
      const fetched = await api(server, "GET", `/messages/${sent.body.id}`, { as: alice, template: "/messages/{message_id}" });
      expect(fetched.body.message.client).toBe(client);
    }
  });
});
