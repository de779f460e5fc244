/**
 * `npx tsx bench/turn-cost.ts [--actors 10000] [--rounds 30] [--root ../other-checkout]`: what the actor system
 * itself costs a fan-out, with no store, no HTTP and no chat: one process, the memory transport, every shard held
 * here, and a broadcast to `--actors` actors of a kind that does nothing but count, `--rounds` times after one
 * discarded round (which activates them). Two kinds: one whose handler returns at once (as a delivery to a user
 * with no queue does), and one whose handler is an async function that holds its acknowledgement on a settled
 * promise (as a delivery queued and written behind does). Prints CPU µs per turn, wall ms per broadcast, and the
 * young-generation GCs.
 *
 * `--root`: the runtime of another checkout (its runtime/system.ts and transports), for an A/B in one command.
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { PerformanceObserver, constants as perfConstants } from "node:perf_hooks";
import type { ActorContext, ActorFactory } from "../runtime/actor.ts";

const { values } = parseArgs({
  options: {
    actors: { type: "string", default: "10000" },
    rounds: { type: "string", default: "30" },
    root: { type: "string" },
  },
});
const actors = Number(values.actors);
const rounds = Number(values.rounds);
const root = path.resolve(values.root ?? path.join(import.meta.dirname, ".."));
const load = async <T>(file: string): Promise<T> => (await import(pathToFileURL(path.join(root, file)).href)) as T;
const { ActorSystem } = await load<typeof import("../runtime/system.ts")>("runtime/system.ts");
const { MemoryTransport } = await load<typeof import("../runtime/transport/memory.ts")>("runtime/transport/memory.ts");
const { MemoryPubSub } = await load<typeof import("../runtime/transport/memory-pubsub.ts")>("runtime/transport/memory-pubsub.ts");
const { actorKind } = await load<typeof import("../runtime/protocol.ts")>("runtime/protocol.ts");

const SHARDS = 16;
let turns = 0;
const settled = Promise.resolve();
const kinds: Record<string, ActorFactory> = {
  quick: () => ({
    receive: () => {
      turns++;
      return undefined;
    },
  }),
  held: (ctx: ActorContext) => ({
    receive: async () => {
      turns++;
      ctx.holdAcknowledgement(settled);
    },
  }),
};

const system = new ActorSystem({ transport: new MemoryTransport(), pubsub: new MemoryPubSub(), shards: SHARDS, kinds, askTimeoutMs: 30_000 });
await system.start();
for (let shard = 0; shard < SHARDS; shard++) await system.holdShard(shard, 1);

let scavenges = 0;
let scavengeMs = 0;
const gcs = new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const gc = e as unknown as { detail?: { kind?: number }; kind?: number };
    if ((gc.detail?.kind ?? gc.kind) !== perfConstants.NODE_PERFORMANCE_GC_MINOR) continue;
    scavenges++;
    scavengeMs += e.duration;
  }
});
gcs.observe({ entryTypes: ["gc"] });

const keys = Array.from({ length: actors }, (_, i) => i + 1);
console.log(`runtime of ${root}; ${actors} actors, ${rounds} broadcasts each after one discarded`);
for (const name of ["quick", "held", "quick", "held"]) {
  const kind = actorKind<{ touch: { message: { op: "touch" }; reply: void } }>(name);
  await system.broadcast(kind, keys, { op: "touch" });
  turns = 0;
  scavenges = 0;
  scavengeMs = 0;
  const cpu = process.cpuUsage();
  const wall = performance.now();
  for (let r = 0; r < rounds; r++) await system.broadcast(kind, keys, { op: "touch" });
  const ms = performance.now() - wall;
  const used = process.cpuUsage(cpu);
  // The GC observer hears of collections from a later turn of the event loop (the memory transport's turns are microtasks).
  await new Promise((resolve) => setImmediate(resolve));
  if (turns !== actors * rounds) throw new Error(`${turns} turns, expected ${actors * rounds}`);
  console.log(
    `${name.padEnd(6)} ${((used.user + used.system) / turns).toFixed(2)} µs CPU per turn, ${(ms / rounds).toFixed(1)} ms per broadcast, ` +
      `${scavenges} scavenges (${scavengeMs.toFixed(0)} ms)`,
  );
}
gcs.disconnect();
await system.close();
