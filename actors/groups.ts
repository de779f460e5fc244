/**
 * User groups: the system groups every realm has, and group-setting values (a group id, or
 * `{direct_members, direct_subgroups}`) as Zulip's permission settings take them.
 */
import type { Kysely, Transaction } from "kysely";
import type { Database } from "../runtime/store/schema.ts";

/** Organization roles, as Zulip numbers them. */
export const ROLE = { owner: 100, administrator: 200, moderator: 300, member: 400, guest: 600 } as const;

export type GroupSettingValue = number | { direct_members: number[]; direct_subgroups: number[] };

/** System groups, each containing the one before it (owners ⊂ administrators ⊂ … ⊂ internet); nobody is alone. */
const NESTED = ["role:owners", "role:administrators", "role:moderators", "role:fullmembers", "role:members", "role:everyone", "role:internet"];
const DESCRIPTIONS: Record<string, string> = {
  "role:owners": "Owners of this organization",
  "role:administrators": "Administrators of this organization, including owners",
  "role:moderators": "Moderators of this organization, including administrators",
  "role:fullmembers": "Members of this organization, not including new accounts and guests",
  "role:members": "Members of this organization, not including guests",
  "role:everyone": "Everyone in this organization, including guests",
  "role:internet": "Everyone on the Internet",
  "role:nobody": "Nobody",
};

export type SystemGroups = Map<string, number>;

export async function createSystemGroups(trx: Transaction<Database>, realmId: number): Promise<SystemGroups> {
  const groups: SystemGroups = new Map();
  for (const name of [...NESTED, "role:nobody"]) {
    const row = await trx
      .insertInto("user_groups")
      .values({ realm_id: realmId, name, description: DESCRIPTIONS[name]!, is_system_group: true, deactivated: false, creator_id: null, date_created: null, settings: "{}" })
      .returning("id")
      .executeTakeFirstOrThrow();
    groups.set(name, row.id);
  }
  for (let i = 1; i < NESTED.length; i++) {
    await trx.insertInto("user_group_subgroups").values({ group_id: groups.get(NESTED[i]!)!, subgroup_id: groups.get(NESTED[i - 1]!)! }).execute();
  }
  return groups;
}

export async function systemGroups(db: Kysely<Database> | Transaction<Database>, realmId: number): Promise<SystemGroups> {
  const rows = await db.selectFrom("user_groups").select(["id", "name"]).where("realm_id", "=", realmId).where("is_system_group", "=", true).execute();
  return new Map(rows.map((r) => [r.name, r.id]));
}

/** The system groups a user of this role is a direct member of. */
export function roleGroups(role: number): string[] {
  switch (role) {
    case 100:
      return ["role:owners"];
    case 200:
      return ["role:administrators"];
    case 300:
      return ["role:moderators"];
    case 600:
      return ["role:everyone"];
    default:
      return ["role:members", "role:fullmembers"];
  }
}

export async function addToRoleGroups(trx: Transaction<Database>, realmId: number, userId: number, role: number): Promise<void> {
  const groups = await systemGroups(trx, realmId);
  const values = roleGroups(role).map((name) => ({ group_id: groups.get(name)!, user_id: userId }));
  await trx.insertInto("user_group_members").values(values).execute();
}

/** Zulip's defaults for a new channel's permission settings. */
export function channelPermissionDefaults(groups: SystemGroups, creatorId: number | null): Record<string, GroupSettingValue> {
  const id = (name: string) => groups.get(name)!;
  return {
    can_add_subscribers_group: { direct_members: [], direct_subgroups: [] },
    can_administer_channel_group: { direct_members: creatorId ? [creatorId] : [], direct_subgroups: [] },
    can_delete_any_message_group: { direct_members: [], direct_subgroups: [] },
    can_delete_own_message_group: id("role:everyone"),
    can_move_messages_out_of_channel_group: { direct_members: [], direct_subgroups: [] },
    can_move_messages_within_channel_group: { direct_members: [], direct_subgroups: [] },
    can_remove_subscribers_group: id("role:administrators"),
    can_resolve_topics_group: { direct_members: [], direct_subgroups: [] },
    can_send_message_group: id("role:everyone"),
    can_subscribe_group: { direct_members: [], direct_subgroups: [] },
  };
}

