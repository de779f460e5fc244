/** Running the organization on both engines: realm settings, roles and user groups, with their events. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("organization on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let admin: User;
  let member: User;
  let groups: Map<string, number>;

  // PATCH /realm is not in Zulip's OpenAPI description: its answers are checked here instead.
  const patchRealm = async (as: Credentials, params: Record<string, unknown>) => {
    const res = await api(server, "PATCH", "/realm", { as, params, validate: false });
    expect(res.body.result).toBe(res.status === 200 ? "success" : "error");
    return res;
  };
  const setRole = (as: Credentials, userId: number, role: number) => api(server, "PATCH", `/users/${userId}`, { as, params: { role }, template: "/users/{user_id}" });

  beforeAll(async () => {
    server = await startTestServer(engine);
    const me = await api(server, "GET", "/users/me", { as: server.owner });
    owner = { ...server.owner, id: me.body.user_id };
    admin = await createUser(server, "admin@example.com", "Ada");
    member = await createUser(server, "member@example.com", "Mo");
    expect((await setRole(owner, admin.id, 200)).status).toBe(200);
    const all = await api(server, "GET", "/user_groups", { as: owner });
    groups = new Map(all.body.user_groups.map((g: any) => [g.name, g.id]));
  });
  afterAll(async () => server?.close());

  describe("PATCH /realm", () => {
    it("changes settings, sends Zulip's realm events to everyone and shows them in register", async () => {
      const queue = await openQueue(server, member, ["realm"]);
      const res = await patchRealm(admin, {
        allow_message_editing: false,
        message_content_edit_limit_seconds: 3600,
        move_messages_within_stream_limit_seconds: "unlimited",
        can_resolve_topics_group: { new: groups.get("role:members") },
      });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        allow_message_editing: false,
        message_content_edit_limit_seconds: 3600,
        move_messages_within_stream_limit_seconds: null,
        can_resolve_topics_group: groups.get("role:members"),
      });
      expect(await queue.events()).toEqual([
        { type: "realm", op: "update_dict", property: "default", data: { allow_message_editing: false } },
        { type: "realm", op: "update_dict", property: "default", data: { message_content_edit_limit_seconds: 3600 } },
        { type: "realm", op: "update", property: "move_messages_within_stream_limit_seconds", value: null },
        { type: "realm", op: "update_dict", property: "default", data: { can_resolve_topics_group: groups.get("role:members") } },
      ]);
      const state = (await openQueue(server, member, ["realm"])).state;
      expect(state).toMatchObject({
        realm_allow_message_editing: false,
        realm_message_content_edit_limit_seconds: 3600,
        realm_move_messages_within_stream_limit_seconds: null,
        realm_can_resolve_topics_group: groups.get("role:members"),
      });
      // The same values again change nothing and announce nothing.
      const again = await openQueue(server, member, ["realm"]);
      expect((await patchRealm(admin, { allow_message_editing: false })).body).toEqual({ result: "success", msg: "" });
      expect(await again.events()).toEqual([]);
      await patchRealm(admin, { allow_message_editing: true });
    });

    it("sends the topics policy with its legacy mandatory_topics, and the channel actors obey it at once", async () => {
      await api(server, "POST", "/users/me/subscriptions", { as: member, params: { subscriptions: [{ name: "policy" }] } });
      const send = () => api(server, "POST", "/messages", { as: member, params: { type: "stream", to: "policy", topic: "", content: "hi" } });
      expect((await send()).status).toBe(200);
      const queue = await openQueue(server, member, ["realm"]);
      expect((await patchRealm(owner, { topics_policy: "disable_empty_topic" })).status).toBe(200);
      expect(await queue.events()).toEqual([
        { type: "realm", op: "update_dict", property: "default", data: { topics_policy: "disable_empty_topic", mandatory_topics: true } },
      ]);
      expect((await send()).status).toBe(400);
      expect((await openQueue(server, member, ["realm"])).state).toMatchObject({ realm_topics_policy: "disable_empty_topic", realm_mandatory_topics: true });
      await patchRealm(owner, { mandatory_topics: false });
      expect((await send()).status).toBe(200);
    });

    it("makes message rules follow the new settings", async () => {
      await api(server, "POST", "/users/me/subscriptions", { as: member, params: { subscriptions: [{ name: "edits" }] } });
      const sent = await api(server, "POST", "/messages", { as: member, params: { type: "stream", to: "edits", topic: "t", content: "first" } });
      const edit = (content: string) => api(server, "PATCH", `/messages/${sent.body.id}`, { as: member, params: { content }, template: "/messages/{message_id}" });
      await patchRealm(admin, { allow_message_editing: false });
      expect((await edit("second")).body.msg).toBe("Your organization has turned off message editing");
      await patchRealm(admin, { allow_message_editing: true });
      expect((await edit("third")).status).toBe(200);
    });

    it("makes a new move time limit apply to the next move", async () => {
      await api(server, "POST", "/users/me/subscriptions", { as: member, params: { subscriptions: [{ name: "moves" }] } });
      const sent = await api(server, "POST", "/messages", { as: member, params: { type: "stream", to: "moves", topic: "old", content: "from long ago" } });
      // Two hours old, as far as the limits are concerned.
      await server.node.store.db.updateTable("messages").set({ date_sent: Math.floor(Date.now() / 1000) - 7200 }).where("id", "=", sent.body.id).execute();
      const move = (topic: string) => api(server, "PATCH", `/messages/${sent.body.id}`, { as: member, params: { topic }, template: "/messages/{message_id}" });
      await patchRealm(admin, { move_messages_within_stream_limit_seconds: 3600 });
      expect((await move("newer")).body.msg).toBe("The time limit for editing this message's topic has passed");
      await patchRealm(admin, { move_messages_within_stream_limit_seconds: "unlimited" });
      expect((await move("newer")).status).toBe(200);
    });

    it("sets and clears the moderation request channel", async () => {
      const channel = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "moderation" }] } });
      expect(channel.status).toBe(200);
      const id = (await api(server, "GET", "/users/me/subscriptions", { as: owner })).body.subscriptions.find((s: any) => s.name === "moderation").stream_id;
      const queue = await openQueue(server, member, ["realm"]);
      expect((await patchRealm(admin, { moderation_request_channel_id: id })).status).toBe(200);
      expect((await patchRealm(admin, { moderation_request_channel_id: -1 })).status).toBe(200);
      expect(await queue.events()).toEqual([
        { type: "realm", op: "update", property: "moderation_request_channel_id", value: id },
        { type: "realm", op: "update", property: "moderation_request_channel_id", value: -1 },
      ]);
      expect((await patchRealm(admin, { moderation_request_channel_id: 99999 })).body.msg).toBe("Invalid channel ID");
    });

    it("refuses non-administrators, owner-only settings to administrators, and bad values", async () => {
      expect((await patchRealm(member, { allow_message_editing: false })).body.msg).toBe("Must be an organization administrator");
      expect((await patchRealm(admin, { can_create_groups: { new: groups.get("role:administrators") } })).body.msg).toBe("Must be an organization owner");
      const bad: Array<[Record<string, unknown>, string]> = [
        [{ message_content_edit_limit_seconds: 0 }, "Bad value for 'message_content_edit_limit_seconds': 0"],
        [{ move_messages_between_streams_limit_seconds: "forever" }, "Bad value for 'move_messages_between_streams_limit_seconds': forever"],
        [{ allow_message_editing: "maybe" }, "allow_message_editing is not a boolean"],
        [{ topics_policy: "sometimes" }, "Invalid topics_policy"],
        [{ can_resolve_topics_group: { new: groups.get("role:internet") } }, "'can_resolve_topics_group' setting cannot be set to 'role:internet' group."],
        [{ can_add_subscribers_group: { new: groups.get("role:everyone") } }, "'can_add_subscribers_group' setting cannot be set to 'role:everyone' group."],
        [{ can_resolve_topics_group: { new: 424242 } }, "Invalid user group"],
        [{ can_resolve_topics_group: { new: { direct_members: [424242], direct_subgroups: [] } } }, "Invalid user ID: 424242"],
        [{ can_resolve_topics_group: { new: { members: [] } } }, "Invalid can_resolve_topics_group"],
        [{ can_resolve_topics_group: { new: groups.get("role:members"), old: groups.get("role:owners") } }, "'old' value does not match the expected value."],
      ];
      for (const [params, msg] of bad) expect((await patchRealm(owner, params)).body.msg, JSON.stringify(params)).toBe(msg);
      // Zulip derives the empty topic's display name; it is no setting.
      expect((await patchRealm(owner, { empty_topic_display_name: "misc" })).body.ignored_parameters_unsupported).toEqual(["empty_topic_display_name"]);
    });

    it("canonicalises anonymous group settings", async () => {
      const res = await patchRealm(owner, {
        can_create_groups: { new: { direct_members: [member.id, member.id], direct_subgroups: [groups.get("role:administrators")] } },
        can_mention_many_users_group: { new: { direct_members: [], direct_subgroups: [groups.get("role:moderators")] } },
      });
      expect(res.body).toMatchObject({
        can_create_groups: { direct_members: [member.id], direct_subgroups: [groups.get("role:administrators")] },
        can_mention_many_users_group: groups.get("role:moderators"),
      });
      await patchRealm(owner, { can_create_groups: { new: groups.get("role:members") } });
    });
  });

  describe("PATCH /users/{user_id}", () => {
    it("changes a role, with realm_user and system group events", async () => {
      const target = await createUser(server, "promoted@example.com", "Pro");
      const queue = await openQueue(server, member, ["realm_user", "user_group"]);
      expect((await setRole(admin, target.id, 300)).status).toBe(200);
      expect(await queue.events()).toEqual([
        { type: "realm_user", op: "update", person: { user_id: target.id, role: 300 } },
        { type: "user_group", op: "remove_members", group_id: groups.get("role:members"), user_ids: [target.id] },
        { type: "user_group", op: "remove_members", group_id: groups.get("role:fullmembers"), user_ids: [target.id] },
        { type: "user_group", op: "add_members", group_id: groups.get("role:moderators"), user_ids: [target.id] },
      ]);
      const fetched = await api(server, "GET", `/users/${target.id}`, { as: member, template: "/users/{user_id}" });
      expect(fetched.body.user).toMatchObject({ role: 300, is_admin: false });
      const all = (await api(server, "GET", "/user_groups", { as: member })).body.user_groups;
      const moderators = all.find((g: any) => g.name === "role:moderators");
      expect(moderators.members).toContain(target.id);
      expect(all.find((g: any) => g.name === "role:members").members).not.toContain(target.id);
      // The new role applies to the next request at once.
      expect((await setRole(target, member.id, 300)).body.msg).toBe("Insufficient permission");
    });

    it("shows and hides channels as a role change opens or closes them, with stream create and delete", async () => {
      const target = await createUser(server, "climber@example.com", "Climber");
      const subscribe = (params: Record<string, unknown>) => api(server, "POST", "/users/me/subscriptions", { as: owner, params });
      expect((await subscribe({ subscriptions: [{ name: "open-plaza" }] })).status).toBe(200);
      expect((await subscribe({ subscriptions: [{ name: "back-office" }], invite_only: true })).status).toBe(200);
      const ids = new Map((await server.node.store.db.selectFrom("streams").select(["id", "name"]).execute()).map((r) => [r.name, r.id]));
      const queue = await openQueue(server, target, ["stream"]);
      const streamEvents = async () => (await queue.events()).map((e: any) => [e.op, (e.streams as any[]).map((x) => x.stream_id).filter((id) => id === ids.get("open-plaza") || id === ids.get("back-office"))]);
      expect((await setRole(owner, target.id, 600)).status).toBe(200);
      expect(await streamEvents()).toEqual([["delete", [ids.get("open-plaza")]]]);
      expect((await setRole(owner, target.id, 200)).status).toBe(200);
      expect((await streamEvents()).slice(1)).toEqual([["create", [ids.get("open-plaza"), ids.get("back-office")]]]);
      expect((await setRole(owner, target.id, 400)).status).toBe(200);
      expect((await streamEvents()).slice(2)).toEqual([["delete", [ids.get("back-office")]]]);
    });

    it("changes the full name", async () => {
      const queue = await openQueue(server, owner, ["realm_user"]);
      expect((await api(server, "PATCH", `/users/${member.id}`, { as: admin, params: { full_name: " Mo Renamed " }, template: "/users/{user_id}" })).status).toBe(200);
      expect(await queue.events()).toEqual([{ type: "realm_user", op: "update", person: { user_id: member.id, full_name: "Mo Renamed" } }]);
    });

    it("names the user by e-mail as well (PATCH /users/{email})", async () => {
      const queue = await openQueue(server, owner, ["realm_user"]);
      const byEmail = (email: string, params: Record<string, unknown>) => api(server, "PATCH", `/users/${encodeURIComponent(email)}`, { as: admin, params, template: "/users/{email}" });
      expect((await byEmail("MEMBER@example.com", { full_name: "Mo by Mail" })).status).toBe(200);
      expect(await queue.events()).toEqual([{ type: "realm_user", op: "update", person: { user_id: member.id, full_name: "Mo by Mail" } }]);
      const unknown = await byEmail("nobody@example.com", { full_name: "X" });
      expect([unknown.status, unknown.body.msg]).toEqual([400, "No such user"]);
      const asMember = await api(server, "PATCH", `/users/${encodeURIComponent(admin.email)}`, { as: member, params: { role: 400 }, template: "/users/{email}" });
      expect(asMember.body.msg).toBe("Insufficient permission");
    });

    it("follows Zulip's rules on who may change which role", async () => {
      expect((await setRole(member, admin.id, 400)).body.msg).toBe("Insufficient permission");
      expect((await setRole(admin, member.id, 100)).body.msg).toBe("Must be an organization owner");
      expect((await setRole(admin, owner.id, 200)).body.msg).toBe("Must be an organization owner");
      expect((await setRole(owner, owner.id, 200)).body.msg).toBe("The owner permission cannot be removed from the only organization owner.");
      expect((await setRole(owner, member.id, 250)).body.msg).toBe("Invalid role");
      expect((await setRole(owner, 424242, 400)).body.msg).toBe("No such user");
      const name = await api(server, "PATCH", `/users/${member.id}`, { as: owner, params: { full_name: "  " }, template: "/users/{user_id}" });
      expect(name.body.msg).toBe("Name too short!");
      // With a second owner, the first may step down.
      const second = await createUser(server, "second-owner@example.com", "Sec");
      expect((await setRole(owner, second.id, 100)).status).toBe(200);
      expect((await setRole(second, owner.id, 200)).status).toBe(200);
      expect((await setRole(second, owner.id, 100)).status).toBe(200);
    });
  });

  describe("POST /user_groups/create", () => {
    it("creates a group, announces it and lists it", async () => {
      const queue = await openQueue(server, member, ["user_group"]);
      const res = await api(server, "POST", "/user_groups/create", {
        as: member,
        params: { name: "backend", description: "Backend team", members: [member.id, admin.id], subgroups: [groups.get("role:moderators")], can_mention_group: groups.get("role:members") },
      });
      expect(res.status).toBe(200);
      const id = res.body.group_id;
      const expected = {
        id,
        name: "backend",
        description: "Backend team",
        members: [admin.id, member.id],
        direct_subgroup_ids: [groups.get("role:moderators")],
        creator_id: member.id,
        is_system_group: false,
        can_manage_group: { direct_members: [member.id], direct_subgroups: [] },
        can_mention_group: groups.get("role:members"),
        can_join_group: groups.get("role:nobody"),
        can_leave_group: groups.get("role:everyone"),
      };
      const events = await queue.events();
      expect(events).toEqual([{ type: "user_group", op: "add", group: expect.objectContaining(expected) }]);
      const listed = (await api(server, "GET", "/user_groups", { as: owner })).body.user_groups;
      expect(listed.find((g: any) => g.id === id)).toMatchObject(expected);
      expect((await openQueue(server, owner, ["realm_user_groups"])).state.realm_user_groups.find((g: any) => g.id === id)).toMatchObject(expected);
    });

    it("makes the group a permission that counts its subgroups' members", async () => {
      const moderator = await createUser(server, "moderator@example.com", "Mod");
      await setRole(owner, moderator.id, 300);
      const created = await api(server, "POST", "/user_groups/create", {
        as: owner,
        params: { name: "creators", description: "", members: [], subgroups: [groups.get("role:moderators")] },
      });
      await patchRealm(owner, { can_create_groups: { new: created.body.group_id } });
      const attempt = (as: Credentials, name: string) => api(server, "POST", "/user_groups/create", { as, params: { name, description: "", members: [] } });
      expect((await attempt(member, "not allowed")).body.msg).toBe("Insufficient permission");
      expect((await attempt(moderator, "allowed")).status).toBe(200);
      await patchRealm(owner, { can_create_groups: { new: groups.get("role:members") } });
    });

    it("refuses bad names, unknown members and forbidden settings", async () => {
      const create = (params: Record<string, unknown>) =>
        api(server, "POST", "/user_groups/create", { as: member, params: { name: "g", description: "", members: [], ...params } });
      await create({ name: "Frontend" });
      const bad: Array<[Record<string, unknown>, string]> = [
        [{ name: "frontend" }, "User group 'frontend' already exists."],
        [{ name: "role:mine" }, "User group name cannot start with 'role:'."],
        [{ name: " " }, "User group name cannot be empty."],
        [{ name: "x".repeat(101) }, "User group name cannot exceed 100 characters."],
        [{ members: [424242] }, "Invalid user ID: 424242"],
        [{ subgroups: [424242] }, "Invalid user group ID: 424242"],
        [{ can_manage_group: groups.get("role:everyone") }, "'can_manage_group' setting cannot be set to 'role:everyone' group."],
        [{ can_manage_group: groups.get("role:internet") }, "'can_manage_group' setting cannot be set to 'role:internet' group."],
        [{ can_mention_group: groups.get("role:owners") }, "'can_mention_group' setting cannot be set to 'role:owners' group."],
        [{ can_join_group: { direct_members: [424242], direct_subgroups: [] } }, "Invalid user ID: 424242"],
      ];
      for (const [params, msg] of bad) {
        const res = await create(params);
        expect(res.status, JSON.stringify(params)).toBe(400);
        expect(res.body.msg, JSON.stringify(params)).toBe(msg);
      }
      expect((await api(server, "POST", "/user_groups/create", { as: member, params: { name: "x", description: "" } })).body.code).toBe("REQUEST_VARIABLE_MISSING");
    });
  });
});
