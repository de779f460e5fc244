import { sql, type Kysely } from "kysely";

/**
 * The search document stored (issue 28): `messages.search_document`, the tsvector of `topic || ' ' || content` that
 * the expression index of 2026-11-28T0100 indexes, kept in the row and indexed itself. At 10,000,000 messages a
 * common word's bitmap went lossy and every row of a lossy block was parsed again (`to_tsvector`) to recheck it, 2-3 s
 * a search; the stored document is read instead, and a newest-first walk can test rows against it cheaply
 * (actors/chat/reads/search.ts).
 *
 * Made for a store that already holds millions of messages without holding writers for long:
 * - the column is added nullable, no default: no rewrite, an instant catalog change;
 * - a row trigger fills it on every insert and on every update of topic or content (the group commit's inserts,
 *   edits, topic moves, any other writer), in the writer's own statement;
 * - the index is partial (`where search_document is not null`): built here while every existing row is null, it
 *   reads the table once and indexes nothing;
 * - the existing rows are filled afterwards, newest first, in small transactions of their own
 *   (actors/chat/search-fill.ts), from `message_search_fill.below`: every message with an id below it may still be
 *   unfilled; null once the fill is done. Until then a search matches the document parsed again, as before, through
 *   the expression index of 2026-11-28T0100, which covers every row (reads/search.ts `searchCondition`).
 * Idempotent (the read migrations' test re-runs it over a store whose documents it emptied): the fill starts over.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table messages add column if not exists search_document tsvector`.execute(db);
  await sql`
    create or replace function messages_search_document() returns trigger language plpgsql as $$
    begin
      new.search_document := to_tsvector('english'::regconfig, new.topic || ' ' || new.content);
      return new;
    end $$`.execute(db);
  await sql`drop trigger if exists messages_search_document on messages`.execute(db);
  await sql`
    create trigger messages_search_document before insert or update of topic, content on messages
    for each row execute function messages_search_document()`.execute(db);
  await sql`create index if not exists messages_search_document on messages using gin (search_document) where search_document is not null`.execute(db);
  await sql`create table if not exists message_search_fill (id integer primary key check (id = 1), below bigint)`.execute(db);
  await sql`
    insert into message_search_fill (id, below)
    select 1, (select max(id) + 1 from messages where search_document is null)
    on conflict (id) do update set below = excluded.below`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
