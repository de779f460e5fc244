/**
 * The parts of POST /register's initial state that describe the current user (under `realm_user`) and the
 * server (under `realm`), plus the legacy `muted_topics` and `starred_messages` types: every key Zulip documents
 * for them (zerver/lib/events.py, fetch_initial_state_data). Real clients read these keys without checking for
 * them (zulip-terminal indexes `user_id`, `muted_topics`).
 */
import { sql, type Kysely, type SqlBool } from "kysely";
import type { Database } from "../../schema.ts";
import { FLAG_BITS } from "../conversations/flags.ts";
import { inGroupSettingOf, ROLE, userGroupIds, type GroupSettingValue } from "../organization/groups.ts";
import { NOTIFICATION_BOT, WELCOME_BOT } from "../organization/system-bots.ts";
import { gravatarUrl } from "../rendering/message-format.ts";
import { emojiDataDocument } from "../rendering/emoji.ts";
import { VISIBILITY } from "../users/user-topics.ts";
import { userObjectsFor, type UserRow } from "./users.ts";
import { MAX_CHANNEL_FOLDER_DESCRIPTION_LENGTH, MAX_CHANNEL_FOLDER_NAME_LENGTH } from "../organization/channel-folders.ts";
import { serverThumbnailFormats } from "../rendering/thumbnails.ts";

/** When this process started: Zulip's server_generation (clients put it in error reports). */
const SERVER_GENERATION = Math.floor(Date.now() / 1000);

/** The deprecated *_policy integers matching the default group settings: 1 members, 5 administrators, 7 owners. */
const LEGACY_POLICIES = {
  realm_create_public_stream_policy: 1,
  realm_create_private_stream_policy: 1,
  realm_create_web_public_stream_policy: 7,
  realm_wildcard_mention_policy: 5,
};

const GIPHY_RATINGS = {
  disabled: { name: "GIPHY integration disabled", id: 0 },
  y: { name: "Allow GIFs rated Y (Very young audience)", id: 1 },
  g: { name: "Allow GIFs rated G (General audience)", id: 2 },
  pg: { name: "Allow GIFs rated PG (Parental guidance)", id: 3 },
  "pg-13": { name: "Allow GIFs rated PG-13 (Parental guidance - under 13)", id: 4 },
  r: { name: "Allow GIFs rated R (Restricted)", id: 5 },
};

/**
 * Server facts and the realm settings Chorus has no feature for, at the value that says so (no uploads of logos,
 * no video calls, no digests, no GIPHY, no thumbnails); Zulip's defaults elsewhere.
 */
export function serverRealmState(siteUrl: string): Record<string, unknown> {
  return {
    ...LEGACY_POLICIES,
    max_channel_folder_name_length: MAX_CHANNEL_FOLDER_NAME_LENGTH,
    max_channel_folder_description_length: MAX_CHANNEL_FOLDER_DESCRIPTION_LENGTH,
    server_min_deactivated_realm_deletion_days: 14,
    server_max_deactivated_realm_deletion_days: null,
    server_typing_started_expiry_period_milliseconds: 45_000,
    server_typing_stopped_wait_period_milliseconds: 5_000,
    server_typing_started_wait_period_milliseconds: 10_000,
    realm_message_edit_history_visibility_policy: "all",
    realm_allow_edit_history: true,
    realm_welcome_message_custom_text: "",
    realm_digest_emails_enabled: false,
    realm_disallow_disposable_email_addresses: true,
    realm_invite_required: true,
    realm_inline_image_preview: true,
    realm_inline_url_embed_preview: false,
    realm_require_e2ee_push_notifications: false,
    realm_require_unique_names: false,
    realm_name_changes_disabled: false,
    realm_avatar_changes_disabled: false,
    realm_emails_restricted_to_domains: false,
    realm_send_welcome_emails: true,
    realm_message_content_allowed_in_email_notifications: true,
    realm_want_advertise_in_communities_directory: false,
    realm_video_chat_provider: 0,
    realm_available_video_chat_providers: { disabled: { name: "None", id: 0 } },
    realm_jitsi_server_url: null,
    jitsi_server_url: "",
    server_jitsi_server_url: null,
    realm_giphy_rating: 0,
    giphy_rating_options: GIPHY_RATINGS,
    realm_digest_weekday: 1,
    realm_default_code_block_language: "",
    realm_authentication_methods: { Email: { enabled: true, available: true } },
    max_icon_file_size_mib: 0,
    realm_logo_url: "",
    realm_logo_source: "D",
    realm_night_logo_url: "",
    realm_night_logo_source: "D",
    max_logo_file_size_mib: 0,
    realm_bot_domain: new URL(siteUrl).hostname,
    settings_send_digest_emails: false,
    realm_is_zephyr_mirror_realm: false,
    realm_push_notifications_enabled_end_timestamp: null,
    realm_upload_quota_mib: null,
    realm_org_type: 0,
    realm_plan_type: 1,
    realm_enable_guest_user_dm_warning: true,
    realm_enable_guest_user_indicator: true,
    zulip_plan_is_not_limited: true,
    upgrade_text_for_wide_organization_logo: "",
    realm_default_external_accounts: {},
    development_environment: false,
    server_generation: SERVER_GENERATION,
    password_min_length: 6,
    password_max_length: 100,
    password_min_guesses: 10_000,
    max_file_upload_size_mib: 0,
    max_avatar_file_size_mib: 0,
    server_inline_image_preview: true,
    server_inline_url_embed_preview: false,
    server_thumbnail_formats: serverThumbnailFormats(),
    server_avatar_changes_disabled: false,
    server_name_changes_disabled: false,
    server_needs_upgrade: false,
    server_web_public_streams_enabled: false,
    server_emoji_data_url: new URL(emojiDataDocument().path, siteUrl).href,
    server_can_summarize_topics: false,
    // Not described yet: the permission settings' metadata (each setting's allowed groups) is not modelled.
    server_supported_permission_settings: { realm: {}, stream: {}, group: {} },
  };
}

