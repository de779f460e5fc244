/**
 * PATCH /realm: the organization settings Chorus implements, how each is checked, who may change it, and the
 * event Zulip sends when it changes (zerver/views/realm.py, zerver/actions/realm_settings.py). Settings are stored
 * in realms.settings under their `realm_*` names, the names POST /register reports them by.
 *
 * `realm_empty_topic_display_name` is not among them: Zulip derives it on the server ("general chat") and has no
 * setting for it, so PATCH /realm lists it in `ignored_parameters_unsupported`.
 */
import type { Kysely } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import { checkGroupSetting, ROLE, type GroupSettingRule } from "./groups.ts";
import { isLanguageCode } from "../users/user-data.ts";
import type { Database } from "../../schema.ts";

type Rule =
  | { kind: "bool" }
  /** Seconds > 0, or "unlimited" (stored as null). */
  | { kind: "time-limit" }
  /** A channel of the realm, or -1 for none. */
  | { kind: "channel" }
  | { kind: "topics-policy" }
  /** A language code; the realm's messages are searched in its language (migration 2026-12-05T2100). */
  | { kind: "language" }
  | ({ kind: "group" } & GroupSettingRule);

const group = (everyone: boolean, extra: Partial<GroupSettingRule> = {}): Rule => ({ kind: "group", everyone, nobody: true, ...extra });

/** The settings PATCH /realm takes, by their parameter names. */
export const REALM_SETTINGS: Record<string, Rule> = {
  allow_message_editing: { kind: "bool" },
  message_content_edit_limit_seconds: { kind: "time-limit" },
  message_content_delete_limit_seconds: { kind: "time-limit" },
  move_messages_within_stream_limit_seconds: { kind: "time-limit" },
  move_messages_between_streams_limit_seconds: { kind: "time-limit" },
  moderation_request_channel_id: { kind: "channel" },
  topics_policy: { kind: "topics-policy" },
  /** Legacy form of topics_policy: true is disable_empty_topic. */
  mandatory_topics: { kind: "bool" },
  email_changes_disabled: { kind: "bool" },
  default_language: { kind: "language" },
  can_add_custom_emoji_group: group(false),
  can_add_subscribers_group: group(false),
  can_delete_any_message_group: group(false),
  can_delete_own_message_group: group(true),
  can_invite_users_group: group(false),
  create_multiuse_invite_group: group(false),
  can_mention_many_users_group: group(true),
  can_move_messages_between_channels_group: group(false),
  can_move_messages_between_topics_group: group(true),
  can_resolve_topics_group: group(true),
  can_set_delete_message_policy_group: group(false),
  can_set_topics_policy_group: group(true),
  can_create_groups: group(false),
  can_manage_all_groups: group(false, { nobody: false }),
  can_create_public_channel_group: group(false),
  can_create_private_channel_group: group(false),
  can_create_web_public_channel_group: group(false, { onlySystem: ["role:moderators", "role:administrators", "role:owners", "role:nobody"] }),
  can_access_all_users_group: group(true, { onlySystem: ["role:everyone", "role:members"] }),
  direct_message_initiator_group: group(true),
  direct_message_permission_group: group(true),
};

/** Administrators may change the others; these only owners (Zulip's update_realm). */
const OWNER_ONLY = new Set(["can_create_groups", "can_invite_users_group", "can_manage_all_groups", "create_multiuse_invite_group"]);

/** Zulip's realm topics policies (the channel-level ones add `inherit` and `empty_topic_only`). */
const TOPICS_POLICIES = ["allow_empty_topic", "disable_empty_topic"];

export interface RealmSettingsChange {
  /** `realm_*` keys to store. */
  stored: Record<string, unknown>;
  /** Zulip's events, in order. */
  events: Record<string, unknown>[];
  /** The response's fields: what changed, as Zulip answers. */
  data: Record<string, unknown>;
}

/**
 * Check a PATCH /realm request against the current settings (`current`: the `realm_*` values register reports)
 * and work out what to store and announce. Values equal to the current ones change nothing and send nothing.
 * Everything is checked before anything is stored: the request succeeds or fails as a whole.
 */
