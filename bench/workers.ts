/**
 * POST /messages on Redis + Postgres with WORKERS=1 and WORKERS=2, interleaved: what the second worker process
 * costs. Each run starts what `npm start` runs (`gateway/main.ts`, the primary forking its workers, which share the
 * port) on a fresh Postgres database and a private Redis, sends to `--channels` channels in turn (their actors
 * spread over the shards, so with two workers about half of a send's hops cross to the other process) for
 * `--duration` seconds after a warm-up, and reports sends/s, latency, and CPU per send of the Chorus processes
 * (primary + workers), of Redis and of this database's Postgres backends, from /proc and INFO. The load generator
 * (autocannon) runs in this process; its CPU is reported too.
 *
 * Beside the totals: each process's CPU per send (`primary`, `worker 0`, …) and its CPU per second while idle
 * (measured for `--idle` seconds after the warm-up), its context switches per send, and Redis's commands per send by
 * command (INFO commandstats) with Postgres's transactions per send beside them, and the whole machine's CPU time per
 * send by state (user, system, softirq, steal, idle, …). Postgres's row operations and scans by table are given per
 * message inserted, not per send: a backend reports its counts up to a second late (10 s when idle), and a ratio of
 * two counts of the same window cancels most of that.
 * The workers link to each other directly, as a primary's workers do by default (runtime/transport/peer-links.ts);
 * `PEER_LINKS_DIR=off` in the environment runs them without (every ask between them through Redis).
 * `--cpu-prof`: every Chorus process runs under V8's sampling profiler; the samples taken inside the measured
 * window are summed by function (self time, µs per send), per process, and the profiles kept beside the results.
 * `--root`: run the Chorus of another checkout (a base worktree), for interleaved A/B runs with one bench.
 *
 *   npx tsx bench/workers.ts [--rounds 2] [--duration 8] [--connections 50] [--channels 16] [--workers 1,2] [--rate <sends/s>] [--redis <url>] [--idle 3] [--cpu-prof] [--root <checkout>]
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import pg from "pg";
import { startPrivateRedis } from "../test/support/private-services.ts";
import { freePort, startChorus, workerPids, type ChorusProcess } from "../test/support/process.ts";
import { readZuliprc } from "../test/support/server.ts";
import { freshDatabase } from "../test/support/services.ts";
import { sendToChannels, subscribeToChannels } from "./channel-sends.ts";
import { procCpuMicros, TICKS_PER_SECOND } from "../test/support/proc-stat.ts";
import { placeShards } from "../runtime/placement.ts";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "2" },
    duration: { type: "string", default: "8" },
    warmup: { type: "string", default: "2" },
    connections: { type: "string", default: "50" },
    channels: { type: "string", default: "16" },
    workers: { type: "string", default: "1,2" },
    /** Sends offered per second in all (autocannon overallRate); unset: as many as answered (saturation). */
    rate: { type: "string" },
    /** A Redis of your own to use instead of a private one started here (its INFO then counts others' work too). */
    redis: { type: "string" },
    /** Seconds of idle measured before the warm-up (each process's CPU per second with nothing to do). */
    idle: { type: "string", default: "3" },
    "cpu-prof": { type: "boolean", default: false },
    /** The checkout whose Chorus runs (default: this one). */
    root: { type: "string" },
  },
});
const ROUNDS = Number(values.rounds);
const DURATION = Number(values.duration);
const WARMUP = Number(values.warmup);
const CONNECTIONS = Number(values.connections);
const CHANNELS = Array.from({ length: Number(values.channels) }, (_, i) => `load-${i}`);
const WORKER_COUNTS = values.workers.split(",").map(Number);
const IDLE = Number(values.idle);

function sendLoad(server: ChorusProcess, authorization: string, seconds: number) {
  return sendToChannels(server, authorization, { channels: CHANNELS, connections: CONNECTIONS, seconds, overallRate: values.rate ? Number(values.rate) : undefined });
}

