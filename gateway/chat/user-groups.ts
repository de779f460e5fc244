/**
 * User groups beyond creating and listing them: PATCH /user_groups/{user_group_id} (name, description, permission
 * settings), POST
 * /user_groups/{user_group_id}/deactivate, POST and
 * GET /user_groups/{user_group_id}/members, GET /user_groups/{user_group_id}/members/{user_id}, POST and GET
 * /user_groups/{user_group_id}/subgroups. Changes are realm actor turns (group-changes.ts), which check the
 * caller's permissions against the group's settings; the reads need only a member of the realm.
 */
import { errors } from "../../runtime/errors.ts";
import { GROUP_PERMISSIONS, ROLE } from "../../actors/chat/organization/groups.ts";
import { groupMemberIds, subgroupIds } from "../../actors/chat/organization/group-changes.ts";
import { userInRealm } from "../../actors/chat/reads/users.ts";
import { askRealm, type Call, type RouteSpec } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";

const IdList = { type: "array", items: Id } as const;
const GroupId = { user_group_id: Id };
/** Zulip's GroupSettingChangeRequest: `{"new": value, "old": value}`, each a group id or `{direct_members, direct_subgroups}`. */
const GroupSettingValue = { anyOf: [Id, { type: "object" }] };
const GroupSettingChange = { type: "object", properties: { new: GroupSettingValue, old: GroupSettingValue }, required: ["new"], additionalProperties: false };

/** Zulip's require_member_or_admin. */
function refuseGuests(call: Call): void {
  if (call.user.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
}

export const userGroupRoutes: RouteSpec[] = [
  {
    method: "PATCH",
    path: "/user_groups/{user_group_id}",
    params: {
      type: "object",
      properties: { ...GroupId, name: Str, description: Str, ...Object.fromEntries(GROUP_PERMISSIONS.map((s) => [s, GroupSettingChange])) },
      required: ["user_group_id"],
    },
    async handle(call) {
      const { params } = call;
      const settings = Object.fromEntries(GROUP_PERMISSIONS.filter((s) => params[s] !== undefined).map((s) => [s, params[s]]));
      return askRealm(call, { op: "updateGroup", groupId: params.user_group_id, name: params.name, description: params.description, settings });
    },
  },
  {
    method: "POST",
    path: "/user_groups/{user_group_id}/members",
    params: { type: "object", properties: { ...GroupId, add: IdList, delete: IdList, add_subgroups: IdList, delete_subgroups: IdList }, required: ["user_group_id"] },
    async handle(call) {
      const { params } = call;
      return askRealm(call, {
        op: "changeGroupMembership",
        groupId: params.user_group_id,
        add: params.add ?? [],
        delete: params.delete ?? [],
        addSubgroups: params.add_subgroups ?? [],
        deleteSubgroups: params.delete_subgroups ?? [],
      });
    },
  },
  {
    method: "POST",
    path: "/user_groups/{user_group_id}/subgroups",
    params: { type: "object", properties: { ...GroupId, add: IdList, delete: IdList }, required: ["user_group_id"] },
    async handle(call) {
      const { params } = call;
      if (!params.add?.length && !params.delete?.length) throw errors.badRequest('Nothing to do. Specify at least one of "add" or "delete".');
      return askRealm(call, { op: "changeGroupMembership", groupId: params.user_group_id, add: [], delete: [], addSubgroups: params.add ?? [], deleteSubgroups: params.delete ?? [] });
    },
  },
  {
    method: "POST",
    path: "/user_groups/{user_group_id}/deactivate",
    params: { type: "object", properties: GroupId, required: ["user_group_id"] },
    async handle(call) {
      return askRealm(call, { op: "deactivateGroup", groupId: call.params.user_group_id });
    },
  },
  {
    method: "GET",
    path: "/user_groups/{user_group_id}/members",
    params: { type: "object", properties: { ...GroupId, direct_member_only: { ...Bool, default: false } }, required: ["user_group_id"] },
    async handle(call) {
      refuseGuests(call);
      const { params, user, services } = call;
      return { members: await groupMemberIds(services.store.db, user.realm_id, params.user_group_id, params.direct_member_only) };
    },
  },
  {
    method: "GET",
    path: "/user_groups/{user_group_id}/members/{user_id}",
    params: { type: "object", properties: { ...GroupId, user_id: Id, direct_member_only: { ...Bool, default: false } }, required: ["user_group_id", "user_id"] },
    async handle(call) {
      refuseGuests(call);
      const { params, user, services } = call;
      const members = await groupMemberIds(services.store.db, user.realm_id, params.user_group_id, params.direct_member_only);
      if (!(await userInRealm(services.store.db, user.realm_id, params.user_id))) throw errors.badRequest("No such user");
      return { is_user_group_member: members.includes(params.user_id) };
    },
  },
  {
    method: "GET",
    path: "/user_groups/{user_group_id}/subgroups",
    params: { type: "object", properties: { ...GroupId, direct_subgroup_only: { ...Bool, default: false } }, required: ["user_group_id"] },
    async handle(call) {
      refuseGuests(call);
      const { params, user, services } = call;
      return { subgroups: await subgroupIds(services.store.db, user.realm_id, params.user_group_id, params.direct_subgroup_only) };
    },
  },
];
