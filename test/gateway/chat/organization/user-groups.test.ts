/**
 * Changing user groups through a real server on both engines: name and description, members and subgroups with
 * Zulip's permission settings (can_manage_group, can_add_members_group, can_join_group, can_leave_group, the
 * realm's can_manage_all_groups), the membership reads, and the user_group events everyone in the realm gets.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";

describe.each(ENGINES)("user group changes on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let alice: User;
  let bob: User;
  let guest: User;
  let systemGroups: Map<string, number>;

  const { register, events } = messageApi(() => server);
  const create = async (as: Credentials, name: string, params: Record<string, unknown> = {}) => {
    const res = await api(server, "POST", "/user_groups/create", { as, params: { name, description: "", members: [], ...params } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.group_id as number;
  };
  const members = (as: Credentials, id: number, params: Record<string, unknown>) =>
    api(server, "POST", `/user_groups/${id}/members`, { as, params, template: "/user_groups/{user_group_id}/members" });
  const memberIds = async (id: number, directOnly = false) =>
    (await api(server, "GET", `/user_groups/${id}/members`, { as: alice, params: { direct_member_only: directOnly }, template: "/user_groups/{user_group_id}/members" })).body.members;

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    guest = await createUserWithRole(server, "guest@example.com", ROLE.guest, "Guest");
    const all = await api(server, "GET", "/user_groups", { as: owner });
    systemGroups = new Map(all.body.user_groups.map((g: { name: string; id: number }) => [g.name, g.id]));
  });
  afterAll(async () => server?.close());

  it("renames and describes a group its manager manages, with one event per property", async () => {
    const id = await create(alice, "backend");
    const queue = await register(bob, ["user_group"]);
    const patch = (as: Credentials, params: Record<string, unknown>) => api(server, "PATCH", `/user_groups/${id}`, { as, params, template: "/user_groups/{user_group_id}" });
    expect((await patch(alice, { name: "platform", description: "Servers" })).status).toBe(200);
    const updates = (await events(bob, queue)).filter((e) => e.type === "user_group");
    expect(updates.map(({ id: _, ...e }) => e)).toEqual([
      { type: "user_group", op: "update", group_id: id, data: { name: "platform" } },
      { type: "user_group", op: "update", group_id: id, data: { description: "Servers" } },
    ]);
    expect((await patch(bob, { name: "mine" })).body.msg).toBe("Insufficient permission");
    expect((await patch(alice, {})).body.msg).toBe("No new data supplied");
    expect((await patch(alice, { name: "role:x" })).body.msg).toBe("User group name cannot start with 'role:'.");
    await create(alice, "taken");
    expect((await patch(alice, { name: "taken" })).body.msg).toBe("User group 'taken' already exists.");
    // Permission settings, as Zulip's GroupSettingChangeRequest ({new, old}).
    const members = systemGroups.get("role:members")!;
    const everyone = systemGroups.get("role:everyone")!;
    expect((await patch(alice, { can_mention_group: { new: members, old: everyone } })).status).toBe(200);
    const mention = (await events(bob, queue)).filter((e) => e.type === "user_group").at(-1);
    expect(mention).toMatchObject({ op: "update", group_id: id, data: { can_mention_group: members } });
    expect((await patch(alice, { can_mention_group: { new: everyone, old: everyone } })).body.msg).toBe("'old' value does not match the expected value.");
    expect((await patch(alice, { can_manage_group: { new: everyone } })).body.msg).toBe("'can_manage_group' setting cannot be set to 'role:everyone' group.");
    expect((await patch(alice, { can_add_members_group: { new: { direct_members: [bob.id], direct_subgroups: [] } } })).status).toBe(200);
    const groups = (await api(server, "GET", "/user_groups", { as: bob })).body.user_groups;
    expect(groups.find((g: { id: number }) => g.id === id)).toMatchObject({ can_mention_group: members, can_add_members_group: { direct_members: [bob.id], direct_subgroups: [] } });
    // Administrators manage every group (the realm's can_manage_all_groups).
    expect((await patch(owner, { description: "Owned" })).status).toBe(200);
    const system = systemGroups.get("role:members")!;
    expect((await api(server, "PATCH", `/user_groups/${system}`, { as: owner, params: { name: "x" }, template: "/user_groups/{user_group_id}" })).body.msg).toBe("Insufficient permission");
  });

  it("adds and removes members with the group's permissions, and reads them back", async () => {
    const id = await create(alice, "frontend", { members: [alice.id] });
    const queue = await register(owner, ["user_group"]);
    expect((await members(alice, id, { add: [bob.id] })).status).toBe(200);
    expect(await memberIds(id)).toEqual([alice.id, bob.id]);
    const isMember = (user: number) =>
      api(server, "GET", `/user_groups/${id}/members/${user}`, { as: bob, template: "/user_groups/{user_group_id}/members/{user_id}" });
    expect((await isMember(bob.id)).body.is_user_group_member).toBe(true);
    expect((await isMember(owner.id)).body.is_user_group_member).toBe(false);
    expect((await members(alice, id, { add: [bob.id] })).body.msg).toBe(`User ${bob.id} is already a member of this group`);
    expect((await members(alice, id, { delete: [owner.id] })).body.msg).toBe(`There is no member '${owner.id}' in this user group`);
    expect((await members(alice, id, { add: [999999] })).body.msg).toBe("Invalid user ID: 999999");
    // Bob may not add others, and may leave (can_leave_group is everyone by default).
    expect((await members(bob, id, { add: [owner.id] })).body.msg).toBe("Insufficient permission");
    expect((await members(bob, id, { delete: [bob.id] })).status).toBe(200);
    // Nobody may join by default (can_join_group is nobody).
    expect((await members(bob, id, { add: [bob.id] })).body.msg).toBe("Insufficient permission");
    expect((await members(alice, id, {})).body.msg).toBe('Nothing to do. Specify at least one of "add", "delete", "add_subgroups" or "delete_subgroups".');
    const changes = (await events(owner, queue)).filter((e) => e.type === "user_group").map(({ id: _, ...e }) => e);
    expect(changes).toEqual([
      { type: "user_group", op: "add_members", group_id: id, user_ids: [bob.id] },
      { type: "user_group", op: "remove_members", group_id: id, user_ids: [bob.id] },
    ]);
    const guestRead = await api(server, "GET", `/user_groups/${id}/members`, { as: guest, template: "/user_groups/{user_group_id}/members" });
    expect(guestRead.body.msg).toBe("Not allowed for guest users");
  });

  it("adds and removes subgroups, refusing cycles, and counts their members as the group's", async () => {
    const outer = await create(alice, "outer", { members: [alice.id] });
    const inner = await create(alice, "inner", { members: [bob.id] });
    const queue = await register(bob, ["user_group"]);
    const subgroups = (as: Credentials, id: number, params: Record<string, unknown>) =>
      api(server, "POST", `/user_groups/${id}/subgroups`, { as, params, template: "/user_groups/{user_group_id}/subgroups" });
    expect((await subgroups(alice, outer, { add: [inner] })).status).toBe(200);
    expect(await memberIds(outer)).toEqual([alice.id, bob.id]);
    expect(await memberIds(outer, true)).toEqual([alice.id]);
    const listed = await api(server, "GET", `/user_groups/${outer}/subgroups`, { as: bob, template: "/user_groups/{user_group_id}/subgroups" });
    expect(listed.body.subgroups).toEqual([inner]);
    expect((await subgroups(alice, outer, { add: [inner] })).body.msg).toBe(`User group ${inner} is already a subgroup of this group.`);
    expect((await subgroups(alice, inner, { add: [outer] })).body.msg).toBe(`User group ${inner} is already a subgroup of one of the passed subgroups.`);
    expect((await subgroups(alice, outer, { add: [999999] })).body.msg).toBe("Invalid user group ID: 999999");
    expect((await subgroups(bob, outer, { delete: [inner] })).body.msg).toBe("Insufficient permission");
    expect((await members(alice, outer, { delete_subgroups: [inner] })).status).toBe(200);
    expect(await memberIds(outer)).toEqual([alice.id]);
    expect((await subgroups(alice, outer, { delete: [inner] })).body.msg).toBe(`User group ${inner} is not a subgroup of this group.`);
    const changes = (await events(bob, queue)).filter((e) => e.type === "user_group").map(({ id: _, ...e }) => e);
    expect(changes).toEqual([
      { type: "user_group", op: "add_subgroups", group_id: outer, direct_subgroup_ids: [inner] },
      { type: "user_group", op: "remove_subgroups", group_id: outer, direct_subgroup_ids: [inner] },
    ]);
  });

  it("deactivates a group nothing uses, and lists the uses of one in use", async () => {
    const deactivate = (as: Credentials, id: number) => api(server, "POST", `/user_groups/${id}/deactivate`, { as, template: "/user_groups/{user_group_id}/deactivate" });
    const part = await create(alice, "part");
    const whole = await create(alice, "whole", { subgroups: [part] });
    const mentioned = await create(alice, "mentioned");
    const mentioning = await create(alice, "mentioning", { can_mention_group: mentioned });
    const refused = await deactivate(alice, part);
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ code: "CANNOT_DEACTIVATE_GROUP_IN_USE", msg: "Cannot deactivate user group in use.", objections: [{ type: "subgroup", supergroup_ids: [whole] }] });
    expect((await deactivate(alice, mentioned)).body.objections).toEqual([{ type: "user_group", group_id: mentioning, settings: ["can_mention_group"] }]);
    expect((await deactivate(bob, whole)).body.msg).toBe("Insufficient permission");

    const modern = await register(bob, ["user_group"], { include_deactivated_groups: true });
    const legacy = await register(bob, ["user_group"]);
    expect((await deactivate(alice, whole)).status).toBe(200);
    expect((await events(bob, modern)).map(({ id: _, ...e }) => e)).toContainEqual({ type: "user_group", op: "update", group_id: whole, data: { deactivated: true } });
    expect((await events(bob, legacy)).map(({ id: _, ...e }) => e)).toContainEqual({ type: "user_group", op: "remove", group_id: whole });
    expect((await deactivate(alice, whole)).body.msg).toBe("User group is deactivated.");
    const registered = async (capabilities: Record<string, boolean>) =>
      (await api(server, "POST", "/register", { as: bob, params: { fetch_event_types: ["realm_user_groups"], client_capabilities: capabilities } })).body.realm_user_groups.map(
        (g: { id: number }) => g.id,
      );
    expect(await registered({})).not.toContain(whole);
    expect(await registered({ include_deactivated_groups: true })).toContain(whole);
    // Its subgroup is free now.
    expect((await deactivate(alice, part)).status).toBe(200);
  });
});