/** The Chorus processes by role: `primary` (WORKERS > 1 only), `worker 0`, `worker 1`, … */
function chorusProcesses(server: ChorusProcess): Map<string, number> {
  const workers = workerPids(server);
  const named = new Map<string, number>();
  if (!workers.includes(server.proc.pid!)) named.set("primary", server.proc.pid!);
  workers.forEach((pid, i) => named.set(`worker ${i}`, pid));
  return named;
}

/**
 * Context switches so far of a process's threads, voluntary (it waited: each a wake-up when it comes back) and not:
 * a count that a busy machine does not inflate the way it inflates CPU time.
 */
function contextSwitches(pid: number): number {
  let sum = 0;
  try {
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      const status = fs.readFileSync(`/proc/${pid}/task/${task}/status`, "utf8");
      for (const m of status.matchAll(/^(?:non)?voluntary_ctxt_switches:\s+(\d+)/gm)) sum += Number(m[1]);
    }
  } catch {
    // gone
  }
  return sum;
}

const MACHINE_STATES = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];

/**
 * The machine's CPU time so far by state (/proc/stat's first line, in µs): whether a run left cores idle, and how much
 * went to the kernel's interrupt work and to the hypervisor (steal), which no process's figures count.
 */
function machineMicros(): Map<string, number> {
  const ticks = fs.readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  return new Map(MACHINE_STATES.map((state, i) => [state, ((ticks[i] ?? 0) / TICKS_PER_SECOND) * 1e6]));
}

/** CPU µs so far of each Chorus process, of Redis, and of the database's Postgres backends; Redis's calls by command. */
async function cpuNow(server: ChorusProcess, redis: Redis, db: pg.Client) {
  const named = [...chorusProcesses(server)];
  const processes = new Map(named.map(([name, pid]) => [name, procCpuMicros(pid) ?? 0]));
  const switches = new Map(named.map(([name, pid]) => [name, contextSwitches(pid)]));
  const chorus = [...processes.values()].reduce((a, b) => a + b, 0);
  const info = await redis.info("cpu");
  const field = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, "m").exec(info)?.[1] ?? 0);
  const commands = new Map([...(await redis.info("commandstats")).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].map((m) => [m[1]!, Number(m[2])]));
  const { rows } = await db.query<{ pid: number }>("select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()");
  const postgres = rows.reduce((sum, { pid }) => sum + (procCpuMicros(pid) ?? 0), 0);
  // Redis's socket reads (each a wake-up of Redis for what one client wrote) and writes (each an answer to one).
  const stats = await redis.info("stats");
  for (const k of ["total_reads_processed", "total_writes_processed"]) commands.set(k, Number(new RegExp(`^${k}:(\\d+)`, "m").exec(stats)?.[1] ?? 0));
  const stat = await db.query<{ n: string }>("select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()");
  commands.set("postgres transactions", Number(stat.rows[0]?.n ?? 0));
  // The whole cluster's WAL (pg_stat_wal has no database column): its flushes to disk, full-page images and bytes.
  const wal = await db.query<{ wal_sync: string; wal_fpi: string; wal_bytes: string }>("select wal_sync, wal_fpi, wal_bytes from pg_stat_wal");
  for (const k of ["wal_sync", "wal_fpi", "wal_bytes"] as const) commands.set(`postgres ${k}`, Number(wal.rows[0]?.[k] ?? 0));
  const tables = new Map<string, number>();
  const { rows: touched } = await db.query<{ relname: string; ins: string; upd: string; del: string; scans: string }>(
    "select relname, n_tup_ins as ins, n_tup_upd as upd, n_tup_del as del, seq_scan + coalesce(idx_scan, 0) as scans from pg_stat_user_tables",
  );
  for (const t of touched) for (const k of ["ins", "upd", "del", "scans"] as const) tables.set(`${t.relname} ${k}`, Number(t[k]));
  const load = process.cpuUsage().user + process.cpuUsage().system;
  return { chorus, processes, switches, commands, tables, machine: machineMicros(), redis: (field("used_cpu_sys") + field("used_cpu_user")) * 1e6, postgres, load, at: process.hrtime.bigint() };
}
type CpuSnapshot = Awaited<ReturnType<typeof cpuNow>>;