export async function planRealmSettings(
  db: Kysely<Database>,
  realmId: number,
  actingRole: number,
  current: Record<string, unknown>,
  request: Record<string, unknown>,
): Promise<RealmSettingsChange> {
  if (actingRole > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
  const change: RealmSettingsChange = { stored: {}, events: [], data: {} };
  const requested = Object.entries(request).filter(([name]) => name in REALM_SETTINGS);
  if (requested.some(([name]) => OWNER_ONLY.has(name)) && actingRole !== ROLE.owner) throw errors.badRequest("Must be an organization owner");
  for (const [name, raw] of requested) {
    const rule = REALM_SETTINGS[name]!;
    const key = `realm_${name}`;
    let value: unknown;
    switch (rule.kind) {
      case "bool":
        if (typeof raw !== "boolean") throw errors.badRequest(`${name} is not a boolean`);
        value = raw;
        break;
      case "time-limit":
        if (raw === "unlimited") value = null;
        else if (typeof raw === "number" && Number.isSafeInteger(raw) && raw > 0) value = raw;
        else throw errors.badRequest(`Bad value for '${name}': ${typeof raw === "string" ? raw : JSON.stringify(raw)}`);
        break;
      case "channel":
        if (typeof raw !== "number" || !Number.isSafeInteger(raw) || raw < -1) throw errors.badRequest(`Invalid ${name}`);
        if (raw >= 0) {
          const found = await db.selectFrom("streams").select("id").where("id", "=", raw).where("realm_id", "=", realmId).executeTakeFirst();
          if (!found) throw errors.badRequest("Invalid channel ID");
        }
        value = raw;
        break;
      case "topics-policy":
        if (typeof raw !== "string" || !TOPICS_POLICIES.includes(raw)) throw errors.badRequest(`Invalid ${name}`);
        value = raw;
        break;
      case "language":
        if (!isLanguageCode(raw)) throw errors.badRequest(`Invalid language '${typeof raw === "string" ? raw : JSON.stringify(raw)}'`);
        value = raw;
        break;
      case "group":
        value = await checkGroupSetting(db, realmId, name, groupSettingRequest(name, raw, current[key]), rule);
        break;
    }
    if (name === "mandatory_topics") {
      planTopicsPolicy(change, current, value ? "disable_empty_topic" : "allow_empty_topic");
      continue;
    }
    if (name === "topics_policy") {
      planTopicsPolicy(change, current, value as string);
      continue;
    }
    if (JSON.stringify(value) === JSON.stringify(current[key])) continue;
    change.stored[key] = value;
    change.data[name] = value;
    // Zulip's event formats differ by setting, for historical reasons.
    const dict = rule.kind === "group" || name === "allow_message_editing" || name === "message_content_edit_limit_seconds";
    change.events.push(dict ? { type: "realm", op: "update_dict", property: "default", data: { [name]: value } } : { type: "realm", op: "update", property: name, value });
  }
  return change;
}

function planTopicsPolicy(change: RealmSettingsChange, current: Record<string, unknown>, policy: string): void {
  if (policy === (change.stored.realm_topics_policy ?? current.realm_topics_policy)) return;
  const mandatory = policy === "disable_empty_topic";
  change.stored.realm_topics_policy = policy;
  change.stored.realm_mandatory_topics = mandatory;
  change.data.topics_policy = policy;
  change.events.push({ type: "realm", op: "update_dict", property: "default", data: { topics_policy: policy, mandatory_topics: mandatory } });
}

/**
 * Zulip takes a realm group setting as `{"new": value, "old": value}`, where `old` (optional) must match the
 * current value; a bare value is accepted as `new`.
 */
function groupSettingRequest(name: string, raw: unknown, current: unknown): unknown {
  if (!raw || typeof raw !== "object" || Array.isArray(raw) || !("new" in raw)) return raw;
  const { new: next, old, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) throw errors.badRequest(`Invalid ${name}`);
  if (old !== undefined && JSON.stringify(normalizeForCompare(old)) !== JSON.stringify(normalizeForCompare(current))) {
    throw errors.badRequest(`'old' value does not match the expected value.`);
  }
  return next;
}

function normalizeForCompare(v: unknown): unknown {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    const o = v as { direct_members?: number[]; direct_subgroups?: number[] };
    return { direct_members: [...(o.direct_members ?? [])].sort((a, b) => a - b), direct_subgroups: [...(o.direct_subgroups ?? [])].sort((a, b) => a - b) };
  }
  return v;
}
