/**
 * GET /messages of one channel, or a topic of it: the narrow whose access and page are one statement
 * (actors/chat/reads/messages.ts channelPage). The window around every kind of anchor with Zulip's found_* flags,
 * the channel named by id or by name, an unknown channel, and a channel with protected history, where a reader sees
 * only what they received. A page's messages come from the records this process keeps (message-records.ts): what
 * changed since, written here or by another process straight into the store, is what the next page shows.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { FLAG_STORAGES, api, createUser, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, type User } from "../../../support/messages.ts";

// Both flag storages: a page reads the reader's flags from their flag row, or else from the message's recipient list.
describe.each(FLAG_STORAGES)("a channel's page on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let channels: Record<string, number>;
  const { toChannel, get, subscribe } = messageApi(() => server);
  /** lobby's messages oldest first; topic "a" holds the even ones. */
  const lobby: number[] = [];

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    channels = await subscribe(alice, ["lobby", "elsewhere"], { principals: [alice.id, bob.id] });
    for (let i = 0; i < 6; i++) {
      lobby.push(await toChannel(alice, i % 2 ? "b" : "A", `lobby ${i}`, "lobby"));
      await toChannel(alice, "a", `elsewhere ${i}`, "elsewhere");
    }
  });
  afterAll(async () => server?.close());

  const lobbyNarrow = [{ operator: "channel", operand: "lobby" }];
  const topicA = [{ operator: "channel", operand: "Lobby" }, { operator: "topic", operand: "a" }];

  it("answers the window around each kind of anchor, with the found_* flags", async () => {
    const newest = await get(bob, { narrow: lobbyNarrow, anchor: "newest", num_before: 3, num_after: 0 });
    expect(ids(newest)).toEqual(lobby.slice(3));
    expect(newest.body).toMatchObject({ found_anchor: false, found_oldest: false, found_newest: true });
    const oldest = await get(bob, { narrow: lobbyNarrow, anchor: "oldest", num_before: 0, num_after: 2 });
    expect(ids(oldest)).toEqual(lobby.slice(0, 2));
    expect(oldest.body).toMatchObject({ found_anchor: false, found_oldest: true, found_newest: false });
    const around = await get(bob, { narrow: lobbyNarrow, anchor: lobby[2], num_before: 2, num_after: 3 });
    expect(ids(around)).toEqual(lobby);
    expect(around.body).toMatchObject({ anchor: lobby[2], found_anchor: true, found_oldest: true, found_newest: true });
    const without = await get(bob, { narrow: lobbyNarrow, anchor: lobby[2], num_before: 1, num_after: 1, include_anchor: false });
    expect(ids(without)).toEqual([lobby[1], lobby[3]]);
    expect(without.body).toMatchObject({ found_anchor: true, found_oldest: false, found_newest: false });
    const none = await get(bob, { narrow: lobbyNarrow, anchor: "newest", num_before: 0, num_after: 0 });
    expect(ids(none)).toEqual([]);
    expect(none.body).toMatchObject({ found_oldest: false, found_newest: true });
  });

  it("reads a topic case-insensitively, the channel by name or id, with every field of the message", async () => {
    const byName = await get(bob, { narrow: topicA, anchor: lobby[2], num_before: 5, num_after: 5 });
    expect(ids(byName)).toEqual([lobby[0], lobby[2], lobby[4]]);
    expect(byName.body).toMatchObject({ found_anchor: true, found_oldest: true, found_newest: true });
    const byId = await get(bob, { narrow: [{ operator: "channel", operand: channels.lobby }, { operator: "topic", operand: "A" }] });
    expect(ids(byId)).toEqual([lobby[0], lobby[2], lobby[4]]);
    expect(byId.body.messages[0]).toMatchObject({
      type: "stream",
      stream_id: channels.lobby,
      display_recipient: "lobby",
      subject: "A",
      content: "lobby 0",
      sender_email: "alice@example.com",
      sender_full_name: "Alice",
      reactions: [],
      flags: [],
    });
    expect(ids(await get(bob, { narrow: [{ operator: "channel", operand: channels.elsewhere }] }))).toHaveLength(6);
  });

  it("gives each message the reader's own flags, and read + historical to one the reader never received", async () => {
    const flag = (as: User, messages: number[], op: "add" | "remove", which: string) =>
      api(server, "POST", "/messages/flags", { as, params: { messages, op, flag: which } });
    expect((await flag(bob, [lobby[1]!], "add", "starred")).status).toBe(200);
    expect((await flag(bob, [lobby[0]!], "add", "read")).status).toBe(200);
    const flagsOf = async (as: User) => {
      const page = await get(as, { narrow: lobbyNarrow, anchor: "oldest", num_before: 0, num_after: 3 });
      return page.body.messages.map((m: any) => [m.id, [...m.flags].sort()]);
    };
    expect(await flagsOf(bob)).toEqual([
      [lobby[0], ["read"]],
      [lobby[1], ["starred"]],
      [lobby[2], []],
    ]);
    const carol = await createUser(server, "carol@example.com", "Carol");
    await subscribe(carol, ["lobby"]);
    expect(await flagsOf(carol)).toEqual(lobby.slice(0, 3).map((id) => [id, ["historical", "read"]]));
    await flag(bob, [lobby[1]!], "remove", "starred");
    await flag(bob, [lobby[0]!], "remove", "read");
  });

  it("refuses an unknown channel, by name or id (past the ids a channel has too), with BAD_NARROW", async () => {
    // With a topic: one statement; with is:starred beside: the access rule's statement, then the page.
    for (const channel of ["nowhere", 987654, 2 ** 40]) {
      for (const other of [{ operator: "topic", operand: "a" }, { operator: "is", operand: "starred" }]) {
        const res = await get(bob, { narrow: [{ operator: "channel", operand: channel }, other] });
        expect([res.status, res.body.code, res.body.msg]).toEqual([400, "BAD_NARROW", "Invalid narrow operator: unknown channel"]);
      }
    }
  });

  it("shows a channel with protected history only as far as the reader received it", async () => {
    const vault = await subscribe(alice, ["vault"], { invite_only: true, history_public_to_subscribers: false });
    const before = await toChannel(alice, "t", "before bob", "vault");
    await subscribe(alice, ["vault"], { principals: [bob.id] });
    const after = await toChannel(alice, "t", "after bob", "vault");
    const narrow = [{ operator: "channel", operand: vault.vault }];
    expect(ids(await get(alice, { narrow }))).toEqual([before, after]);
    expect(ids(await get(bob, { narrow }))).toEqual([after]);
    expect(ids(await get(bob, { narrow: [...narrow, { operator: "topic", operand: "t" }], anchor: before, num_before: 1, num_after: 1 }))).toEqual([after]);
  });

  it("shows a direct message's members as they are now, renamed since the page was last read", async () => {
    const { send } = messageApi(() => server);
    const id = (await send(bob, { type: "direct", to: JSON.stringify([alice.id]), content: "psst" })).body.id as number;
    const members = async () => {
      const res = await get(alice, { narrow: [{ operator: "dm", operand: [bob.id] }], anchor: id, num_before: 0, num_after: 0 });
      return (res.body.messages[0].display_recipient as Array<{ id: number; full_name: string }>).map((u) => [u.id, u.full_name]);
    };
    expect(await members()).toContainEqual([bob.id, "Bob"]);
    await sql`update users set full_name = 'Bob Elsewhere' where id = ${bob.id}`.execute(server.node.store.db);
    expect(await members()).toContainEqual([bob.id, "Bob Elsewhere"]);
    await sql`update users set full_name = 'Bob' where id = ${bob.id}`.execute(server.node.store.db);
  });

  // What a page shows of a kept message is serialized once per format and kept with it (buildMessages): the format
  // asked for, and what the message's version does not follow (its channel's name, the realm's linkifiers), are
  // as they are now at every read.
  it.each([
    ["a channel's page", (name: string) => [{ operator: "channel", operand: name }]],
    ["every message", () => []],
  ])("shows %s in the format asked for, with its channel's name and the realm's linkifiers as they are now", async (label, narrowOf) => {
    const name = `formats ${label}`;
    const channel = (await subscribe(alice, [name], { principals: [alice.id, bob.id] }))[name]!;
    const id = await toChannel(alice, "ticket 42", "as **bold**", name);
    const shown = async (params: Record<string, unknown> = {}, narrowName = name) =>
      (await get(bob, { narrow: narrowOf(narrowName), anchor: id, num_before: 0, num_after: 0, ...params })).body.messages[0] as Record<string, any>;
    expect(await shown({ apply_markdown: false })).toMatchObject({ id, content: "as **bold**", content_type: "text/x-markdown" });
    expect(await shown({ apply_markdown: true })).toMatchObject({ id, content: "<p>as <strong>bold</strong></p>", content_type: "text/html" });
    expect(await shown({ apply_markdown: false })).toMatchObject({ id, content: "as **bold**" });
    expect((await shown({ client_gravatar: false })).avatar_url).toEqual(expect.stringContaining("gravatar"));
    expect((await shown({ client_gravatar: true })).avatar_url).toBeNull();

    const renamed = await api(server, "PATCH", `/streams/${channel}`, { as: server.owner, params: { new_name: `${name} renamed` }, template: "/streams/{stream_id}" });
    expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
    expect(await shown({}, `${name} renamed`)).toMatchObject({ id, display_recipient: `${name} renamed`, flags: [] });

    expect((await shown({}, `${name} renamed`)).topic_links).toEqual([]);
    const pattern = `ticket (?P<id>[0-9]+)`;
    const linkifier = await api(server, "POST", "/realm/filters", { as: server.owner, params: { pattern, url_template: "https://tickets.example.com/{id}" } });
    expect(linkifier.status, JSON.stringify(linkifier.body)).toBe(200);
    try {
      expect((await shown({}, `${name} renamed`)).topic_links).toEqual([{ text: "ticket 42", url: "https://tickets.example.com/42" }]);
    } finally {
      await api(server, "DELETE", `/realm/filters/${linkifier.body.id}`, { as: server.owner, template: "/realm/filters/{filter_id}" });
    }
    // The reader's own flags are the reader's, on the same kept message.
    expect((await api(server, "POST", "/messages/flags", { as: bob, params: { messages: JSON.stringify([id]), op: "add", flag: "starred" } })).status).toBe(200);
    expect((await shown({}, `${name} renamed`)).flags).toEqual(["starred"]);
    const asAlice = (await get(alice, { narrow: narrowOf(`${name} renamed`), anchor: id, num_before: 0, num_after: 0 })).body.messages[0];
    expect(asAlice.flags).toEqual(["read"]);
  });

  // A channel's page (one statement), and the other walks: every message, a sender's, the reader's starred flag rows.
  it.each([
    ["a channel's page", () => lobbyNarrow],
    ["every message", () => []],
    ["a sender's", () => [{ operator: "sender", operand: alice.id }]],
    ["the reader's starred", () => [{ operator: "is", operand: "starred" }]],
  ])("shows what changed since %s was last read: edit, move, reaction, sender's name, another process's writes, deletion", async (label, narrowOf) => {
    const id = await toChannel(alice, "kept", "as sent", "lobby");
    const flag = await api(server, "POST", "/messages/flags", { as: bob, params: { messages: JSON.stringify([id]), op: "add", flag: "starred" } });
    expect(flag.status).toBe(200);
    const page = async () => (await get(bob, { narrow: narrowOf(), anchor: id, num_before: 1, num_after: 1 })).body.messages as Array<{ id: number }>;
    // The message itself (a move's notification comes after it).
    const newest = async () => (await page()).find((m) => m.id === id) as Record<string, any> | undefined;
    const message = (params: Record<string, unknown>) => api(server, "PATCH", `/messages/${id}`, { as: alice, params, template: "/messages/{message_id}" });
    const reaction = (method: string) =>
      api(server, method, `/messages/${id}/reactions`, { as: bob, params: { emoji_name: "octopus" }, template: "/messages/{message_id}/reactions" });
    expect(await newest()).toMatchObject({ id, content: "as sent", reactions: [], flags: ["starred"] });

    expect((await message({ content: "as **edited**" })).status).toBe(200);
    expect(await newest()).toMatchObject({ id, content: "as **edited**", reactions: [] });
    expect((await message({ topic: `moved: ${label}` })).status).toBe(200);
    expect(await newest()).toMatchObject({ id, subject: `moved: ${label}` });
    expect((await reaction("POST")).status).toBe(200);
    expect((await newest())!.reactions).toEqual([expect.objectContaining({ emoji_name: "octopus", user_id: bob.id })]);
    expect((await reaction("DELETE")).status).toBe(200);
    expect((await newest())!.reactions).toEqual([]);
    expect((await api(server, "PATCH", "/settings", { as: alice, params: { full_name: `Alice ${label}` } })).status).toBe(200);
    expect(await newest()).toMatchObject({ id, sender_full_name: `Alice ${label}` });

    // Another worker's writes reach this process only through the store: its triggers change the versions.
    const db = server.node.store.db;
    const version = async () => (await sql<{ version: number }>`select version from messages where id = ${id}`.execute(db)).rows[0]!.version;
    await sql`update messages set content = 'elsewhere', rendered_content = '<p>elsewhere</p>' where id = ${id}`.execute(db);
    expect(await newest()).toMatchObject({ id, content: "elsewhere" });
    await sql`insert into reactions (message_id, user_id, emoji_name, emoji_code, reaction_type) values (${id}, ${alice.id}, 'tada', '1f389', 'unicode_emoji')`.execute(db);
    expect((await newest())!.reactions).toEqual([expect.objectContaining({ emoji_name: "tada", user_id: alice.id })]);
    await sql`delete from reactions where message_id = ${id}`.execute(db);
    expect((await newest())!.reactions).toEqual([]);
    await sql`update users set full_name = ${`Alice elsewhere: ${label}`} where id = ${alice.id}`.execute(db);
    expect(await newest()).toMatchObject({ id, sender_full_name: `Alice elsewhere: ${label}` });
    // The search documents' fill rewrites a column no message object shows: no new version.
    const before = await version();
    await sql`update messages set search_document = to_tsvector('english'::regconfig, topic || ' ' || content) where id = ${id}`.execute(db);
    expect(await version()).toBe(before);

    expect((await api(server, "DELETE", `/messages/${id}`, { as: server.owner, template: "/messages/{message_id}" })).status).toBe(200);
    expect(await newest()).toBeUndefined();
  });
});
