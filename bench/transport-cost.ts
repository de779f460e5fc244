/**
 * CPU per entry of the Redis Streams transport alone: one node holds a shard and sends entries to it (the path of
 * every hop of a chat message inside one worker: append, take, hand over, acknowledge), `--in-flight` at a time,
 * on a Redis of your own (its INFO counts everyone's commands). Prints this process's CPU µs per entry (Node: the
 * transport and ioredis) and Redis's, and entries/s. `--root` runs another checkout's transport (A/B, interleaved).
 *
 * `--content-bytes`: the size of the entry's message text (a chat message's entry to its recipients carries it rendered).
 *
 *   npx tsx bench/transport-cost.ts --redis redis://127.0.0.1:6391 [--in-flight 1] [--entries 10000] [--content-bytes 5] [--root <dir>]
 */
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import type { Transport } from "../runtime/transport/transport.ts";

const { values } = parseArgs({
  options: {
    redis: { type: "string" },
    "in-flight": { type: "string", default: "1" },
    entries: { type: "string", default: "10000" },
    "content-bytes": { type: "string", default: "5" },
    root: { type: "string", default: path.resolve(import.meta.dirname, "..") },
  },
});
if (!values.redis) throw new Error("--redis <url> is required: a Redis of your own, whose CPU this measures");
const url = values.redis;
const inFlight = Number(values["in-flight"]);
const entries = Number(values.entries);
const { RedisStreamsTransport } = (await import(path.join(values.root, "runtime/transport/redis-streams.ts"))) as typeof import("../runtime/transport/redis-streams.ts");

const info = new Redis(url, { protocol: 2 });
async function redisCpuMicros(): Promise<number> {
  const text = await info.info("cpu");
  const field = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, "m").exec(text)?.[1] ?? 0);
  return (field("used_cpu_sys") + field("used_cpu_user")) * 1e6;
}

const transport: Transport = new RedisStreamsTransport({ url, prefix: `transport-cost-${process.pid}-${Date.now()}` });
await transport.start({ onEntry: async () => {}, onReply: () => {} });
await transport.acquire(1);
const body = { op: "send", content: "hello".padEnd(Number(values["content-bytes"]), "o"), topic: "load", senderId: 5, queueId: "1795833008406:7", localId: "1" };

async function send(n: number): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next++ < n) await transport.send(1, { targets: ["channel:1"], body, replyTo: { node: "asker", corr: String(next) } });
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
}

await send(2000); // warm-up: the JIT, the connections
const cpu0 = process.cpuUsage();
const redis0 = await redisCpuMicros();
const started = performance.now();
await send(entries);
const wallMs = performance.now() - started;
const cpu = process.cpuUsage(cpu0);
const redis1 = await redisCpuMicros();
console.log(
  JSON.stringify({
    root: values.root,
    inFlight,
    nodeMicrosPerEntry: Math.round(((cpu.user + cpu.system) / entries) * 10) / 10,
    redisMicrosPerEntry: Math.round(((redis1 - redis0) / entries) * 10) / 10,
    entriesPerSecond: Math.round(entries / (wallMs / 1000)),
    loadavg: fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" "),
  }),
);
await transport.close();
info.disconnect();
