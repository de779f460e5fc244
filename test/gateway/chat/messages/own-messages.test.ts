/**
 * A narrow without a channel operator reads the reader's own messages: those they received, never a channel's
 * history from before they subscribed (Zulip's ok_to_include_history is false, so its query joins UserMessage;
 * chat-service.md: "a narrow lacking a channel operator searches the user's own message history"). With the
 * channel named, the same reader sees that history. A search without a channel follows it too, by each of the
 * statements a search's page may take (reads/messages.ts messageWindow).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FLAG_STORAGES, api, createUser, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, type User } from "../../../support/messages.ts";
import { SEARCH_WINDOWS } from "../../../../actors/chat/reads/messages.ts";

// Both flag storages: every message's page reads the reader's flag rows, and the recipient lists not yet expanded.
describe.each(FLAG_STORAGES)("the reader's own messages on $engine, flags as $storage", ({ engine, overrides }) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  const { send, toChannel, get, subscribe } = messageApi(() => server);
  let before: number;
  let after: number;
  /** Bob's direct message about zebras, older than every channel message; and the channel's before he joined. */
  let olderDm: number;
  const history: number[] = [];

  beforeAll(async () => {
    server = await startTestServer(engine, overrides);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    await subscribe(alice, ["archive"]);
    olderDm = (await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "a zebra for you" })).body.id;
    for (let i = 0; i < 5; i++) history.push(await toChannel(alice, "older", `zebra number ${i}`, "archive"));
    before = await toChannel(alice, "t", "zebra sighting early", "archive");
    await subscribe(alice, ["archive"], { principals: [bob.id] });
    after = await toChannel(alice, "t", "zebra sighting late", "archive");
  });
  afterAll(async () => server?.close());

  const readsOwn = async (narrow: unknown[]) => {
    const seen = ids(await get(bob, { narrow }));
    expect(seen).toContain(after);
    expect(seen).not.toContain(before);
    // The sender received both.
    expect(ids(await get(alice, { narrow }))).toEqual(expect.arrayContaining([before, after]));
  };

  it.each([
    ["every message", () => []],
    ["a sender's", () => [{ operator: "sender", operand: alice.id }]],
    ["a topic", () => [{ operator: "topic", operand: "t" }]],
  ])("shows in %s only what the reader received", async (_label, narrowOf) => readsOwn(narrowOf()));

  it("shows in a search only what the reader received", () => readsOwn([{ operator: "search", operand: "zebra" }]));

  // The matches nearest the anchor are the channel's history from before Bob joined; what he received is on either
  // side of them. Each statement a search's page may take, in either order, with as few candidates tested as the
  // page's rows allow (then the full statement gives way to the one that tests the received condition in it).
  it("finds a search's received matches past the history by every statement, around any anchor", async () => {
    const zebra = [{ operator: "search", operand: "zebra" }];
    const asked = [
      { num_before: 50, num_after: 0 },
      { num_before: 2, num_after: 0 },
      { anchor: "oldest", num_before: 0, num_after: 1 },
      { anchor: olderDm, num_before: 0, num_after: 1, include_anchor: false },
    ];
    const expected = [[olderDm, after], [olderDm, after], [olderDm], [after]];
    const defaults = { ...SEARCH_WINDOWS };
    try {
      for (const windows of [
        { ...defaults },
        { recent: 1, channel: 1, cap: 1_000, first: "nearby" as const, received: 0 },
        { recent: 1, channel: 1, cap: 1_000, first: "capped" as const, received: 0 },
        { recent: 1, channel: 1, cap: 0, first: "capped" as const, received: 0 },
        { recent: 1, channel: 1, cap: 0, first: "capped" as const, received: 50 },
      ]) {
        Object.assign(SEARCH_WINDOWS, windows);
        for (const [i, params] of asked.entries()) {
          const page = await get(bob, { narrow: zebra, ...params });
          expect(ids(page), `${JSON.stringify(windows)} ${JSON.stringify(params)}`).toEqual(expected[i]);
        }
      }
    } finally {
      Object.assign(SEARCH_WINDOWS, defaults);
    }
    // The sender received them all.
    expect(ids(await get(alice, { narrow: zebra }))).toEqual([olderDm, ...history, before, after]);
  });

  // Zulip's narrow [] joins UserMessage and nothing else (reads/messages.ts receivedPage).
  it("keeps in every message what the reader received in a channel they have left, around any anchor", async () => {
    await subscribe(alice, ["left"], { principals: [bob.id] });
    const kept = await toChannel(alice, "t", "said before bob left", "left");
    const left = await api(server, "DELETE", "/users/me/subscriptions", { as: bob, params: { subscriptions: JSON.stringify(["left"]) } });
    expect(left.status, JSON.stringify(left.body)).toBe(200);
    const unseen = await toChannel(alice, "t", "said after bob left", "left");
    const newest = await get(bob, { narrow: [] });
    expect(ids(newest)).toContain(kept);
    expect(ids(newest)).not.toContain(unseen);
    expect(ids(newest)).not.toContain(before);
    expect(newest.body).toMatchObject({ found_newest: true, found_oldest: true });
    const all = ids(newest);
    const around = await get(bob, { narrow: [], anchor: all[1], num_before: 1, num_after: 1 });
    expect(ids(around)).toEqual(all.slice(0, 3));
    expect(around.body).toMatchObject({ found_anchor: true, found_oldest: true, found_newest: all.length <= 3 });
    // The general path (the first_unread anchor, a sender's narrow) reads the same messages.
    const fromFirstUnread = ids(await get(bob, { narrow: [], anchor: "first_unread", num_before: 50, num_after: 50 }));
    expect(fromFirstUnread).toEqual(all);
    expect(ids(await get(bob, { narrow: [{ operator: "sender", operand: alice.id }] }))).toContain(kept);
    const searched = ids(await get(bob, { narrow: [{ operator: "search", operand: "bob left" }] }));
    expect(searched).toContain(kept);
    expect(searched).not.toContain(unseen);
    const keptShown = newest.body.messages.find((m: { id: number }) => m.id === kept);
    expect(keptShown).toMatchObject({ display_recipient: "left", content: "said before bob left", flags: [] });
  });

  it("shows the channel's history to the same reader when the channel is named", async () => {
    const named = await get(bob, { narrow: [{ operator: "channel", operand: "archive" }, { operator: "search", operand: "zebra" }] });
    expect(ids(named)).toEqual([...history, before, after]);
    const early = named.body.messages.find((m: { id: number }) => m.id === before);
    expect(early.flags).toEqual(expect.arrayContaining(["historical"]));
  });
});
