/*
 * Frozen snapshot: a shipped migration, never edited. chorus_append_messages is kept in the schema for a node of an
 * earlier version during a rolling upgrade; the live statement is defined once, in actors/chat/message-log.ts
 * (APPEND_MESSAGES). chorus_expand_recipient_lists, defined here only, is live: the message log calls it. Paths
 * below are where code lived when this shipped.
 */
import { sql, type Kysely } from "kysely";

/**
 * A message to many recipients commits their flags as one row, a recipient list, instead of a row each; the list is
 * expanded into per-user rows right after, off the send's critical path (runtime/store/sql-store.ts). Writing
 * 10,000 flag rows was most of a 10,000-subscriber send: 75-175 ms on PGlite, 40-60 ms on Postgres, before any
 * recipient could be told. Zulip's soft deactivation is the precedent for not writing every row at send time.
 *
 * - `user_message_rows` is the former `user_messages` table, renamed: the flag rows themselves.
 * - `user_message_lists`: a committed message's recipients and their initial flags, not expanded yet.
 * - `user_messages` is now a view of both. A statement's snapshot sees a message's recipients either as its list or
 *   as its rows, never both and never neither (the expansion moves them in one statement), so every read through
 *   the view is exact whatever the expansion's progress. Writes go to `user_message_rows`, after expanding the
 *   messages they touch (chorus_expand_recipient_lists).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table user_messages rename to user_message_rows`.execute(db);
  await sql`
    create table user_message_lists (
      message_id bigint primary key,
      user_ids integer[] not null,
      flags integer[] not null
    )`.execute(db);
  await sql`
    create view user_messages as
      select user_id, message_id, flags from user_message_rows
      union all
      select r.user_id, l.message_id, r.flags from user_message_lists l cross join lateral unnest(l.user_ids, l.flags) as r(user_id, flags)`.execute(db);

  // Moves the lists of the given messages (all lists, given null) into rows: every recipient, or the first
  // p_limit recipients in message order (a list partly expanded keeps the rest). Answers how many of those lists'
  // recipients are still listed. Each list is locked first, so two expansions of one list serialise and the second
  // sees what the first left; always in message order, so two expansions of overlapping sets (a flag change and
  // the background expansion) cannot deadlock.
  await sql`
    create function chorus_expand_recipient_lists(p_message_ids bigint[], p_limit integer) returns bigint
    language sql as $fn$
      with locked as (
        select message_id, user_ids, flags from user_message_lists
        where p_message_ids is null or message_id = any(p_message_ids)
        order by message_id
        for update
      ),
      part as (
        select message_id, user_ids, flags, cardinality(user_ids) as size,
          case when p_limit is null then cardinality(user_ids)
            else greatest(0, least(cardinality(user_ids),
              p_limit - coalesce(sum(cardinality(user_ids)) over (order by message_id rows between unbounded preceding and 1 preceding), 0)))
          end as n
        from locked
      ),
      expanded as (
        insert into user_message_rows (user_id, message_id, flags)
        select r.user_id, p.message_id, r.flags from part p cross join lateral unnest(p.user_ids[1:p.n], p.flags[1:p.n]) as r(user_id, flags)
      ),
      emptied as (
        delete from user_message_lists l using part p where l.message_id = p.message_id and p.n = p.size
      ),
      shrunk as (
        update user_message_lists l set user_ids = p.user_ids[p.n + 1:], flags = p.flags[p.n + 1:]
        from part p where l.message_id = p.message_id and p.n > 0 and p.n < p.size
      )
      select coalesce(sum(size - n), 0) from part
    $fn$`.execute(db);

  // chorus_append_messages as in 2026-11-23T2200-append-functions, with two changes.
  // - Recipient lists: message l_message_id[i] lists the recipients l_user_id[l_first[i]:l_last[i]] (and their
  //   flags, alike). Slices of arrays given as they are stored: grouping 10,000 rows into arrays in SQL cost 8 ms
  //   on PGlite, the slices nothing.
  // - It no longer looks up the messages stored earlier under the batch's send_keys: the caller does, in the rare
  //   batch where a send_key was not inserted. That lookup was the only statement whose cached generic plan could
  //   go stale (see 2026-11-24T0100-append-plans), so the function no longer needs `enable_seqscan = off` (whose
  //   save and restore around every call cost about 20 µs of a 530-550 µs one-message commit on PGlite).
  await sql`
    drop function chorus_append_messages(bigint[], integer[], integer[], text[], integer[], integer[], text[], text[], text[],
      bigint[], text[], text[], integer[], bigint[], text[], integer[], bigint[], integer[], text[])`.execute(db);
  await sql`
    create function chorus_append_messages(
      p_id bigint[], p_realm_id integer[], p_sender_id integer[], p_recipient_type text[], p_recipient_id integer[],
      p_stream_id integer[], p_topic text[], p_content text[], p_rendered_content text[], p_date_sent bigint[],
      p_sending_client text[], p_send_key text[], p_shard integer[], p_epoch bigint[], p_node text[],
      r_user_id integer[], r_message_id bigint[], r_flags integer[],
      l_message_id bigint[], l_first integer[], l_last integer[], l_user_id integer[], l_flags integer[])
    returns table(kind text, shard integer, owner text, epoch bigint, id bigint, send_key text)
    language plpgsql as $fn$
    #variable_conflict use_column
    begin
      return query
        with lease as (
          select l.shard, l.owner, l.epoch from shard_leases l where l.shard = any(p_shard) for share
        ),
        message_rows as (
          select t.* from unnest(p_id, p_realm_id, p_sender_id, p_recipient_type, p_recipient_id, p_stream_id, p_topic,
              p_content, p_rendered_content, p_date_sent, p_sending_client, p_send_key, p_shard, p_epoch, p_node)
            with ordinality as t(id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content,
              rendered_content, date_sent, sending_client, send_key, f_shard, f_epoch, f_node, ord)
          join lease l on l.shard = t.f_shard and l.epoch = t.f_epoch and l.owner = t.f_node
        ),
        new_messages as (
          insert into messages as m (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content,
              rendered_content, date_sent, sending_client, send_key)
          select r.id, r.realm_id, r.sender_id, r.recipient_type, r.recipient_id, r.stream_id, r.topic, r.content,
              r.rendered_content, r.date_sent, r.sending_client, r.send_key
          from message_rows r
          order by r.ord -- of two rows with one send_key, the first appended is the one kept
          on conflict (send_key) do nothing
          returning m.id, m.send_key
        ),
        new_flags as (
          insert into user_message_rows (user_id, message_id, flags)
          select r.user_id, r.message_id, r.flags from unnest(r_user_id, r_message_id, r_flags) as r(user_id, message_id, flags)
          -- A message inserted just now has no flag rows yet: a plain insert, cheaper than ON CONFLICT's speculative one.
          where r.message_id in (select n.id from new_messages n)
        ),
        new_lists as (
          insert into user_message_lists (message_id, user_ids, flags)
          select l.message_id, l_user_id[l.first:l.last], l_flags[l.first:l.last]
          from unnest(l_message_id, l_first, l_last) as l(message_id, first, last)
          where l.message_id in (select n.id from new_messages n)
        )
        select 'lease'::text, l.shard, l.owner, l.epoch, null::bigint, null::text from lease l
        union all select 'inserted', null, null, null, n.id, n.send_key from new_messages n;
    end
    $fn$`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
