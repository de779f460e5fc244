/**
 * `npx tsx bench/ab-reads.ts <database url> [rounds]`: two A/B comparisons of GET /messages' statements on a
 * generated organization left by `npx tsx bench/explain-reads.ts --keep` (readers: user 2 ordinary, as there), each
 * interleaved round by round on one connection per side, so that the machine's load falls on both alike:
 * - newest 20 of a channel through fetchMessages, as plain statements and as named prepared ones (the store's
 *   NAMED_STATEMENT, runtime/store/db.ts): wall time and the Postgres backend's CPU per fetch (/proc of the backend
 *   process: the database must run on this machine);
 * - the is:unread page statement as planned (parallel workers allowed) and with max_parallel_workers_per_gather 0.
 * What docs/reads.md's figures for both come from.
 */
import fs from "node:fs";
import pg from "pg";
import { CompiledQuery, Kysely, PostgresDialect, sql, type KyselyPlugin } from "kysely";
import { openDatabase } from "../runtime/store/db.ts";
import { fetchMessages, type MessageQuery } from "../actors/chat/reads/messages.ts";
import { findUserById } from "../actors/chat/reads/users.ts";
import { channelName } from "./organization.ts";

const url = process.argv[2];
if (!url) throw new Error("usage: npx tsx bench/ab-reads.ts <database url> [rounds]");
const rounds = Number(process.argv[3] ?? 6);
const PER_ROUND = 200;

const plain = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }) });
const named = (await openDatabase({ databaseUrl: url, dataDir: "/tmp", poolSize: 1 })).db as Kysely<any>;
const realmId = (await sql<{ realm_id: number }>`select realm_id from users where id = 2`.execute(plain)).rows[0]!.realm_id;
const reader = (await findUserById(plain, realmId, 2))!;
const base: Omit<MessageQuery, "narrow"> = { anchor: "newest", numBefore: 20, numAfter: 0, includeAnchor: true, format: { applyMarkdown: true, clientGravatar: true }, allowEmptyTopicName: false };
const channel = { ...base, narrow: [{ operator: "channel", operand: channelName(7), negated: false }] };
const unread = { ...base, narrow: [{ operator: "is", operand: "unread", negated: false }] };

/** The backend process's CPU milliseconds so far (utime + stime, in clock ticks of 10 ms). */
const backendPid = async (db: Kysely<any>) => (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]!.pid;
const backendCpuMs = (pid: number) => {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
};
const fmt = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(" ");

async function measure(db: Kysely<any>, pid: number, run: () => Promise<unknown>) {
  const cpu0 = backendCpuMs(pid);
  const t0 = performance.now();
  for (let i = 0; i < PER_ROUND; i++) await run();
  return { wallMs: (performance.now() - t0) / PER_ROUND, backendMs: (backendCpuMs(pid) - cpu0) / PER_ROUND };
}

const pids = { plain: await backendPid(plain), named: await backendPid(named) };
const sides = { plain: { wall: [] as number[], backend: [] as number[] }, named: { wall: [] as number[], backend: [] as number[] } };
for (let round = 0; round < rounds; round++) {
  for (const side of ["plain", "named"] as const) {
    const db = side === "plain" ? plain : named;
    const m = await measure(db, pids[side], () => fetchMessages(db, reader, channel));
    sides[side].wall.push(m.wallMs);
    sides[side].backend.push(m.backendMs);
  }
}
console.log(`newest 20 of a channel, ${rounds} rounds of ${PER_ROUND}, interleaved; load average ${fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
console.log(`  plain statements: wall ms/fetch ${fmt(sides.plain.wall)}; Postgres backend CPU ms/fetch ${fmt(sides.plain.backend)}`);
console.log(`  named statements: wall ms/fetch ${fmt(sides.named.wall)}; Postgres backend CPU ms/fetch ${fmt(sides.named.backend)}`);

// The is:unread page's statement, taken from the query log as fetchMessages runs it.
const captured: CompiledQuery[] = [];
const capture: KyselyPlugin = { transformQuery: (a) => (captured.push(plain.getExecutor().compileQuery(a.node, a.queryId)), a.node), transformResult: async (a) => a.result };
await fetchMessages(plain.withPlugin(capture), reader, unread);
const page = captured.filter((q) => q.sql.includes("order by um.message_id")).at(-1)!;
const timed = async (run: () => Promise<unknown>) => {
  const t0 = performance.now();
  await run();
  return performance.now() - t0;
};
const parallel: number[] = [];
const serial: number[] = [];
for (let i = 0; i < rounds * 5; i++) {
  parallel.push(await timed(() => plain.executeQuery(page)));
  serial.push(await timed(() => plain.transaction().execute(async (trx) => (await sql`set local max_parallel_workers_per_gather = 0`.execute(trx), trx.executeQuery(page)))));
}
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) * p)]!.toFixed(2);
console.log(`is:unread page statement, ${rounds * 5} runs each, interleaved; load average ${fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
console.log(`  as planned (parallel workers allowed): p50 ${pct(parallel, 0.5)} ms, p90 ${pct(parallel, 0.9)} ms`);
console.log(`  max_parallel_workers_per_gather 0:     p50 ${pct(serial, 0.5)} ms, p90 ${pct(serial, 0.9)} ms`);
await plain.destroy();
await named.destroy();
