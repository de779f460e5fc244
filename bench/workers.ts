/**
 * POST /messages on Redis + Postgres with WORKERS=1 and WORKERS=2, interleaved: what the second worker process
 * costs. Each run starts what `npm start` runs (`gateway/main.ts`, the primary forking its workers, which share the
 * port) on a fresh Postgres database and a private Redis, sends to `--channels` channels in turn (their actors
 * spread over the shards, so with two workers about half of a send's hops cross to the other process) for
 * `--duration` seconds after a warm-up, and reports sends/s, latency, and CPU per send of the Chorus processes
 * (primary + workers), of Redis and of this database's Postgres backends, from /proc and INFO. The load generator
 * (autocannon) runs in this process; its CPU is reported too.
 *
 *   npx tsx bench/workers.ts [--rounds 2] [--duration 8] [--connections 50] [--channels 16] [--workers 1,2] [--rate <sends/s>] [--redis <url>]
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import pg from "pg";
import { startPrivateRedis } from "../test/support/private-services.ts";
import { startChorus, workerPids, type ChorusProcess } from "../test/support/process.ts";
import { readZuliprc } from "../test/support/server.ts";
import { freshDatabase } from "../test/support/services.ts";
import { sendToChannels, subscribeToChannels } from "./channel-sends.ts";
import { procCpuMicros } from "./scenarios.ts";

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
  },
});
const ROUNDS = Number(values.rounds);
const DURATION = Number(values.duration);
const WARMUP = Number(values.warmup);
const CONNECTIONS = Number(values.connections);
const CHANNELS = Array.from({ length: Number(values.channels) }, (_, i) => `load-${i}`);
const WORKER_COUNTS = values.workers.split(",").map(Number);

function sendLoad(server: ChorusProcess, authorization: string, seconds: number) {
  return sendToChannels(server, authorization, { channels: CHANNELS, connections: CONNECTIONS, seconds, overallRate: values.rate ? Number(values.rate) : undefined });
}

/** CPU µs so far of the Chorus processes, of Redis, and of the database's Postgres backends. */
async function cpuNow(server: ChorusProcess, redis: Redis, db: pg.Client) {
  const chorus = [...new Set([server.proc.pid!, ...workerPids(server)])].reduce((sum, pid) => sum + (procCpuMicros(pid) ?? 0), 0);
  const info = await redis.info("cpu");
  const field = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, "m").exec(info)?.[1] ?? 0);
  const { rows } = await db.query<{ pid: number }>("select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()");
  const postgres = rows.reduce((sum, { pid }) => sum + (procCpuMicros(pid) ?? 0), 0);
  return { chorus, redis: (field("used_cpu_sys") + field("used_cpu_user")) * 1e6, postgres, load: process.cpuUsage().user + process.cpuUsage().system };
}

async function run(workers: number, redisUrl: string, round: number) {
  const database = await freshDatabase();
  const env = { WORKERS: String(workers), REDIS_URL: redisUrl, DATABASE_URL: database.url, REDIS_PREFIX: `workers-${workers}-${round}-${Date.now()}`, ACCESS_LOG: "off", RATE_LIMIT_API_BY_USER: "off" };
  const server = await startChorus(env);
  const db = new pg.Client({ connectionString: database.url });
  const redis = new Redis(redisUrl, { protocol: 2 });
  try {
    await db.connect();
    // Every worker holds its home shards (a send to one still moving waits for its new holder).
    for (let ok = 0, deadline = Date.now() + 30_000; ok < 5 && Date.now() < deadline; ) {
      ok = (await fetch(`http://${server.address}:${server.port}/ready`)).ok ? ok + 1 : 0;
      await new Promise((r) => setTimeout(r, 200));
    }
    const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
    const authorization = `Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}`;
    await subscribeToChannels(server, authorization, CHANNELS);
    await sendLoad(server, authorization, WARMUP); // the channels' actors, the connections, the JIT
    const before = await cpuNow(server, redis, db);
    const loadavg = fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
    const result = await sendLoad(server, authorization, DURATION);
    const after = await cpuNow(server, redis, db);
    const sends = Math.max(1, result["2xx"]);
    const per = (k: keyof typeof before) => Math.round(((after[k] - before[k]) / sends) * 10) / 10;
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
    };
  } finally {
    redis.disconnect();
    await db.end().catch(() => {});
    await server.stop();
    fs.rmSync(server.dataDir, { recursive: true, force: true });
    await database.drop();
  }
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
