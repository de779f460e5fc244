/**
 * POST /user_groups/create: who may create a group, how its name, members, subgroups and permission settings are
 * checked (zerver/views/user_groups.py, zerver/lib/user_groups.py), and the new group's rows.
 */
import { sql, type Kysely, type Transaction } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import { checkActiveUsers, checkGroupSetting, GROUP_PERMISSIONS, inGroupSetting, systemGroups, type GroupSettingRule, type GroupSettingValue } from "./groups.ts";
import { realmSettings } from "../users/settings.ts";
import type { CreateGroup } from "./realm.protocol.ts";
import type { Database } from "../../schema.ts";

export const MAX_GROUP_NAME_LENGTH = 100;
export const MAX_GROUP_DESCRIPTION_LENGTH = 1024;

/** What each group permission may not be set to (zulip.yaml, POST /user_groups/create). */
export const GROUP_SETTING_RULES: Record<(typeof GROUP_PERMISSIONS)[number], GroupSettingRule> = {
  can_add_members_group: { everyone: true, nobody: true },
  can_join_group: { everyone: true, nobody: true },
  can_leave_group: { everyone: true, nobody: true },
  can_manage_group: { everyone: false, nobody: true },
  can_mention_group: { everyone: true, nobody: true, forbidden: ["role:owners"] },
  can_remove_members_group: { everyone: true, nobody: true },
};

export interface NewGroup {
  name: string;
  description: string;
  members: number[];
  subgroups: number[];
  settings: Record<string, GroupSettingValue>;
}

/** Check a creation request; everything is checked before anything is written. */
export async function checkNewGroup(db: Kysely<Database>, realmId: number, actingId: number, msg: CreateGroup): Promise<NewGroup> {
  const rules = await realmSettings(db, realmId);
  if (!(await inGroupSetting(db, rules.realm_can_create_groups as GroupSettingValue, actingId))) throw errors.badRequest("Insufficient permission");
  const name = msg.name.trim();
  if (!name) throw errors.badRequest("User group name cannot be empty.");
  if (name.length > MAX_GROUP_NAME_LENGTH) throw errors.badRequest(`User group name cannot exceed ${MAX_GROUP_NAME_LENGTH} characters.`);
  if (name.startsWith("role:")) throw errors.badRequest("User group name cannot start with 'role:'.");
  if (msg.description.length > MAX_GROUP_DESCRIPTION_LENGTH) {
    throw errors.badRequest(`User group description cannot exceed ${MAX_GROUP_DESCRIPTION_LENGTH} characters.`);
  }
  const taken = await db.selectFrom("user_groups").select("id").where("realm_id", "=", realmId).where(sql`lower(name)`, "=", name.toLowerCase()).executeTakeFirst();
  if (taken) throw errors.badRequest(`User group '${name}' already exists.`);

  const members = [...new Set(msg.members)];
  await checkActiveUsers(db, realmId, members);
  const subgroups = [...new Set(msg.subgroups)];
  if (subgroups.length) {
    const found = new Set(
      (await db.selectFrom("user_groups").select("id").where("realm_id", "=", realmId).where("deactivated", "=", false).where("id", "in", subgroups).execute()).map((g) => g.id),
    );
    const missing = subgroups.find((id) => !found.has(id));
    if (missing !== undefined) throw errors.badRequest(`Invalid user group ID: ${missing}`);
  }

  const groups = await systemGroups(db, realmId);
  const creatorOnly = { direct_members: [actingId], direct_subgroups: [] };
  // Zulip's defaults for a new group: its creator manages it; everyone may mention it and leave it.
  const settings: Record<string, GroupSettingValue> = {
    can_add_members_group: creatorOnly,
    can_join_group: groups.get("role:nobody")!,
    can_leave_group: groups.get("role:everyone")!,
    can_manage_group: creatorOnly,
    can_mention_group: groups.get("role:everyone")!,
    can_remove_members_group: creatorOnly,
  };
  for (const setting of GROUP_PERMISSIONS) {
    if (msg.settings[setting] !== undefined) settings[setting] = await checkGroupSetting(db, realmId, setting, msg.settings[setting], GROUP_SETTING_RULES[setting]);
  }
  return { name, description: msg.description, members, subgroups, settings };
}

export async function insertGroup(trx: Transaction<Database>, realmId: number, creatorId: number, group: NewGroup): Promise<number> {
  const row = await trx
    .insertInto("user_groups")
    .values({
      realm_id: realmId,
      name: group.name,
      description: group.description,
      is_system_group: false,
      deactivated: false,
      creator_id: creatorId,
      date_created: Math.floor(Date.now() / 1000),
      settings: JSON.stringify(group.settings),
    })
    .returning("id")
    .executeTakeFirstOrThrow();
  if (group.members.length) await trx.insertInto("user_group_members").values(group.members.map((user_id) => ({ group_id: row.id, user_id }))).execute();
  if (group.subgroups.length) {
    await trx.insertInto("user_group_subgroups").values(group.subgroups.map((subgroup_id) => ({ group_id: row.id, subgroup_id }))).execute();
  }
  return row.id;
}
