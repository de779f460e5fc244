/**
 * `has:` narrows (from the rendered content and the uploads linked), and bad input at the message routes: every case a clear Zulip
 * error (or Zulip's truncation), never a 500. Through a real server on both engines.
 */
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { ids, messageApi, type User } from "../../../support/messages.ts";
import { FEW_IMAGE_MESSAGES } from "../../../../actors/chat/reads/messages.ts";

/** One past Number.MAX_SAFE_INTEGER: JSON and Number() would round it onto another id. */
const PAST_2_53 = "9007199254740993";

describe.each(ENGINES)("has: narrows and bad input on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;
  let alice: User;

  const { send, toChannel, get, events, subscribe } = messageApi(() => server);
  const expectUrlTooLong = (res: { status: number; body: any }) => {
    expect(res.status).toBe(414);
    expect(res.body).toMatchObject({ result: "error", code: "BAD_REQUEST", msg: expect.stringMatching(/URL is too long/) });
  };
  const expectError = (res: { status: number; body: any }, msg: string | RegExp, code = "BAD_REQUEST") => {
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.code).toBe(code);
    expect(res.body.msg).toMatch(msg);
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = server.owner;
    alice = await createUser(server, "alice@example.com", "Alice");
    const ownerId = (await api(server, "GET", "/users/me", { as: owner })).body.user_id;
    await subscribe(owner, ["general"], { principals: [ownerId, alice.id] });
  });
  afterAll(async () => server?.close());

  it("decides has:link and has:image from the rendered content, has:attachment from the uploads linked, in fetches and in queues", async () => {
    const uploaded = async (filename: string, type: string) =>
      (await api(server, "POST", "/user_uploads", { as: owner, files: [{ filename, type, data: Buffer.from("bytes") }] })).body.url as string;
    const q = await api(server, "POST", "/register", { as: alice, params: { event_types: ["message"], narrow: [["has", "link"]] } });
    const web = await toChannel(owner, "has", "see https://example.com/page");
    const code = await toChannel(owner, "has", "`https://example.com/in-code`");
    const channel = await toChannel(owner, "has", "over in #**general**");
    const mail = await toChannel(owner, "has", "write to someone@example.com");
    const pdf = await toChannel(owner, "has", `[report.pdf](${await uploaded("report.pdf", "application/pdf")})`);
    const upload = await toChannel(owner, "has", `[cat.PNG](${await uploaded("cat.PNG", "image/png")})`);
    const external = await toChannel(owner, "has", "https://example.com/dog.jpg?size=large");
    // A link to no upload of ours (or one the sender could not read) is a link, not an attachment.
    const unclaimed = await toChannel(owner, "has", "[gone.txt](/user_uploads/2/ab/xyz/gone.txt)");
    const has = async (operand: string, negated = false) =>
      ids(await get(alice, { narrow: [{ operator: "topic", operand: "has" }, { operator: "has", operand, negated }] }));
    expect(await has("link")).toEqual([web, pdf, upload, external, unclaimed]);
    expect(await has("attachment")).toEqual([pdf, upload]);
    expect(await has("image")).toEqual([upload, external]);
    expect(await has("link", true)).toEqual([code, channel, mail]);
    expect(await has("reaction")).toEqual([]);
    const delivered = (await events(alice, q.body.queue_id)).map((e) => e.message.id);
    expect(delivered).toEqual([web, pdf, upload, external, unclaimed]);
  });

  it("refuses ids past 2^53 wherever an id is read", async () => {
    // An anchor is no id: Zulip's parse_anchor_value reads one past the largest message id as "newest".
    const pastAll = await get(alice, { anchor: PAST_2_53, num_before: 1, num_after: 0 });
    expect(pastAll.status).toBe(200);
    expect(pastAll.body.found_newest).toBe(true);
    expectError(await api(server, "GET", "/messages", { as: alice, params: { message_ids: `[${PAST_2_53}]` } }), /message_ids/);
    expectError(await get(alice, { narrow: `[{"operator":"id","operand":${PAST_2_53}}]` }), /Invalid narrow operand/, "BAD_NARROW");
    expectError(await get(alice, { narrow: [{ operator: "near", operand: PAST_2_53 }] }), /Invalid narrow operand/, "BAD_NARROW");
    const template = "/messages/{message_id}";
    expectError(await api(server, "PATCH", `/messages/${PAST_2_53}`, { as: alice, params: { content: "x" }, template }), /message_id/);
    expectError(await api(server, "DELETE", `/messages/${PAST_2_53}`, { as: alice, template }), /message_id/);
    expectError(await api(server, "POST", "/messages/flags", { as: alice, params: { messages: `[${PAST_2_53}]`, op: "add", flag: "read" } }), /messages/);
    expectError(await send(alice, { type: "direct", to: `[${PAST_2_53}]`, content: "x" }), /to|Invalid/);
  });

  it("refuses negative and oversized counts, with Zulip's 5000 cap on the sum", async () => {
    expectError(await get(alice, { num_before: -1 }), "num_before is too small");
    expectError(await get(alice, { num_after: "-5" }), "num_after is too small");
    expectError(await get(alice, { num_before: 3000, num_after: 2001 }), "Too many messages requested (maximum 5000).");
    expectError(await get(alice, { num_before: 0, num_after: 5001 }), "Too many messages requested (maximum 5000).");
    expectError(await get(alice, { num_before: "1e3" }), "num_before is not an integer");
    expectError(await get(alice, { num_before: "100000000000000000000" }), "num_before is not an integer");
    expect((await get(alice, { num_before: 2500, num_after: 2500 })).status).toBe(200);
    for (const anchor of ["1.5", "0x10", "", "12a"]) expectError(await get(alice, { anchor }), "Invalid anchor");
    // As Zulip's int(): a negative anchor is the oldest, and spaces around the digits are allowed.
    const oldest = ids(await get(alice, { anchor: 0, num_before: 0, num_after: 2 }));
    expect(ids(await get(alice, { anchor: "-1", num_before: 0, num_after: 2 }))).toEqual(oldest);
    expect(ids(await get(alice, { anchor: ` ${oldest[1]}`, num_before: 0, num_after: 0 }))).toEqual([oldest[1]]);
    expectError(await get(alice, { include_anchor: "yes" }), "include_anchor is not a boolean");
    const tooMany = JSON.stringify(Array.from({ length: 5001 }, (_, i) => i + 1));
    // 5,001 ids do not fit in a URL (8 KiB, nginx's default in front of Zulip): the whole request is refused first.
    expectUrlTooLong(await api(server, "GET", "/messages", { as: alice, params: { message_ids: tooMany } }));
    expectError(await api(server, "GET", "/messages", { as: alice, params: { message_ids: '[1, "x"]' } }), /message_ids/);
  });

  it("answers recipient and user lists of any length without a 500", async () => {
    const huge = Array.from({ length: 70_000 }, (_, i) => i + 1_000_000);
    expectError(await send(alice, { type: "direct", to: huge, content: "x" }), "Invalid user ID 1000000");
    const emails = huge.map((i) => `u${i}@example.com`);
    expectError(await send(alice, { type: "direct", to: emails, content: "x" }), "Invalid email 'u1000000@example.com'");
    expectUrlTooLong(await get(alice, { narrow: [{ operator: "dm", operand: huge.slice(0, 5000) }] }));
    expectError(await get(alice, { narrow: [{ operator: "dm", operand: huge.slice(0, 500) }] }), "Invalid narrow operator: unknown user", "BAD_NARROW");
  });

  it("answers a narrow of thousands of operators with a quick BAD_NARROW, in both forms", async () => {
    const many = Array.from({ length: 5000 }, (_, i) => ({ operator: "search", operand: `word${i}` }));
    const started = Date.now();
    // In a query string within the URL limit (8 KiB), and in a form body.
    expectError(await get(alice, { narrow: many.slice(0, 200).map((_, i) => ["id", i]) }), "Invalid narrow: at most 100 operators", "BAD_NARROW");
    expectError(await api(server, "POST", "/register", { as: alice, params: { narrow: many } }), "Invalid narrow: at most 100 operators", "BAD_NARROW");
    expect(Date.now() - started).toBeLessThan(2000);
    expect((await get(alice, { narrow: many.slice(0, 100) })).status).toBe(200);
    expectError(await get(alice, { narrow: "not json" }), /narrow/, "INVALID_JSON");
    expectError(await get(alice, { narrow: [{ operator: "topic", operand: { nested: true } }] }), /Invalid narrow operand/, "BAD_NARROW");
  });

  it("refuses null bytes and empty content, and truncates over-long topics and content as Zulip does", async () => {
    expectError(await send(alice, { type: "stream", to: "general", topic: "t", content: "a\u0000b" }), /NULL/);
    expectError(await send(alice, { type: "stream", to: "general", topic: "a\u0000b", content: "x" }), /NULL/);
    expectError(await send(alice, { type: "stream", to: "general", topic: "t", content: " \n " }), "Message must not be empty");
    // Inside JSON a NUL is spelled \u0000: still refused, before any query sees it.
    expectError(await get(alice, { narrow: [{ operator: "search", operand: "a\u0000b" }] }), /NULL/, "BAD_NARROW");
    expectError(await send(alice, { type: "direct", to: ["nobody\u0000@example.com"], content: "x" }), /NULL/);
    expectError(await send(alice, { type: "stream", to: ["gen\u0000eral"], topic: "t", content: "x" }), /NULL/);
    const long = await send(alice, { type: "stream", to: "general", topic: "t".repeat(100), content: "c".repeat(20_000) });
    expect(long.status).toBe(200);
    const [m] = (await get(alice, { narrow: [{ operator: "id", operand: long.body.id }] })).body.messages;
    expect(m.subject).toBe("t".repeat(57) + "...");
    expect(m.content).toHaveLength(10_000);
    expect(m.content.endsWith("\n[message truncated]")).toBe(true);
    const id = long.body.id;
    const template = "/messages/{message_id}";
    expectError(await api(server, "PATCH", `/messages/${id}`, { as: alice, params: { content: "\u0000" }, template }), /NULL/);
    expectError(await api(server, "PATCH", `/messages/${id}`, { as: alice, params: { topic: "a\u0000" }, template }), /NULL/);
    const edited = await api(server, "PATCH", `/messages/${id}`, { as: alice, params: { topic: "u".repeat(61) }, template });
    expect(edited.status).toBe(200);
    expect((await get(alice, { narrow: [{ operator: "id", operand: id }] })).body.messages[0].subject).toBe("u".repeat(57) + "...");
  });

  it("counts the limits in characters as Zulip does: an emoji is one, and a cut never splits one", async () => {
    // 10,000 characters of which 5,000 are emoji (15,000 UTF-16 units): within Zulip's limit, kept whole.
    const emoji = "🎉x".repeat(5_000);
    const kept = await send(alice, { type: "stream", to: "general", topic: "🎉".repeat(60), content: emoji });
    expect(kept.status).toBe(200);
    const [m] = (await get(alice, { narrow: [{ operator: "id", operand: kept.body.id }] })).body.messages;
    expect(m.content).toBe(emoji);
    expect(m.subject).toBe("🎉".repeat(60));
    // One character more: cut to 10,000 characters, the marker included, at a character's boundary.
    const cut = await send(alice, { type: "stream", to: "general", topic: "🎉".repeat(61), content: emoji + "🎉" });
    const [n] = (await get(alice, { narrow: [{ operator: "id", operand: cut.body.id }] })).body.messages;
    expect(Array.from(n.content)).toHaveLength(10_000);
    expect(n.content).toBe("🎉x".repeat(4_990) + "\n[message truncated]");
    expect(n.subject).toBe("🎉".repeat(57) + "...");
  });
  // Up to FEW_IMAGE_MESSAGES a page reads the realm's images by id; past it, it tests each message it walks. Rows
  // added behind Chorus's back, far above the ids it hands out, make the realm's images many.
  it("decides has:image the same way when the realm has more images than a page reads by id", async () => {
    const first = await toChannel(owner, "many", "the first, no image");
    await sql`
      insert into messages (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content, rendered_content, date_sent, sending_client)
      select m.id + 1000000 + g, m.realm_id, m.sender_id, m.recipient_type, m.recipient_id, m.stream_id, m.topic, 'image ' || g,
        '<div class="message_inline_image"><a href="/user_uploads/x.png"><img src="/x.png"></a></div>', m.date_sent, m.sending_client
      from messages m, generate_series(1, ${FEW_IMAGE_MESSAGES + 1}) g where m.id = ${first}`.execute(server.node.store.db);
    await sql`
      insert into user_message_rows (user_id, message_id, flags)
      select ${alice.id}, ${first} + 1000000 + g, 0 from generate_series(1, ${FEW_IMAGE_MESSAGES + 1}) g`.execute(server.node.store.db);
    const newest = (operand: string, topic: string, negated = false) =>
      get(alice, { anchor: "newest", num_before: 3, num_after: 0, narrow: [{ operator: "topic", operand: topic }, { operator: "has", operand, negated }] });
    expect(ids(await newest("image", "many"))).toEqual([1, 2, 3].map((k) => first + 1000000 + FEW_IMAGE_MESSAGES + k - 2));
    expect(ids(await newest("image", "many", true))).toEqual([first]);
    expect(ids(await newest("image", "has")).length).toBe(2); // the upload and the external image of the first test
  });
});
