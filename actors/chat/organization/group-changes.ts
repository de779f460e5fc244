/**
 * Changing user groups inside the realm actor (name, description, members, subgroups, deactivation) with Zulip's permission
 * rules (zerver/views/user_groups.py, zerver/lib/user_groups.py access_user_group_for_update), and the membership
 * reads (GET /user_groups/{id}/members, …/members/{user_id}, …/subgroups).
 *
 * Not done: Notification Bot's "added you to the group" direct messages, reactivation through PATCH.
 */
import { sql, type Kysely, type Transaction } from "kysely";
import type { ActorContext } from "../../../runtime/actor.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { checkActiveUsers, checkGroupSetting, GROUP_PERMISSIONS, inGroupSetting, ROLE, systemGroups, type GroupSettingValue } from "./groups.ts";
import { GROUP_SETTING_RULES, MAX_GROUP_NAME_LENGTH } from "./user-groups.ts";
import { realmSettings } from "../users/settings.ts";
import { REALM_SETTINGS } from "./realm-settings.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { ChangeGroupMembership, DeactivateGroup, GroupChangesProtocol, UpdateGroup } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database> | Transaction<Database>;

/** Zulip's get_user_group_by_id_in_realm: a group of the realm (deactivated ones only where allowed). */
async function groupInRealm(db: DB, realmId: number, groupId: number, allowDeactivated: boolean) {
  const group = await db.selectFrom("user_groups").selectAll().where("realm_id", "=", realmId).where("id", "=", groupId).executeTakeFirst();
  if (!group) throw errors.badRequest("Invalid user group");
  if (group.deactivated && !allowDeactivated) throw errors.badRequest("User group is deactivated.");
  return group;
}

/** The group ids reachable from these through subgroups, themselves included. */
async function recursiveSubgroups(db: DB, roots: number[]): Promise<number[]> {
  if (!roots.length) return [];
  const { rows } = await sql<{ id: number }>`
    with recursive g(id) as (
      select unnest(${sql.val(roots)}::int[])
      union select s.subgroup_id from user_group_subgroups s join g on s.group_id = g.id
    )
    select id from g order by id`.execute(db);
  return rows.map((r) => r.id);
}

/** GET /user_groups/{id}/members: direct members, or everyone through subgroups too (active users only). */
export async function groupMemberIds(db: Kysely<Database>, realmId: number, groupId: number, directOnly: boolean): Promise<number[]> {
  await groupInRealm(db, realmId, groupId, false);
  const groups = directOnly ? [groupId] : await recursiveSubgroups(db, [groupId]);
  const rows = await db
    .selectFrom("user_group_members")
    .innerJoin("users", "users.id", "user_group_members.user_id")
    .select("user_id")
    .distinct()
    .where("group_id", "in", groups)
    .where("users.is_active", "=", true)
    .orderBy("user_id")
    .execute();
  return rows.map((r) => r.user_id);
}

/** GET /user_groups/{id}/subgroups: direct subgroups, or every one reached through them. */
export async function subgroupIds(db: Kysely<Database>, realmId: number, groupId: number, directOnly: boolean): Promise<number[]> {
  await groupInRealm(db, realmId, groupId, false);
  const direct = (await db.selectFrom("user_group_subgroups").select("subgroup_id").where("group_id", "=", groupId).orderBy("subgroup_id").execute()).map((r) => r.subgroup_id);
  return directOnly ? direct : (await recursiveSubgroups(db, direct)).sort((a, b) => a - b);
}

