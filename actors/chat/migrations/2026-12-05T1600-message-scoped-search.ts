import { sql, type Kysely } from "kysely";

/**
 * A message's search words scoped to its conversation (issue 28): `messages.scoped_document`, each lexeme of the
 * stored search document prefixed with where the message is, `s<stream id>:` for a channel's message and
 * `r<recipient id>:` for a direct message's (`s17:budget`), without positions, in a GIN index of its own.
 *
 * Why: a search without a channel may find only what the reader's channels and conversations hold (50 of 1,000
 * channels for the bench's reader), but the document's index answers for the whole store: two common words rare
 * together cost their whole posting lists (`budget coff`: 655,000 entries each at 10,000,000 messages, 94-101 ms)
 * whatever the reader may read. Asked per scope, one small index scan for each of the reader's channels and
 * conversations (reads/search.ts `scopedQueries`), the lists read are those channels' shares of the words'.
 * English lexemes never hold a colon (the parser splits at it), so a scoped lexeme is never a word a search asks for.
 *
 * Made as 2026-11-28T0900 made the document, for a store that already holds millions of messages:
 * - the column is added nullable, no default (no rewrite);
 * - a row trigger fills it on insert and on every update of the document's text or of where the message is (a
 *   message moved to another channel). It is named after the document's trigger, `messages_search_document`, and
 *   Postgres fires a table's BEFORE triggers in name order: the document is computed first;
 * - the index is partial (`where scoped_document is not null`), built here over null rows, and without GIN's
 *   pending list (`fastupdate = off`): a search scans it once per scope, and each scan reads the whole pending list
 *   (at 10,000,000 messages, 293 pages made a search of no match 50 times slower). Each insert then writes its
 *   entries into the tree, a few µs more of Postgres an append (docs/reads.md, 2026-12-05 15:00).
 * - the existing rows are filled afterwards in the background (actors/chat/search-fill.ts), from
 *   `message_search_fill.scoped_below`: a message below it may still have none; null once done. Until then searches
 *   do not ask the scoped index (reads/messages.ts).
 * Idempotent: run again, the fill starts over.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table messages add column if not exists scoped_document tsvector`.execute(db);
  await sql`
    create or replace function message_scoped_document(document tsvector, stream_id bigint, recipient_id bigint) returns tsvector
    language sql immutable as $$
      select array_to_tsvector(array(
        select case when stream_id is not null then 's' || stream_id else 'r' || recipient_id end || ':' || w
        from unnest(tsvector_to_array(document)) w))
    $$`.execute(db);
  await sql`
    create or replace function messages_search_document_scoped() returns trigger language plpgsql as $$
    begin
      new.scoped_document := message_scoped_document(
        coalesce(new.search_document, to_tsvector('english'::regconfig, new.topic || ' ' || new.content)), new.stream_id, new.recipient_id);
      return new;
    end $$`.execute(db);
  await sql`drop trigger if exists messages_search_document_scoped on messages`.execute(db);
  await sql`
    create trigger messages_search_document_scoped before insert or update of topic, content, stream_id, recipient_id on messages
    for each row execute function messages_search_document_scoped()`.execute(db);
  await sql`create index if not exists messages_scoped_document on messages using gin (scoped_document) with (fastupdate = off) where scoped_document is not null`.execute(db);
  // Run again over an index made before, the same.
  await sql`alter index messages_scoped_document set (fastupdate = off)`.execute(db);
  await sql`alter table message_search_fill add column if not exists scoped_below bigint`.execute(db);
  await sql`
    insert into message_search_fill (id, scoped_below)
    select 1, (select max(id) + 1 from messages where scoped_document is null)
    on conflict (id) do update set scoped_below = excluded.scoped_below`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
