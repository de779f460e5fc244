import { sql, type Kysely } from "kysely";

/**
 * The indexes GET /messages needs for the narrows that had none (issue 28; plans in docs/reads.md): `sender:` walks
 * the sender's messages newest first, and `is:starred`, `is:mentioned` and `is:alerted` walk the reader's flag rows
 * that have the flag (as `is:unread` already walks user_messages_unread), instead of every message the reader can
 * read: on 1,000,000 messages, a starred page read 230,000 rows for its 21 (0.5-2.4 s). Partial indexes, as Zulip's,
 * hold only the rows with the flag. Their predicates are spelled as the reads spell them (actors/chat/reads/messages.ts).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index messages_sender on messages (sender_id, id)`.execute(db);
  await sql`create index user_messages_starred on user_message_rows (user_id, message_id) where (flags & 2) <> 0`.execute(db);
  await sql`create index user_messages_mentioned on user_message_rows (user_id, message_id) where (flags & 56) <> 0`.execute(db);
  await sql`create index user_messages_alerted on user_message_rows (user_id, message_id) where (flags & 64) <> 0`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
