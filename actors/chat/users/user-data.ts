/**
 * What a user keeps on the server, validated and stored for the user actor: settings (Zulip's allowed values),
 * drafts (Zulip's `to` rules), navigation views (built-in vs custom), status and muted users (alert words: alert-words.ts). Functions here run inside the user
 * actor's turn and its store transactions; the actor publishes the events.
 */
import { sql, type Kysely, type Selectable, type Transaction } from "kysely";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { DraftTable } from "../schema.ts";
import { USER_SETTINGS, USER_SETTINGS_DEFAULTS } from "./settings.ts";
import { AUTOMATIC_POLICY } from "../conversations/topic-policies.ts";
import { isSubscribed } from "../reads/subscriptions.ts";
import { NoticedRealmCache } from "../realm-cache.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database> | Transaction<Database>;

// ---- settings ---------------------------------------------------------------------------------------------------

const oneOf = (...values: Array<string | number>) => (v: unknown) => values.includes(v as string | number);
const isBool = (v: unknown) => typeof v === "boolean";
const intIn = (min: number, max: number) => (v: unknown) => Number.isInteger(v) && (v as number) >= min && (v as number) <= max;

function isTimezone(v: unknown): boolean {
  if (typeof v !== "string") return false;
  if (v === "") return true;
  try {
    new Intl.DateTimeFormat("en", { timeZone: v });
    return true;
  } catch {
    return false;
  }
}

/** A language code as Zulip names its languages (`en`, `de`, `pt-br`, `zh-hans`, `sr_Latn`). */
export function isLanguageCode(v: unknown): v is string {
  return typeof v === "string" && /^[a-z]{2,3}(?:[-_][A-Za-z]{2,4})?$/.test(v);
}

/** Every setting PATCH /settings accepts, with the values Zulip allows. */
export const SETTING_RULES: Record<string, (v: unknown) => boolean> = {
  twenty_four_hour_time: isBool,
  web_mark_read_on_scroll_policy: oneOf(1, 2, 3),
  web_channel_default_view: oneOf(1, 2, 3, 4),
  starred_message_counts: isBool,
  receives_typing_notifications: isBool,
  web_suggest_update_timezone: isBool,
  fluid_layout_width: isBool,
  high_contrast_mode: isBool,
  web_font_size_px: intIn(12, 24),
  web_line_height_percent: intIn(100, 200),
  color_scheme: oneOf(1, 2, 3),
  enable_drafts_synchronization: isBool,
  translate_emoticons: isBool,
  display_emoji_reaction_users: isBool,
  default_language: isLanguageCode,
  web_home_view: oneOf("recent_topics", "inbox", "all_messages"),
  web_escape_navigates_to_home_view: isBool,
  left_side_userlist: isBool,
  emojiset: oneOf("google", "twitter", "text"),
  demote_inactive_streams: oneOf(1, 2, 3),
  user_list_style: oneOf(1, 2, 3),
  web_animate_image_previews: oneOf("always", "on_hover", "never"),
  web_stream_unreads_count_display_policy: oneOf(1, 2, 3),
  hide_ai_features: isBool,
  web_left_sidebar_show_channel_folders: isBool,
  web_left_sidebar_unreads_count_summary: isBool,
  timezone: isTimezone,
  notification_sound: (v) => v === "none" || USER_SETTINGS_DEFAULTS.available_notification_sounds.includes(v as string),
  email_notifications_batching_period_seconds: intIn(120, 7 * 24 * 3600),
  enter_sends: isBool,
  email_address_visibility: oneOf(1, 2, 3, 4, 5),
  automatically_follow_topics_policy: oneOf(...Object.values(AUTOMATIC_POLICY)),
  automatically_unmute_topics_in_muted_streams_policy: oneOf(...Object.values(AUTOMATIC_POLICY)),
  automatically_follow_topics_where_mentioned: isBool,
  resolved_topic_notice_auto_read_policy: oneOf("always", "except_followed", "never"),
  ...Object.fromEntries(
    [
      "enable_stream_desktop_notifications",
      "enable_stream_email_notifications",
      "enable_stream_push_notifications",
      "enable_stream_audible_notifications",
      "enable_desktop_notifications",
      "enable_sounds",
      "enable_offline_email_notifications",
      "enable_offline_push_notifications",
      "enable_online_push_notifications",
      "enable_followed_topic_desktop_notifications",
      "enable_followed_topic_email_notifications",
      "enable_followed_topic_push_notifications",
      "enable_followed_topic_audible_notifications",
      "enable_digest_emails",
      "enable_marketing_emails",
      "enable_login_emails",
      "message_content_in_email_notifications",
      "pm_content_in_desktop_notifications",
      "wildcard_mentions_notify",
      "presence_enabled",
      "send_private_typing_notifications",
      "send_stream_typing_notifications",
      "send_read_receipts",
      "allow_private_data_export",
    ].map((name) => [name, isBool]),
  ),
};

