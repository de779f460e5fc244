/**
 * The message surface: recipients (one id per channel and per direct-message conversation, from one sequence so
 * the two never collide), per-user message rows with their flags, reactions, and edit/move bookkeeping.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<any>): Promise<void> {
  // type 2 = channel (type_id = stream id), 3 = direct-message conversation (dm_key = sorted user ids), as in Zulip.
  await db.schema
    .createTable("recipients")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull())
    .addColumn("type", "smallint", (c) => c.notNull())
    .addColumn("type_id", "integer")
    .addColumn("dm_key", "text")
    .execute();
  await sql`create unique index recipients_stream on recipients (type_id) where type = 2`.execute(db);
  await sql`create unique index recipients_dm on recipients (realm_id, dm_key) where type = 3`.execute(db);
  await db.schema
    .createTable("recipient_members")
    .addColumn("recipient_id", "integer", (c) => c.notNull().references("recipients.id"))
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addPrimaryKeyConstraint("recipient_members_pk", ["recipient_id", "user_id"])
    .execute();
  await sql`create index recipient_members_user on recipient_members (user_id)`.execute(db);

  // Channel messages used the stream id as recipient id until now: give every channel a recipient row.
  await sql`insert into recipients (realm_id, type, type_id) select realm_id, 2, id from streams`.execute(db);
  await sql`update messages set recipient_id = r.id from recipients r where r.type = 2 and r.type_id = messages.stream_id`.execute(db);

  // Zulip's UserMessage: a row per message per user who received it; flags is Zulip's bitfield (see actors/chat/conversations/flags.ts).
  await db.schema
    .createTable("user_messages")
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("message_id", "bigint", (c) => c.notNull())
    .addColumn("flags", "integer", (c) => c.notNull().defaultTo(0))
    .addPrimaryKeyConstraint("user_messages_pk", ["user_id", "message_id"])
    .execute();
  await sql`create index user_messages_unread on user_messages (user_id, message_id) where (flags & 1) = 0`.execute(db);
  await sql`create index user_messages_message on user_messages (message_id)`.execute(db);

  await db.schema
    .createTable("reactions")
    .addColumn("message_id", "bigint", (c) => c.notNull())
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("emoji_name", "text", (c) => c.notNull())
    .addColumn("emoji_code", "text", (c) => c.notNull())
    .addColumn("reaction_type", "text", (c) => c.notNull())
    .addColumn("created", "bigserial")
    .addPrimaryKeyConstraint("reactions_pk", ["message_id", "user_id", "reaction_type", "emoji_code"])
    .execute();

  // Scheduled messages: delivered by the realm's scheduler actor; `send_key` makes a repeated delivery commit once.
  await db.schema
    .createTable("scheduled_messages")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull())
    .addColumn("sender_id", "integer", (c) => c.notNull())
    .addColumn("type", "text", (c) => c.notNull())
    .addColumn("stream_id", "integer")
    .addColumn("to_user_ids", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("topic", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("content", "text", (c) => c.notNull())
    .addColumn("rendered_content", "text", (c) => c.notNull())
    .addColumn("scheduled_timestamp", "bigint", (c) => c.notNull())
    .addColumn("read_by_sender", "boolean")
    .addColumn("status", "text", (c) => c.notNull().defaultTo("pending"))
    .addColumn("delivered_message_id", "bigint")
    .addColumn("failure_message", "text")
    .execute();
  await sql`create index scheduled_messages_due on scheduled_messages (realm_id, scheduled_timestamp) where status = 'pending'`.execute(db);

  // Zulip's UserTopic: a user's visibility policy for one topic (0 inherit, 1 muted, 2 unmuted, 3 followed).
  await db.schema
    .createTable("user_topics")
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("stream_id", "integer", (c) => c.notNull())
    .addColumn("topic_name", "text", (c) => c.notNull())
    .addColumn("topic_key", "text", (c) => c.notNull())
    .addColumn("visibility_policy", "smallint", (c) => c.notNull())
    .addColumn("last_updated", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("user_topics_pk", ["user_id", "stream_id", "topic_key"])
    .execute();

  await db.schema
    .alterTable("messages")
    .addColumn("edit_history", "jsonb")
    .addColumn("last_edit_time", "bigint")
    .addColumn("last_moved_time", "bigint")
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
