import { sql, type Kysely } from "kysely";

/**
 * `unread_messages`: one row per unread flag row (`user_message_rows` without the read bit), with the message's
 * channel, topic and recipient beside it, so that POST /register's `unread_msgs` is one index range of the user's
 * rows with no lookup of messages (issue 28: the lookups of 50,001 messages were most of a 100,000-unread register).
 *
 * Kept by statement triggers in the writers' own transactions, on both engines alike:
 * - on `user_message_rows`: every insert (the group commit's rows, the recipient lists' expansion, historical rows,
 *   a move's new readers), update (mark read / unread, changed mentions) and delete (deleted messages, a move's
 *   lost readers) of a row, whoever writes it (a node of the previous version too, during a rolling upgrade);
 * - on `messages`: a move (channel, topic or recipient changed) carries the rows along; a deleted message's go.
 * Transition tables make each one statement per writing statement, whatever the rows. Rows of unsubscribed
 * channels stay (Zulip keeps their flags): the read leaves them out. Recipients still listed in
 * `user_message_lists` have no rows here until expanded (the expansion's insert adds them): the read adds them.
 *
 * Existing unread rows are copied once here, after the triggers exist, in the migration's transaction: creating the
 * triggers locks out writers of both tables until it commits, reads go on. Idempotent (the read migrations' tests
 * re-run it): the copy is made again.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create table if not exists unread_messages (
      user_id integer not null,
      message_id bigint not null,
      stream_id integer,
      recipient_id integer not null,
      topic text not null,
      flags integer not null,
      primary key (user_id, message_id)
    )`.execute(db);
  // Moves and deletions find the rows by message.
  await sql`create index if not exists unread_messages_message on unread_messages (message_id)`.execute(db);

  // Rows go in with their message's columns, looked up once per message (a recipient list's expansion inserts
  // thousands of rows of one message). An insert of flag rows is a plain insert: a flag row inserted is new (the
  // writers that may meet an existing one skip it, and a skipped row is not in the transition table). An update
  // inserts the rows that became unread and updates the flags of those still unread. The transition tables exist
  // only for their own operation.
  await sql`
    create or replace function unread_messages_follow_flags() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        insert into unread_messages (user_id, message_id, stream_id, recipient_id, topic, flags)
        select n.user_id, n.message_id, m.stream_id, m.recipient_id, m.topic, n.flags
        from new_rows n
        join (select id, stream_id, recipient_id, topic from messages where id in (select message_id from new_rows where (flags & 1) = 0)) m
          on m.id = n.message_id
        where (n.flags & 1) = 0;
      elsif tg_op = 'DELETE' then
        delete from unread_messages u using old_rows o
        where u.user_id = o.user_id and u.message_id = o.message_id and (o.flags & 1) = 0;
      else
        delete from unread_messages u using new_rows n
        where u.user_id = n.user_id and u.message_id = n.message_id and (n.flags & 1) <> 0;
        insert into unread_messages (user_id, message_id, stream_id, recipient_id, topic, flags)
        select n.user_id, n.message_id, m.stream_id, m.recipient_id, m.topic, n.flags
        from new_rows n
        join old_rows o on o.user_id = n.user_id and o.message_id = n.message_id and o.flags <> n.flags
        join messages m on m.id = n.message_id
        where (n.flags & 1) = 0
        on conflict (user_id, message_id) do update set flags = excluded.flags;
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
          select n.id from new_rows n join old_rows o on o.id = n.id
          where n.stream_id is distinct from o.stream_id or n.recipient_id <> o.recipient_id or n.topic <> o.topic);
        if cardinality(moved) = 0 then
          return null;
        end if;
        -- A moved message's recipients still listed are expanded here first. An expansion running meanwhile in
        -- another transaction inserted its rows with the message's columns as they were before this move, and
        -- those rows are not visible to the update below until it commits: expanding waits for it (it holds the
        -- list's lock), and the update, a statement of its own, then sees its rows. An expansion that starts after
        -- this one waits for this transaction and finds the list gone.
        perform chorus_expand_recipient_lists(moved, null);
        update unread_messages u set stream_id = n.stream_id, recipient_id = n.recipient_id, topic = n.topic
        from new_rows n
        where u.message_id = n.id and n.id = any(moved);
      end if;
      return null;
    end $$`.execute(db);
  for (const [table, name, event, tables, fn] of [
    ["user_message_rows", "unread_messages_flags_insert", "insert", "new table as new_rows", "unread_messages_follow_flags"],
    ["user_message_rows", "unread_messages_flags_update", "update", "old table as old_rows new table as new_rows", "unread_messages_follow_flags"],
    ["user_message_rows", "unread_messages_flags_delete", "delete", "old table as old_rows", "unread_messages_follow_flags"],
    ["messages", "unread_messages_moves", "update", "old table as old_rows new table as new_rows", "unread_messages_follow_messages"],
    ["messages", "unread_messages_deletions", "delete", "old table as old_rows", "unread_messages_follow_messages"],
  ] as const) {
    await sql`drop trigger if exists ${sql.id(name)} on ${sql.table(table)}`.execute(db);
    await sql`create trigger ${sql.id(name)} after ${sql.raw(event)} on ${sql.table(table)} referencing ${sql.raw(tables)} for each statement execute function ${sql.id(fn)}()`.execute(db);
  }

  await sql`delete from unread_messages`.execute(db);
  await sql`
    insert into unread_messages (user_id, message_id, stream_id, recipient_id, topic, flags)
    select um.user_id, um.message_id, m.stream_id, m.recipient_id, m.topic, um.flags
    from user_message_rows um join messages m on m.id = um.message_id
    where (um.flags & 1) = 0
    order by um.user_id, um.message_id`.execute(db);
  await sql`analyze unread_messages`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
