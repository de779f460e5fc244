/**
 * `npx tsx bench/fetch-cost.ts <database url> [fetches]`: what one GET /messages of the newest 20 of a channel costs
 * in CPU, on a generated organization left by `npx tsx bench/explain-reads.ts --keep` (its ordinary reader, user 2):
 * this process's CPU (fetchMessages and serializing its answer, as the gateway does) and the database's Postgres
 * backends' (/proc of each: the database must run on this machine) per fetch, and the statements per fetch.
 * One fetch at a time on one connection: CPU time, not wall time, so that a loaded machine shifts it less. Runs from
 * any checkout (it uses only fetchMessages, findUserById and openDatabase), so that two builds can take turns on
 * one database: the A/B of docs/reads.md.
 */
import fs from "node:fs";
import { sql, type Kysely } from "kysely";
import { openDatabase } from "../runtime/store/db.ts";
import { fetchMessages, type MessageQuery } from "../actors/chat/reads/messages.ts";
import { findUserById } from "../actors/chat/reads/users.ts";
import { channelName } from "./organization.ts";

const url = process.argv[2];
if (!url) throw new Error("usage: npx tsx bench/fetch-cost.ts <database url> [fetches]");
const fetches = Number(process.argv[3] ?? 2000);

const db = (await openDatabase({ databaseUrl: url, dataDir: "/tmp", poolSize: 1 })).db as Kysely<any>;
const realmId = (await sql<{ realm_id: number }>`select realm_id from users where id = 2`.execute(db)).rows[0]!.realm_id;
const reader = (await findUserById(db, realmId, 2))!;
const query: MessageQuery = {
  anchor: "newest",
  numBefore: 20,
  numAfter: 0,
  includeAnchor: true,
  narrow: [{ operator: "channel", operand: channelName(7), negated: false }],
  format: { applyMarkdown: true, clientGravatar: true },
  allowEmptyTopicName: false,
};
/** This database's backends (a channel's page runs on connections of its own: queryPlannedOnce), after the warm-up. */
let backendPids: number[] = [];
/** Their CPU milliseconds so far (utime + stime, clock ticks of 10 ms). */
const backendCpuMs = () =>
  backendPids.reduce((total, pid) => {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return total + (Number(fields[11]) + Number(fields[12])) * 10;
  }, 0);
/** Statements the backend ran (this database's transactions: each statement outside a transaction is one). */
const transactions = async () =>
  Number((await sql<{ n: number }>`select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()`.execute(db)).rows[0]!.n);

// As the gateway writes the answer: the messages come as JSON texts (since 2026-12-03; objects before, in older checkouts).
const once = async () => {
  const { messages, ...fields } = await fetchMessages(db, reader, query);
  const list = (messages as unknown[]).every((m) => typeof m === "string") ? `[${messages.join(",")}]` : JSON.stringify(messages);
  return `{"result":"success","msg":"",${JSON.stringify(fields).slice(1, -1)},"messages":${list}}`.length;
};
for (let i = 0; i < 200; i++) await once(); // warm: named statements prepared, code optimized
backendPids = (await sql<{ pid: number }>`select pid from pg_stat_activity where datname = current_database() and backend_type = 'client backend'`.execute(db)).rows.map((r) => r.pid);
const xacts0 = await transactions();
const cpu0 = process.cpuUsage();
const backend0 = backendCpuMs();
const t0 = performance.now();
let bytes = 0;
for (let i = 0; i < fetches; i++) bytes = await once();
const wallMs = performance.now() - t0;
const cpu = process.cpuUsage(cpu0);
const backendMs = backendCpuMs() - backend0;
// pg_stat_database is updated when a backend reports (at most every 10 ms idle): wait for this one's.
await new Promise((r) => setTimeout(r, 1100));
const xacts = (await transactions()) - xacts0 - 1;
const load = fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
console.log(
  `${fetches} fetches (answer ${bytes} bytes): node ${(((cpu.user + cpu.system) / fetches)).toFixed(0)} µs CPU/fetch, ` +
    `Postgres backend ${((backendMs * 1000) / fetches).toFixed(0)} µs CPU/fetch, ${(xacts / fetches).toFixed(2)} transactions/fetch, ` +
    `wall ${((wallMs * 1000) / fetches).toFixed(0)} µs/fetch; load average ${load}`,
);
await db.destroy();
