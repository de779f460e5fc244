/**
 * Chat's tables, as kysely sees them. Changes go through a new migration in ./migrations (append-only); this file
 * follows them. Times are UNIX seconds (bigint, read as numbers), as Zulip's API speaks them.
 */
import type { Generated, ColumnType } from "kysely";
import type { Json } from "../../runtime/store/schema.ts";

export interface RealmTable {
  id: Generated<number>;
  string_id: string;
  name: string;
  date_created: number;
  deactivated: Generated<boolean>;
  /** Organization settings not worth a column each (names as in Zulip's realm object). */
  settings: Json;
  /** The defaults for new users' settings an administrator changed (PATCH /realm/user_settings_defaults). */
  user_settings_defaults: Generated<Json>;
  /** The text search configuration of its language (migration 2026-12-05T2100), set with `realm_default_language`. */
  search_config: Generated<string>;
}

export interface UserTable {
  id: Generated<number>;
  realm_id: number;
  /** The API e-mail (Zulip's `email`); equal to delivery_email while e-mail visibility is "everyone". */
  email: string;
  delivery_email: string;
  full_name: string;
  role: number;
  is_active: boolean;
  is_bot: boolean;
  bot_type: number | null;
  bot_owner_id: number | null;
  /** HMAC-SHA256(secret, api key), hex: what authentication compares. */
  api_key_hash: string;
  /** AES-256-GCM(secret, api key): so POST /fetch_api_key can return the existing key. */
  api_key_enc: string;
  /** scrypt hash, or null for accounts that cannot log in with a password. */
  password_hash: string | null;
  date_joined: number;
  timezone: string;
  avatar_version: number;
}

export interface StreamTable {
  id: Generated<number>;
  realm_id: number;
  name: string;
  description: string;
  rendered_description: string;
  invite_only: boolean;
  is_web_public: boolean;
  history_public_to_subscribers: boolean;
  creator_id: number | null;
  date_created: number;
  message_retention_days: number | null;
  /** The remaining channel settings (topics_policy, can_*_group, ...), as Zulip names them. */
  settings: Json;
  /** One of the realm's default channels, which new users join. */
  is_default: Generated<boolean>;
  /** Archived (Zulip's "deactivated"): read-only, listed only to clients that handle archived channels. */
  deactivated: Generated<boolean>;
  /** Active subscriptions, kept by triggers on `subscriptions` (migration 2026-11-28T0130-channel-subscriber-counts). */
  subscriber_count: ColumnType<number, never, never>;
}

export interface SubscriptionTable {
  user_id: number;
  stream_id: number;
  active: boolean;
  color: string;
  is_muted: boolean;
  pin_to_top: boolean;
  /** Per-channel notification settings; null follows the user's global setting. */
  desktop_notifications: boolean | null;
  audible_notifications: boolean | null;
  push_notifications: boolean | null;
  email_notifications: boolean | null;
  wildcard_mentions_notify: boolean | null;
}

export interface UserGroupTable {
  id: Generated<number>;
  realm_id: number;
  name: string;
  description: string;
  is_system_group: boolean;
  deactivated: boolean;
  creator_id: number | null;
  date_created: number | null;
  /** The group's own can_*_group settings. */
  settings: Json;
}

export interface UserGroupMemberTable {
  group_id: number;
  user_id: number;
}

export interface UserGroupSubgroupTable {
  group_id: number;
  subgroup_id: number;
}

export interface MessageTable {
  id: number;
  realm_id: number;
  sender_id: number;
  /** "stream" or "direct". */
  recipient_type: string;
  /** Zulip's recipient id: the channel's recipient, or the direct-message group's. */
  recipient_id: number;
  stream_id: number | null;
  topic: string;
  content: string;
  rendered_content: string;
  date_sent: number;
  sending_client: string;
  /** Set by the gateway per request: a redelivered send finds its first insert instead of writing twice. */
  send_key: string | null;
  /** Changed by triggers whenever the message object's columns or reactions change (migration 2026-12-02T1800). */
  version: ColumnType<number, never, never>;
}

