/**
 * Throughput with 1, 2 and 3 Chorus hosts, back to back: hosts are network namespaces on this machine
 * (test/support/hosts.ts), Redis and Postgres on a host of their own, one Chorus process (ROLE=all) per Chorus host.
 * For each count, POST /messages through every host at once (autocannon here, one instance per host, each request
 * to the next of 64 channels so that the sends spread over the shards), for `--duration` seconds: acknowledged sends
 * a second, latency, and errors; and what each send cost: CPU per send of each host's processes (counted by network
 * namespace from /proc: Chorus on each Chorus host, Postgres and Redis apart on `db`), Postgres commits per send and
 * rows written per commit (pg_stat_database). All hosts share this machine's cores: the throughput shows what crossing
 * hosts costs and how the placement spreads work, not what separate machines would add; the CPU per send is what
 * the capacity model (docs/capacity.md) scales.
 *
 *   npx tsx bench/hosts.ts [--duration 10] [--connections 16]      (root: it makes network namespaces)
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import pg from "pg";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { createNetwork, type TestNetwork } from "../test/support/hosts.ts";
import { startPrivatePostgres, startPrivateRedis } from "../test/support/private-services.ts";
import { startChorus, type ChorusProcess } from "../test/support/process.ts";
import { readZuliprc } from "../test/support/server.ts";
import { procStat } from "../test/support/proc-stat.ts";
import { sendToChannels, subscribeToChannels } from "./channel-sends.ts";

const { values } = parseArgs({ options: { duration: { type: "string", default: "10" }, connections: { type: "string", default: "16" } } });
const DURATION = Number(values.duration);
const CONNECTIONS = Number(values.connections);
const CHANNELS = Array.from({ length: 64 }, (_, i) => `load-${i}`);

async function sendLoad(hosts: ChorusProcess[], authorization: string) {
  const runs = hosts.map((host) => sendToChannels(host, authorization, { channels: CHANNELS, connections: CONNECTIONS, seconds: DURATION }));
  const results = await Promise.all(runs);
  return {
    sendsPerSecond: Math.round(results.reduce((sum, r) => sum + r["2xx"], 0) / DURATION),
    p50Ms: Math.max(...results.map((r) => r.latency.p50)),
    p99Ms: Math.max(...results.map((r) => r.latency.p99)),
    errors: results.reduce((sum, r) => sum + r.non2xx + r.errors + r.timeouts, 0),
  };
}

const execAsync = promisify(execFile);

/** CPU seconds used so far by the live processes of each host, by command name (`node`, `postgres`, `redis-server`). */
async function cpuByHost(net: TestNetwork): Promise<Map<string, number>> {
  const cpu = new Map<string, number>();
  for (const host of Object.values(net.hosts)) {
    const { stdout } = await execAsync("ip", ["netns", "pids", host.namespace]);
    for (const pid of stdout.split("\n").filter(Boolean)) {
      const stat = procStat(Number(pid));
      if (!stat) continue; // exited meanwhile
      const key = `${host.name} ${stat.command}`;
      cpu.set(key, (cpu.get(key) ?? 0) + stat.cpuMicros / 1e6);
    }
  }
  return cpu;
}

/** This database's commits and rows written so far (Postgres publishes its counters with a delay: see pg_stat_force_next_flush). */
async function writesOf(databaseUrl: string): Promise<{ commits: number; rows: number }> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      "select xact_commit::float8 as commits, (tup_inserted + tup_updated + tup_deleted)::float8 as rows from pg_stat_database where datname = current_database()",
    );
    return rows[0];
  } finally {
    await client.end();
  }
}

/** Cores each host's processes use with no traffic (timers, blocked reads, lease renewals), over `seconds`. */
async function idleCores(net: TestNetwork, seconds: number): Promise<Record<string, number>> {
  const before = await cpuByHost(net);
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const after = await cpuByHost(net);
  const cores: Record<string, number> = {};
  for (const [key, used] of after) {
    const share = (used - (before.get(key) ?? 0)) / seconds;
    if (share > 0) cores[key] = Number(share.toFixed(3));
  }
  return cores;
}

/**
 * What the measured run cost: CPU µs per acknowledged send by host and command, commits per send, rows per commit;
 * and, first, what the hosts use idle.
 */
async function costs(net: TestNetwork, databaseUrl: string, run: () => Promise<{ sendsPerSecond: number }>) {
  const idle = await idleCores(net, 5);
  const cpuBefore = await cpuByHost(net);
  const writesBefore = await writesOf(databaseUrl);
  const result = await run();
  // Postgres's statistics reach pg_stat_database up to a second after the commits.
  await new Promise((r) => setTimeout(r, 1500));
  const writesAfter = await writesOf(databaseUrl);
  const cpuAfter = await cpuByHost(net);
  const sends = result.sendsPerSecond * DURATION;
  const cpuMicrosPerSend: Record<string, number> = {};
  for (const [key, seconds] of cpuAfter) {
    const used = seconds - (cpuBefore.get(key) ?? 0);
    if (used > 0) cpuMicrosPerSend[key] = Math.round((used * 1e6) / sends);
  }
  const commits = writesAfter.commits - writesBefore.commits;
  return {
    ...result,
    idleCores: idle,
    cpuMicrosPerSend,
    commitsPerSend: Number((commits / sends).toFixed(2)),
    rowsPerCommit: Number(((writesAfter.rows - writesBefore.rows) / commits).toFixed(2)),
  };
}

async function main(): Promise<void> {
  const net = await createNetwork(["db", "h1", "h2", "h3"]);
  const stops: Array<() => Promise<unknown>> = [net.remove];
  const rows: Array<Record<string, unknown>> = [];
  try {
    const redis = await startPrivateRedis({ aof: false, placement: net.hosts.db! });
    stops.push(redis.stop);
    const postgres = await startPrivatePostgres(net.hosts.db!);
    stops.push(postgres.stop);
    for (const count of [1, 2, 3]) {
      // Each count starts from an empty organization: a database and a key prefix of its own.
      const admin = new pg.Client({ connectionString: postgres.url });
      await admin.connect();
      await admin.query(`create database hosts_${count}`);
      await admin.end();
      const databaseUrl = postgres.url.replace(/\/postgres$/, `/hosts_${count}`);
      const env = { REDIS_URL: redis.url, DATABASE_URL: databaseUrl, REDIS_PREFIX: `hosts-${count}`, ACCESS_LOG: "off", RATE_LIMIT_API_BY_USER: "off" };
      const first = await startChorus(env, undefined, { host: net.hosts.h1 });
      const hosts = [first];
      try {
        for (const name of ["h2", "h3"].slice(0, count - 1)) hosts.push(await startChorus(env, undefined, { host: net.hosts[name], joins: true }));
        const owner = readZuliprc(path.join(first.dataDir, "zuliprc"));
        const authorization = `Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}`;
        await subscribeToChannels(first, authorization, CHANNELS);
        await sendLoad(hosts, authorization); // warm-up: the channels' actors, the connections, the JIT
        const row = { hosts: count, ...(await costs(net, databaseUrl, () => sendLoad(hosts, authorization))) };
        console.log(JSON.stringify(row));
        rows.push(row);
      } finally {
        for (const host of hosts.reverse()) await host.stop();
        for (const host of hosts) fs.rmSync(host.dataDir, { recursive: true, force: true });
      }
    }
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => {});
  }
  const file = path.join("bench", "results", `hosts-${new Date().toISOString().replace(/[:.]/g, "-")}.json`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify({ duration: DURATION, connections: CONNECTIONS, rows }, null, 2));
  console.log(`written to ${file}`);
}

await main();