export function checkSetting(name: string, value: unknown): void {
  const rule = SETTING_RULES[name];
  if (rule && !rule(value)) throw errors.badRequest(`Invalid ${name}`);
}

// ---- drafts -----------------------------------------------------------------------------------------------------

export interface DraftInput {
  type: "" | "stream" | "private";
  to: number[];
  topic: string;
  content: string;
  timestamp?: number;
}

export function draftObject(row: Selectable<DraftTable>) {
  return { id: row.id, type: row.type, to: row.to as number[], topic: row.topic, content: row.content, timestamp: row.timestamp };
}

const draftNotFound = () => new ChorusError("BAD_REQUEST", "Draft does not exist", 404);

/** Zulip's rules for a draft's addressing; returns the row to store. */
export async function checkDraft(db: DB, userId: number, realmId: number, draft: DraftInput) {
  if (draft.content.includes("\u0000")) throw errors.badRequest("Content must not contain null bytes");
  if (draft.topic.includes("\u0000")) throw errors.badRequest("Topic must not contain null bytes");
  if (draft.timestamp !== undefined && draft.timestamp < 0) throw errors.badRequest("Timestamp must not be negative.");
  const to = [...new Set(draft.to)];
  if (draft.type === "") {
    if (to.length) throw errors.badRequest("Must not have recipients");
  } else if (draft.type === "stream") {
    if (to.length !== 1) throw errors.badRequest("Must specify exactly 1 channel ID for channel messages");
    const stream = await db.selectFrom("streams").select(["id", "invite_only"]).where("id", "=", to[0]!).where("realm_id", "=", realmId).executeTakeFirst();
    const subscribed = stream ? await isSubscribed(db, userId, stream.id) : false;
    if (!stream || (stream.invite_only && !subscribed)) throw errors.badRequest("Invalid channel ID");
  } else if (to.length) {
    const found = await db.selectFrom("users").select("id").where("realm_id", "=", realmId).where("id", "in", to).execute();
    if (found.length !== to.length) throw errors.badRequest("Invalid user ID");
  }
  return {
    user_id: userId,
    type: draft.type,
    to: JSON.stringify(draft.type === "private" ? to.sort((a, b) => a - b) : to),
    topic: draft.type === "stream" ? draft.topic : "",
    content: draft.content,
    timestamp: draft.timestamp ?? Math.floor(Date.now() / 1000),
  };
}

export async function ownDraft(db: DB, userId: number, id: number) {
  const row = await db.selectFrom("drafts").selectAll().where("id", "=", id).where("user_id", "=", userId).executeTakeFirst();
  if (!row) throw draftNotFound();
  return row;
}

export function draftsOf(db: DB, userId: number) {
  return db.selectFrom("drafts").selectAll().where("user_id", "=", userId).orderBy("id").execute().then((rows) => rows.map(draftObject));
}

// ---- navigation views -------------------------------------------------------------------------------------------

/** The views every client has; they may be pinned or unpinned but not named. */
export const BUILT_IN_VIEWS = new Set(["inbox", "recent", "feed", "drafts", "narrow/has/reaction/sender/me", "narrow/is/mentioned", "narrow/is/starred"]);

export function viewsOf(db: DB, userId: number) {
  return db
    .selectFrom("navigation_views")
    .select(["fragment", "is_pinned", "name"])
    .where("user_id", "=", userId)
    .orderBy("fragment")
    .execute();
}

export async function checkNewView(db: DB, userId: number, fragment: string, name: string | null) {
  if (BUILT_IN_VIEWS.has(fragment)) {
    if (name !== null) throw errors.badRequest("Built-in views cannot have a custom name.");
  } else if (!name) {
    throw errors.badRequest("Custom views must have a valid name.");
  }
  const clash = await db
    .selectFrom("navigation_views")
    .select("fragment")
    .where("user_id", "=", userId)
    .where((eb) => (name === null ? eb("fragment", "=", fragment) : eb.or([eb("fragment", "=", fragment), eb("name", "=", name)])))
    .executeTakeFirst();
  if (clash) throw errors.badRequest("Navigation view already exists.");
}