/** An attempt to send a message, or its tombstone (migration 2026-11-27T2120-send-attempts). */
export interface SendAttemptTable {
  attempt: string;
  abandoned: boolean;
  at: ColumnType<Date, Date | undefined, never>;
}

/** A fan-out still owed for a message (migration 2026-12-05T0700-pending-fan-outs). */
export interface PendingFanOutTable {
  message_id: number;
  /** The shard of the conversation that committed it, and that holder's epoch. */
  shard: number;
  epoch: number;
}

/** Columns a message gets when edited or moved (absent from a new message). */
export interface MessageEditColumns {
  /** Zulip's edit_history entries, newest first; null when never edited or moved. */
  edit_history: ColumnType<unknown[] | null, string | null | undefined, string | null>;
  last_edit_time: ColumnType<number | null, number | null | undefined, number | null>;
  last_moved_time: ColumnType<number | null, number | null | undefined, number | null>;
}

// ---- the message surface (migration 2026-11-22T0500-messages) ---------------------------------------------

export interface RecipientTable {
  id: Generated<number>;
  realm_id: number;
  /** 2 = channel (type_id is the stream id), 3 = direct-message conversation (dm_key), as Zulip numbers them. */
  type: number;
  type_id: number | null;
  /** The participants' user ids, sorted, comma-separated. */
  dm_key: string | null;
}

export interface RecipientMemberTable {
  recipient_id: number;
  user_id: number;
}

/**
 * Zulip's UserMessage: who received a message, and their flags (bitfield, see actors/chat/conversations/flags.ts). `user_messages` is
 * a view (read-only) of `user_message_rows` and the not yet expanded `user_message_lists`; writes go to the rows,
 * after MessageLog.expandRecipientLists (migration 2026-11-24T1000-recipient-lists).
 */
export interface UserMessageTable {
  user_id: number;
  message_id: number;
  flags: number;
}

/** A committed message's recipients and their initial flags, as one row until expanded into user_message_rows. */
export interface UserMessageListTable {
  message_id: number;
  user_ids: number[];
  flags: number[];
}

/**
 * An unread flag row with its message's channel, topic and recipient (migration 2026-11-28T0800-unread-messages):
 * kept by triggers on `user_message_rows` and `messages`, read by POST /register's `unread_msgs`. Read-only here.
 */
export interface UnreadMessageTable {
  user_id: number;
  message_id: number;
  stream_id: number | null;
  recipient_id: number;
  topic: string;
  flags: number;
}

export interface ScheduledMessageTable {
  id: Generated<number>;
  realm_id: number;
  sender_id: number;
  /** "stream" or "private", as Zulip's scheduled message object says it. */
  type: string;
  stream_id: number | null;
  to_user_ids: ColumnType<number[], string, string>;
  topic: string;
  content: string;
  rendered_content: string;
  scheduled_timestamp: number;
  read_by_sender: boolean | null;
  /** pending → delivered | failed (kept, shown with failed: true); deleted rows are removed. */
  status: Generated<string>;
  delivered_message_id: number | null;
  failure_message: string | null;
  /** A reminder (sent to its owner by Notification Bot) about this message; null for a scheduled message. */
  reminder_target_message_id: ColumnType<number | null, number | null | undefined, number | null>;
}

/** Zulip's UserTopic; `topic_key` is the lower-cased name (topics match case-insensitively). */
export interface UserTopicTable {
  user_id: number;
  stream_id: number;
  topic_name: string;
  topic_key: string;
  visibility_policy: number;
  last_updated: number;
}

export interface ReactionTable {
  message_id: number;
  user_id: number;
  emoji_name: string;
  emoji_code: string;
  reaction_type: string;
  /** Insertion order, so reactions list in the order they were added. */
  created: Generated<number>;
}

/** A widget message's submessage (migration 2026-12-05T1000): the widget, then what its readers add to it. */
export interface SubmessageTable {
  id: Generated<number>;
  message_id: number;
  sender_id: number;
  msg_type: string;
  /** JSON text, as the client sent it (the widget's own: its type and extra data). */
  content: string;
}

