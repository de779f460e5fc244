import { sql, type Kysely } from "kysely";

/**
 * Search stems by the realm's language (issue 28): a realm's `default_language` (PATCH /realm, kept in
 * `realms.settings` as `realm_default_language`, English by default) chooses the text search configuration its
 * messages' documents are parsed with, and its searches' queries.
 *
 * - `search_config(language)`: Zulip's language code (`de`, `pt-br`, `zh-hans`) to the configuration of its
 *   stemmer among those Postgres and PGlite both ship, `simple` (words lower-cased, no stemming, no stop words) for
 *   a language without one. Immutable: constants only.
 * - `realms.search_config`: the realm's configuration, set with its language (search-fill.ts `restemRealm`): the
 *   document's trigger reads it for every message inserted, a primary-key lookup (docs/reads.md, 2026-12-05
 *   20:40). `realm_search_config(realm)` reads it.
 * - The document's trigger (2026-11-28T0900) parses with the message's realm's configuration.
 * - `search_restems`: realms whose language changed, each with the bound below which its messages still have
 *   documents parsed with the previous configuration. The background fill (actors/chat/search-fill.ts) parses them
 *   again, newest first, and deletes the row when done. Until then a search of that realm finds in the older
 *   messages only the words whose stems the two languages share.
 *
 * Zulip itself stems every realm as English (its `zulip.english_us_search`); the issue asks for the realm's language.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace function search_config(language text) returns regconfig language sql immutable as $$
      select case regexp_replace(lower(coalesce(language, 'en')), '[-_].*$', '')
        when 'en' then 'english'::regconfig
        when 'ar' then 'arabic'::regconfig
        when 'hy' then 'armenian'::regconfig
        when 'eu' then 'basque'::regconfig
        when 'ca' then 'catalan'::regconfig
        when 'da' then 'danish'::regconfig
        when 'nl' then 'dutch'::regconfig
        when 'fi' then 'finnish'::regconfig
        when 'fr' then 'french'::regconfig
        when 'de' then 'german'::regconfig
        when 'el' then 'greek'::regconfig
        when 'hi' then 'hindi'::regconfig
        when 'hu' then 'hungarian'::regconfig
        when 'id' then 'indonesian'::regconfig
        when 'ga' then 'irish'::regconfig
        when 'it' then 'italian'::regconfig
        when 'lt' then 'lithuanian'::regconfig
        when 'ne' then 'nepali'::regconfig
        when 'nb' then 'norwegian'::regconfig
        when 'nn' then 'norwegian'::regconfig
        when 'no' then 'norwegian'::regconfig
        when 'pt' then 'portuguese'::regconfig
        when 'ro' then 'romanian'::regconfig
        when 'ru' then 'russian'::regconfig
        when 'sr' then 'serbian'::regconfig
        when 'es' then 'spanish'::regconfig
        when 'sv' then 'swedish'::regconfig
        when 'ta' then 'tamil'::regconfig
        when 'tr' then 'turkish'::regconfig
        when 'yi' then 'yiddish'::regconfig
        else 'simple'::regconfig
      end
    $$`.execute(db);
  await sql`alter table realms add column if not exists search_config regconfig not null default 'english'`.execute(db);
  await sql`update realms set search_config = search_config(settings->>'realm_default_language')`.execute(db);
  await sql`
    create or replace function realm_search_config(realm bigint) returns regconfig language sql stable as $$
      select coalesce((select r.search_config from realms r where r.id = realm), 'english'::regconfig)
    $$`.execute(db);
  await sql`
    create or replace function messages_search_document() returns trigger language plpgsql as $$
    begin
      new.search_document := to_tsvector(coalesce((select r.search_config from realms r where r.id = new.realm_id), 'english'::regconfig), new.topic || ' ' || new.content);
      return new;
    end $$`.execute(db);
  await sql`create table if not exists search_restems (realm_id bigint primary key, below bigint not null)`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
