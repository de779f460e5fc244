/**
 * The `with` narrow operator (Zulip 9.0, feature level 271): a permalink to a message. The Zulip mobile app adds it
 * to a topic's narrow when it opens a link to a message (zulip-flutter TopicNarrow.apiEncode, sent to servers of
 * feature level 271 and up, which Chorus reports). The narrow's conversation becomes the message's current one,
 * so a link still opens the conversation after the message moved; a message the reader may not read leaves a
 * narrow naming its own conversation as it is, and makes any other invalid (zerver/lib/narrow.py).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENGINES, api, createUser, startTestServer, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, type User } from "../../../support/messages.ts";

const channel = (operand: string | number) => ({ operator: "channel", operand });
const topic = (operand: string) => ({ operator: "topic", operand });
const withMessage = (operand: number | string) => ({ operator: "with", operand });

describe.each(ENGINES)("the with operator on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  const { send, toChannel, get, patch, subscribe } = messageApi(() => server);
  let hallId: number;
  /** Messages in hall: `moved` went from topic "old" to "new" with the first of "new"; `stayed` is still in "old". */
  let moved: number;
  let stayed: number;
  let alreadyNew: number;
  let bobInNew: number;
  let direct: number;
  let selfNote: number;
  /** In attic, a private channel without Bob. */
  let hidden: number;

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    hallId = (await subscribe(alice, ["hall"], { principals: [alice.id, bob.id] })).hall!;
    await subscribe(alice, ["attic"], { principals: [alice.id], invite_only: true });
    alreadyNew = await toChannel(alice, "new", "first of new", "hall");
    moved = await toChannel(alice, "old", "will move", "hall");
    stayed = await toChannel(alice, "old", "stays", "hall");
    bobInNew = await toChannel(bob, "new", "bob in new", "hall");
    expect((await patch(alice, moved, { topic: "new", propagate_mode: "change_one", send_notification_to_old_thread: false, send_notification_to_new_thread: false })).status).toBe(200);
    direct = (await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "hello bob" })).body.id;
    selfNote = (await send(alice, { type: "direct", to: JSON.stringify([alice.id]), content: "note to self" })).body.id;
    hidden = await toChannel(alice, "secret", "not for bob", "attic");
  });
  afterAll(async () => server?.close());

  const fetchOk = async (as: User, narrow: unknown[]) => {
    const res = await get(as, { narrow: JSON.stringify(narrow) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res;
  };

  it("opens the message's current topic, whatever topic the link named", async () => {
    const res = await fetchOk(bob, [channel(hallId), topic("old"), withMessage(moved)]);
    expect(ids(res)).toEqual([alreadyNew, moved, bobInNew]);
    expect(res.body.messages.every((m: any) => m.subject === "new")).toBe(true);
    // Without the term, the topic named is read.
    expect(ids(await fetchOk(bob, [channel(hallId), topic("old")]))).toEqual([stayed]);
    // The operand as a decimal string, as a URL carries it.
    expect(ids(await fetchOk(bob, [channel("hall"), topic("old"), withMessage(String(moved))]))).toEqual([alreadyNew, moved, bobInNew]);
  });

  it("keeps the narrow's other terms", async () => {
    const res = await fetchOk(bob, [channel(hallId), topic("old"), { operator: "sender", operand: bob.id }, withMessage(moved)]);
    expect(ids(res)).toEqual([bobInNew]);
  });

  it("opens a direct message's conversation, the reader's own one included", async () => {
    expect(ids(await fetchOk(bob, [withMessage(direct)]))).toEqual([direct]);
    // Named with a channel and topic, a direct message still opens its own conversation.
    expect(ids(await fetchOk(bob, [channel(hallId), topic("old"), withMessage(direct)]))).toEqual([direct]);
    expect(ids(await fetchOk(alice, [withMessage(selfNote)]))).toEqual([selfNote]);
  });

  it("reads a narrow that names a conversation without the term when the message is not the reader's to read", async () => {
    expect(ids(await fetchOk(bob, [channel(hallId), topic("old"), withMessage(hidden)]))).toEqual([stayed]);
    expect(ids(await fetchOk(bob, [{ operator: "dm", operand: [alice.id] }, withMessage(hidden)]))).toEqual([direct]);
    for (const narrow of [[withMessage(hidden)], [channel(hallId), withMessage(hidden)], [withMessage(999_999_999)]]) {
      const res = await get(bob, { narrow: JSON.stringify(narrow) });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: "BAD_NARROW", msg: "Invalid narrow operator: Invalid 'with' operator" });
    }
  });

  it("refuses two with terms, and an operand that is not a message id", async () => {
    const twice = await get(bob, { narrow: JSON.stringify([withMessage(moved), withMessage(stayed)]) });
    expect(twice.status).toBe(400);
    expect(twice.body).toMatchObject({ code: "BAD_NARROW", msg: "Invalid narrow operator combination: Duplicate 'with' operators." });
    for (const operand of ["abc", -3, 1.5]) {
      const res = await get(bob, { narrow: JSON.stringify([withMessage(operand as number)]) });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: "BAD_NARROW", msg: "Invalid narrow operator: Invalid 'with' operator" });
    }
  });

  it("marks the message's current conversation when flags are updated by narrow", async () => {
    const res = await api(server, "POST", "/messages/flags/narrow", {
      as: bob,
      params: { narrow: JSON.stringify([channel(hallId), topic("old"), withMessage(moved)]), anchor: "oldest", num_before: 0, num_after: 100, op: "add", flag: "starred" },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(ids(await fetchOk(bob, [{ operator: "is", operand: "starred" }]))).toEqual([alreadyNew, moved, bobInNew]);
  });
});