export interface UserEventTable {
  user_id: number;
  seq: number;
  payload: Json;
}

export interface DraftTable {
  id: Generated<number>;
  user_id: number;
  /** "", "stream" or "private", as Zulip's draft objects say. */
  type: string;
  to: Json;
  topic: string;
  content: string;
  timestamp: number;
}

export interface NavigationViewTable {
  user_id: number;
  fragment: string;
  is_pinned: boolean;
  /** Custom views only; built-in views have none. */
  name: string | null;
}

export interface PresenceTable {
  user_id: number;
  realm_id: number;
  last_active_time: number | null;
  last_connected_time: number;
  /** The client of the latest ping (for the legacy per-client format). */
  client: string;
  last_update_id: number;
}

export interface PushDeviceTable {
  user_id: number;
  /** "apns" or "fcm". */
  kind: string;
  token: string;
  appid: string | null;
  date_created: number;
}

export interface InvitationTable {
  id: Generated<number>;
  realm_id: number;
  email: string;
  referrer_id: number;
  invited_as: number;
  stream_ids: Json;
  group_ids: Json;
  include_realm_default_subscriptions: boolean;
  notify_referrer_on_join: boolean;
  welcome_message_custom_text: string | null;
  /** SHA-256 of the key in the invitation link: the key itself is only in the e-mail. */
  key_hash: string;
  created_at: number;
  /** null: never expires. */
  expires_at: number | null;
  /** pending, accepted or revoked. */
  status: Generated<string>;
  /** The account created by accepting it. */
  user_id: number | null;
  /** The POST /invites request that created it: a redelivered request invites nobody twice. */
  request_key: string;
  /** Set when someone signed up through this reusable link: the invitation confirms their address. */
  link_id: number | null;
}

/** A reusable invitation link (POST /invites/multiuse). */
export interface InviteLinkTable {
  id: Generated<number>;
  realm_id: number;
  referrer_id: number;
  invited_as: number;
  stream_ids: Json;
  group_ids: Json;
  include_realm_default_subscriptions: boolean;
  welcome_message_custom_text: string | null;
  /** SHA-256 of the key in the link, to find it. */
  key_hash: string;
  /** The key itself, encrypted: GET /invites shows the link again. */
  key_enc: string;
  created_at: number;
  /** null: never expires. */
  expires_at: number | null;
  /** active or revoked. */
  status: Generated<string>;
  /** The request that created it: a redelivered request creates one link. */
  request_key: string;
}

/** Each re-sent invitation e-mail: they count towards the realm's daily invitation limit. */
export interface InvitationResendTable {
  id: Generated<number>;
  realm_id: number;
  invitation_id: number;
  created_at: number;
  request_key: string;
}

export interface EmailOutboxTable {
  id: Generated<number>;
  to_address: string;
  subject: string;
  body: string;
  created_at: number;
  sent_at: number | null;
  attempts: Generated<number>;
  /** Milliseconds since the epoch. */
  next_attempt_at: number;
  last_error: string | null;
}

export interface PasswordResetTable {
  id: Generated<number>;
  realm_id: number;
  user_id: number;
  /** SHA-256 of the key in the reset e-mail: the key itself is only in the e-mail. */
  key_hash: string;
  created_at: number;
  expires_at: number;
  /** pending, used, or superseded (by a later request, or by another of the user's keys being used). */
  status: Generated<string>;
}

export interface EmailChangeTable {
  id: Generated<number>;
  realm_id: number;
  user_id: number;
  old_email: string;
  new_email: string;
  /** SHA-256 of the key in the confirmation e-mail: the key itself is only in the e-mail. */
  key_hash: string;
  created_at: number;
  expires_at: number;
  /** pending, confirmed, or superseded (by a later request of the same user). */
  status: Generated<string>;
}

