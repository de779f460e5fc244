/**
 * The first schema, frozen as shipped: it mixes the kernel's tables (actor_snapshots, shard_leases, cluster_nodes)
 * with chat's (realms, users, streams, subscriptions, messages, the message id sequence), so it stays here whole, a
 * snapshot of history, rather than split between the domains. Never edited: later changes are new migrations.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("realms")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("string_id", "text", (c) => c.notNull().unique())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("date_created", "bigint", (c) => c.notNull())
    .addColumn("deactivated", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("settings", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .execute();

  await db.schema
    .createTable("users")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("email", "text", (c) => c.notNull())
    .addColumn("delivery_email", "text", (c) => c.notNull())
    .addColumn("full_name", "text", (c) => c.notNull())
    .addColumn("role", "integer", (c) => c.notNull())
    .addColumn("is_active", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("is_bot", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("bot_type", "integer")
    .addColumn("bot_owner_id", "integer")
    .addColumn("api_key_hash", "text", (c) => c.notNull())
    .addColumn("api_key_enc", "text", (c) => c.notNull())
    .addColumn("password_hash", "text")
    .addColumn("date_joined", "bigint", (c) => c.notNull())
    .addColumn("timezone", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("avatar_version", "integer", (c) => c.notNull().defaultTo(1))
    .execute();
  await sql`create unique index users_realm_email on users (realm_id, lower(delivery_email))`.execute(db);

  await db.schema
    .createTable("streams")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("description", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("rendered_description", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("invite_only", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("is_web_public", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("history_public_to_subscribers", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("creator_id", "integer")
    .addColumn("date_created", "bigint", (c) => c.notNull())
    .addColumn("message_retention_days", "integer")
    .addColumn("settings", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .execute();
  await sql`create unique index streams_realm_name on streams (realm_id, lower(name))`.execute(db);

  await db.schema
    .createTable("user_groups")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("description", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("is_system_group", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("deactivated", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("creator_id", "integer")
    .addColumn("date_created", "bigint")
    .addColumn("settings", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .execute();
  await sql`create unique index user_groups_realm_name on user_groups (realm_id, lower(name))`.execute(db);
  await db.schema
    .createTable("user_group_members")
    .addColumn("group_id", "integer", (c) => c.notNull().references("user_groups.id"))
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addPrimaryKeyConstraint("user_group_members_pk", ["group_id", "user_id"])
    .execute();
  await db.schema
    .createTable("user_group_subgroups")
    .addColumn("group_id", "integer", (c) => c.notNull().references("user_groups.id"))
    .addColumn("subgroup_id", "integer", (c) => c.notNull().references("user_groups.id"))
    .addPrimaryKeyConstraint("user_group_subgroups_pk", ["group_id", "subgroup_id"])
    .execute();

  await db.schema
    .createTable("subscriptions")
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("stream_id", "integer", (c) => c.notNull().references("streams.id"))
    .addColumn("active", "boolean", (c) => c.notNull().defaultTo(true))
    .addColumn("color", "text", (c) => c.notNull())
    .addColumn("is_muted", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("pin_to_top", "boolean", (c) => c.notNull().defaultTo(false))
    .addPrimaryKeyConstraint("subscriptions_pk", ["user_id", "stream_id"])
    .execute();
  await sql`create index subscriptions_stream on subscriptions (stream_id) where active`.execute(db);

  // Message ids come from the store in blocks of 256 (see MessageLog.allocateMessageIds in actors/chat/message-log.ts).
  await sql`create sequence message_id_blocks start with 1 increment by 256`.execute(db);
  await db.schema
    .createTable("messages")
    .addColumn("id", "bigint", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull())
    .addColumn("sender_id", "integer", (c) => c.notNull())
    .addColumn("recipient_type", "text", (c) => c.notNull())
    .addColumn("recipient_id", "integer", (c) => c.notNull())
    .addColumn("stream_id", "integer")
    .addColumn("topic", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("content", "text", (c) => c.notNull())
    .addColumn("rendered_content", "text", (c) => c.notNull())
    .addColumn("date_sent", "bigint", (c) => c.notNull())
    .addColumn("sending_client", "text", (c) => c.notNull())
    .addColumn("send_key", "text", (c) => c.unique())
    .execute();
  await sql`create index messages_stream_topic on messages (stream_id, lower(topic), id)`.execute(db);
  await sql`create index messages_recipient on messages (recipient_id, id)`.execute(db);
  await sql`create index messages_stream_id on messages (stream_id, id)`.execute(db);

  await db.schema
    .createTable("actor_snapshots")
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("key", "text", (c) => c.notNull())
    .addColumn("version", "integer", (c) => c.notNull())
    .addColumn("state", "jsonb", (c) => c.notNull())
    .addColumn("updated_at", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("actor_snapshots_pk", ["kind", "key"])
    .execute();

  await db.schema
    .createTable("shard_leases")
    .addColumn("shard", "integer", (c) => c.primaryKey())
    .addColumn("owner", "text")
    .addColumn("epoch", "bigint", (c) => c.notNull().defaultTo(0))
    .addColumn("expires_at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable("cluster_nodes")
    .addColumn("node_id", "text", (c) => c.primaryKey())
    .addColumn("worker_index", "integer", (c) => c.notNull())
    .addColumn("seen_at", "timestamptz", (c) => c.notNull())
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