/**
 * The current user's own fields, the realm's deactivated users and the system bots (Zulip's cross-realm bots),
 * beside `realm_users`. `settings`: the realm's `realm_*` settings, for the can_* permissions.
 */
export async function ownUserState(db: Kysely<Database>, user: UserRow, settings: Record<string, unknown>, clientGravatar: boolean) {
  const [groups, others] = await Promise.all([
    userGroupIds(db, user.id),
    db
      .selectFrom("users")
      .selectAll()
      .where("realm_id", "=", user.realm_id)
      .where((eb) => eb.or([eb("is_active", "=", false), eb("delivery_email", "in", [NOTIFICATION_BOT.email, WELCOME_BOT.email])]))
      .orderBy("id")
      .execute(),
  ]);
  const may = (setting: string) => inGroupSettingOf(settings[setting] as GroupSettingValue, user.id, groups);
  const [canPublic, canPrivate, canWebPublic] = [may("realm_can_create_public_channel_group"), may("realm_can_create_private_channel_group"), may("realm_can_create_web_public_channel_group")];
  const [canSubscribe, canInvite] = [may("realm_can_add_subscribers_group"), may("realm_can_invite_users_group")];
  const systemBots = others.filter((u) => u.is_bot && (u.delivery_email === NOTIFICATION_BOT.email || u.delivery_email === WELCOME_BOT.email));
  const [inactive, bots] = await Promise.all([
    userObjectsFor(db, user, others.filter((u) => !u.is_active && !systemBots.includes(u)), { clientGravatar, includeProfileData: true }),
    userObjectsFor(db, user, systemBots, { clientGravatar, includeProfileData: false }),
  ]);
  const avatar = gravatarUrl(user.delivery_email);
  return {
    user_id: user.id,
    email: user.email,
    delivery_email: user.delivery_email,
    full_name: user.full_name,
    is_owner: user.role === ROLE.owner,
    is_admin: user.role <= ROLE.administrator,
    is_moderator: user.role === ROLE.moderator,
    is_guest: user.role === ROLE.guest,
    // The user's own avatar never leaves the URL to the client (Zulip forces client_gravatar off here).
    avatar_source: "G",
    avatar_url: avatar,
    avatar_url_medium: avatar.replace("?", "?s=500&"),
    can_create_streams: canPublic || canPrivate,
    can_create_public_streams: canPublic,
    can_create_private_streams: canPrivate,
    can_create_web_public_streams: canWebPublic,
    can_subscribe_other_users: canSubscribe,
    can_invite_others_to_realm: canInvite,
    realm_non_active_users: inactive.map(({ is_active, ...rest }) => rest),
    cross_realm_bots: bots.map((b) => ({ ...b, is_system_bot: true })),
  };
}

/** Zulip's legacy muted_topics: `[channel name, topic, last_updated]` for each muted topic. */
export async function mutedTopics(db: Kysely<Database>, userId: number): Promise<Array<[string, string, number]>> {
  const rows = await db
    .selectFrom("user_topics as t")
    .innerJoin("streams as s", "s.id", "t.stream_id")
    .select(["s.name", "t.topic_name", "t.last_updated"])
    .where("t.user_id", "=", userId)
    .where("t.visibility_policy", "=", VISIBILITY.muted)
    .orderBy("t.last_updated")
    .execute();
  return rows.map((r) => [r.name, r.topic_name, Number(r.last_updated)]);
}

/** The ids of the messages the user starred, oldest first. */
export async function starredMessages(db: Kysely<Database>, userId: number): Promise<number[]> {
  const rows = await db
    .selectFrom("user_messages")
    .select("message_id")
    .where("user_id", "=", userId)
    .where(sql<SqlBool>`(flags & ${FLAG_BITS.starred}) <> 0`)
    .orderBy("message_id")
    .execute();
  return rows.map((r) => Number(r.message_id));
}
