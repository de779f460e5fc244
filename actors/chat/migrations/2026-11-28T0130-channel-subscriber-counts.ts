import { sql, type Kysely } from "kysely";

/**
 * Each channel's number of active subscriptions as a column of `streams` (Zulip keeps Stream.subscriber_count
 * alike), maintained by statement triggers on `subscriptions` in the writers' own transactions, one update of each
 * channel touched per statement whatever the number of rows. POST /register lists every channel of the realm with its
 * count: counting them per request grouped every subscription of the realm (200,000 rows in a 10,000-user realm, 30-70
 * ms, twice a register; issue 28). Existing counts are computed once here. Idempotent (the read migrations' test
 * re-runs it): the counts are recomputed.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table streams add column if not exists subscriber_count integer not null default 0`.execute(db);
  // The transition tables exist only for their own operation: each branch reads the one its trigger has.
  await sql`
    create or replace function subscriptions_count_subscribers() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        update streams s set subscriber_count = s.subscriber_count + d.n
        from (select stream_id, count(*) as n from new_rows where active group by stream_id) d where s.id = d.stream_id;
      elsif tg_op = 'DELETE' then
        update streams s set subscriber_count = s.subscriber_count - d.n
        from (select stream_id, count(*) as n from old_rows where active group by stream_id) d where s.id = d.stream_id;
      else
        update streams s set subscriber_count = s.subscriber_count + d.n
        from (
          select stream_id, sum(n) as n from (
            select stream_id, 1 as n from new_rows where active
            union all select stream_id, -1 from old_rows where active
          ) changes group by stream_id having sum(n) <> 0
        ) d where s.id = d.stream_id;
      end if;
      return null;
    end $$`.execute(db);
  for (const [name, event, tables] of [
    ["subscriptions_count_insert", "insert", "new table as new_rows"],
    ["subscriptions_count_delete", "delete", "old table as old_rows"],
    ["subscriptions_count_update", "update", "old table as old_rows new table as new_rows"],
  ] as const) {
    await sql`drop trigger if exists ${sql.id(name)} on subscriptions`.execute(db);
    await sql`create trigger ${sql.id(name)} after ${sql.raw(event)} on subscriptions referencing ${sql.raw(tables)} for each statement execute function subscriptions_count_subscribers()`.execute(db);
  }
  await sql`
    update streams s set subscriber_count = coalesce((select count(*) from subscriptions where stream_id = s.id and active), 0)`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
