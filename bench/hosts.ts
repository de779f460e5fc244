/**
 * Throughput with 1, 2 and 3 Chorus hosts, back to back: hosts are network namespaces on this machine
 * (test/support/hosts.ts), Redis and Postgres on a host of their own, one Chorus process (ROLE=all) per Chorus host.
 * For each count, POST /messages through every host at once (autocannon here, one instance per host, each request
 * to the next of 64 channels so that the sends spread over the shards), for `--duration` seconds: acknowledged sends
 * a second, latency, and errors. All hosts share this machine's cores: the figures show what crossing hosts costs and
 * how the placement spreads work, not what separate machines would add.
 *
 *   npx tsx bench/hosts.ts [--duration 10] [--connections 16]      (root: it makes network namespaces)
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import pg from "pg";
import { createNetwork } from "../test/support/hosts.ts";
import { startPrivatePostgres, startPrivateRedis } from "../test/support/private-services.ts";
import { startChorus, type ChorusProcess } from "../test/support/process.ts";
import { readZuliprc } from "../test/support/server.ts";
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
        const row = { hosts: count, ...(await sendLoad(hosts, authorization)) };
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