/** `after - before` of each key, divided by `per`, rounded to 0.1 (keys whose difference rounds to 0 left out). */
function perUnit(before: Map<string, number>, after: Map<string, number>, per: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) {
    const x = Math.round(((v - (before.get(k) ?? 0)) / per) * 100) / 100;
    if (x) out[k] = x;
  }
  return out;
}

interface CpuProfileFile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/**
 * Self time by function of the samples a V8 profile took between `from` and `to` (process.hrtime's clock, which is
 * the profiler's: CLOCK_MONOTONIC), in µs per send; the functions above `minMicros` per send.
 */
function profileWindow(file: string, from: bigint, to: bigint, sends: number, minMicros = 1): Record<string, number> {
  const p = JSON.parse(fs.readFileSync(file, "utf8")) as CpuProfileFile;
  const frames = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
  const self = new Map<string, number>();
  const start = Number(from / 1000n);
  const end = Number(to / 1000n);
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    const delta = p.timeDeltas[i] ?? 0;
    t += delta;
    if (t < start || t > end) continue;
    const f = frames.get(p.samples[i]!)!;
    const where = f.url ? `${path.basename(f.url)}:${f.lineNumber + 1}` : "";
    const name = `${f.functionName || "(anonymous)"} ${where}`.trim();
    self.set(name, (self.get(name) ?? 0) + delta);
  }
  const top: Record<string, number> = {};
  for (const [name, us] of [...self].sort((a, b) => b[1] - a[1])) {
    if (us / sends < minMicros) break;
    top[name] = Math.round((us / sends) * 10) / 10;
  }
  return top;
}

/** The profiles of one run's processes (their file names carry the pid), summed over the measured window. */
function profilesByProcess(dir: string, named: Map<string, number>, before: CpuSnapshot, after: CpuSnapshot, sends: number): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".cpuprofile"))) {
    const pid = Number(file.split(".")[3]);
    const thread = Number(file.split(".")[4]);
    const name = [...named].find(([, p]) => p === pid)?.[0] ?? `pid ${pid}`;
    out[thread ? `${name} thread ${thread}` : name] = profileWindow(path.join(dir, file), before.at, after.at, sends);
  }
  return out;
}

/**
 * Until every worker listens and the shards' leases are spread over all of them: the first worker to start takes
 * every shard and hands half over when the second joins, which must not happen inside the measured window (a send
 * to a shard on the move waits for its new holder, and the joiner's start-up CPU would count as the sends').
 * /ready alone does not tell: a keep-alive client asks one worker every time.
 */
