/**
 * User groups: the system groups every realm has, and group-setting values (a group id, or
 * `{direct_members, direct_subgroups}`) as Zulip's permission settings take them.
 */
import { sql, type Kysely, type Transaction } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database> | Transaction<Database>;

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

/** Move a user between the role groups of two roles; returns the group ids they left and joined. */
export async function moveRoleGroups(trx: Transaction<Database>, realmId: number, userId: number, from: number, to: number) {
  const groups = await systemGroups(trx, realmId);
  const before = roleGroups(from).map((n) => groups.get(n)!);
  const after = roleGroups(to).map((n) => groups.get(n)!);
  const left = before.filter((g) => !after.includes(g));
  const joined = after.filter((g) => !before.includes(g));
  if (left.length) await trx.deleteFrom("user_group_members").where("user_id", "=", userId).where("group_id", "in", left).execute();
  if (joined.length) await trx.insertInto("user_group_members").values(joined.map((group_id) => ({ group_id, user_id: userId }))).execute();
  return { left, joined };
}

/**
 * Whether the user belongs to a group-setting value (a group id, or `{direct_members, direct_subgroups}`):
 * direct members, or members of the groups reached through subgroups, recursively. Every permission check on a
 * group setting goes through here.
 */
export async function inGroupSetting(db: DB, value: GroupSettingValue | undefined, userId: number): Promise<boolean> {
  if (value === undefined || value === null) return false;
  let roots: number[];
  if (typeof value === "number") roots = [value];
  else {
    if (value.direct_members.includes(userId)) return true;
    roots = value.direct_subgroups;
  }
  if (!roots.length) return false;
  const { rows } = await sql<{ ok: number }>`
    with recursive g(id) as (
      select unnest(${sql.val(roots)}::int[])
      union select s.subgroup_id from user_group_subgroups s join g on s.group_id = g.id
    )
    select 1 as ok from user_group_members where user_id = ${userId} and group_id in (select id from g) limit 1`.execute(db);
  return rows.length > 0;
}

/** Everyone a group-setting value reaches: its direct members and the members of its subgroups, recursively. */
export async function groupSettingMembers(db: DB, value: GroupSettingValue | undefined): Promise<number[]> {
  if (value === undefined || value === null) return [];
  const direct = typeof value === "number" ? [] : value.direct_members;
  const roots = typeof value === "number" ? [value] : value.direct_subgroups;
  if (!roots.length) return direct;
  const { rows } = await sql<{ user_id: number }>`
    with recursive g(id) as (
      select unnest(${sql.val(roots)}::int[])
      union select s.subgroup_id from user_group_subgroups s join g on s.group_id = g.id
    )
    select distinct user_id from user_group_members where group_id in (select id from g)`.execute(db);
  return [...new Set([...direct, ...rows.map((r) => r.user_id)])];
}

/** The groups the user belongs to, directly or as a member of a subgroup (Zulip's get_recursive_membership_groups). */
export async function userGroupIds(db: DB, userId: number): Promise<Set<number>> {
  const { rows } = await sql<{ id: number }>`
    with recursive g(id) as (
      select group_id from user_group_members where user_id = ${userId}
      union select s.group_id from user_group_subgroups s join g on s.subgroup_id = g.id
    )
    select id from g`.execute(db);
  return new Set(rows.map((r) => r.id));
}

/** inGroupSetting for a user whose groups (userGroupIds) are already known: no query per setting. */
export function inGroupSettingOf(value: GroupSettingValue | undefined, userId: number, groups: Set<number>): boolean {
  if (value === undefined || value === null) return false;
  if (typeof value === "number") return groups.has(value);
  return value.direct_members.includes(userId) || value.direct_subgroups.some((g) => groups.has(g));
}

/** The channel settings whose members see a private channel's metadata, and those whose members may also read it. */
export const METADATA_ACCESS_SETTINGS = ["can_administer_channel_group", "can_add_subscribers_group", "can_subscribe_group"];
export const CONTENT_ACCESS_SETTINGS = ["can_add_subscribers_group", "can_subscribe_group"];

/** Which system groups a group setting may not name (Zulip's GroupPermissionSetting flags). */
export interface GroupSettingRule {
  /** role:everyone allowed (role:internet never is). */
  everyone: boolean;
  /** role:nobody (and the empty value) allowed. */
  nobody: boolean;
  /** Further system groups refused. */
  forbidden?: string[];
  /** Only these system groups are allowed, and nothing else. */
  onlySystem?: string[];
}

/**
 * Check a group-setting value from a client against the realm and the setting's rule, and return it in Zulip's
 * canonical form: an anonymous value that is one subgroup and no members is that group's id, and an empty one is
 * role:nobody.
 */
