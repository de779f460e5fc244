import { sql, type Kysely } from "kysely";

/**
 * The words of the stored search documents (issue 28), so that the word a search ends with, matched as a prefix,
 * is expanded to the words it starts (`coff` → `coffe | coffeehous`) before the GIN index is asked: a prefix
 * (`coffe:*`) is a partial match in GIN, every posting list of every matching word read into one bitmap with no
 * skipping (230-265 ms at 10,000,000 messages for `budget & coffe:*`, a common word and a common prefix); whole words
 * OR-ed let GIN's AND skip through the lists (0.1 ms for `budget & coffe`).
 *
 * - `search_words`: every lexeme of every stored document but numbers (never removed: a word no document holds any
 *   more matches nothing), its own collation "C" so that a prefix is a range of the primary key. Numbers (a lexeme of
 *   digits only) are left out: every message of a log or a ticket system holds new ones, and a prefix of digits,
 *   which alone could start one, stays a prefix (`12:*`).
 * - Kept by statement triggers over the rows a statement inserted or updated (transition tables): one statement per
 *   group commit, not per message. The documents stored before this migration are read by the background fill
 *   (actors/chat/search-fill.ts), restarted here when the store holds messages; until it is done, searches read as
 *   before (the parsed document through messages_search, the prefix as `:*`).
 * - `search_prefix_query(query, most)`: the query with each lexeme expanded to the words starting with it, or left a
 *   prefix when more than `most` do (a short prefix: its posting lists are many anyway).
 * - `search_share(query)`: the share of messages a query matches, as the planner estimates it.
 * - The expression index of 2026-11-28T0100 (messages_search) is dropped once the fill is done (here on a store
 *   whose fill has nothing to do, else by the fill): every insert computed the document twice, for the trigger's
 *   column and for that index.
 */
export async function up(db: Kysely<any>): Promise<void> {
  // Run again (the migrations' tests), a store whose words are kept already keeps them: no fill to restart.
  const { rows: had } = await sql<{ words: boolean }>`select to_regclass('search_words') is not null as words`.execute(db);
  await sql`create table if not exists search_words (word text collate "C" primary key)`.execute(db);
  await sql`
    create or replace function messages_search_words() returns trigger language plpgsql as $$
    begin
      insert into search_words (word)
      select distinct w.word from new_rows, unnest(tsvector_to_array(new_rows.search_document)) w(word)
      where new_rows.search_document is not null and w.word !~ '^[0-9]+$'
      on conflict do nothing;
      return null;
    end $$`.execute(db);
  // One event per trigger: Postgres refuses transition tables on a trigger of several events or with columns.
  await sql`drop trigger if exists messages_search_words_insert on messages`.execute(db);
  await sql`
    create trigger messages_search_words_insert after insert on messages
    referencing new table as new_rows for each statement execute function messages_search_words()`.execute(db);
  await sql`drop trigger if exists messages_search_words_update on messages`.execute(db);
  await sql`
    create trigger messages_search_words_update after update on messages
    referencing new table as new_rows for each statement execute function messages_search_words()`.execute(db);
  await sql`
    create or replace function search_prefix_query(query tsquery, most integer) returns tsquery language plpgsql stable as $$
    declare
      rest text := query::text;
      result text := '';
      part text[];
      lexeme text;
      words text[];
    begin
      loop
        part := regexp_match(rest, '^(.*?)(''(?:[^'']|'''')*'')(:\\*)?(.*)$', 's');
        exit when part is null;
        lexeme := (tsvector_to_array(part[2]::tsvector))[1];
        words := null;
        if lexeme ~ '^[0-9]+$' then
          -- Numbers are not kept (search_words): a prefix of digits stays a prefix.
          result := result || part[1] || part[2] || ':*';
          rest := part[4];
          continue;
        end if;
        select array_agg('''' || replace(replace(w.word, '\\', '\\\\'), '''', '''''') || '''') into words
        from (select word from search_words where word > lexeme collate "C" and word < (lexeme || chr(1114111)) collate "C" order by word limit most + 1) w;
        result := result || part[1] || case
          when coalesce(cardinality(words), 0) > most then part[2] || ':*'
          when words is null then part[2]
          else '(' || array_to_string(array_prepend(part[2], words), ' | ') || ')' end;
        rest := part[4];
      end loop;
      return (result || rest)::tsquery;
    end $$`.execute(db);
  // The share of the messages a query matches, as the planner estimates it (its statistics of the stored documents'
  // lexemes): whether a search page walks the nearest messages first or asks the index first (reads/messages.ts).
  await sql`
    create or replace function search_share(query tsquery) returns float8 language plpgsql volatile as $$
    declare
      plan json;
      total float8;
    begin
      execute format('explain (format json) select 1 from messages where search_document @@ %L::tsquery', query::text) into plan;
      select reltuples into total from pg_class where oid = 'messages'::regclass;
      return (plan->0->'Plan'->>'Plan Rows')::float8 / greatest(total, 1);
    end $$`.execute(db);
  const { rows } = await sql<{ below: string | null; any: boolean }>`
    select (select below from message_search_fill where id = 1) as below, exists (select 1 from messages) as any`.execute(db);
  if (rows[0]!.below === null && rows[0]!.any && !had[0]!.words) {
    // The documents are all stored, but their words not: the fill reads them again (searches parse as before meanwhile).
    await sql`update message_search_fill set below = (select max(id) + 1 from messages) where id = 1`.execute(db);
  } else if (rows[0]!.below === null) {
    await sql`drop index if exists messages_search`.execute(db);
  }
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
