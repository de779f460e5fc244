/**
 * The tables, as kysely sees them. Changes go through a new migration in ./migrations (append-only); this file
 * follows them. Times are UNIX seconds (bigint, read as numbers), as Zulip's API speaks them.
 */
import type { Generated, ColumnType } from "kysely";

type Json = ColumnType<unknown, string, string>;

export interface RealmTable {
  id: Generated<number>;
  string_id: string;
  name: string;
  date_created: number;
  deactivated: Generated<boolean>;
  /** Organization settings not worth a column each (names as in Zulip's realm object). */
  settings: Json;
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
}

export interface SubscriptionTable {
  user_id: number;
  stream_id: number;
  active: boolean;
  color: string;
  is_muted: boolean;
  pin_to_top: boolean;
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
}

export interface ActorSnapshotTable {
  kind: string;
  key: string;
  version: number;
  state: Json;
  updated_at: number;
}

export interface ShardLeaseTable {
  shard: number;
  owner: string | null;
  epoch: number;
  expires_at: Date;
}

export interface ClusterNodeTable {
  node_id: string;
  worker_index: number;
  seen_at: Date;
}

export interface Database {
  realms: RealmTable;
  users: UserTable;
  streams: StreamTable;
  subscriptions: SubscriptionTable;
  user_groups: UserGroupTable;
  user_group_members: UserGroupMemberTable;
  user_group_subgroups: UserGroupSubgroupTable;
  messages: MessageTable;
  actor_snapshots: ActorSnapshotTable;
  shard_leases: ShardLeaseTable;
  cluster_nodes: ClusterNodeTable;
}
