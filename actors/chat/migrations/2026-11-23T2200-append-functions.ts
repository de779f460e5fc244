/*
 * Frozen snapshot: a shipped migration, never edited. Its function bodies are the append statements as they were
 * on this date; both functions were replaced since, and the live statements are defined once, in
 * actors/chat/message-log.ts (APPEND_MESSAGES, APPEND_USER_EVENTS). Paths below are where code lived then.
 */
import { sql, type Kysely } from "kysely";

/**
 * The group commits of messages and of user events (runtime/store/sql-store.ts) as PL/pgSQL functions. The
 * statements are the same as before; inside a function their plans are prepared once per session and reused, where
 * a statement sent from the client is planned again on every call. For a commit of one or two messages, planning
 * was over half the cost (on PGlite 0.8-1.1 ms per commit as a statement, 0.38 ms through the function).
 *
 * Both take their rows as column arrays and fence them the same way: `lease` reads the batch's shard leases FOR
 * SHARE (a takeover, which updates the row, waits for this commit) and only rows whose fence matches the lease are
 * written. Both answer the leases they read, so the caller can refuse the rows of a stale fence.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // chorus_append_messages: the messages, skipping a send_key already stored (a redelivered send); the recipients'
  // flag rows of the messages actually inserted. Answers the leases ('lease'), the messages inserted ('inserted')
  // and those stored earlier under the batch's send_keys ('earlier': the statement does not see its own inserts).
  await sql`
    create function chorus_append_messages(
      p_id bigint[], p_realm_id integer[], p_sender_id integer[], p_recipient_type text[], p_recipient_id integer[],
      p_stream_id integer[], p_topic text[], p_content text[], p_rendered_content text[], p_date_sent bigint[],
      p_sending_client text[], p_send_key text[], p_shard integer[], p_epoch bigint[], p_node text[],
      r_user_id integer[], r_message_id bigint[], r_flags integer[], p_send_keys text[])
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
          insert into user_messages (user_id, message_id, flags)
          select r.user_id, r.message_id, r.flags from unnest(r_user_id, r_message_id, r_flags) as r(user_id, message_id, flags)
          -- A message inserted just now has no flag rows yet: a plain insert, cheaper than ON CONFLICT's speculative one.
          where r.message_id in (select n.id from new_messages n)
        )
        select 'lease'::text, l.shard, l.owner, l.epoch, null::bigint, null::text from lease l
        union all select 'inserted', null, null, null, n.id, n.send_key from new_messages n
        union all select 'earlier', null, null, null, m.id, m.send_key from messages m where m.send_key = any(p_send_keys);
    end
    $fn$`.execute(db);

  // chorus_append_user_events: the events; a repeated (user_id, seq) is kept once. Answers the leases.
  await sql`
    create function chorus_append_user_events(
      p_user_id integer[], p_seq bigint[], p_payload jsonb[], p_shard integer[], p_epoch bigint[], p_node text[])
    returns table(shard integer, owner text, epoch bigint)
    language plpgsql as $fn$
    #variable_conflict use_column
    begin
      return query
        with lease as (
          select l.shard, l.owner, l.epoch from shard_leases l where l.shard = any(p_shard) for share
        ),
        new_events as (
          insert into user_events (user_id, seq, payload)
          select t.user_id, t.seq, t.payload
          from unnest(p_user_id, p_seq, p_payload, p_shard, p_epoch, p_node) as t(user_id, seq, payload, f_shard, f_epoch, f_node)
          join lease l on l.shard = t.f_shard and l.epoch = t.f_epoch and l.owner = t.f_node
          on conflict (user_id, seq) do nothing
        )
        select l.shard, l.owner, l.epoch from lease l;
    end
    $fn$`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
