import { sql, type Kysely } from "kysely";

/**
 * chorus_append_messages plans its statements without sequential scans. PL/pgSQL caches a generic plan after a
 * function's fifth call, and keeps it until the tables' statistics change (the next ANALYZE, autovacuum's or not).
 * Planned while `messages` was small, the lookup of a batch's earlier send_keys was a sequential scan, which then
 * read the whole table on every commit as it grew: on Postgres, 1.1 ms per append on an empty table and 6.0 ms once
 * it held 15,000 messages, until analysed (1.2 ms). A fresh deployment's first busy minute, and every benchmark
 * that runs right after another, paid that. With this setting every read in the function goes through its index
 * (the lease's primary key, messages' send_key), whatever the statistics say: 1.2 ms at 15,000 messages unanalysed.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter function chorus_append_messages set enable_seqscan = off`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
