import { sql, type Kysely } from "kysely";

/**
 * A version number per realm that changes whenever one of its channels' rows changes (created, renamed, archived,
 * its settings and permission groups, its subscriber count: everything Zulip's channel object is made of). Kept by
 * statement triggers on `streams`, so every writer on every worker bumps it in the transaction that changes the rows
 * (the subscriber-count trigger on `subscriptions` included, as it updates `streams`), and a worker that cached the
 * realm's serialized channel objects (actors/chat/reads/channel-lists.ts) knows with one single-row read whether its
 * copy is current: POST /register built 1,000 channel objects three times a register (issue 28). One bump per realm
 * per statement whatever the number of rows. Idempotent (`if not exists`, `or replace`): the read migrations' test
 * forgets and re-runs it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create table if not exists channel_versions (realm_id integer primary key, version bigint not null)`.execute(db);
  // The transition tables exist only for their own operation: each branch reads the one its trigger has.
  await sql`
    create or replace function streams_bump_channel_version() returns trigger language plpgsql as $$
    begin
      if tg_op = 'INSERT' then
        insert into channel_versions (realm_id, version) select distinct realm_id, 1 from new_rows
        on conflict (realm_id) do update set version = channel_versions.version + 1;
      elsif tg_op = 'DELETE' then
        insert into channel_versions (realm_id, version) select distinct realm_id, 1 from old_rows
        on conflict (realm_id) do update set version = channel_versions.version + 1;
      else
        insert into channel_versions (realm_id, version)
        select realm_id, 1 from new_rows union select realm_id, 1 from old_rows
        on conflict (realm_id) do update set version = channel_versions.version + 1;
      end if;
      return null;
    end $$`.execute(db);
  for (const [name, event, tables] of [
    ["streams_channel_version_insert", "insert", "new table as new_rows"],
    ["streams_channel_version_delete", "delete", "old table as old_rows"],
    ["streams_channel_version_update", "update", "old table as old_rows new table as new_rows"],
  ] as const) {
    await sql`drop trigger if exists ${sql.id(name)} on streams`.execute(db);
    await sql`create trigger ${sql.id(name)} after ${sql.raw(event)} on streams referencing ${sql.raw(tables)} for each statement execute function streams_bump_channel_version()`.execute(db);
  }
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
