/**
 * GET /messages of one sender (`sender:` and one user, nothing else): the narrow whose user and page are one
 * statement (actors/chat/reads/messages.ts senderPage), walking the sender's messages until the page holds what the
 * reader received. Every page is checked against the general path's answer for the same narrow (`sender:` said
 * twice: the access rule's statement, then the page), around every kind of anchor, the user named by id or e-mail;
 * and what it must leave out: a channel's history from before the reader joined, a channel they are not in, other
 * senders' messages between the sender's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FLAG_STORAGES, api, createUser, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, windowShape, type User } from "../../../support/messages.ts";

describe.each(FLAG_STORAGES)("a sender's page on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  const { send, toChannel, get, subscribe } = messageApi(() => server);
  /** Alice's messages that Bob received, oldest first; and hers that he did not. */
  const received: number[] = [];
  const notReceived: number[] = [];

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    await subscribe(alice, ["hall"], { principals: [alice.id, carol.id] });
    await subscribe(alice, ["attic"], { principals: [alice.id] });
    // Before Bob joins the hall: its history, which a narrow without a channel does not show him.
    for (let i = 0; i < 3; i++) notReceived.push(await toChannel(alice, "t", `early ${i}`, "hall"));
    received.push((await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "hello bob" })).body.id);
    await subscribe(alice, ["hall"], { principals: [bob.id] });
    for (let i = 0; i < 4; i++) {
      received.push(await toChannel(alice, "t", `late ${i}`, "hall"));
      await toChannel(carol, "t", `carol ${i}`, "hall");
      notReceived.push(await toChannel(alice, "t", `attic ${i}`, "attic"));
    }
  });
  afterAll(async () => server?.close());

  /** The page and the general path's page for the same sender and window: both must agree. */
  async function page(reader: User, operand: number | string, window: Record<string, unknown>) {
    const term = { operator: "sender", operand };
    const one = await get(reader, { narrow: [term], ...window });
    const general = await get(reader, { narrow: [term, term], ...window });
    expect(one.status, JSON.stringify(one.body)).toBe(200);
    expect(windowShape(one)).toEqual(windowShape(general));
    return one;
  }

  it("answers the window around each kind of anchor with what the reader received, the sender named by id or e-mail", async () => {
    for (const operand of [alice.id, "Alice@Example.COM"]) {
      const newest = await page(bob, operand, { anchor: "newest", num_before: 3, num_after: 0 });
      expect(ids(newest)).toEqual(received.slice(-3));
      expect(newest.body).toMatchObject({ found_anchor: false, found_oldest: false, found_newest: true });
      const all = await page(bob, operand, { anchor: "newest", num_before: 50, num_after: 0 });
      expect(ids(all)).toEqual(received);
      expect(all.body).toMatchObject({ found_oldest: true });
      const oldest = await page(bob, operand, { anchor: "oldest", num_before: 0, num_after: 2 });
      expect(ids(oldest)).toEqual(received.slice(0, 2));
      expect(oldest.body).toMatchObject({ found_oldest: true, found_newest: false });
      const around = await page(bob, operand, { anchor: received[2], num_before: 1, num_after: 1 });
      expect(ids(around)).toEqual(received.slice(1, 4));
      expect(around.body).toMatchObject({ anchor: received[2], found_anchor: true });
      // An anchor that is a message the reader did not receive: the window around where it would be.
      const between = await page(bob, operand, { anchor: notReceived[4], num_before: 1, num_after: 1, include_anchor: false });
      expect(between.body).toMatchObject({ found_anchor: false });
      expect(ids(between)).toHaveLength(2);
    }
    // The sender received every message of her own, with her own flags.
    const own = await page(alice, alice.id, { anchor: "newest", num_before: 50, num_after: 0 });
    expect(ids(own)).toEqual([...received, ...notReceived].sort((a, b) => a - b));
    expect(own.body.messages[0].flags).toContain("read");
    expect(ids(await page(bob, carol.id, { anchor: "newest", num_before: 50, num_after: 0 }))).toHaveLength(4);
  });

  // A sender's first_unread anchor is one statement before the page (reads/messages.ts firstUnread).
  it("anchors a sender's page at the first unread message as the general path does", async () => {
    const read = await api(server, "POST", "/messages/flags", { as: bob, params: { messages: JSON.stringify(received.slice(0, 2)), op: "add", flag: "read" } });
    expect(read.status).toBe(200);
    const window = { anchor: "first_unread", num_before: 1, num_after: 1 };
    for (const [reader, operand] of [[bob, alice.id], [bob, "ALICE@example.com"], [carol, alice.id], [alice, alice.id], [bob, carol.id]] as const) {
      const term = { operator: "sender", operand };
      const one = await get(reader, { narrow: [term], ...window });
      expect(one.status, JSON.stringify(one.body)).toBe(200);
      expect(windowShape(one), `${reader.email} ${operand}`).toEqual(windowShape(await get(reader, { narrow: [term, term], ...window })));
    }
    // Bob read Alice's first two: her third anchors his window; Carol's messages came between, unread, and are not hers.
    expect((await get(bob, { narrow: [{ operator: "sender", operand: alice.id }], ...window })).body).toMatchObject({ anchor: received[2], found_anchor: true });
    const unknown = await get(bob, { narrow: [{ operator: "sender", operand: 999_999 }], ...window });
    expect([unknown.status, unknown.body.code]).toEqual([400, "BAD_NARROW"]);
  });

  it("answers an unknown sender as Zulip does, and a sender with no message an empty page", async () => {
    for (const operand of [999_999, "nobody@example.com"]) {
      const res = await get(bob, { narrow: [{ operator: "sender", operand }] });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ result: "error", code: "BAD_NARROW" });
    }
    const none = await page(carol, bob.id, { anchor: "newest", num_before: 5, num_after: 0 });
    expect(ids(none)).toEqual([]);
    expect(none.body).toMatchObject({ found_oldest: true, found_newest: true });
  });
});
