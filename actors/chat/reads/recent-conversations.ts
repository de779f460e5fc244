/**
 * POST /register's `recent_private_conversations`: the reader's direct-message conversations, newest first, each
 * with the id of its newest message and its other members' ids (none for the reader's conversation with
 * themselves), at most RECENT_CONVERSATIONS_LIMIT. Clients list their direct messages from it (the mobile app's
 * "Direct messages" screen) and keep it current from message events.
 *
 * Zulip reads it from the reader's 1,000 newest direct messages (zerver/lib/message.py,
 * get_recent_private_conversations), so that one busy conversation can hide every other; here each conversation's
 * newest message is one probe of messages_recipient, and every conversation is listed, newest first, up to the
 * limit. The reader receives every message of a conversation they are in, so its newest is the reader's too.
 */
import type { Kysely } from "kysely";
import { queryPlannedOnce } from "../../../runtime/store/db.ts";
import type { Database } from "../../schema.ts";

const RECENT_CONVERSATIONS_LIMIT = 1_000;

/** The statement, for the reader ($1): planned once per connection, its plan the same whatever the reader. */
const RECENT_CONVERSATIONS_TEXT = `
  select newest.id as max_message_id,
    array(select o.user_id from recipient_members o where o.recipient_id = mine.recipient_id and o.user_id <> $1::int order by o.user_id) as user_ids
  from recipient_members mine
  cross join lateral (select m.id from messages m where m.recipient_id = mine.recipient_id order by m.id desc limit 1) newest
  where mine.user_id = $1::int
  order by newest.id desc
  limit ${RECENT_CONVERSATIONS_LIMIT}`;

export async function recentPrivateConversations(db: Kysely<Database>, userId: number): Promise<Array<{ max_message_id: number; user_ids: number[] }>> {
  const rows = await queryPlannedOnce<{ max_message_id: string | number; user_ids: number[] }>(db, RECENT_CONVERSATIONS_TEXT, [userId]);
  return rows.map((r) => ({ max_message_id: Number(r.max_message_id), user_ids: r.user_ids.map(Number) }));
}