export async function checkViewUpdate(db: DB, userId: number, fragment: string, name: string | undefined) {
  if (name !== undefined && BUILT_IN_VIEWS.has(fragment)) throw errors.badRequest("Built-in views cannot have a custom name.");
  const view = await db.selectFrom("navigation_views").selectAll().where("user_id", "=", userId).where("fragment", "=", fragment).executeTakeFirst();
  if (!view) throw new ChorusError("NOT_FOUND", "Navigation view does not exist.", 404);
  if (name !== undefined) {
    const clash = await db
      .selectFrom("navigation_views")
      .select("fragment")
      .where("user_id", "=", userId)
      .where("name", "=", name)
      .where("fragment", "!=", fragment)
      .executeTakeFirst();
    if (clash) throw errors.badRequest("Navigation view already exists.");
  }
  return view;
}

// ---- user status ------------------------------------------------------------------------------------------------

/** A stored status as Zulip's user_status objects show it: only the parts that are set; `away` from presence. */
export function statusObject(row: { status_text: string; emoji_name: string; emoji_code: string; reaction_type: string } | undefined, presenceEnabled: boolean) {
  const status: Record<string, unknown> = {};
  if (!presenceEnabled) status.away = true;
  if (row?.status_text) status.status_text = row.status_text;
  if (row?.emoji_name) Object.assign(status, { emoji_name: row.emoji_name, emoji_code: row.emoji_code, reaction_type: row.reaction_type });
  return status;
}

/**
 * The statuses of the realm's active users (or of the given ones) that say something, by user id: Zulip's
 * get_all_users_status_dict. The deprecated `away` is the user's presence_enabled setting turned off.
 */
export async function userStatuses(db: DB, realmId: number, userIds?: number[]): Promise<Record<string, Record<string, unknown>>> {
  let query = db
    .selectFrom("user_status as s")
    .innerJoin("users as u", "u.id", "s.user_id")
    .leftJoin("actor_snapshots as a", (j) => j.on("a.kind", "=", USER_SETTINGS).on(sql`a.key`, "=", sql`u.id::text`))
    .select(["s.user_id", "s.status_text", "s.emoji_name", "s.emoji_code", "s.reaction_type", sql<boolean | null>`(a.state->>'presence_enabled')::boolean`.as("presence_enabled")])
    .where("u.realm_id", "=", realmId)
    .where("u.is_active", "=", true);
  if (userIds) query = query.where("s.user_id", "in", userIds.length ? userIds : [-1]);
  const rows = await query.orderBy("s.user_id").execute();
  const out: Record<string, Record<string, unknown>> = {};
  for (const row of rows) {
    const status = statusObject(row, row.presence_enabled ?? USER_SETTINGS_DEFAULTS.presence_enabled);
    if (Object.keys(status).length) out[row.user_id] = status;
  }
  return out;
}

// ---- muted users ------------------------------------------------------------------------------------------------

/** Zulip's muted_users list: each muted user's id and when they were muted. */
export async function mutedUsersOf(db: DB, userId: number): Promise<Array<{ id: number; timestamp: number }>> {
  const rows = await db.selectFrom("muted_users").select(["muted_user_id", "date_muted"]).where("user_id", "=", userId).orderBy("date_muted").orderBy("muted_user_id").execute();
  return rows.map((r) => ({ id: r.muted_user_id, timestamp: Number(r.date_muted) }));
}

/** Who muted whom in each realm: for each muted user, the users who muted them (new messages start read for those). */
export const usersMutingCache = new NoticedRealmCache("muted-users-changed", async (db, realmId) => {
  const rows = await db
    .selectFrom("muted_users")
    .innerJoin("users", "users.id", "muted_users.user_id")
    .select(["muted_users.user_id", "muted_users.muted_user_id"])
    .where("users.realm_id", "=", realmId)
    .execute();
  const out = new Map<number, number[]>();
  for (const r of rows) out.set(r.muted_user_id, [...(out.get(r.muted_user_id) ?? []), r.user_id]);
  return out;
});
