import { sql, type Kysely } from "kysely";

/**
 * Full-text search of messages through an index (issue 28): a GIN index on the search document that `search:`
 * narrows match (actors/chat/reads/search.ts, whose SEARCH_DOCUMENT must stay this expression, spelled alike, for
 * the planner to use the index). An expression index rather than a stored generated column: adding the column
 * rewrites the whole table under an exclusive lock, the index only reads it (writes wait; reads go on), and the
 * group commit's inserts keep it up to date like any other index. Without it a search computed the document of
 * every candidate row: 2.3-3.0 s on 200,000 messages.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index messages_search on messages using gin (to_tsvector('english'::regconfig, topic || ' ' || content))`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