/** Two canonical group-setting values (checkGroupSetting sorts an anonymous value's lists). */
function sameSetting(a: GroupSettingValue, b: GroupSettingValue): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export class GroupChanges {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: {
      actingUser(id: number): Promise<{ id: number; role: number }>;
      tellRealm(event: Record<string, unknown>): Promise<void>;
    },
  ) {}

  /** The group operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<GroupChangesProtocol, GroupChanges> = {
    updateGroup: (groups, msg) => groups.update(msg),
    changeGroupMembership: (groups, msg) => groups.changeMembership(msg),
    deactivateGroup: (groups, msg) => groups.deactivate(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  /** Zulip's require_member_or_admin. */
  private async member(actingId: number) {
    const acting = await this.realm.actingUser(actingId);
    if (acting.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
    return acting;
  }

  /**
   * Zulip's access_user_group_for_update: never a system group; those who may manage every group (the realm's
   * can_manage_all_groups) or this one (its can_manage_group) may do anything, others only what `setting` lets.
   */
  private async groupForUpdate(actingId: number, groupId: number, setting: (typeof GROUP_PERMISSIONS)[number]) {
    const group = await groupInRealm(this.db, this.realmId, groupId, true);
    if (group.is_system_group) throw errors.badRequest("Insufficient permission");
    const realm = await realmSettings(this.db, this.realmId);
    if (await inGroupSetting(this.db, realm.realm_can_manage_all_groups as GroupSettingValue, actingId)) return group;
    const settings = (group.settings ?? {}) as Record<string, GroupSettingValue>;
    const nobody = (await systemGroups(this.db, this.realmId)).get("role:nobody");
    for (const name of new Set(["can_manage_group", setting] as const)) {
      if (await inGroupSetting(this.db, settings[name] ?? nobody, actingId)) return group;
    }
    throw errors.badRequest("Insufficient permission");
  }

  /** For the caller alone, `selfSetting` (join, leave) also lets them; else `othersSetting` must. */
  private async groupForMembers(actingId: number, groupId: number, userIds: number[], selfSetting: "can_join_group" | "can_leave_group", othersSetting: "can_add_members_group" | "can_remove_members_group") {
    if (userIds.length === 1 && userIds[0] === actingId) {
      try {
        return await this.groupForUpdate(actingId, groupId, selfSetting);
      } catch {
        // Joining or leaving is also adding or removing anyone.
      }
    }
    return this.groupForUpdate(actingId, groupId, othersSetting);
  }

  /** PATCH /user_groups/{id}: name, description, permission settings. */
  private async update(msg: UpdateGroup): Promise<Record<string, never>> {
    await this.member(msg.actingId);
    if (msg.name === undefined && msg.description === undefined && !Object.keys(msg.settings).length) throw errors.badRequest("No new data supplied");
    const group = await this.groupForUpdate(msg.actingId, msg.groupId, "can_manage_group");
    const data: { name?: string; description?: string } = {};
    if (msg.name !== undefined && msg.name !== group.name) {
      const name = msg.name;
      if (!name.trim()) throw errors.badRequest("User group name can't be empty!");
      if (name.length > MAX_GROUP_NAME_LENGTH) throw errors.badRequest(`User group name cannot exceed ${MAX_GROUP_NAME_LENGTH} characters.`);
      for (const prefix of ["@", "role:", "user:", "stream:", "channel:"]) {
        if (name.startsWith(prefix)) throw errors.badRequest(`User group name cannot start with '${prefix}'.`);
      }
      const taken = await this.db.selectFrom("user_groups").select("id").where("realm_id", "=", this.realmId).where("name", "=", name).executeTakeFirst();
      if (taken) throw errors.badRequest(`User group '${name}' already exists.`);
      data.name = name;
    }
    if (msg.description !== undefined && msg.description !== group.description) data.description = msg.description;
    const current = (group.settings ?? {}) as Record<string, GroupSettingValue>;
    const changed = await this.settingChanges(current, msg.settings);
    if (!Object.keys(data).length && !Object.keys(changed).length) return {};
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .updateTable("user_groups")
        .set({ ...data, ...(Object.keys(changed).length ? { settings: JSON.stringify({ ...current, ...changed }) } : {}) })
        .where("id", "=", group.id)
        .execute(),
    );
    // Zulip sends one event per property changed.
    for (const [key, value] of Object.entries({ ...data, ...changed })) {
      await this.realm.tellRealm({ type: "user_group", op: "update", group_id: group.id, data: { [key]: value } });
    }
    return {};
  }

  /**
   * Zulip's validate_group_setting_value_change for each requested setting: the new value checked and made
   * canonical; `old`, when given, must be the current value. Returns the settings whose value changes.
   */
  private async settingChanges(current: Record<string, GroupSettingValue>, requested: UpdateGroup["settings"]): Promise<Record<string, GroupSettingValue>> {
    const nobody = (await systemGroups(this.db, this.realmId)).get("role:nobody")!;
    const changed: Record<string, GroupSettingValue> = {};
    for (const [name, change] of Object.entries(requested)) {
      const rule = GROUP_SETTING_RULES[name as (typeof GROUP_PERMISSIONS)[number]];
      const now = current[name] ?? nobody;
      if (change.old !== undefined && !sameSetting(now, await checkGroupSetting(this.db, this.realmId, name, change.old, rule))) {
        throw errors.badRequest("'old' value does not match the expected value.");
      }
      const next = await checkGroupSetting(this.db, this.realmId, name, change.new, rule);
      if (!sameSetting(now, next)) changed[name] = next;
    }
    return changed;
  }

  /** POST /user_groups/{id}/members and /subgroups: everything is checked, then written in one transaction. */
  private async changeMembership(msg: ChangeGroupMembership): Promise<Record<string, never>> {
    await this.member(msg.actingId);
    const { groupId } = msg;
    const add = [...new Set(msg.add)];
    const remove = [...new Set(msg.delete)];
    const addSubgroups = [...new Set(msg.addSubgroups)];
    const removeSubgroups = [...new Set(msg.deleteSubgroups)];
    const directMembers = async () => new Set((await this.db.selectFrom("user_group_members").select("user_id").where("group_id", "=", groupId).execute()).map((r) => r.user_id));
    const directSubgroups = async () => new Set((await this.db.selectFrom("user_group_subgroups").select("subgroup_id").where("group_id", "=", groupId).execute()).map((r) => r.subgroup_id));
    if (add.length) {
      await this.groupForMembers(msg.actingId, groupId, add, "can_join_group", "can_add_members_group");
      await checkActiveUsers(this.db, this.realmId, add);
      const members = await directMembers();
      const already = add.find((id) => members.has(id));
      if (already !== undefined) throw errors.badRequest(`User ${already} is already a member of this group`);
    }
    if (remove.length) {
      await checkActiveUsers(this.db, this.realmId, remove);
      await this.groupForMembers(msg.actingId, groupId, remove, "can_leave_group", "can_remove_members_group");
      const members = await directMembers();
      const absent = remove.find((id) => !members.has(id));
      if (absent !== undefined) throw errors.badRequest(`There is no member '${absent}' in this user group`);
    }
    if (addSubgroups.length) {
      await this.groupForUpdate(msg.actingId, groupId, "can_add_members_group");
      await this.checkGroupsExist(addSubgroups);
      const subgroups = await directSubgroups();
      const already = addSubgroups.find((id) => subgroups.has(id));
      if (already !== undefined) throw errors.badRequest(`User group ${already} is already a subgroup of this group.`);
      if ((await recursiveSubgroups(this.db, addSubgroups)).includes(groupId)) {
        throw errors.badRequest(`User group ${groupId} is already a subgroup of one of the passed subgroups.`);
      }
    }
    if (removeSubgroups.length) {
      await this.groupForUpdate(msg.actingId, groupId, "can_manage_group");
      await this.checkGroupsExist(removeSubgroups);
      const subgroups = await directSubgroups();
      const absent = removeSubgroups.find((id) => !subgroups.has(id));
      if (absent !== undefined) throw errors.badRequest(`User group ${absent} is not a subgroup of this group.`);
    }
    if (!add.length && !remove.length && !addSubgroups.length && !removeSubgroups.length) {
      throw errors.badRequest('Nothing to do. Specify at least one of "add", "delete", "add_subgroups" or "delete_subgroups".');
    }
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      if (add.length) await trx.insertInto("user_group_members").values(add.map((user_id) => ({ group_id: groupId, user_id }))).execute();
      if (remove.length) await trx.deleteFrom("user_group_members").where("group_id", "=", groupId).where("user_id", "in", remove).execute();
      if (addSubgroups.length) await trx.insertInto("user_group_subgroups").values(addSubgroups.map((subgroup_id) => ({ group_id: groupId, subgroup_id }))).execute();
      if (removeSubgroups.length) await trx.deleteFrom("user_group_subgroups").where("group_id", "=", groupId).where("subgroup_id", "in", removeSubgroups).execute();
    });
    const tell = (op: string, fields: Record<string, unknown>) => this.realm.tellRealm({ type: "user_group", op, group_id: groupId, ...fields });
    if (add.length) await tell("add_members", { user_ids: add });
    if (remove.length) await tell("remove_members", { user_ids: remove });
    if (addSubgroups.length) await tell("add_subgroups", { direct_subgroup_ids: addSubgroups });
    if (removeSubgroups.length) await tell("remove_subgroups", { direct_subgroup_ids: removeSubgroups });
    return {};
  }

  /**
   * Zulip's access_user_group_for_deactivation: a group still in use (a subgroup of an active group, or named by a
   * channel's, a group's or the realm's permission setting, directly or inside an anonymous value) stays, and the
   * error lists every use.
   */
  private async deactivate(msg: DeactivateGroup): Promise<Record<string, never>> {
    const group = await this.groupForUpdate(msg.actingId, msg.groupId, "can_manage_group");
    if (group.deactivated) throw errors.badRequest("User group is deactivated.");
    const uses = (value: unknown) =>
      value === group.id || (typeof value === "object" && value !== null && ((value as { direct_subgroups?: number[] }).direct_subgroups ?? []).includes(group.id));
    const settingsUsing = (settings: unknown, names?: Iterable<string>) =>
      Object.entries((settings ?? {}) as Record<string, unknown>)
        .filter(([name, value]) => (names ? [...names].includes(name) : name.endsWith("_group")) && uses(value))
        .map(([name]) => name);
    const objections: Array<Record<string, unknown>> = [];
    const supergroups = await this.db
      .selectFrom("user_group_subgroups")
      .innerJoin("user_groups", "user_groups.id", "user_group_subgroups.group_id")
      .select("user_groups.id")
      .where("user_group_subgroups.subgroup_id", "=", group.id)
      .where("user_groups.deactivated", "=", false)
      .orderBy("user_groups.id")
      .execute();
    if (supergroups.length) objections.push({ type: "subgroup", supergroup_ids: supergroups.map((g) => g.id) });
    for (const channel of await this.db.selectFrom("streams").select(["id", "settings"]).where("realm_id", "=", this.realmId).orderBy("id").execute()) {
      const settings = settingsUsing(channel.settings);
      if (settings.length) objections.push({ type: "channel", channel_id: channel.id, settings });
    }
    const groups = await this.db.selectFrom("user_groups").select(["id", "settings"]).where("realm_id", "=", this.realmId).where("deactivated", "=", false).orderBy("id").execute();
    for (const other of groups) {
      const settings = settingsUsing(other.settings, GROUP_PERMISSIONS);
      if (settings.length) objections.push({ type: "user_group", group_id: other.id, settings });
    }
    const realm = await realmSettings(this.db, this.realmId);
    const realmUses = Object.entries(REALM_SETTINGS)
      .filter(([name, rule]) => rule.kind === "group" && uses(realm[`realm_${name}`]))
      .map(([name]) => name);
    if (realmUses.length) objections.push({ type: "realm", settings: realmUses });
    if (objections.length) throw new ChorusError("CANNOT_DEACTIVATE_GROUP_IN_USE", "Cannot deactivate user group in use.", 400, { objections });
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("user_groups").set({ deactivated: true }).where("id", "=", group.id).execute());
    // Queues without the include_deactivated_groups capability get `remove` instead (the user actor's rendering).
    await this.realm.tellRealm({ type: "user_group", op: "update", group_id: group.id, data: { deactivated: true } });
    return {};
  }

  /** Zulip's lock_subgroups_with_respect_to_supergroup: every subgroup an active group of the realm. */
  private async checkGroupsExist(subgroups: number[]): Promise<void> {
    const found = new Set(
      (await this.db.selectFrom("user_groups").select("id").where("realm_id", "=", this.realmId).where("deactivated", "=", false).where("id", "in", subgroups).execute()).map((g) => g.id),
    );
    const missing = subgroups.find((id) => !found.has(id));
    if (missing !== undefined) throw errors.badRequest(`Invalid user group ID: ${missing}`);
  }
}
