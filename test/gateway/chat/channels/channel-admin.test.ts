/**
 * Administering channels through a real server on both engines, as Zulip clients ask for it: archiving (zulip-js
 * `streams.deleteById`, the python bindings' `delete_stream`), deleting a topic, and the realm's default channels
 * (`add_default_stream`), with Zulip's permission checks, events and register state.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { api, createUser, createUserWithRole, ENGINES, setRealmSettings, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { eventually, ids, messageApi, NOTIFICATION_BOT, type User } from "../../../support/messages.ts";

describe.each(ENGINES)("channel administration on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let admin: User;
  let alice: User;
  let bob: User;
  let guest: User;
  const { send, subscribe, toChannel, get, register, events } = messageApi(() => server);

  const expectError = (res: { status: number; body: any }, msg: string) => {
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body).toMatchObject({ result: "error", code: "BAD_REQUEST", msg });
  };
  const ok = (res: { status: number; body: any }) => {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  };
  /** zulip-js's streams.deleteById: DELETE with the id in the path and again in the query. */
  const archive = (as: Credentials, streamId: number) =>
    api(server, "DELETE", `/streams/${streamId}`, { as, params: { stream_id: streamId }, template: "/streams/{stream_id}" });
  const deleteTopic = (as: Credentials, streamId: number, topic: string) =>
    api(server, "POST", `/streams/${streamId}/delete_topic`, { as, params: { topic_name: topic }, template: "/streams/{stream_id}/delete_topic" });
  const topicIds = async (as: Credentials, streamId: number, topic: string) =>
    ids(await get(as, { narrow: [{ operator: "channel", operand: streamId }, { operator: "topic", operand: topic }] }));

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    admin = await createUserWithRole(server, "admin@example.com", ROLE.administrator);
    guest = await createUserWithRole(server, "guest@example.com", ROLE.guest);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
  });
  afterAll(async () => server?.close());

  describe("DELETE /streams/{stream_id}", () => {
    it("lets only those who administer the channel archive it", async () => {
      const channels = await subscribe(alice, ["alice's"]);
      ok(await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "hidden" }], invite_only: true } }));
      const hidden = (await api(server, "GET", "/streams", { as: owner })).body.streams.find((s: any) => s.name === "hidden").stream_id;
      expectError(await archive(bob, channels["alice's"]!), "You do not have permission to administer this channel.");
      // A private channel bob cannot see, and one that does not exist, look alike.
      expectError(await archive(bob, hidden), "Invalid channel ID");
      expectError(await archive(bob, 999_999), "Invalid channel ID");
      // Its creator administers it (can_administer_channel_group), as administrators administer every channel.
      ok(await archive(alice, channels["alice's"]!));
      ok(await archive(admin, hidden));
      expectError(await archive(admin, hidden), "Channel is already deactivated");
    });

    it("keeps the channel and its messages, tells each client in its form, and takes no more sends", async () => {
      const channels = await subscribe(owner, ["archived"], { principals: [owner.id, alice.id, guest.id], is_default_stream: true });
      const id = channels["archived"]!;
      await setRealmSettings(server, { realm_new_stream_announcements_stream_id: id });
      const before = await toChannel(alice, "history", "still here", "archived");
      const modern = await register(alice, ["stream", "default_streams", "message"], { archived_channels: true });
      const legacy = await register(bob, ["stream", "default_streams", "realm"]);
      const guestQueue = await register(guest, ["stream", "default_streams"]);

      ok(await archive(owner, id));

      expect((await events(alice, modern)).filter((e) => e.type === "stream")).toEqual([
        { type: "stream", op: "update", stream_id: id, name: "archived", property: "is_archived", value: true, id: expect.any(Number) },
      ]);
      expect((await events(bob, legacy)).filter((e) => e.type === "stream")).toEqual([
        { type: "stream", op: "delete", streams: [{ stream_id: id }], stream_ids: [id], id: expect.any(Number) },
      ]);
      // It stops being a default channel: members are told the new list, guests are not told of default channels.
      const defaults = (await events(bob, legacy)).filter((e) => e.type === "default_streams");
      expect(defaults).toHaveLength(1);
      expect(defaults[0].default_streams).not.toContain(id);
      expect((await events(guest, guestQueue)).map((e) => e.type)).toEqual(["stream"]);
      // Nor is it the channel new channels are announced in any more.
      expect((await events(bob, legacy)).filter((e) => e.type === "realm")).toEqual([
        { type: "realm", op: "update_dict", property: "default", data: { new_stream_announcements_stream_id: -1 }, id: expect.any(Number) },
      ]);
      const realmState = await api(server, "POST", "/register", { as: bob, params: { fetch_event_types: ["realm"] } });
      expect(realmState.body.realm_new_stream_announcements_stream_id).toBe(-1);

      // Notification Bot says so in the channel, read for everyone.
      const notice = (await get(alice, { narrow: [{ operator: "channel", operand: id }, { operator: "topic", operand: "channel events" }] })).body.messages;
      expect(notice.map((m: any) => [m.sender_email, m.content, m.flags.includes("read")])).toEqual([[NOTIFICATION_BOT, "Channel archived has been archived.", true]]);
      expect(ids(await get(alice, { narrow: [{ operator: "channel", operand: id }, { operator: "topic", operand: "history" }] }))).toEqual([before]);

      expectError(await send(alice, { type: "stream", to: id, topic: "after", content: "too late" }), "Not authorized to send to channel 'archived'");

      // Listed only where asked for: GET /streams's exclude_archived, the archived_channels client capability.
      const listed = async (params: Record<string, unknown>) => (await api(server, "GET", "/streams", { as: alice, params })).body.streams.find((s: any) => s.stream_id === id);
      expect(await listed({})).toBeUndefined();
      expect(await listed({ exclude_archived: false })).toMatchObject({ name: "archived", is_archived: true });
      const state = async (capabilities: Record<string, boolean>) =>
        (await api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["stream", "subscription"], client_capabilities: capabilities } })).body;
      const withCapability = await state({ archived_channels: true });
      expect(withCapability.streams.find((s: any) => s.stream_id === id)).toMatchObject({ is_archived: true });
      expect(withCapability.subscriptions.find((s: any) => s.stream_id === id)).toMatchObject({ is_archived: true });
      expect((await api(server, "GET", "/users/me/subscriptions", { as: alice })).body.subscriptions.some((s: any) => s.stream_id === id)).toBe(false);
      const without = await state({});
      expect(without.streams.some((s: any) => s.stream_id === id)).toBe(false);
      expect(without.subscriptions.some((s: any) => s.stream_id === id)).toBe(false);
    });
  });

  describe("PATCH /streams/{stream_id} is_archived false", () => {
    const patch = (as: Credentials, streamId: number, params: Record<string, unknown>) =>
      api(server, "PATCH", `/streams/${streamId}`, { as, params, template: "/streams/{stream_id}" });

    it("unarchives: sends are taken again, each client hears it in its form, Notification Bot says so", async () => {
      const id = (await subscribe(owner, ["revived"], { principals: [owner.id, alice.id] }))["revived"]!;
      ok(await archive(owner, id));
      const modern = await register(alice, ["stream"], { archived_channels: true });
      const legacy = await register(bob, ["stream"]);
      expectError(await patch(alice, id, { is_archived: false }), "You do not have permission to administer this channel.");
      ok(await patch(owner, id, { is_archived: false }));
      expect(await events(alice, modern)).toEqual([
        { type: "stream", op: "update", stream_id: id, name: "revived", property: "is_archived", value: false, id: expect.any(Number) },
      ]);
      const created = await events(bob, legacy);
      expect(created.map((e) => [e.type, e.op, e.streams?.[0]?.stream_id, e.streams?.[0]?.is_archived])).toEqual([["stream", "create", id, false]]);
      const notices = (await get(alice, { narrow: [{ operator: "channel", operand: id }, { operator: "topic", operand: "channel events" }] })).body.messages;
      expect(notices.map((m: any) => m.content)).toEqual(["Channel revived has been archived.", "Channel #**revived** has been unarchived."]);
      ok(await send(alice, { type: "stream", to: id, topic: "back", content: "we are back" }));
      expectError(await patch(owner, id, { is_archived: false }), "Channel is not currently deactivated");
      expectError(await patch(owner, id, { is_archived: true }), "Invalid parameters");
    });

    it("leaves a private channel with nobody in it archived", async () => {
      const id = (await subscribe(owner, ["empty-private"], { invite_only: true }))["empty-private"]!;
      ok(await archive(owner, id));
      ok(await api(server, "DELETE", "/users/me/subscriptions", { as: owner, params: { subscriptions: ["empty-private"] } }));
      expectError(await patch(owner, id, { is_archived: false }), "Channel is private and have no subscribers");
    });
  });

  describe("POST /streams/{stream_id}/delete_topic", () => {
    it("is for administrators, on channels they can read", async () => {
      const channels = await subscribe(alice, ["topics"]);
      await toChannel(alice, "mine", "one", "topics");
      expectError(await deleteTopic(alice, channels["topics"]!, "mine"), "Must be an organization administrator");
      expectError(await deleteTopic(owner, 999_999, "mine"), "Invalid channel ID");
      ok(await api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name: "alice-private" }], invite_only: true } }));
      const privateId = (await api(server, "GET", "/streams", { as: alice })).body.streams.find((s: any) => s.name === "alice-private").stream_id;
      expectError(await deleteTopic(admin, privateId, "mine"), "Invalid channel ID");
      expect(await topicIds(alice, channels["topics"]!, "mine")).toHaveLength(1);
    });

    it("deletes every message of the topic, tells the subscribers in one event, and forgets the topic's policies", async () => {
      const channels = await subscribe(owner, ["cleanup"], { principals: [owner.id, alice.id] });
      const id = channels["cleanup"]!;
      const doomed = [await toChannel(alice, "Doomed", "a", "cleanup"), await toChannel(owner, "doomed", "b", "cleanup"), await toChannel(alice, "Doomed", "c", "cleanup")];
      const kept = await toChannel(alice, "kept", "d", "cleanup");
      ok(await api(server, "POST", "/user_topics", { as: alice, params: { stream_id: id, topic: "Doomed", visibility_policy: 3 } }));
      const queue = await register(alice, ["delete_message", "user_topic"], { bulk_message_deletion: true });

      expect(ok(await deleteTopic(owner, id, "doomed"))).toEqual({ result: "success", msg: "", complete: true });

      expect(await topicIds(alice, id, "Doomed")).toEqual([]);
      expect(await topicIds(alice, id, "kept")).toEqual([kept]);
      const seen = await events(alice, queue);
      expect(seen.filter((e) => e.type === "delete_message")).toEqual([
        { type: "delete_message", message_type: "stream", stream_id: id, topic: "Doomed", message_ids: doomed, id: expect.any(Number) },
      ]);
      expect(seen.filter((e) => e.type === "user_topic")).toMatchObject([{ stream_id: id, visibility_policy: 0 }]);
      // Nothing left: the request still succeeds.
      expect(ok(await deleteTopic(owner, id, "doomed")).complete).toBe(true);
    });

    it("deletes, with protected history, only what the administrator received, in batches", async () => {
      ok(await api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name: "protected" }], invite_only: true } }));
      const id = (await api(server, "GET", "/streams", { as: alice })).body.streams.find((s: any) => s.name === "protected").stream_id;
      const early = await toChannel(alice, "t", "before the administrator came", "protected");
      ok(await api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name: "protected" }], principals: [admin.id] } }));
      // More than one batch of 100.
      const later: number[] = [];
      for (let i = 0; i < 101; i++) later.push(await toChannel(alice, "t", `message ${i}`, "protected"));
      expect(ok(await deleteTopic(admin, id, "t")).complete).toBe(true);
      expect(await topicIds(alice, id, "t")).toEqual([early]);
    });

    it("reads the empty topic's display name as the empty topic", async () => {
      const channels = await subscribe(owner, ["general-chat"]);
      const id = channels["general-chat"]!;
      await toChannel(owner, "", "in general chat", "general-chat");
      ok(await deleteTopic(owner, id, "general chat"));
      expect(await topicIds(owner, id, "")).toEqual([]);
    });
  });

  describe("default channels", () => {
    /** The python bindings' add_default_stream: a form body with stream_id. */
    const addDefault = (as: Credentials, streamId: number) => api(server, "POST", "/default_streams", { as, params: { stream_id: streamId } });
    const removeDefault = (as: Credentials, streamId: number) => api(server, "DELETE", "/default_streams", { as, params: { stream_id: streamId } });
    const registeredDefaults = async (as: Credentials) =>
      (await api(server, "POST", "/register", { as, params: { fetch_event_types: ["default_streams", "default_stream_groups"] } })).body;

    it("are managed by administrators, public channels they can read only", async () => {
      const channels = await subscribe(owner, ["lobby"]);
      ok(await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "closed" }], invite_only: true } }));
      const closed = (await api(server, "GET", "/streams", { as: owner })).body.streams.find((s: any) => s.name === "closed").stream_id;
      expectError(await addDefault(alice, channels["lobby"]!), "Must be an organization administrator");
      expectError(await removeDefault(alice, channels["lobby"]!), "Must be an organization administrator");
      expectError(await addDefault(owner, closed), "Private channels cannot be made default.");
      expectError(await addDefault(owner, 999_999), "Invalid channel ID");
    });

    it("tell members the realm's default channels, in events and in register's state", async () => {
      const channels = await subscribe(owner, ["welcome", "newcomers"]);
      const member = await register(bob, ["default_streams"]);
      const guestQueue = await register(guest, ["default_streams"]);

      ok(await addDefault(owner, channels["welcome"]!));
      ok(await addDefault(admin, channels["newcomers"]!));
      // Already default: nothing changes, nobody is told.
      ok(await addDefault(owner, channels["newcomers"]!));
      ok(await removeDefault(owner, channels["welcome"]!));

      const lists = (await events(bob, member)).map((e) => e.default_streams.filter((s: number) => s === channels["welcome"] || s === channels["newcomers"]));
      expect(lists).toEqual([[channels["welcome"]], [channels["welcome"], channels["newcomers"]], [channels["newcomers"]]]);
      expect(await events(guest, guestQueue)).toEqual([]);

      const state = await registeredDefaults(bob);
      expect(state.realm_default_streams).toContain(channels["newcomers"]);
      expect(state.realm_default_streams).not.toContain(channels["welcome"]);
      expect(state.realm_default_stream_groups).toEqual([]);
      expect((await registeredDefaults(guest)).realm_default_streams).toEqual([]);
      const listed = (await api(server, "GET", "/streams", { as: bob, params: { include_default: true } })).body.streams.map((s: any) => s.stream_id);
      expect(listed).toContain(channels["newcomers"]);
    });

    it("include channels created as default ones", async () => {
      const member = await register(bob, ["default_streams"]);
      const channels = await subscribe(owner, ["born-default"], { is_default_stream: true });
      await eventually(async () => (await events(bob, member)).length > 0);
      expect((await events(bob, member)).at(-1).default_streams).toContain(channels["born-default"]);
    });
  });
});
