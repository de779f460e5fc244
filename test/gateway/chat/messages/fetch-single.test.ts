/**
 * What zulip-terminal sends at start-up and to edit, through a real server on both engines: GET /messages with
 * `use_first_unread_anchor` beside `anchor=0` (Zulip ignores the anchor then), and GET /messages/{message_id}
 * (Zulip's json_fetch_raw_message) with Zulip's access rule. Responses are checked against zulip.yaml by `api()`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";

describe.each(ENGINES)("message fetches of real clients on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  let general: number;
  const { send, toChannel, subscribe } = messageApi(() => server);
  const one = (as: User, id: number, params: Record<string, unknown> = {}) =>
    api(server, "GET", `/messages/${id}`, { as, params, template: "/messages/{message_id}" });

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    ({ general } = await subscribe(alice, ["general"], { principals: [alice.id, bob.id] }));
    await subscribe(alice, ["secret"], { invite_only: true });
  });
  afterAll(async () => server?.close());

  describe("anchors", () => {
    it("uses the first unread message when use_first_unread_anchor is set, whatever anchor says", async () => {
      const read = await toChannel(alice, "anchors", "seen");
      await api(server, "POST", "/messages/flags", { as: bob, params: { messages: [read], op: "add", flag: "read" } });
      const unread = await toChannel(alice, "anchors", "not yet");
      // zulip-terminal's first fetch (zulipterminal/model.py get_messages).
      const res = await api(server, "GET", "/messages", {
        as: bob,
        params: { anchor: 0, num_before: 30, num_after: 10, apply_markdown: true, use_first_unread_anchor: true, client_gravatar: true, narrow: [] },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.anchor).toBe(unread);
      expect(res.body.messages.map((m: { id: number }) => m.id)).toEqual(expect.arrayContaining([read, unread]));
    });

    it("reads a negative anchor as 0 and one past any id as newest, as Zulip", async () => {
      const low = await api(server, "GET", "/messages", { as: bob, params: { anchor: "-5", num_before: 0, num_after: 1 } });
      expect(low.body.anchor).toBe(0);
      const high = await api(server, "GET", "/messages", { as: bob, params: { anchor: "99999999999999999999", num_before: 1, num_after: 0 } });
      expect(high.body.anchor).toBe(10_000_000_000_000_000);
      expect(high.body.messages).toHaveLength(1);
      const bad = await api(server, "GET", "/messages", { as: bob, params: { anchor: "soon", num_before: 1, num_after: 0 } });
      expect([bad.status, bad.body.msg]).toEqual([400, "Invalid anchor"]);
    });
  });

  describe("GET /messages/{message_id}", () => {
    it("answers the raw content and the message, rendered or not", async () => {
      const id = await toChannel(alice, "single", "**bold** move");
      const rendered = await one(bob, id);
      expect(rendered.status, JSON.stringify(rendered.body)).toBe(200);
      expect(rendered.body.raw_content).toBe("**bold** move");
      expect(rendered.body.message).toMatchObject({ id, content: "<p><strong>bold</strong> move</p>", subject: "single", stream_id: general, flags: [] });
      const raw = await one(bob, id, { apply_markdown: false });
      expect(raw.body.message.content).toBe("**bold** move");
    });

    it("shows a public channel's message to a member not subscribed, with historical flags", async () => {
      const id = await toChannel(alice, "single", "for all");
      const res = await one(carol, id);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.message.flags).toEqual(["read", "historical"]);
    });

    it("shows a direct message to its participants only", async () => {
      const dm = await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "just us" });
      expect((await one(bob, dm.body.id)).body.raw_content).toBe("just us");
      const refused = await one(carol, dm.body.id);
      expect([refused.status, refused.body.msg]).toEqual([400, "Invalid message(s)"]);
    });

    it("answers the edit history zulip-terminal shows, oldest first, with what each edit changed", async () => {
      const id = await toChannel(alice, "drafty", "first");
      const history = (res: { body: any }) => res.body.message_history;
      const path = `/messages/${id}/history`;
      const get = (as: User) => api(server, "GET", path, { as, template: "/messages/{message_id}/history" });
      expect(history(await get(bob))).toEqual([{ content: "first", rendered_content: "<p>first</p>", timestamp: expect.any(Number), topic: "drafty", user_id: alice.id }]);
      const edit = (params: Record<string, unknown>) => api(server, "PATCH", `/messages/${id}`, { as: alice, params, template: "/messages/{message_id}" });
      expect((await edit({ content: "second" })).status).toBe(200);
      expect((await edit({ topic: "final" })).status).toBe(200);
      const res = await get(bob);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(history(res)).toEqual([
        expect.objectContaining({ content: "first", topic: "drafty", user_id: alice.id }),
        expect.objectContaining({ content: "second", rendered_content: "<p>second</p>", prev_content: "first", prev_rendered_content: "<p>first</p>", topic: "drafty" }),
        expect.objectContaining({ content: "second", topic: "final", prev_topic: "drafty" }),
      ]);
      expect(history(res)[2]).not.toHaveProperty("prev_content");
      const hidden = await toChannel(alice, "hidden", "psst", "secret");
      const refused = await api(server, "GET", `/messages/${hidden}/history`, { as: bob, template: "/messages/{message_id}/history" });
      expect([refused.status, refused.body.msg]).toEqual([400, "Invalid message(s)"]);
    });

    it("refuses a private channel's message to a non-subscriber and an unknown id alike", async () => {
      const id = await toChannel(alice, "hidden", "psst", "secret");
      for (const res of [await one(bob, id), await one(bob, 999_999)]) expect([res.status, res.body.msg]).toEqual([400, "Invalid message(s)"]);
    });
  });
});