/** Zulip's CustomProfileField (migration 2026-11-23T1900-custom-profile-fields). */
export interface CustomProfileFieldTable {
  id: Generated<number>;
  realm_id: number;
  name: string;
  hint: string;
  /** 1 short text, 2 long text, 3 list of options, 4 date, 5 link, 6 users, 7 external account, 8 pronouns. */
  field_type: number;
  /** JSON text as the API carries it (options of a list, an external account's subtype), or "". */
  field_data: string;
  /** Display order; a new field takes its id (last). */
  order: Generated<number>;
  display_in_profile_summary: boolean;
  required: boolean;
  editable_by_user: boolean;
}

/** Zulip's CustomProfileFieldValue: a user's value for one field (a users field's value is a JSON list of ids). */
export interface CustomProfileFieldValueTable {
  user_id: number;
  field_id: number;
  value: string;
  /** The value as HTML, for the text types (Zulip renders those as Markdown); null for the others. */
  rendered_value: string | null;
}

export interface RealmEmojiTable {
  id: Generated<number>;
  realm_id: number;
  name: string;
  /** Who uploaded it (Zulip reports null when unknown). */
  author_id: number | null;
  deactivated: Generated<boolean>;
  /** image/png, image/gif, image/jpeg or image/webp, as the bytes say. */
  content_type: string;
  /** The file name's extension in the image URL: png, gif, jpeg, webp. */
  file_ext: string;
  is_animated: Generated<boolean>;
  /** The uploaded image (PGlite reads it back as a Uint8Array, pg as a Buffer). */
  image: Uint8Array;
  date_created: number;
  /** The request (upload or deactivation) that last changed the row: a redelivery of it is already done. */
  last_request_key: string | null;
}

/** Zulip's RealmFilter: a linkifier. */
export interface RealmLinkifierTable {
  id: Generated<number>;
  realm_id: number;
  /** A regular expression in Zulip's (re2) syntax, named groups as `(?P<name>…)`. */
  pattern: string;
  /** An RFC 6570 template whose variables are the pattern's groups. */
  url_template: string;
  /** Linkifiers apply in this order (PATCH /realm/linkifiers); a new one goes last. */
  order: Generated<number>;
}

/** Zulip's RealmPlayground: where code blocks of a language can be opened. */
/** Zulip's ChannelFolder. */
export interface ChannelFolderTable {
  id: Generated<number>;
  realm_id: number;
  name: string;
  description: string;
  rendered_description: string;
  /** Position in the organization's list, from 0. */
  order: number;
  creator_id: number | null;
  date_created: number;
  is_archived: Generated<boolean>;
}

export interface RealmPlaygroundTable {
  id: Generated<number>;
  realm_id: number;
  name: string;
  pygments_language: string;
  /** An RFC 6570 template with the one variable `code`. */
  url_template: string;
}

/** Zulip's SavedSnippet: a user's reusable text. */
export interface SavedSnippetTable {
  id: Generated<number>;
  user_id: number;
  title: string;
  content: string;
  date_created: number;
}

export interface AlertWordTable {
  id: Generated<number>;
  user_id: number;
  realm_id: number;
  /** As the user typed it; matching ignores case. */
  word: string;
}

/** The status a user shows beside their name; "" clears a part. */
export interface UserStatusTable {
  user_id: number;
  status_text: Generated<string>;
  emoji_name: Generated<string>;
  emoji_code: Generated<string>;
  reaction_type: Generated<string>;
  timestamp: number;
}

export interface MutedUserTable {
  user_id: number;
  muted_user_id: number;
  date_muted: number;
}

/** Zulip's Attachment (migrations/2026-11-27T2100-attachments.ts): an uploaded file; its bytes are in the blob store. */
export interface AttachmentTable {
  id: Generated<number>;
  realm_id: number;
  owner_id: number;
  /** Zulip's path id, `{realm}/{xx}/{random}/{sanitised name}`: the file's URL is /user_uploads/ and this. */
  path_id: string;
  /** The path id as it appears in a URL (the name percent-encoded): what message links are matched against. */
  url_path: string;
  blob_key: string;
  /** The name as uploaded. */
  file_name: string;
  content_type: string;
  size: ColumnType<number, number, number>;
  create_time: number;
}

