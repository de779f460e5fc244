import { sql, type Kysely } from "kysely";

/**
 * The unread table (2026-11-28T0800) without its index by message: moves and deletions of messages reach their
 * unread rows through the flag rows instead (`user_messages_message`, one probe of the unread table's primary key
 * per recipient), as the flag rows' own triggers already do.
 *
 * Why: every unread flag row a send writes inserted into five indexes (three of the flag rows', two of the unread
 * table's), and the index by message was the one read only by moves and deletions. On PGlite a channel message's
 * flag rows cost 36-42 µs each with it and 31-32 µs without it (400 rows a commit, the unread triggers on;
 * docs/performance.md, 2026-12-01): a fan-out's deliveries are mostly those rows on the embedded engine.
 *
 * The statements, each linear in the rows it changes (see 2026-11-28T1600):
 * - a move: the moved messages' lists are expanded first (as before), then each moved message's flag rows are
 *   found by message and their unread rows by primary key;
 * - a deletion: the deleted messages' flag rows, if any are still there, lead to their unread rows. The message
 *   log deletes the flag rows in a statement of their own before the messages (their trigger drops the unread
 *   rows then), so this finds none there; it keeps the table right for a writer that deletes the messages first.
 * Behaviour is unchanged: the same rows in the same table (test/gateway/chat/messages/unread-table.test.ts).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function unread_messages_follow_messages() returns trigger language plpgsql as $$
    declare
      moved bigint[];
    begin
      if tg_op = 'DELETE' then
        delete from unread_messages u using old_rows o join user_message_rows r on r.message_id = o.id
        where u.user_id = r.user_id and u.message_id = r.message_id;
      else
        moved := array(
          select id from (
            select id, coalesce(stream_id, -1) as stream_id, recipient_id, topic from new_rows
            union all
            select id, coalesce(stream_id, -1), recipient_id, topic from old_rows
          ) r
          group by id
          having min(stream_id) <> max(stream_id) or min(recipient_id) <> max(recipient_id) or min(topic) <> max(topic));
        if cardinality(moved) = 0 then
          return null;
        end if;
        -- A moved message's recipients still listed are expanded here first (see 2026-11-28T0800 for the race with
        -- an expansion in another transaction).
        perform chorus_expand_recipient_lists(moved, null);
        update unread_messages u set stream_id = n.stream_id, recipient_id = n.recipient_id, topic = n.topic
        from new_rows n join user_message_rows r on r.message_id = n.id
        where n.id = any(moved) and u.user_id = r.user_id and u.message_id = r.message_id
          and (u.stream_id is distinct from n.stream_id or u.recipient_id <> n.recipient_id or u.topic <> n.topic);
      end if;
      return null;
    end $$`.execute(db);
  await sql`drop index if exists unread_messages_message`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
