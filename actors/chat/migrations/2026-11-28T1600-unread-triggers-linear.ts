import { sql, type Kysely } from "kysely";

/**
 * The unread table's triggers (2026-11-28T0800) in statements whose every plan is linear in the rows a statement
 * wrote. PL/pgSQL plans a trigger's statements once per session, and the planner takes a transition table for one
 * row: the insert's `messages.id in (select message_id from new_rows …)` became a nested loop that scanned new_rows
 * once per row of new_rows. A group commit's flag rows are thousands under load (100 members × a batch of messages),
 * so the commit took seconds (13,000 rows: 9.2 s, 84 million comparisons), commits grew, and channel fan-out fell
 * to a third (docs/performance.md). The update's join of new_rows with old_rows, and the move's, had the same shape.
 *
 * Each statement now joins a transition table only to an indexed table (one index probe per row: messages by id,
 * unread_messages by its keys), or groups it (a hash or sort):
 * - an insert of flag rows: each unread row with its message's columns (the message looked up per row);
 * - an update of flag rows: rows now read leave the table; rows now unread are inserted, or their flags updated,
 *   which also covers the rows whose flags changed while unread (old_rows is not read);
 * - a move: the messages whose channel, topic or recipient changed are found by grouping old and new rows by id;
 *   their lists are expanded, and the unread rows that differ from their message's new columns are updated.
 * Behaviour is unchanged: the same rows in the same table (test/gateway/chat/messages/unread-table.test.ts).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function unread_messages_follow_flags() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        insert into unread_messages (user_id, message_id, stream_id, recipient_id, topic, flags)
        select n.user_id, n.message_id, m.stream_id, m.recipient_id, m.topic, n.flags
        from new_rows n join messages m on m.id = n.message_id
        where (n.flags & 1) = 0;
      elsif tg_op = 'DELETE' then
        delete from unread_messages u using old_rows o
        where u.user_id = o.user_id and u.message_id = o.message_id and (o.flags & 1) = 0;
      else
        delete from unread_messages u using new_rows n
        where u.user_id = n.user_id and u.message_id = n.message_id and (n.flags & 1) <> 0;
        insert into unread_messages (user_id, message_id, stream_id, recipient_id, topic, flags)
        select n.user_id, n.message_id, m.stream_id, m.recipient_id, m.topic, n.flags
        from new_rows n join messages m on m.id = n.message_id
        where (n.flags & 1) = 0
        on conflict (user_id, message_id) do update set flags = excluded.flags
        where unread_messages.flags <> excluded.flags;
      end if;
      return null;
    end $$`.execute(db);
  await sql`
    create or replace function unread_messages_follow_messages() returns trigger language plpgsql as $$
    declare
      moved bigint[];
    begin
      if tg_op = 'DELETE' then
        delete from unread_messages u using old_rows o where u.message_id = o.id;
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
        from new_rows n
        where u.message_id = n.id
          and (u.stream_id is distinct from n.stream_id or u.recipient_id <> n.recipient_id or u.topic <> n.topic);
      end if;
      return null;
    end $$`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
