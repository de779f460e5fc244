/**
 * `npx tsx bench/search-fill.ts <database url> [step]`: the migrations not yet applied (2026-11-28T0900, the stored
 * search document; 2026-12-05T1600, the scoped document) on a store that already holds messages (one kept by
 * `npx tsx bench/explain-reads.ts --keep`), then the background fills of its existing messages run to the end in
 * this process, one after the other: how long the migration held the messages table
 * (its transaction: writers wait for it), how long the fill took, its steps' times and the Postgres backend's
 * CPU. The database must run on this machine (the backend's CPU is read from /proc).
 */
import fs from "node:fs";
import { sql, type Kysely } from "kysely";
import { openDatabase } from "../runtime/store/db.ts";
import { SqlStore } from "../runtime/store/sql-store.ts";
import { migrations } from "../actors/migrations/index.ts";
import { fillSearchDocuments } from "../actors/chat/search-fill.ts";
import type { Database } from "../actors/schema.ts";

const url = process.argv[2];
if (!url) throw new Error("usage: npx tsx bench/search-fill.ts <database url> [step]");
const step = Number(process.argv[3] ?? 2000);
const load = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");

const store = new SqlStore<Database>(await openDatabase({ databaseUrl: url, dataDir: "/tmp", poolSize: 1 }));
const db = store.db as Kysely<Database>;
const backendPid = (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]!.pid;
const backendCpuMs = () => {
  const fields = fs.readFileSync(`/proc/${backendPid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
};
const size = async () => (await sql<{ table: string; index: string; scoped: string }>`select pg_size_pretty(pg_table_size('messages')) as table, pg_size_pretty(coalesce(pg_relation_size(to_regclass('messages_search_document')), 0)) as index,
  pg_size_pretty(coalesce(pg_relation_size(to_regclass('messages_scoped_document')), 0)) as scoped`.execute(db)).rows[0];
console.log(`before: messages ${JSON.stringify(await size())}, load ${load()}`);
let t0 = performance.now();
let cpu0 = backendCpuMs();
await store.migrate(migrations);
console.log(`migrated in ${((performance.now() - t0) / 1000).toFixed(1)} s (backend CPU ${((backendCpuMs() - cpu0) / 1000).toFixed(1)} s), load ${load()}`);
for (const which of ["documents", "scoped"] as const) {
  t0 = performance.now();
  cpu0 = backendCpuMs();
  const times: number[] = [];
  for (;;) {
    const s0 = performance.now();
    const state = await fillSearchDocuments(db, step, which);
    times.push(performance.now() - s0);
    if (times.length % 500 === 0) console.log(`  ${which}: ${times.length} steps, ${((performance.now() - t0) / 1000).toFixed(0)} s, load ${load()}`);
    if (state !== "filled") break;
  }
  times.sort((a, b) => a - b);
  const column = sql.raw(which === "documents" ? "search_document" : "scoped_document");
  const unfilled = (await sql<{ n: number }>`select count(*)::int as n from messages where ${column} is null`.execute(db)).rows[0]!.n;
  console.log(
    `${which}: filled in ${((performance.now() - t0) / 1000).toFixed(1)} s, ${times.length} steps of ${step}: step p50 ${times[times.length >> 1]!.toFixed(0)} ms, ` +
      `p99 ${times[Math.floor(times.length * 0.99)]!.toFixed(0)} ms, max ${times.at(-1)!.toFixed(0)} ms; backend CPU ${((backendCpuMs() - cpu0) / 1000).toFixed(1)} s; ` +
      `unfilled left ${unfilled}; load ${load()}`,
  );
}
await sql`vacuum analyze messages`.execute(db);
console.log(`after (vacuum analyze): messages ${JSON.stringify(await size())}, load ${load()}`);
await db.destroy();