export async function checkGroupSetting(db: DB, realmId: number, setting: string, value: unknown, rule: GroupSettingRule): Promise<GroupSettingValue> {
  const groups = await db.selectFrom("user_groups").select(["id", "name", "is_system_group", "deactivated"]).where("realm_id", "=", realmId).execute();
  const byId = new Map(groups.map((g) => [g.id, g]));
  const system = (id: number) => (byId.get(id)?.is_system_group ? byId.get(id)!.name : undefined);
  const nobody = groups.find((g) => g.is_system_group && g.name === "role:nobody")!.id;
  let canonical: GroupSettingValue;
  if (typeof value === "number" && Number.isSafeInteger(value)) {
    canonical = value;
  } else if (isAnonymousValue(value)) {
    const members = [...new Set(value.direct_members)].sort((a, b) => a - b);
    const subgroups = [...new Set(value.direct_subgroups)].sort((a, b) => a - b);
    await checkActiveUsers(db, realmId, members);
    if (!members.length && subgroups.length === 1) canonical = subgroups[0]!;
    else if (!members.length && !subgroups.length) canonical = nobody;
    else canonical = { direct_members: members, direct_subgroups: subgroups };
  } else {
    throw errors.badRequest(`Invalid ${setting}`);
  }
  const named = typeof canonical === "number" ? [canonical] : canonical.direct_subgroups;
  for (const id of named) {
    const group = byId.get(id);
    // Zulip's two messages: one for a group named as the whole value, one for a subgroup of an anonymous value.
    if (!group) throw errors.badRequest(typeof value === "number" ? "Invalid user group" : `Invalid user group ID: ${id}`);
    if (group.deactivated) throw errors.badRequest("User group is deactivated.");
  }
  const refuse = (name: string) => errors.badRequest(`'${setting}' setting cannot be set to '${name}' group.`);
  if (rule.onlySystem) {
    const name = typeof canonical === "number" ? system(canonical) : undefined;
    if (!name || !rule.onlySystem.includes(name)) throw errors.badRequest(`'${setting}' must be a system user group.`);
  }
  const forbidden = ["role:internet", ...(rule.everyone ? [] : ["role:everyone"]), ...(rule.nobody ? [] : ["role:nobody"]), ...(rule.forbidden ?? [])];
  for (const id of named) {
    const name = system(id);
    if (name && forbidden.includes(name)) throw refuse(name);
  }
  return canonical;
}

/** Zulip's error for the first id that is not an active user of the realm. */
export async function checkActiveUsers(db: DB, realmId: number, userIds: number[]): Promise<void> {
  if (!userIds.length) return;
  const found = new Set((await db.selectFrom("users").select("id").where("realm_id", "=", realmId).where("is_active", "=", true).where("id", "in", userIds).execute()).map((u) => u.id));
  const missing = userIds.find((id) => !found.has(id));
  if (missing !== undefined) throw errors.badRequest(`Invalid user ID: ${missing}`);
}

function isAnonymousValue(v: unknown): v is { direct_members: number[]; direct_subgroups: number[] } {
  if (!v || typeof v !== "object" || Array.isArray(v)) return false;
  const o = v as Record<string, unknown>;
  const ids = (x: unknown) => Array.isArray(x) && x.every((n) => typeof n === "number" && Number.isSafeInteger(n) && n >= 0);
  return Object.keys(o).every((k) => k === "direct_members" || k === "direct_subgroups") && ids(o.direct_members) && ids(o.direct_subgroups);
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

export const GROUP_PERMISSIONS = [
  "can_add_members_group",
  "can_join_group",
  "can_leave_group",
  "can_manage_group",
  "can_mention_group",
  "can_remove_members_group",
] as const;

/** Zulip's user group objects (`realm_user_groups` in /register, GET /user_groups). */
export async function userGroupObjects(db: Kysely<Database>, realmId: number, onlyIds?: number[]) {
  let query = db.selectFrom("user_groups").selectAll().where("realm_id", "=", realmId);
  if (onlyIds) query = query.where("id", "in", onlyIds);
  const groups = await query.orderBy("id").execute();
  const ids = groups.map((g) => g.id);
  const [members, subgroups] = ids.length
    ? await Promise.all([
        db.selectFrom("user_group_members").select(["group_id", "user_id"]).where("group_id", "in", ids).orderBy("user_id").execute(),
        db.selectFrom("user_group_subgroups").select(["group_id", "subgroup_id"]).where("group_id", "in", ids).orderBy("subgroup_id").execute(),
      ])
    : [[], []];
  const nobody = (await systemGroups(db, realmId)).get("role:nobody");
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

/** How a channel's group setting is checked: role:everyone only where Zulip allows it, role:nobody always. */
export function channelSettingRule(setting: string): GroupSettingRule {
  return { everyone: CHANNEL_GROUP_SETTINGS[setting]!.allowEveryone, nobody: true };
}

