/**
 * GET /messages of one direct-message conversation (`dm:` and its users, nothing else): the narrow whose users,
 * conversation and page are one statement (actors/chat/reads/messages.ts conversationPage). Every page is checked
 * against the general path's answer for the same conversation (`dm:` with `is:dm` beside it: the access rule's
 * statement, then the page). The users are named by id and by e-mail (a list of ids, or e-mails in one string), in
 * one-to-one, group and self conversations; also an unknown user, a conversation never started, and each reader's
 * own flags. And `is:dm` alone, every conversation of the reader's (conversationsPage), against `is:dm` said twice.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FLAG_STORAGES, api, createUser, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, windowShape, type User } from "../../../support/messages.ts";

describe.each(FLAG_STORAGES)("a conversation's page on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  const { send, get, subscribe, toChannel } = messageApi(() => server);
  /** Each conversation's messages, oldest first. */
  const pair: number[] = [];
  const group: number[] = [];
  const own: number[] = [];

  /** A message to a conversation named by all its participants (the sender among them, as Zulip allows). */
  const dm = (participants: () => number[]) => async (from: User, content: string) =>
    (await send(from, { type: "direct", to: JSON.stringify(participants()), content })).body.id as number;

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    // Interleaved, so that each conversation's page must skip the others' messages.
    for (let i = 0; i < 5; i++) {
      pair.push(await dm(() => [alice.id, bob.id])(i % 2 ? bob : alice, `pair ${i}`));
      group.push(await dm(() => [alice.id, bob.id, carol.id])(i % 2 ? carol : alice, `group ${i}`));
      own.push(await dm(() => [alice.id])(alice, `own ${i}`));
    }
  });
  afterAll(async () => server?.close());

  /** The page and the general path's page for the same conversation, the same window: both must agree. */
  async function page(reader: User, operand: number[] | string, window: Record<string, unknown>) {
    const one = await get(reader, { narrow: [{ operator: "dm", operand }], ...window });
    const general = await get(reader, { narrow: [{ operator: "dm", operand }, { operator: "is", operand: "dm" }], ...window });
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(windowShape(one)).toEqual(windowShape(general));
    return one;
  }

  it("answers the window around each kind of anchor with the found_* flags, the users named by id or e-mail", async () => {
    for (const operand of [[bob.id], "Bob@Example.com"]) {
      const newest = await page(alice, operand, { anchor: "newest", num_before: 3, num_after: 0 });
      expect(ids(newest)).toEqual(pair.slice(2));
      expect(newest.body).toMatchObject({ found_anchor: false, found_oldest: false, found_newest: true });
      const oldest = await page(alice, operand, { anchor: "oldest", num_before: 0, num_after: 2 });
      expect(ids(oldest)).toEqual(pair.slice(0, 2));
      expect(oldest.body).toMatchObject({ found_oldest: true, found_newest: false });
      const around = await page(alice, operand, { anchor: pair[2], num_before: 2, num_after: 2 });
      expect(ids(around)).toEqual(pair);
      expect(around.body).toMatchObject({ anchor: pair[2], found_anchor: true, found_oldest: true, found_newest: true });
      // An anchor that is another conversation's message: found_anchor false, the window around where it would be.
      const between = await page(alice, operand, { anchor: group[2], num_before: 1, num_after: 1, include_anchor: false });
      expect(ids(between)).toEqual([pair[2], pair[3]]);
      expect(between.body).toMatchObject({ found_anchor: false });
    }
    // The other participant reads the same conversation, with their own flags.
    const fromBob = await page(bob, [alice.id], { anchor: "newest", num_before: 10, num_after: 0 });
    expect(ids(fromBob)).toEqual(pair);
    expect(fromBob.body.messages[0]).toMatchObject({ type: "private", content: "pair 0", sender_email: "alice@example.com", flags: [] });
    expect(fromBob.body.messages[1]).toMatchObject({ sender_email: "bob@example.com", flags: ["read"] });
  });

  it("reads a group conversation whatever the operand's order, with or without the reader named", async () => {
    for (const operand of [[bob.id, carol.id], [carol.id, bob.id], [carol.id, alice.id, bob.id], "carol@example.com, BOB@example.com"]) {
      expect(ids(await page(alice, operand, { anchor: "newest", num_before: 10, num_after: 0 }))).toEqual(group);
    }
    expect(ids(await page(carol, [alice.id, bob.id], { anchor: "oldest", num_before: 0, num_after: 10 }))).toEqual(group);
    // Bob and Carol alone have no conversation: nothing, with both ends found.
    const none = await page(bob, [carol.id], { anchor: "newest", num_before: 5, num_after: 0 });
    expect(ids(none)).toEqual([]);
    expect(none.body).toMatchObject({ found_oldest: true, found_newest: true });
  });

  it("reads the reader's conversation with themselves", async () => {
    expect(ids(await page(alice, [alice.id], { anchor: "newest", num_before: 10, num_after: 0 }))).toEqual(own);
    expect(ids(await page(alice, "alice@example.com", { anchor: own[1], num_before: 1, num_after: 1 }))).toEqual(own.slice(0, 3));
  });

  it("shows each reader's own flags on the conversation's messages", async () => {
    const starred = await api(server, "POST", "/messages/flags", { as: bob, params: { messages: JSON.stringify([pair[0]]), op: "add", flag: "starred" } });
    expect(starred.status).toBe(200);
    const asBob = await page(bob, [alice.id], { anchor: pair[0], num_before: 0, num_after: 0 });
    expect(asBob.body.messages[0].flags).toEqual(["starred"]);
    const asAlice = await page(alice, [bob.id], { anchor: pair[0], num_before: 0, num_after: 0 });
    expect(asAlice.body.messages[0].flags).toEqual(["read"]);
  });

  // is:dm alone is one statement too (conversationsPage); the general path's answer is is:dm said twice.
  it("pages every conversation of the reader's with is:dm, around each kind of anchor", async () => {
    const every = async (reader: User, window: Record<string, unknown>) => {
      const one = await get(reader, { narrow: [{ operator: "is", operand: "dm" }], ...window });
      const general = await get(reader, { narrow: [{ operator: "is", operand: "dm" }, { operator: "is", operand: "private" }], ...window });
      expect(one.status, JSON.stringify(one.body)).toBe(200);
      const shape = (res: typeof one) => [ids(res), res.body.found_anchor, res.body.found_oldest, res.body.found_newest, res.body.messages.map((m: { flags: string[] }) => m.flags)];
      expect(shape(one)).toEqual(shape(general));
      return one;
    };
    const alices = [...pair, ...group, ...own].sort((a, b) => a - b);
    expect(ids(await every(alice, { anchor: "newest", num_before: 100, num_after: 0 }))).toEqual(alices);
    expect(ids(await every(alice, { anchor: "newest", num_before: 4, num_after: 0 }))).toEqual(alices.slice(-4));
    expect(ids(await every(alice, { anchor: "oldest", num_before: 0, num_after: 4 }))).toEqual(alices.slice(0, 4));
    const around = await every(alice, { anchor: alices[7], num_before: 3, num_after: 3 });
    expect(ids(around)).toEqual(alices.slice(4, 11));
    expect(around.body).toMatchObject({ found_anchor: true, found_oldest: false, found_newest: false });
    // Carol is in the group conversation only; Bob in the pair and the group.
    expect(ids(await every(carol, { anchor: "newest", num_before: 100, num_after: 0 }))).toEqual(group);
    expect(ids(await every(bob, { anchor: pair[2], num_before: 100, num_after: 100 }))).toEqual([...pair, ...group].sort((a, b) => a - b));
  });

  // A conversation's and is:dm's first_unread anchor is one statement before the page (reads/messages.ts firstUnread).
  it("anchors a conversation's page and is:dm at the first unread message as the general path does", async () => {
    const read = await api(server, "POST", "/messages/flags", { as: bob, params: { messages: JSON.stringify([pair[0], group[0], pair[1]]), op: "add", flag: "read" } });
    expect(read.status).toBe(200);
    const window = { anchor: "first_unread", num_before: 1, num_after: 2 };
    const isDm = { operator: "is", operand: "dm" };
    const cases: Array<[User, unknown[], unknown[]]> = [
      [bob, [{ operator: "dm", operand: [alice.id] }], [{ operator: "dm", operand: [alice.id] }, isDm]],
      [bob, [{ operator: "dm", operand: "carol@example.com, ALICE@example.com" }], [{ operator: "dm", operand: [alice.id, carol.id] }, isDm]],
      [bob, [isDm], [isDm, isDm]],
      [carol, [isDm], [isDm, isDm]],
      [alice, [{ operator: "dm", operand: [alice.id] }], [{ operator: "dm", operand: [alice.id] }, isDm]],
      [carol, [{ operator: "dm", operand: [bob.id] }], [{ operator: "dm", operand: [bob.id] }, isDm]],
    ];
    for (const [reader, narrow, general] of cases) {
      const one = await get(reader, { narrow, ...window });
      expect(one.status, JSON.stringify(one.body)).toBe(200);
      expect(windowShape(one), `${reader.email} ${JSON.stringify(narrow)}`).toEqual(windowShape(await get(reader, { narrow: general, ...window })));
    }
    // Bob's first unread in the pair is its third message, which anchors the window.
    expect((await get(bob, { narrow: [{ operator: "dm", operand: [alice.id] }], ...window })).body).toMatchObject({ anchor: pair[2], found_anchor: true });
    const unknown = await get(bob, { narrow: [{ operator: "dm", operand: [987654] }], ...window });
    expect([unknown.status, unknown.body.code]).toEqual([400, "BAD_NARROW"]);
    // A channel message unread before the first unread direct message: is:dm's anchor passes over it.
    expect((await api(server, "POST", "/mark_all_as_read", { as: bob })).status).toBe(200);
    await subscribe(alice, ["porch"], { principals: [alice.id, bob.id] });
    await toChannel(alice, "t", "not a direct message", "porch");
    const direct = await dm(() => [alice.id, bob.id])(alice, "pair again");
    const dms = await get(bob, { narrow: [isDm], ...window });
    expect(dms.body).toMatchObject({ anchor: direct, found_anchor: true });
    expect(windowShape(dms)).toEqual(windowShape(await get(bob, { narrow: [isDm, isDm], ...window })));
  });

  it("refuses an unknown user, by id or e-mail, with BAD_NARROW", async () => {
    for (const operand of [[987654], [bob.id, 987654], "nobody@example.com", "bob@example.com,nobody@example.com"]) {
      const res = await get(alice, { narrow: [{ operator: "dm", operand }] });
      expect([res.status, res.body.code, res.body.msg]).toEqual([400, "BAD_NARROW", "Invalid narrow operator: unknown user"]);
    }
  });
});