const GROUP_PERMISSIONS = [
  "can_add_members_group",
  "can_join_group",
  "can_leave_group",
  "can_manage_group",
  "can_mention_group",
  "can_remove_members_group",
] as const;

/** Zulip's user group objects (`realm_user_groups` in /register, GET /user_groups). */
export async function userGroupObjects(db: Kysely<Database>, realmId: number) {
  const groups = await db.selectFrom("user_groups").selectAll().where("realm_id", "=", realmId).orderBy("id").execute();
  const ids = groups.map((g) => g.id);
  const [members, subgroups] = ids.length
    ? await Promise.all([
        db.selectFrom("user_group_members").select(["group_id", "user_id"]).where("group_id", "in", ids).orderBy("user_id").execute(),
        db.selectFrom("user_group_subgroups").select(["group_id", "subgroup_id"]).where("group_id", "in", ids).orderBy("subgroup_id").execute(),
      ])
    : [[], []];
  const nobody = groups.find((g) => g.is_system_group && g.name === "role:nobody")?.id;
  return groups.map((g) => {
    const settings = (g.settings ?? {}) as Record<string, GroupSettingValue>;
    return {
      id: g.id,
      name: g.name,
      description: g.description,
      date_created: g.date_created,
      creator_id: g.creator_id,
      members: members.filter((m) => m.group_id === g.id).map((m) => m.user_id),
      direct_subgroup_ids: subgroups.filter((s) => s.group_id === g.id).map((s) => s.subgroup_id),
      is_system_group: g.is_system_group,
      deactivated: g.deactivated,
      ...Object.fromEntries(GROUP_PERMISSIONS.map((p) => [p, settings[p] ?? nobody])),
    };
  });
}

/** The channel permission settings a request may set, and whether Zulip lets each be "role:everyone". */
export const CHANNEL_GROUP_SETTINGS: Record<string, { allowEveryone: boolean }> = {
  can_add_subscribers_group: { allowEveryone: false },
  can_administer_channel_group: { allowEveryone: false },
  can_delete_any_message_group: { allowEveryone: false },
  can_delete_own_message_group: { allowEveryone: true },
  can_move_messages_out_of_channel_group: { allowEveryone: false },
  can_move_messages_within_channel_group: { allowEveryone: false },
  can_remove_subscribers_group: { allowEveryone: false },
  can_resolve_topics_group: { allowEveryone: true },
  can_send_message_group: { allowEveryone: true },
  can_subscribe_group: { allowEveryone: false },
};

/**
 * A group-setting value from a request, checked as Zulip checks it (zerver/lib/user_groups.py): groups and users
 * of this realm, never "role:internet", "role:everyone" only where the setting allows it. `{direct_members: [],
 * direct_subgroups: [g]}` is the group g itself. Returns the value to store, or the error message.
 */
export async function checkGroupSettingValue(db: Kysely<Database>, realmId: number, setting: string, value: GroupSettingValue): Promise<GroupSettingValue | string> {
  const groupIds = typeof value === "number" ? [value] : value.direct_subgroups;
  const userIds = typeof value === "number" ? [] : value.direct_members;
  const groups = groupIds.length ? await db.selectFrom("user_groups").select(["id", "name", "is_system_group", "deactivated"]).where("realm_id", "=", realmId).where("id", "in", groupIds).execute() : [];
  for (const id of groupIds) {
    const group = groups.find((g) => g.id === id);
    if (!group) return typeof value === "number" ? "Invalid user group" : `Invalid user group ID: ${id}`;
    if (group.deactivated) return "User group is deactivated.";
    const forbidden = group.is_system_group && (group.name === "role:internet" || (group.name === "role:everyone" && !CHANNEL_GROUP_SETTINGS[setting]!.allowEveryone));
    if (forbidden) return `'${setting}' setting cannot be set to '${group.name}' group.`;
  }
  if (userIds.length) {
    const users = await db.selectFrom("users").select("id").where("realm_id", "=", realmId).where("is_active", "=", true).where("id", "in", userIds).execute();
    const missing = userIds.find((id) => !users.some((u) => u.id === id));
    if (missing !== undefined) return `Invalid user ID: ${missing}`;
  }
  if (typeof value !== "number" && !value.direct_members.length && value.direct_subgroups.length === 1) return value.direct_subgroups[0]!;
  return value;
}
