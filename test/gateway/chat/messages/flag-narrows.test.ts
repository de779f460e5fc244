/**
 * The narrows read from the reader's flags (is:starred, is:mentioned, is:unread, and the first_unread anchor), which
 * walk the flag rows rather than the messages (actors/chat/reads/messages.ts): the same answers with flag rows and
 * with recipient lists not yet expanded, negated forms keeping the messages the reader never received.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, FLAG_STORAGES, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, windowShape, type User } from "../../../support/messages.ts";

describe.each(FLAG_STORAGES)("flag narrows on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  const { toChannel, get, subscribe } = messageApi(() => server);
  const m: Record<string, number> = {};

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    await subscribe(alice, ["lobby"], { principals: [alice.id, bob.id] });
    m.plain = await toChannel(alice, "t", "hello", "lobby");
    m.mention = await toChannel(alice, "t", "hi @**Bob**", "lobby");
    m.starred = await toChannel(alice, "t", "star me", "lobby");
    m.last = await toChannel(alice, "t", "last", "lobby");
    const flag = (messages: number[], op: string, name: string) => api(server, "POST", "/messages/flags", { as: bob, params: { messages, op, flag: name } });
    expect((await flag([m.starred], "add", "starred")).status).toBe(200);
    expect((await flag([m.plain, m.mention], "add", "read")).status).toBe(200);
    // Sent before Bob joined: in the channel's history, never received by him.
    await subscribe(alice, ["history"]);
    m.historical = await toChannel(alice, "t", "before bob", "history");
    await subscribe(bob, ["history"]);
  });
  afterAll(async () => server?.close());

  const narrowed = async (narrow: unknown[], params: Record<string, unknown> = {}) => ids(await get(bob, { narrow, ...params }));

  it("finds the starred, mentioned and unread messages", async () => {
    expect(await narrowed([{ operator: "is", operand: "starred" }])).toEqual([m.starred]);
    expect(await narrowed([{ operator: "is", operand: "mentioned" }])).toEqual([m.mention]);
    expect(await narrowed([{ operator: "is", operand: "unread" }])).toEqual([m.starred, m.last]);
    expect(await narrowed([{ operator: "is", operand: "unread" }, { operator: "is", operand: "starred" }])).toEqual([m.starred]);
    expect(await narrowed([{ operator: "channel", operand: "lobby" }, { operator: "is", operand: "starred" }])).toEqual([m.starred]);
    // A page of one, found from either side of an anchor.
    const page = await get(bob, { narrow: [{ operator: "is", operand: "unread" }], anchor: m.starred, num_before: 0, num_after: 1, include_anchor: false });
    expect(ids(page)).toEqual([m.last]);
    expect(page.body).toMatchObject({ found_anchor: true, found_newest: true });
  });

  it("keeps messages never received under a negated flag", async () => {
    const history = { operator: "channel", operand: "history" };
    expect(await narrowed([history, { operator: "is", operand: "starred", negated: true }])).toEqual([m.historical]);
    expect(await narrowed([history, { operator: "is", operand: "mentioned", negated: true }])).toEqual([m.historical]);
    expect(await narrowed([history, { operator: "is", operand: "starred" }])).toEqual([]);
    expect(await narrowed([{ operator: "channel", operand: "lobby" }, { operator: "is", operand: "starred", negated: true }])).toEqual([m.plain, m.mention, m.last]);
  });

  // A flag narrow alone is one statement (reads/messages.ts receivedPage): the same answers as the general path's
  // (the narrow said twice), around every kind of anchor, with more flagged messages than a page holds.
  it("answers each flag narrow alone as the general path does, around every anchor", async () => {
    const words = await api(server, "POST", "/users/me/alert_words", { as: bob, params: { alert_words: JSON.stringify(["pineapple"]) } });
    expect(words.status).toBe(200);
    const more: number[] = [];
    for (let i = 0; i < 6; i++) {
      more.push(await toChannel(alice, "t", i % 2 ? `hi @**Bob** ${i}` : `pineapple ${i}`, "lobby"));
      await toChannel(alice, "t", `filler ${i}`, "lobby");
    }
    const flag = (messages: number[], op: string, name: string) => api(server, "POST", "/messages/flags", { as: bob, params: { messages, op, flag: name } });
    expect((await flag(more.slice(0, 4), "add", "starred")).status).toBe(200);
    expect((await flag([more[1]!, more[2]!], "add", "read")).status).toBe(200);
    const windows = [
      { anchor: "newest", num_before: 2, num_after: 0 },
      { anchor: "newest", num_before: 50, num_after: 0 },
      { anchor: "oldest", num_before: 0, num_after: 2 },
      { anchor: more[2], num_before: 1, num_after: 1 },
      { anchor: more[2]! + 1, num_before: 2, num_after: 2, include_anchor: false },
    ];
    const counts: Record<string, number> = {};
    // Bob's flags, and Alice's: the sender's own messages are read as they are sent.
    for (const reader of [bob, alice]) {
      for (const operand of ["starred", "mentioned", "alerted", "unread"]) {
        const term = { operator: "is", operand };
        for (const window of windows) {
          const one = await get(reader, { narrow: [term], ...window });
          expect(one.status, JSON.stringify(one.body)).toBe(200);
          expect(windowShape(one), `${operand} ${JSON.stringify(window)}`).toEqual(windowShape(await get(reader, { narrow: [term, term], ...window })));
        }
        counts[`${reader.email} ${operand}`] = ids(await get(reader, { narrow: [term] })).length;
      }
    }
    // What each holds: Bob's 1 + 4 starred, 1 + 3 mentioned, 3 alerted, and unread all but the 2 + 2 read; Alice's none.
    expect(counts).toEqual({
      "bob@example.com starred": 5,
      "bob@example.com mentioned": 4,
      "bob@example.com alerted": 3,
      "bob@example.com unread": 2 + 12 - 2,
      "alice@example.com starred": 0,
      "alice@example.com mentioned": 0,
      "alice@example.com alerted": 0,
      "alice@example.com unread": 0,
    });
  });

  // A channel's, a topic's and a received narrow's first_unread anchor is one statement before the page's
  // (reads/messages.ts firstUnread): the same window as the general path's (each term said twice), for a reader
  // with unread messages and one without, the channel by name and by id.
  it("finds the first unread anchor of a one-statement page as the general path does", async () => {
    const lobbyId = (await api(server, "GET", "/get_stream_id", { as: bob, params: { stream: "lobby" } })).body.stream_id as number;
    const narrows: unknown[][] = [
      [{ operator: "channel", operand: "lobby" }],
      [{ operator: "channel", operand: lobbyId }],
      [{ operator: "channel", operand: "Lobby" }, { operator: "topic", operand: "T" }],
      [{ operator: "channel", operand: "history" }],
      [{ operator: "is", operand: "unread" }],
      [{ operator: "is", operand: "starred" }],
      [{ operator: "is", operand: "mentioned" }],
    ];
    const window = { anchor: "first_unread", num_before: 2, num_after: 2 };
    for (const reader of [bob, alice]) {
      for (const narrow of narrows) {
        const one = await get(reader, { narrow, ...window });
        expect(one.status, JSON.stringify(one.body)).toBe(200);
        expect(windowShape(one), `${reader.email} ${JSON.stringify(narrow)}`).toEqual(windowShape(await get(reader, { narrow: [...narrow, ...narrow], ...window })));
      }
    }
    // Bob's first unread message anchors his combined feed and is:unread alike; Alice has none (the anchor past every message).
    const unread = ids(await get(bob, { narrow: [{ operator: "is", operand: "unread" }], anchor: "oldest", num_before: 0, num_after: 1 }));
    expect((await get(bob, { narrow: [], ...window })).body).toMatchObject({ anchor: unread[0], found_anchor: true });
    expect((await get(alice, { narrow: [], ...window })).body).toMatchObject({ anchor: 10_000_000_000_000_000, found_anchor: false, found_newest: true });
    const unknown = await get(bob, { narrow: [{ operator: "channel", operand: "nowhere" }], ...window });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ code: "BAD_NARROW" });
  });

  it("anchors at the first unread message of the narrow", async () => {
    const res = await get(bob, { narrow: [{ operator: "channel", operand: "lobby" }], anchor: "first_unread", num_before: 1, num_after: 1 });
    expect(res.body.anchor).toBe(m.starred);
    expect(ids(res)).toEqual([m.mention, m.starred, m.last]);
  });
});
