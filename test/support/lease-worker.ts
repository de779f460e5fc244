/**
 * A worker of the lease tests (test/runtime/lease-stall.test.ts): its own store connection, Redis Streams transport,
 * actor system and shard manager renewing from a thread (ThreadLeaseKeeper). Its one actor kind, `seen`, records
 * each turn it runs in the table `seen_turns` (outside any fence, so that a turn run twice, by two holders or by one
 * twice, shows as two rows) and answers with its shard's fence.
 * lease-worker-process.ts runs one as a process of its own, which the test can stall.
 */
import { sql } from "kysely";
import type { ActorFactory } from "../../runtime/actor.ts";
import { ShardManager } from "../../runtime/cluster.ts";
import { openDatabase } from "../../runtime/store/db.ts";
import { SqlStore } from "../../runtime/store/sql-store.ts";
import { ActorSystem } from "../../runtime/system.ts";
import { MemoryPubSub } from "../../runtime/transport/memory-pubsub.ts";
import { RedisStreamsTransport } from "../../runtime/transport/redis-streams.ts";

export interface LeaseWorkerOptions {
  node: string;
  databaseUrl: string;
  redisUrl: string;
  redisPrefix: string;
  shards: number;
  leaseSeconds: number;
  stallSeconds: number;
}

export interface LeaseWorker {
  system: ActorSystem;
  manager: ShardManager;
  stop(): Promise<void>;
}

export async function startLeaseWorker(opts: LeaseWorkerOptions): Promise<LeaseWorker> {
  const store = new SqlStore(await openDatabase({ databaseUrl: opts.databaseUrl, dataDir: "unused", poolSize: 3 }));
  const transport = new RedisStreamsTransport({ url: opts.redisUrl, prefix: opts.redisPrefix, nodeId: opts.node, blockMs: 200, claimIdleMs: 60_000, drainTimeoutMs: 500 });
  const kinds: Record<string, ActorFactory> = {
    seen: (ctx) => ({
      receive: async (body) => {
        const fence = ctx.fence();
        const { id } = body as { id: string };
        await sql`insert into seen_turns (id, node, epoch) values (${id}, ${opts.node}, ${fence.epoch})`.execute(store.db);
        return fence;
      },
    }),
  };
  const system = new ActorSystem({ transport, pubsub: new MemoryPubSub(), shards: opts.shards, kinds, askTimeoutMs: 20_000 });
  await system.start();
  const manager = new ShardManager(store, system, {
    node: opts.node,
    shards: opts.shards,
    leaseSeconds: opts.leaseSeconds,
    renewer: { databaseUrl: opts.databaseUrl, stallSeconds: opts.stallSeconds },
  });
  await manager.start();
  return {
    system,
    manager,
    async stop() {
      await manager.stop();
      await system.close();
      await transport.close();
      await store.close();
    },
  };
}

/** What the test tells a forked worker (lease-worker-process.ts), and what it answers. */
export type ToLeaseWorker = { stall: number } | { stop: true };
export type FromLeaseWorker = { started: true } | { stalled: number } | { stopped: true };
