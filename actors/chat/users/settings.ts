/**
 * The defaults of Zulip's realm and user settings, as POST /register reports them. Stored settings (realms.settings,
 * users' settings) override these; what has no stored value yet is Zulip's default.
 */
import { sql, type Kysely, type RawBuilder, type SqlBool, type Transaction } from "kysely";
import { systemGroups, type SystemGroups } from "../organization/groups.ts";
import type { Database } from "../../schema.ts";
import type { Store } from "../../../runtime/store/store.ts";

export const USER_SETTINGS_DEFAULTS = {
  twenty_four_hour_time: false,
  web_mark_read_on_scroll_policy: 1,
  web_channel_default_view: 1,
  starred_message_counts: true,
  receives_typing_notifications: true,
  web_suggest_update_timezone: true,
  fluid_layout_width: false,
  high_contrast_mode: false,
  web_font_size_px: 16,
  web_line_height_percent: 140,
  color_scheme: 1,
  translate_emoticons: false,
  display_emoji_reaction_users: true,
  default_language: "en",
  web_home_view: "inbox",
  web_escape_navigates_to_home_view: true,
  left_side_userlist: false,
  emojiset: "google",
  demote_inactive_streams: 1,
  user_list_style: 2,
  web_animate_image_previews: "on_hover",
  web_stream_unreads_count_display_policy: 2,
  hide_ai_features: false,
  web_left_sidebar_show_channel_folders: true,
  web_left_sidebar_unreads_count_summary: true,
  timezone: "",
  enter_sends: false,
  enable_drafts_synchronization: true,
  enable_stream_desktop_notifications: false,
  enable_stream_email_notifications: false,
  enable_stream_push_notifications: false,
  enable_stream_audible_notifications: false,
  notification_sound: "zulip",
  enable_desktop_notifications: true,
  enable_sounds: true,
  enable_followed_topic_desktop_notifications: true,
  enable_followed_topic_email_notifications: true,
  enable_followed_topic_push_notifications: true,
  enable_followed_topic_audible_notifications: true,
  email_notifications_batching_period_seconds: 120,
  enable_offline_email_notifications: true,
  enable_offline_push_notifications: true,
  enable_online_push_notifications: true,
  enable_digest_emails: true,
  enable_marketing_emails: true,
  enable_login_emails: true,
  message_content_in_email_notifications: true,
  pm_content_in_desktop_notifications: true,
  wildcard_mentions_notify: true,
  enable_followed_topic_wildcard_mentions_notify: true,
  desktop_icon_count_display: 1,
  realm_name_in_email_notifications_policy: 1,
  automatically_follow_topics_policy: 3,
  automatically_unmute_topics_in_muted_streams_policy: 2,
  automatically_follow_topics_where_mentioned: true,
  resolved_topic_notice_auto_read_policy: "except_followed",
  presence_enabled: true,
  available_notification_sounds: ["chime-saved-you", "ding", "zulip"],
  emojiset_choices: [
    { key: "google", text: "Google" },
    { key: "twitter", text: "Twitter" },
    { key: "text", text: "Plain text" },
  ],
  send_private_typing_notifications: true,
  send_stream_typing_notifications: true,
  send_read_receipts: true,
  allow_private_data_export: false,
  email_address_visibility: 1,
  web_navigate_to_sent_message: true,
};

export type UserSettings = typeof USER_SETTINGS_DEFAULTS;

/** Snapshot kind under which a user's changed settings are stored (key: the user id). */
export const USER_SETTINGS = "user-settings";

// Reads of a user's settings for other modules: the user actor writes them as a snapshot, and only this module knows
// that format. Bulk readers embed `userSetting` in their own queries rather than ask each user's actor.

/** The settings a user changed (the rest are USER_SETTINGS_DEFAULTS), or nothing when they changed none. */
export async function storedUserSettings(store: Store<Database>, userId: number): Promise<Partial<UserSettings> | undefined> {
  return (await store.loadSnapshot<Partial<UserSettings>>(USER_SETTINGS, String(userId)))?.state;
}

/** SQL for one setting of the user whose id `userId` is (a column or a value), as text; null when never changed. */
export function userSetting(userId: RawBuilder<unknown>, name: keyof UserSettings): RawBuilder<string | null> {
  return sql<string | null>`(select state ->> ${name} from actor_snapshots where kind = ${USER_SETTINGS} and key = ${userId}::text)`;
}

/**
 * The organization's defaults for new users (realm_user_settings_defaults): every setting but the per-person
 * timezone, those an administrator changed over Zulip's.
 */
export async function realmUserSettingsDefaults(db: Kysely<Database> | Transaction<Database>, realmId: number): Promise<Record<string, unknown>> {
  const row = await db.selectFrom("realms").select("user_settings_defaults").where("id", "=", realmId).executeTakeFirst();
  const { timezone: _perPerson, ...defaults } = USER_SETTINGS_DEFAULTS;
  return { ...defaults, ...((row?.user_settings_defaults ?? {}) as Record<string, unknown>) };
}

