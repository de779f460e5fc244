/*
 * Frozen snapshot: a shipped migration, never edited. chorus_append_user_events is kept in the schema for a node of
 * an earlier version during a rolling upgrade; the live statement is defined once, in actors/chat/message-log.ts
 * (APPEND_USER_EVENTS).
 */
import { sql, type Kysely } from "kysely";

/**
 * chorus_append_user_events takes the batch's payloads as one JSON array instead of an array of jsonb values. The
 * array form had to be quoted element by element on our side: for a fan-out to 10,000 queues, one JSON.stringify of
 * the batch costs about a seventh of 10,000 quoted JSON texts (5 against 35-50 ms of a worker's CPU). Otherwise as in
 * 2026-11-23T2200-append-functions: fenced rows only, a repeated (user_id, seq) kept once, the leases answered.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`drop function chorus_append_user_events(integer[], bigint[], jsonb[], integer[], bigint[], text[])`.execute(db);
  await sql`
    create function chorus_append_user_events(
      p_user_id integer[], p_seq bigint[], p_payloads jsonb, p_shard integer[], p_epoch bigint[], p_node text[])
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
          select t.user_id, t.seq, p.payload
          from unnest(p_user_id, p_seq, p_shard, p_epoch, p_node) with ordinality as t(user_id, seq, f_shard, f_epoch, f_node, ord)
          join jsonb_array_elements(p_payloads) with ordinality as p(payload, ord) on p.ord = t.ord
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
