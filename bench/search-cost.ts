/**
 * `npx tsx bench/search-cost.ts <database url> [searches]`: what a GET /messages search (newest 20) costs on a
 * generated organization left by `npx tsx bench/explain-reads.ts --keep` (its ordinary reader: bench/kept-store.ts),
 * for the searches docs/reads.md explains: wall time p50 / p99 and CPU per search of this process (fetchMessages and
 * the answer's JSON) and of the Postgres backend (/proc: the database must run on this machine). One search at a
 * time on one connection. `READER=heavy`: the heavy reader (500 channels) instead of the ordinary one (50);
 * `SCOPES=N`: SEARCH_WINDOWS.scopes (the most channels and conversations a search asks the scoped index for);
 * `SEARCHES="a b;c"`: these searches (no channel) instead of the cases below. Runs from any checkout (with
 * bench/kept-store.ts beside it: fetchMessages, findUserById, openDatabase), so that two builds can take turns on one
 * database.
 */
import fs from "node:fs";
import { sql, type Kysely } from "kysely";
import { openDatabase } from "../runtime/store/db.ts";
import { fetchMessages, SEARCH_WINDOWS, type MessageQuery } from "../actors/chat/reads/messages.ts";
import { keptReader } from "./kept-store.ts";

const url = process.argv[2];
if (!url) throw new Error("usage: npx tsx bench/search-cost.ts <database url> [searches] [case]");
const searches = Number(process.argv[3] ?? 50);
const only = process.argv[4];

if (process.env.SCOPES) SEARCH_WINDOWS.scopes = Number(process.env.SCOPES);
const db = (await openDatabase({ databaseUrl: url, dataDir: "/tmp", poolSize: 1 })).db as Kysely<any>;
const reader = await keptReader(db, process.env.READER === "heavy" ? "heavy" : "ordinary");
const base: Omit<MessageQuery, "narrow"> = { anchor: "newest", numBefore: 20, numAfter: 0, includeAnchor: true, format: { applyMarkdown: true, clientGravatar: true }, allowEmptyTopicName: false };
const search = (operand: string) => ({ operator: "search", operand, negated: false });
const cases: Array<[string, MessageQuery["narrow"]]> = [
  ["budget", [search("budget")]],
  ["budget coffee", [search("budget coffee")]],
  ["budget coff (the bench's)", [search("budget coff")]],
  ["zanzibar (no match)", [search("zanzibar")]],
  ["channel gen-7 + datab", [{ operator: "channel", operand: "gen-7", negated: false }, search("datab")]],
];
const asked = process.env.SEARCHES?.split(";").map((operand): [string, MessageQuery["narrow"]] => [operand, [search(operand)]]);
if (asked) cases.splice(0, cases.length, ...asked);
const backendPid = (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(db)).rows[0]!.pid;
const backendCpuMs = () => {
  const fields = fs.readFileSync(`/proc/${backendPid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
};
const load = () => fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
for (const [title, narrow] of cases) {
  if (only && !title.startsWith(only)) continue;
  const once = async () => {
    const r = await fetchMessages(db, reader, { ...base, narrow });
    return { n: r.messages.length, bytes: JSON.stringify({ result: "success", msg: "", ...r }).length };
  };
  for (let i = 0; i < 3; i++) await once(); // warm
  const walls: number[] = [];
  const cpu0 = process.cpuUsage();
  const backend0 = backendCpuMs();
  let n = 0;
  for (let i = 0; i < searches; i++) {
    const t0 = performance.now();
    n = (await once()).n;
    walls.push(performance.now() - t0);
  }
  const cpu = process.cpuUsage(cpu0);
  const backendMs = backendCpuMs() - backend0;
  walls.sort((a, b) => a - b);
  console.log(
    `${title}: ${n} messages; wall p50 ${walls[walls.length >> 1]!.toFixed(1)} / p99 ${walls[Math.min(walls.length - 1, Math.floor(walls.length * 0.99))]!.toFixed(1)} ms; ` +
      `node ${((cpu.user + cpu.system) / 1000 / searches).toFixed(2)} ms CPU, Postgres backend ${(backendMs / searches).toFixed(2)} ms CPU per search (${searches}); load ${load()}`,
  );
}
await db.destroy();