/** The messages linking each attachment, kept by a trigger on messages (see the migration). */
export interface AttachmentMessageTable {
  attachment_id: number;
  message_id: number;
}

/** Zulip's ImageAttachment (migrations/2026-11-28T0010-image-attachments.ts): an upload that is an image to thumbnail. */
export interface ImageAttachmentTable {
  attachment_id: number;
  realm_id: number;
  path_id: string;
  original_width_px: number;
  original_height_px: number;
  frames: number;
  content_type: string;
  /** The thumbnails made (rendering/thumbnails.ts StoredThumbnail), as JSON. */
  thumbnail_metadata: ColumnType<unknown[], string | undefined, string>;
}

/**
 * A realm's version of what its user objects are made of, bumped by triggers on every change (migration
 * 2026-11-28T0120-realm-user-versions): what tells a cached realm_users list (reads/users.ts) it is stale.
 */
export interface RealmUserVersionTable {
  realm_id: number;
  version: ColumnType<string, never, never>;
}

/**
 * Where the fills of `messages.search_document` (migration 2026-11-28T0900) and `messages.scoped_document`
 * (2026-12-05T1600) stand (actors/chat/search-fill.ts): one row; messages with an id below `below` (`scoped_below`)
 * may still be without their document (scoped document); null once every message has it.
 */
export interface MessageSearchFillTable {
  id: number;
  below: number | null;
  scoped_below: number | null;
}

/** A realm whose language changed: its messages below `below` are parsed again (migration 2026-12-05T2100). */
export interface SearchRestemTable {
  realm_id: number;
  below: number;
}

/** One row per realm, bumped by triggers on `streams` (migration 2026-11-28T0150): the cached channel objects' version. */
export interface ChannelVersionTable {
  realm_id: number;
  version: ColumnType<string, never, never>;
}

/** Chat's tables by name (part of actors/schema.ts's Database). */
export interface ChatTables {
  realms: RealmTable;
  users: UserTable;
  streams: StreamTable;
  subscriptions: SubscriptionTable;
  user_groups: UserGroupTable;
  user_group_members: UserGroupMemberTable;
  user_group_subgroups: UserGroupSubgroupTable;
  messages: MessageTable & MessageEditColumns;
  recipients: RecipientTable;
  recipient_members: RecipientMemberTable;
  user_messages: UserMessageTable;
  /** A view: the unread ones of `user_messages` (migration 2026-12-02T0330), from `unread_messages` and the lists. */
  unread_user_messages: UserMessageTable;
  user_message_rows: UserMessageTable;
  user_message_lists: UserMessageListTable;
  unread_messages: UnreadMessageTable;
  reactions: ReactionTable;
  submessages: SubmessageTable;
  scheduled_messages: ScheduledMessageTable;
  user_topics: UserTopicTable;
  user_events: UserEventTable;
  drafts: DraftTable;
  navigation_views: NavigationViewTable;
  presence: PresenceTable;
  push_devices: PushDeviceTable;
  invitations: InvitationTable;
  invite_links: InviteLinkTable;
  invitation_resends: InvitationResendTable;
  email_outbox: EmailOutboxTable;
  email_changes: EmailChangeTable;
  password_resets: PasswordResetTable;
  custom_profile_fields: CustomProfileFieldTable;
  custom_profile_field_values: CustomProfileFieldValueTable;
  realm_emoji: RealmEmojiTable;
  realm_linkifiers: RealmLinkifierTable;
  realm_playgrounds: RealmPlaygroundTable;
  channel_folders: ChannelFolderTable;
  saved_snippets: SavedSnippetTable;
  alert_words: AlertWordTable;
  user_status: UserStatusTable;
  muted_users: MutedUserTable;
  attachments: AttachmentTable;
  attachment_messages: AttachmentMessageTable;
  image_attachments: ImageAttachmentTable;
  send_attempts: SendAttemptTable;
  pending_fan_outs: PendingFanOutTable;
  realm_user_versions: RealmUserVersionTable;
  channel_versions: ChannelVersionTable;
  message_search_fill: MessageSearchFillTable;
  search_restems: SearchRestemTable;
}