/**
 * A new account's settings start as its organization's defaults for new users: those an administrator changed are
 * written as the user's own (in the account's transaction), so later changes to the defaults leave it alone.
 */
export async function seedUserSettings(trx: Transaction<Database>, realmId: number, userId: number): Promise<void> {
  await sql`insert into actor_snapshots (kind, key, version, state, updated_at)
    select ${USER_SETTINGS}, ${String(userId)}, 1, user_settings_defaults, ${Math.floor(Date.now() / 1000)}
    from realms where id = ${realmId} and user_settings_defaults <> '{}'::jsonb`.execute(trx);
}

/** Each user's email_address_visibility (Zulip's default, everyone, when never set): one query for any number. */
export async function emailVisibilities(db: Kysely<Database>, userIds: number[]): Promise<Map<number, number>> {
  const out = new Map(userIds.map((id) => [id, USER_SETTINGS_DEFAULTS.email_address_visibility as number]));
  if (!userIds.length) return out;
  const rows = await db
    .selectFrom("actor_snapshots")
    .select(["key", sql<number | null>`(state->>'email_address_visibility')::int`.as("visibility")])
    .where("kind", "=", USER_SETTINGS)
    // One array, not one bind parameter per user: the whole realm's list is one query.
    .where(sql<SqlBool>`key = any(${sql.val(userIds.map(String))}::text[])`)
    .execute();
  for (const r of rows) if (r.visibility !== null) out.set(Number(r.key), Number(r.visibility));
  return out;
}

/** Realm settings as `realm_*` keys of POST /register, for the settings Chorus implements. */
export function realmSettingsDefaults(groups: SystemGroups) {
  const id = (name: string) => groups.get(name)!;
  return {
    realm_description: "",
    realm_allow_message_editing: true,
    realm_message_content_edit_limit_seconds: 600,
    realm_message_content_delete_limit_seconds: null as number | null,
    realm_move_messages_within_stream_limit_seconds: 604800,
    realm_move_messages_between_streams_limit_seconds: 604800,
    realm_topics_policy: "allow_empty_topic",
    realm_mandatory_topics: false,
    realm_empty_topic_display_name: "general chat",
    realm_moderation_request_channel_id: -1,
    realm_new_stream_announcements_stream_id: -1,
    realm_signup_announcements_stream_id: -1,
    realm_zulip_update_announcements_stream_id: -1,
    realm_message_retention_days: -1,
    realm_waiting_period_threshold: 0,
    realm_default_language: "en",
    realm_enable_read_receipts: true,
    realm_presence_disabled: false,
    realm_email_auth_enabled: true,
    realm_email_changes_disabled: false,
    realm_password_auth_enabled: true,
    realm_push_notifications_enabled: false,
    realm_enable_spectator_access: false,
    realm_can_add_custom_emoji_group: id("role:members"),
    realm_can_add_subscribers_group: id("role:members"),
    realm_can_delete_any_message_group: id("role:administrators"),
    realm_can_delete_own_message_group: id("role:everyone"),
    realm_can_invite_users_group: id("role:members"),
    realm_create_multiuse_invite_group: id("role:administrators"),
    realm_can_mention_many_users_group: id("role:administrators"),
    realm_can_move_messages_between_channels_group: id("role:members"),
    realm_can_move_messages_between_topics_group: id("role:everyone"),
    realm_can_resolve_topics_group: id("role:everyone"),
    realm_can_set_delete_message_policy_group: id("role:moderators"),
    realm_can_set_topics_policy_group: id("role:members"),
    realm_can_create_groups: id("role:members"),
    realm_can_manage_all_groups: id("role:administrators"),
    realm_can_create_public_channel_group: id("role:members"),
    realm_can_create_private_channel_group: id("role:members"),
    realm_can_create_web_public_channel_group: id("role:owners"),
    realm_can_access_all_users_group: id("role:everyone"),
    realm_direct_message_initiator_group: id("role:everyone"),
    realm_direct_message_permission_group: id("role:everyone"),
    realm_can_create_bots_group: id("role:members"),
    realm_can_create_write_only_bots_group: id("role:members"),
    realm_can_manage_billing_group: id("role:administrators"),
    realm_can_summarize_topics_group: id("role:everyone"),
  };
}

/** The realm's settings as `realm_*` keys: the stored ones over Zulip's defaults (one source for every reader). */
export async function realmSettings(db: Kysely<Database> | Transaction<Database>, realmId: number): Promise<Record<string, unknown>> {
  const [row, groups] = await Promise.all([db.selectFrom("realms").select("settings").where("id", "=", realmId).executeTakeFirst(), systemGroups(db, realmId)]);
  return { ...realmSettingsDefaults(groups), ...((row?.settings ?? {}) as Record<string, unknown>) };
}
