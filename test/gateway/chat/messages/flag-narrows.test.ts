/**
 * The narrows read from the reader's flags (is:starred, is:mentioned, is:unread, and the first_unread anchor), which
 * walk the flag rows rather than the messages (actors/chat/reads/messages.ts): the same answers with flag rows and
 * with recipient lists not yet expanded, negated forms keeping the messages the reader never received.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, FLAG_STORAGES, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, type User } from "../../../support/messages.ts";

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

  it("anchors at the first unread message of the narrow", async () => {
    const res = await get(bob, { narrow: [{ operator: "channel", operand: "lobby" }], anchor: "first_unread", num_before: 1, num_after: 1 });
    expect(res.body.anchor).toBe(m.starred);
    expect(ids(res)).toEqual([m.mention, m.starred, m.last]);
  });
});
