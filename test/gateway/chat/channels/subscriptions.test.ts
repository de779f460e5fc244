/**
 * Subscriptions through a real server on both engines: creating channels with their settings, subscribing others,
 * unsubscribing with Zulip's removal rules, subscription properties, and the events and register state of each.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { api, createUser, createUserWithRole, ENGINES, eventQueue, setRealmSettings, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("subscriptions on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let admin: User;
  let alice: User;
  let bob: User;
  let carol: User;
  let guest: User;
  let groups: Map<string, number>;

  const subscribe = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/users/me/subscriptions", { as, params });
  const unsubscribe = (as: Credentials, params: Record<string, unknown>) => api(server, "DELETE", "/users/me/subscriptions", { as, params });
  const setProperties = (as: Credentials, data: unknown[]) => api(server, "POST", "/users/me/subscriptions/properties", { as, params: { subscription_data: data } });
  const mySubscriptions = async (as: Credentials) => (await api(server, "GET", "/users/me/subscriptions", { as, params: { include_subscribers: true } })).body.subscriptions as any[];
  const streamId = async (name: string) => (await server.node.store.db.selectFrom("streams").select("id").where("name", "=", name).executeTakeFirstOrThrow()).id;
  const expectError = (res: { status: number; body: any }, msg: string, code = "BAD_REQUEST") => {
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body).toMatchObject({ result: "error", code, msg });
  };
  const ok = (res: { status: number; body: any }) => {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    admin = await createUserWithRole(server, "admin@example.com", ROLE.administrator);
    guest = await createUserWithRole(server, "guest@example.com", ROLE.guest);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    const rows = await server.node.store.db.selectFrom("user_groups").select(["id", "name"]).where("is_system_group", "=", true).execute();
    groups = new Map(rows.map((r) => [r.name, r.id]));
  });
  afterAll(async () => server?.close());

  describe("creating channels", () => {
    it("creates a channel with the settings asked for", async () => {
      const body = ok(
        await subscribe(owner, {
          subscriptions: [{ name: " secrets ", description: "line one\nline two" }],
          invite_only: true,
          history_public_to_subscribers: true,
          message_retention_days: 30,
          topics_policy: "disable_empty_topic",
          can_remove_subscribers_group: { direct_members: [alice.id], direct_subgroups: [] },
          can_add_subscribers_group: { direct_members: [], direct_subgroups: [groups.get("role:moderators")!] },
          can_send_message_group: groups.get("role:everyone"),
        }),
      );
      expect(body).toEqual({ result: "success", msg: "", subscribed: { [owner.id]: ["secrets"] }, already_subscribed: {} });
      const sub = (await mySubscriptions(owner)).find((s) => s.name === "secrets");
      expect(sub).toMatchObject({
        description: "line one line two",
        invite_only: true,
        history_public_to_subscribers: true,
        message_retention_days: 30,
        topics_policy: "disable_empty_topic",
        can_remove_subscribers_group: { direct_members: [alice.id], direct_subgroups: [] },
        // A lone subgroup is that group.
        can_add_subscribers_group: groups.get("role:moderators"),
        can_send_message_group: groups.get("role:everyone"),
        can_administer_channel_group: { direct_members: [owner.id], direct_subgroups: [] },
        subscribers: [owner.id],
        is_muted: false,
        in_home_view: true,
      });
    });

    it("keeps history public for public channels and encodes retention as Zulip does", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "forever" }], history_public_to_subscribers: false, message_retention_days: "unlimited" }));
      const sub = (await mySubscriptions(owner)).find((s) => s.name === "forever");
      expect(sub).toMatchObject({ invite_only: false, history_public_to_subscribers: true, message_retention_days: -1 });
      ok(await subscribe(owner, { subscriptions: [{ name: "private-default" }], invite_only: true }));
      expect((await mySubscriptions(owner)).find((s) => s.name === "private-default")).toMatchObject({ history_public_to_subscribers: false, message_retention_days: null });
    });

    it("refuses settings Zulip refuses", async () => {
      const create = (as: Credentials, extra: Record<string, unknown>) => subscribe(as, { subscriptions: [{ name: "refused" }], ...extra });
      expectError(await create(owner, { is_web_public: true }), "Web-public channels are not enabled.");
      expectError(await create(alice, { is_default_stream: true }), "Must be an organization administrator");
      expectError(await create(owner, { is_default_stream: true, invite_only: true }), "A default channel cannot be private.");
      expectError(await create(admin, { message_retention_days: 10 }), "Must be an organization owner");
      expectError(await create(owner, { message_retention_days: 0 }), "Bad value for 'message_retention_days': 0");
      expectError(await create(owner, { message_retention_days: "forever" }), "Bad value for 'message_retention_days': forever");
      expectError(await create(owner, { topics_policy: "sometimes" }), "Invalid topics_policy");
      expectError(await create(owner, { can_add_subscribers_group: groups.get("role:everyone") }), "'can_add_subscribers_group' setting cannot be set to 'role:everyone' group.");
      expectError(await create(owner, { can_send_message_group: groups.get("role:internet") }), "'can_send_message_group' setting cannot be set to 'role:internet' group.");
      expectError(await create(owner, { can_subscribe_group: 999999 }), "Invalid user group");
      expectError(await create(owner, { can_subscribe_group: { direct_members: [999999], direct_subgroups: [] } }), "Invalid user ID: 999999");
      expectError(await create(owner, { can_subscribe_group: { direct_members: [] } }), "can_subscribe_group is not an integer");
      expectError(await create(guest, {}), "Not allowed for guest users");
      expectError(await subscribe(owner, { subscriptions: [{ name: "  " }] }), "Channel name can't be empty.");
      // Settings are checked only when a channel is created: an existing one ignores them.
      ok(await subscribe(alice, { subscriptions: [{ name: "forever" }], can_add_subscribers_group: groups.get("role:everyone") }));
      const names = (await api(server, "GET", "/streams", { as: owner })).body.streams.map((s: any) => s.name);
      expect(names).not.toContain("refused");
    });

    it("keeps a channel to its can_send_message_group", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "staff-only" }], principals: [owner.id, alice.id, admin.id], can_send_message_group: groups.get("role:administrators") }));
      const post = (as: Credentials) => api(server, "POST", "/messages", { as, params: { type: "stream", to: "staff-only", topic: "t", content: "hi" } });
      expectError(await post(alice), "You do not have permission to post in this channel.");
      ok(await post(admin));
      ok(await post(owner));
    });

    it("makes default channels for administrators", async () => {
      ok(await subscribe(admin, { subscriptions: [{ name: "welcome" }], is_default_stream: true }));
      const row = await server.node.store.db.selectFrom("streams").select("is_default").where("name", "=", "welcome").executeTakeFirstOrThrow();
      expect(row.is_default).toBe(true);
    });

    it("creates web-public channels once the organization allows spectators, for owners", async () => {
      await setRealmSettings(server, { realm_enable_spectator_access: true });
      expectError(await subscribe(admin, { subscriptions: [{ name: "the-web" }], is_web_public: true }), "Insufficient permission");
      ok(await subscribe(owner, { subscriptions: [{ name: "the-web" }], is_web_public: true }));
      expect((await mySubscriptions(owner)).find((s) => s.name === "the-web")).toMatchObject({ is_web_public: true, invite_only: false });
      await setRealmSettings(server, { realm_enable_spectator_access: false });
    });

    it("announces new channels in the new-channel announcements channel", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "announcements" }] }));
      await setRealmSettings(server, { realm_new_stream_announcements_stream_id: await streamId("announcements") });
      ok(await subscribe(alice, { subscriptions: [{ name: "fresh" }], announce: true }));
      ok(await subscribe(alice, { subscriptions: [{ name: "quiet" }] }));
      const res = ok(await api(server, "GET", "/messages", { as: owner, params: { anchor: "newest", num_before: 10, num_after: 0, narrow: [{ operator: "channel", operand: "announcements" }] } }));
      expect(res.messages).toHaveLength(1);
      expect(res.messages[0]).toMatchObject({ subject: "new channels", sender_email: "notification-bot@zulip.com", content: expect.stringContaining("created a new channel") });
      expect(res.messages[0].content).toContain("fresh");
      await setRealmSettings(server, { realm_new_stream_announcements_stream_id: -1 });
    });
  });

  describe("subscribing others", () => {
    it("answers keyed by user id, with principals by id or e-mail", async () => {
      const body = ok(await subscribe(alice, { subscriptions: [{ name: "team" }, { name: "forever" }], principals: [bob.id, alice.id] }));
      // Existing channels first, then the created ones (Zulip's order).
      expect(body.subscribed).toEqual({ [bob.id]: ["forever", "team"], [alice.id]: ["team"] });
      expect(body.already_subscribed).toEqual({ [alice.id]: ["forever"] });
      const byEmail = ok(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: [carol.email.toUpperCase(), bob.email] }));
      expect(byEmail).toMatchObject({ subscribed: { [carol.id]: ["team"] }, already_subscribed: { [bob.id]: ["team"] } });
      // One kind of principal per request, as Zulip takes them.
      expectError(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: [bob.id, carol.email] }), "principals[1] is not an integer");
      const again = ok(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: [bob.id] }));
      expect(again).toMatchObject({ subscribed: {}, already_subscribed: { [bob.id]: ["team"] } });
    });

    it("refuses unknown and deactivated principals with BAD_REQUEST", async () => {
      expectError(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: [999999] }), "No such user: 999999");
      expectError(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: ["nobody@example.com"] }), "No such user: nobody@example.com");
      const gone = await createUser(server, "gone@example.com");
      await server.node.store.db.updateTable("users").set({ is_active: false }).where("id", "=", gone.id).execute();
      expectError(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: [gone.id] }), `No such user: ${gone.id}`);
      expectError(await subscribe(alice, { subscriptions: [{ name: "team" }], principals: [] }), "principals cannot be empty");
    });

    it("keeps private channels to those with content access, fatally or listed as unauthorized", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "inner" }], invite_only: true }));
      expectError(await subscribe(alice, { subscriptions: [{ name: "inner" }] }), "Unable to access channel (inner).");
      // Administrators see private channels' metadata, not their content: they may not join either.
      expectError(await subscribe(admin, { subscriptions: [{ name: "inner" }] }), "Unable to access channel (inner).");
      const body = ok(await subscribe(alice, { subscriptions: [{ name: "inner" }, { name: "team" }], authorization_errors_fatal: false }));
      expect(body).toMatchObject({ unauthorized: ["inner"], subscribed: {}, already_subscribed: { [alice.id]: ["team"] } });
      // A subscriber of a private channel may add others (the realm's can_add_subscribers_group is members).
      ok(await subscribe(owner, { subscriptions: [{ name: "inner" }], principals: [bob.id] }));
      ok(await subscribe(bob, { subscriptions: [{ name: "inner" }], principals: [carol.id] }));
    });

    it("lets the channel's can_add_subscribers_group add others without being subscribed", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "door" }], invite_only: true, can_add_subscribers_group: { direct_members: [alice.id], direct_subgroups: [] } }));
      const body = ok(await subscribe(alice, { subscriptions: [{ name: "door" }], principals: [bob.id] }));
      expect(body.subscribed).toEqual({ [bob.id]: ["door"] });
      expectError(await subscribe(carol, { subscriptions: [{ name: "door" }], principals: [carol.id] }), "Unable to access channel (door).");
    });

    it("follows the realm's can_add_subscribers_group for others, not for oneself", async () => {
      await setRealmSettings(server, { realm_can_add_subscribers_group: groups.get("role:administrators") });
      try {
        expectError(await subscribe(carol, { subscriptions: [{ name: "forever" }], principals: [owner.id] }), "Insufficient permission");
        ok(await subscribe(carol, { subscriptions: [{ name: "forever" }], principals: [carol.id] }));
        ok(await subscribe(admin, { subscriptions: [{ name: "forever" }], principals: [bob.id] }));
      } finally {
        await setRealmSettings(server, { realm_can_add_subscribers_group: groups.get("role:members") });
      }
    });

    it("sends subscription add to the new subscriber and peer_add to those who see the subscribers", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "club" }], invite_only: true }));
      ok(await subscribe(owner, { subscriptions: [{ name: "open-club" }] }));
      const [bobQueue, carolQueue, adminQueue, guestQueue] = await Promise.all([bob, carol, admin, guest].map((u) => eventQueue(server, u, ["subscription", "stream"])));
      ok(await subscribe(owner, { subscriptions: [{ name: "club" }, { name: "open-club" }], principals: [bob.id] }));
      const club = await streamId("club");
      const open = await streamId("open-club");
      const bobEvents = await bobQueue.events();
      const adds = bobEvents.filter((e) => e.op === "add").flatMap((e) => e.subscriptions);
      expect(adds.map((s: any) => s.name).sort()).toEqual(["club", "open-club"]);
      expect(adds.find((s: any) => s.name === "club").subscribers).toEqual([owner.id, bob.id].sort((a, b) => a - b));
      // The private channel appears for Bob before his subscription to it does.
      expect(bobEvents.filter((e) => e.type === "stream").map((e) => [e.op, e.streams.map((s: any) => s.name)])).toEqual([["create", ["club"]]]);
      expect(bobEvents.findIndex((e) => e.type === "stream")).toBeLessThan(bobEvents.findIndex((e) => e.op === "add" && e.subscriptions[0].name === "club"));
      // Private: subscribers and administrators see the list; public: every non-guest.
      const peerAdds = async (q: typeof bobQueue) => (await q.events()).filter((e) => e.op === "peer_add").map((e) => e.stream_ids[0]);
      expect((await peerAdds(adminQueue)).sort()).toEqual([club, open].sort());
      expect(await peerAdds(carolQueue)).toEqual([open]);
      expect(await peerAdds(guestQueue)).toEqual([]);
    });
  });

  describe("unsubscribing", () => {
    it("removes oneself, listing what was not subscribed", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "leave-a" }, { name: "leave-b" }], principals: [carol.id] }));
      ok(await unsubscribe(carol, { subscriptions: ["leave-a"] }));
      const body = ok(await unsubscribe(carol, { subscriptions: ["leave-a", "leave-b"] }));
      expect(body).toEqual({ result: "success", msg: "", removed: ["leave-b"], not_removed: ["leave-a"] });
      expect((await mySubscriptions(carol)).map((s) => s.name)).not.toContain("leave-b");
    });

    it("refuses unknown channels", async () => {
      const res = await unsubscribe(carol, { subscriptions: ["no-such-channel"] });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: "STREAM_DOES_NOT_EXIST", msg: "Channel(s) (no-such-channel) do not exist" });
    });

    it("lets administrators remove anyone and others only through can_remove_subscribers_group", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "kick" }], invite_only: true, principals: [owner.id, bob.id, carol.id], can_remove_subscribers_group: { direct_members: [bob.id], direct_subgroups: [] } }));
      // Alice is a member without access; Carol has access but is not in the group.
      expectError(await unsubscribe(alice, { subscriptions: ["kick"], principals: [carol.id] }), "Insufficient permission");
      expectError(await unsubscribe(carol, { subscriptions: ["kick"], principals: [bob.id] }), "Insufficient permission");
      expect(ok(await unsubscribe(bob, { subscriptions: ["kick"], principals: [carol.id] })).removed).toEqual(["kick"]);
      // An administrator who is not subscribed to the private channel still may.
      expect(ok(await unsubscribe(admin, { subscriptions: ["kick"], principals: [bob.id] })).removed).toEqual(["kick"]);
      expectError(await unsubscribe(guest, { subscriptions: ["kick"], principals: [owner.id] }), "Insufficient permission");
    });

    it("lets a user remove a bot they own", async () => {
      const bot = await createUser(server, "helper-bot@example.com");
      await server.node.store.db.updateTable("users").set({ is_bot: true, bot_type: 1, bot_owner_id: carol.id }).where("id", "=", bot.id).execute();
      ok(await subscribe(owner, { subscriptions: [{ name: "bots" }], principals: [bot.id, carol.id] }));
      expect(ok(await unsubscribe(carol, { subscriptions: ["bots"], principals: [bot.id] })).removed).toEqual(["bots"]);
      expectError(await unsubscribe(alice, { subscriptions: ["bots"], principals: [carol.id] }), "Insufficient permission");
    });

    it("sends remove, peer_remove and stream delete, and stops the channel's messages", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "hush" }], invite_only: true, principals: [owner.id, alice.id, bob.id] }));
      const hush = await streamId("hush");
      const [aliceQueue, bobQueue, adminQueue] = await Promise.all([alice, bob, admin].map((u) => eventQueue(server, u, ["subscription", "stream", "message"])));
      expect(ok(await unsubscribe(owner, { subscriptions: ["hush"], principals: [alice.id] })).removed).toEqual(["hush"]);
      const aliceEvents = await aliceQueue.events();
      expect(aliceEvents.find((e) => e.type === "subscription")).toMatchObject({ op: "remove", subscriptions: [{ name: "hush", stream_id: hush }] });
      expect(aliceEvents.find((e) => e.type === "stream")).toMatchObject({ op: "delete", stream_ids: [hush] });
      for (const q of [bobQueue, adminQueue]) {
        expect((await q.events()).find((e) => e.op === "peer_remove")).toMatchObject({ stream_ids: [hush], user_ids: [alice.id] });
      }
      ok(await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "hush", topic: "t", content: "after alice left" } }));
      expect((await aliceQueue.events()).some((e) => e.type === "message")).toBe(false);
      expect((await bobQueue.events()).some((e) => e.type === "message")).toBe(true);
      const res = await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: "hush", topic: "t", content: "let me in" } });
      expectError(res, "Not authorized to send to channel 'hush'");
      const streams = ok(await api(server, "GET", "/streams", { as: alice })).streams.map((s: any) => s.name);
      expect(streams).not.toContain("hush");
    });
  });

  describe("subscription properties", () => {
    it("changes properties with update events, reflected in GET and register", async () => {
      ok(await subscribe(alice, { subscriptions: [{ name: "props" }] }));
      const props = await streamId("props");
      const queue = await eventQueue(server, alice, ["subscription"]);
      ok(
        await setProperties(alice, [
          { stream_id: props, property: "color", value: "#123abc" },
          { stream_id: props, property: "pin_to_top", value: true },
          { stream_id: props, property: "in_home_view", value: false },
          { stream_id: props, property: "desktop_notifications", value: true },
          { stream_id: props, property: "wildcard_mentions_notify", value: false },
        ]),
      );
      const updates = (await queue.events()).filter((e) => e.op === "update");
      expect(updates.map((e) => [e.stream_id, e.property, e.value])).toEqual([
        [props, "color", "#123abc"],
        [props, "pin_to_top", true],
        [props, "in_home_view", false],
        [props, "desktop_notifications", true],
        [props, "wildcard_mentions_notify", false],
      ]);
      const expected = { color: "#123abc", pin_to_top: true, is_muted: true, in_home_view: false, desktop_notifications: true, wildcard_mentions_notify: false, push_notifications: null };
      expect((await mySubscriptions(alice)).find((s) => s.stream_id === props)).toMatchObject(expected);
      const state = (await eventQueue(server, alice, ["subscription"])).state;
      expect(state.subscriptions.find((s: any) => s.stream_id === props)).toMatchObject(expected);
      ok(await setProperties(alice, [{ stream_id: props, property: "is_muted", value: false }]));
      expect((await mySubscriptions(alice)).find((s) => s.stream_id === props)).toMatchObject({ is_muted: false, in_home_view: true });
    });

    it("refuses bad properties, values and channels, changing nothing", async () => {
      const props = await streamId("props");
      const inner = await streamId("inner");
      const forever = await streamId("forever");
      expectError(await setProperties(alice, [{ stream_id: props, property: "color", value: "red" }]), "color is not a valid hex color code");
      expectError(await setProperties(alice, [{ stream_id: props, property: "pin_to_top", value: "yes" }]), "pin_to_top is not a boolean");
      expectError(await setProperties(alice, [{ stream_id: props, property: "volume", value: true }]), "Unknown subscription property: volume");
      expectError(await setProperties(alice, [{ stream_id: inner, property: "pin_to_top", value: true }]), "Invalid channel ID");
      expectError(await setProperties(alice, [{ stream_id: 999999, property: "pin_to_top", value: true }]), "Invalid channel ID");
      expectError(await setProperties(bob, [{ stream_id: props, property: "pin_to_top", value: true }]), `Not subscribed to channel ID ${props}`);
      expectError(
        await setProperties(alice, [
          { stream_id: props, property: "pin_to_top", value: false },
          { stream_id: forever, property: "nonsense", value: true },
        ]),
        "Unknown subscription property: nonsense",
      );
      expect((await mySubscriptions(alice)).find((s) => s.stream_id === props).pin_to_top).toBe(true);
    });
  });

  describe("updating channels", () => {
    const patch = (as: Credentials, id: number, params: Record<string, unknown>) => api(server, "PATCH", `/streams/${id}`, { as, params, template: "/streams/{stream_id}" });

    it("renames and describes a channel, telling everyone who sees it", async () => {
      ok(await subscribe(owner, { subscriptions: [{ name: "old-name" }], principals: [owner.id, alice.id] }));
      const id = await streamId("old-name");
      const [aliceQueue, carolQueue, guestQueue] = await Promise.all([alice, carol, guest].map((u) => eventQueue(server, u, ["stream"])));
      ok(await patch(owner, id, { new_name: "new-name", description: "**bold**\nmove" }));
      for (const q of [aliceQueue, carolQueue]) {
        const events = await q.events();
        expect(events.find((e) => e.property === "name")).toMatchObject({ op: "update", stream_id: id, name: "old-name", value: "new-name" });
        expect(events.find((e) => e.property === "description")).toMatchObject({ value: "**bold** move", rendered_description: "<p><strong>bold</strong> move</p>" });
      }
      expect(await guestQueue.events()).toEqual([]);
      expect((await mySubscriptions(alice)).find((s) => s.stream_id === id)).toMatchObject({ name: "new-name", description: "**bold** move" });
      // Messages go to the channel by its new name.
      ok(await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: "new-name", topic: "t", content: "renamed" } }));
      const taken = await patch(owner, id, { new_name: "FOREVER" });
      expect(taken.status).toBe(409);
      expect(taken.body).toMatchObject({ code: "CHANNEL_ALREADY_EXISTS", msg: "Channel 'FOREVER' already exists" });
      expectError(await patch(owner, id, { new_name: "new-name" }), "Channel already has that name.");
      expectError(await patch(owner, 999999, { new_name: "x" }), "Invalid channel ID");
    });

    it("lets administrators and the channel's administrators change it, nobody else", async () => {
      const id = await streamId("new-name");
      expectError(await patch(carol, id, { description: "mine now" }), "You do not have permission to administer this channel.");
      expectError(await patch(guest, id, { description: "mine now" }), "Invalid channel ID");
      expectError(await patch(alice, await streamId("inner"), { description: "peek" }), "Invalid channel ID");
      ok(await patch(admin, id, { description: "admin was here" }));
      // Alice created "fresh": its can_administer_channel_group holds her.
      ok(await patch(alice, await streamId("fresh"), { description: "my channel" }));
    });

    it("needs the realm's permissions to change the topics policy and the delete-message groups", async () => {
      const fresh = await streamId("fresh"); // Alice, a member, administers it
      const moderators = { new: groups.get("role:moderators") };
      // Members may set topics policies by default (can_set_topics_policy_group), only moderators the delete groups.
      ok(await patch(alice, fresh, { topics_policy: "disable_empty_topic" }));
      expectError(await patch(alice, fresh, { can_delete_own_message_group: moderators }), "Insufficient permission");
      ok(await patch(admin, fresh, { can_delete_own_message_group: moderators }));
      const realm = (params: Record<string, unknown>) => api(server, "PATCH", "/realm", { as: owner, params, validate: false });
      ok(await realm({ can_set_topics_policy_group: { new: groups.get("role:administrators") } }));
      try {
        expectError(await patch(alice, fresh, { topics_policy: "allow_empty_topic" }), "Insufficient permission");
        ok(await patch(alice, fresh, { description: "still mine" }));
      } finally {
        ok(await realm({ can_set_topics_policy_group: { new: groups.get("role:members") } }));
      }
    });

    it("makes a channel private, with stream delete for those who no longer see it", async () => {
      const id = await streamId("new-name");
      const [aliceQueue, carolQueue, adminQueue] = await Promise.all([alice, carol, admin].map((u) => eventQueue(server, u, ["stream"])));
      expectError(await patch(owner, id, { history_public_to_subscribers: false }), "Invalid parameters");
      ok(await patch(owner, id, { is_private: true }));
      for (const q of [aliceQueue, adminQueue]) {
        expect((await q.events()).find((e) => e.property === "invite_only")).toMatchObject({ value: true, history_public_to_subscribers: false, is_web_public: false });
      }
      expect((await carolQueue.events()).map((e) => e.op)).toEqual(["delete"]);
      expect((await mySubscriptions(alice)).find((s) => s.stream_id === id)).toMatchObject({ invite_only: true, history_public_to_subscribers: false });
      expectError(await api(server, "POST", "/messages", { as: carol, params: { type: "stream", to: "new-name", topic: "t", content: "still?" } }), "Not authorized to send to channel 'new-name'");
      ok(await patch(owner, id, { is_private: false }));
      expect((await carolQueue.events()).map((e) => e.op)).toEqual(["delete", "create"]);
    });

    it("changes group settings, checking 'old'", async () => {
      const id = await streamId("new-name");
      const admins = groups.get("role:administrators")!;
      expectError(await patch(owner, id, { can_remove_subscribers_group: { new: groups.get("role:moderators"), old: groups.get("role:members") } }), "'old' value does not match the expected value.");
      expectError(await patch(owner, id, { can_remove_subscribers_group: { new: groups.get("role:everyone") } }), "'can_remove_subscribers_group' setting cannot be set to 'role:everyone' group.");
      const queue = await eventQueue(server, alice, ["stream"]);
      ok(await patch(owner, id, { can_remove_subscribers_group: { new: { direct_members: [carol.id], direct_subgroups: [] }, old: admins }, topics_policy: "empty_topic_only" }));
      const events = await queue.events();
      expect(events.find((e) => e.property === "can_remove_subscribers_group")).toMatchObject({ value: { direct_members: [carol.id], direct_subgroups: [] } });
      expect(events.find((e) => e.property === "topics_policy")).toMatchObject({ value: "empty_topic_only" });
      expectError(await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: "new-name", topic: "named", content: "x" } }), "Only the general chat topic is allowed in this channel.");
    });
  });

  describe("GET /streams", () => {
    const listed = async (as: Credentials, params: Record<string, unknown> = {}) => ok(await api(server, "GET", "/streams", { as, params })).streams.map((s: any) => s.name) as string[];

    it("lists what Zulip lists for each set of flags", async () => {
      expect(await listed(alice)).toEqual(expect.arrayContaining(["forever", "team"]));
      expect(await listed(alice)).not.toContain("inner");
      expect(await listed(guest)).not.toContain("forever");
      expect(await listed(guest, { include_web_public: true })).toContain("the-web");
      expect(await listed(guest, { include_default: true })).toContain("welcome");
      expect(await listed(carol, { include_public: false })).not.toContain("announcements");
      expect(await listed(carol, { include_public: false })).toContain("inner");
      expect(await listed(alice, { include_public: false, include_subscribed: false })).toEqual([]);
      // include_all: every channel one sees the metadata of; administrators see them all.
      expect(await listed(admin, { include_all: true })).toEqual(expect.arrayContaining(["inner", "forever", "the-web"]));
      expect(await listed(alice, { include_all: true })).not.toContain("inner");
    });
  });

  describe("access through permission groups", () => {
    // A private channel opened to a group's members: they see its metadata (listed, its subscribers, its events)
    // without being subscribed or administrators; members outside the group do not.
    it("lists the channel to members of its groups and sends them its peer and stream events", async () => {
      const steward = await createUser(server, "steward@example.com");
      const keeper = await createUser(server, "keeper@example.com");
      const group = ok(await api(server, "POST", "/user_groups/create", { as: owner, params: { name: "stewards", description: "", members: [steward.id] } })).group_id;
      ok(await subscribe(owner, { subscriptions: [{ name: "vault" }], invite_only: true, can_subscribe_group: group }));
      const vault = await streamId("vault");
      const listed = async (as: Credentials, params: Record<string, unknown>) => ok(await api(server, "GET", "/streams", { as, params })).streams.map((s: any) => s.name);
      expect(await listed(steward, { include_all: true })).toContain("vault");
      expect(await listed(steward, { include_can_access_content: true })).toContain("vault");
      expect(await listed(steward, {})).not.toContain("vault");
      expect(await listed(alice, { include_all: true })).not.toContain("vault");
      const never = (await eventQueue(server, steward, ["subscription"])).state.never_subscribed.map((s: any) => s.name);
      expect(never).toContain("vault");

      const [stewardQueue, aliceQueue, bobQueue, keeperQueue] = await Promise.all([steward, alice, bob, keeper].map((u) => eventQueue(server, u, ["subscription", "stream"])));
      ok(await subscribe(owner, { subscriptions: [{ name: "vault" }], principals: [bob.id] }));
      expect((await stewardQueue.events()).filter((e) => e.op === "peer_add")).toEqual([expect.objectContaining({ stream_ids: [vault], user_ids: [bob.id] })]);
      expect((await aliceQueue.events()).some((e) => e.stream_ids?.includes(vault) || e.streams?.some((x: any) => x.stream_id === vault))).toBe(false);
      expect((await bobQueue.events()).some((e) => e.type === "stream" && e.op === "create")).toBe(true);

      // Already seeing the channel, the steward gets no stream create on joining it, nor stream delete on leaving.
      ok(await subscribe(steward, { subscriptions: [{ name: "vault" }] }));
      ok(await unsubscribe(steward, { subscriptions: ["vault"] }));
      const stewardOps = (await stewardQueue.events()).map((e) => `${e.type}:${e.op}`);
      expect(stewardOps).toEqual(expect.arrayContaining(["subscription:add", "subscription:remove"]));
      expect(stewardOps.filter((op) => op.startsWith("stream:"))).toEqual([]);

      // Granting metadata access by a channel setting is a stream create for the newcomer; taking it back, a delete.
      const patch = (params: Record<string, unknown>) => api(server, "PATCH", `/streams/${vault}`, { as: owner, params, template: "/streams/{stream_id}" });
      ok(await patch({ can_administer_channel_group: { new: { direct_members: [owner.id, keeper.id], direct_subgroups: [] } } }));
      expect((await keeperQueue.events()).filter((e) => e.type === "stream").map((e) => e.op)).toEqual(["create"]);
      expect(await listed(keeper, { include_all: true })).toContain("vault");
      expect(await listed(keeper, { include_can_access_content: true })).not.toContain("vault");
      ok(await patch({ can_administer_channel_group: { new: { direct_members: [owner.id], direct_subgroups: [] } } }));
      expect((await keeperQueue.events()).filter((e) => e.type === "stream").map((e) => e.op)).toEqual(["create", "delete"]);
    });
  });

  describe("register", () => {
    it("lists unsubscribed and never subscribed channels", async () => {
      const dave = await createUser(server, "dave@example.com");
      ok(await subscribe(dave, { subscriptions: [{ name: "been-there" }] }));
      ok(await unsubscribe(dave, { subscriptions: ["been-there"] }));
      const state = (await eventQueue(server, dave, ["subscription"])).state;
      expect(state.subscriptions).toEqual([]);
      expect(state.unsubscribed.map((s: any) => s.name)).toEqual(["been-there"]);
      const never = state.never_subscribed.map((s: any) => s.name);
      expect(never).toContain("forever");
      expect(never).not.toContain("been-there");
      expect(never).not.toContain("inner");
      // Administrators see every channel's metadata.
      const adminState = (await eventQueue(server, admin, ["subscription"])).state;
      expect(adminState.never_subscribed.map((s: any) => s.name)).toContain("inner");
    });
  });
});