async function settled(server: ChorusProcess, db: pg.Client, workers: number): Promise<void> {
  for (let deadline = Date.now() + 300_000; ; await new Promise((r) => setTimeout(r, 250))) {
    if (Date.now() > deadline) throw new Error(`the shards did not settle over ${workers} workers within five minutes`);
    const nodes = [...server.output().matchAll(/\(pid \d+, node ([^,]+),/g)].map((m) => m[1]!);
    if (nodes.length < workers) continue;
    const { rows } = await db.query<{ shard: number; owner: string }>("select shard, owner from shard_leases where expires_at > now()");
    const { rows: all } = await db.query<{ n: number }>("select count(*)::int as n from shard_leases");
    const homes = placeShards(all[0]!.n, nodes);
    if (rows.length === homes.length && rows.every(({ shard, owner }) => homes[shard] === owner)) return;
  }
}

async function run(workers: number, redisUrl: string, round: number) {
  const database = await freshDatabase();
  const profileDir = values["cpu-prof"] ? fs.mkdtempSync(path.join(path.resolve("bench", "results"), `workers-${workers}-prof-`)) : undefined;
  // A metrics port of its own: the primary's default (9464) may be another server's, running alongside.
  const env = { METRICS_PORT: String(await freePort()), WORKERS: String(workers), REDIS_URL: redisUrl, DATABASE_URL: database.url, REDIS_PREFIX: `workers-${workers}-${round}-${Date.now()}`, ACCESS_LOG: "off", RATE_LIMIT_API_BY_USER: "off" };
  const server = await startChorus(env, undefined, { root: values.root, startTimeoutMs: 300_000, nodeFlags: profileDir ? ["--cpu-prof", `--cpu-prof-dir=${profileDir}`] : [] });
  const db = new pg.Client({ connectionString: database.url });
  const redis = new Redis(redisUrl, { protocol: 2 });
  let window: { before: CpuSnapshot; after: CpuSnapshot; sends: number; named: Map<string, number> } | undefined;
  const row = await (async () => {
    await db.connect();
    await settled(server, db, workers);
    const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
    const authorization = `Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}`;
    await subscribeToChannels(server, authorization, CHANNELS);
    await sendLoad(server, authorization, WARMUP); // the channels' actors, the connections, the JIT
    await new Promise((r) => setTimeout(r, 1000)); // the warm-up's acknowledgements and group commits
    const idleFrom = await cpuNow(server, redis, db);
    await new Promise((r) => setTimeout(r, IDLE * 1000));
    const idleTo = await cpuNow(server, redis, db);
    const idleSeconds = Number(idleTo.at - idleFrom.at) / 1e9;
    const before = await cpuNow(server, redis, db);
    const loadavg = fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
    const result = await sendLoad(server, authorization, DURATION);
    const after = await cpuNow(server, redis, db);
    const sends = Math.max(1, result["2xx"]);
    window = { before, after, sends, named: chorusProcesses(server) };
    const per = (k: "chorus" | "redis" | "postgres" | "load") => Math.round(((after[k] - before[k]) / sends) * 10) / 10;
    return {
      workers,
      round,
      loadavg,
      sendsPerSecond: Math.round(result["2xx"] / DURATION),
      p50Ms: result.latency.p50,
      p99Ms: result.latency.p99,
      errors: result.non2xx + result.errors + result.timeouts,
      chorusMicrosPerSend: per("chorus"),
      redisMicrosPerSend: per("redis"),
      postgresMicrosPerSend: per("postgres"),
      loadGeneratorMicrosPerSend: per("load"),
      processMicrosPerSend: perUnit(before.processes, after.processes, sends),
      contextSwitchesPerSend: perUnit(before.switches, after.switches, sends),
      machineMicrosPerSend: perUnit(before.machine, after.machine, sends),
      idleProcessMicrosPerSecond: perUnit(idleFrom.processes, idleTo.processes, idleSeconds),
      idleContextSwitchesPerSecond: perUnit(idleFrom.switches, idleTo.switches, idleSeconds),
      idleRedisCommandsPerSecond: perUnit(idleFrom.commands, idleTo.commands, idleSeconds),
      redisCommandsPerSend: perUnit(before.commands, after.commands, sends),
      postgresRowsPerMessage: perUnit(before.tables, after.tables, Math.max(1, (after.tables.get("messages ins") ?? 0) - (before.tables.get("messages ins") ?? 0))),
    };
  })().finally(async () => {
    redis.disconnect();
    await db.end().catch(() => {});
    await server.stop(); // the profiles are written as the processes exit
    fs.rmSync(server.dataDir, { recursive: true, force: true });
    await database.drop();
  });
  if (!profileDir || !window) return row;
  return { ...row, profileDir, profile: profilesByProcess(profileDir, window.named, window.before, window.after, window.sends) };
}

async function main(): Promise<void> {
  const redis = values.redis ? { url: values.redis, stop: async () => {} } : await startPrivateRedis({ aof: false });
  const rows: Array<Awaited<ReturnType<typeof run>>> = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      // Alternate which count goes first, so neither always runs on the warmer machine.
      const order = round % 2 ? [...WORKER_COUNTS].reverse() : WORKER_COUNTS;
      for (const workers of order) {
        const row = await run(workers, redis.url, round);
        console.log(JSON.stringify(row));
        rows.push(row);
      }
    }
  } finally {
    await redis.stop();
  }
  const file = path.join("bench", "results", `workers-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify({ duration: DURATION, connections: CONNECTIONS, channels: CHANNELS.length, rate: values.rate, rows }, null, 2));
  console.log(`written to ${file}`);
}

await main();
