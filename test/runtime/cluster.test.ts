/**
 * Shard ownership across workers (runtime/cluster.ts) with the real services: a fresh Postgres database per test
 * (each worker with its own connection pool, as separate processes would have) and Redis Streams under a key
 * prefix unique to this run. The workers alive split the shards by rendezvous placement (runtime/placement.ts) over
 * their node ids, which the tests name, so the split is known; leases are short (LEASE seconds) so take-overs happen
 * within seconds.
 *
 * A crash is simulated by cutting a worker off from the database and from Redis without releasing anything: its
 * renewals stop, its leases stay in the store until they expire, and its system still believes it holds its
 * shards (like a paused process), so its fence is the stale one the store must refuse.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { shardOf, type ActorFactory, type Fence } from "../../runtime/actor.ts";
import { ChorusError } from "../../runtime/errors.ts";
import { ShardManager } from "../../runtime/cluster.ts";
import { placeShards } from "../../runtime/placement.ts";
import { openDatabase } from "../../runtime/store/db.ts";
import { SqlStore } from "../../runtime/store/sql-store.ts";
import { migrations } from "../../actors/migrations/index.ts";
import { ActorSystem } from "../../runtime/system.ts";
import { MemoryPubSub } from "../../runtime/transport/memory-pubsub.ts";
import { RedisStreamsTransport } from "../../runtime/transport/redis-streams.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "../support/services.ts";
import { at } from "../support/untyped-actors.ts";
import { log } from "../../runtime/log.ts";

const SHARDS = 8;
const LEASE = 2;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const all = Array.from({ length: SHARDS }, (_, i) => i);
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);

/** The shards placement gives `member` when `members` are alive. */
function homeOf(member: string, members: string[]): number[] {
  return all.filter((shard) => placeShards(SHARDS, members)[shard] === member);
}

async function until(check: () => boolean | Promise<boolean>, ms: number): Promise<number> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > ms) throw new Error(`condition not met within ${ms} ms: ${check.toString()}`);
    await sleep(20);
  }
  return Date.now() - started;
}

/** The first `fence` actor id hosted on `shard`. */
function fenceActor(shard: number): string {
  for (let i = 0; ; i++) if (shardOf(`fence:${i}`, SHARDS) === shard) return `fence:${i}`;
}

const kinds: Record<string, ActorFactory> = {
  fence: (ctx) => ({ receive: (): Fence => ctx.fence() }),
};

const redisRun = freshRedisPrefix();
afterAll(async () => {
  await redisRun.clean();
});

interface Worker {
  node: string;
  store: SqlStore;
  /** How many times the store ran its components' recover (a take-over from a crashed holder runs it). */
  recoveries(): number;
  system: ActorSystem;
  transport: RedisStreamsTransport;
  manager: ShardManager;
  /** Graceful: release the leases, finish turns, close connections. */
  stop(): Promise<void>;
  /** Abrupt: no release, no more renewals; the process's view of its shards is left as it was. */
  crash(): Promise<void>;
}

describe("ShardManager over Postgres and Redis Streams", () => {
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let scope = "";
  let scopes = 0;
  let workers: Worker[] = [];
  let peers: MemoryPubSub;
  /** The test's own view of the store (an operator's connection). */
  let admin: SqlStore;

  async function openStore(): Promise<SqlStore> {
    return new SqlStore(await openDatabase({ databaseUrl: database.url, dataDir: "unused", poolSize: 3 }));
  }

  /**
   * A worker process named `node`: its own store connection, transport and system; its manager is not started yet.
   * The workers of a test share one pub/sub, as a deployment's share Redis's. `thread`: leases renewed from a thread.
   */
  async function worker(node: string, opts: { leaseSeconds?: number; thread?: boolean } = {}): Promise<Worker> {
    const store = await openStore();
    let recoveries = 0;
    store.attach({ recover: async () => void recoveries++, close: async () => {} });
    const transport = new RedisStreamsTransport({ url: REDIS_URL, prefix: scope, nodeId: node, blockMs: 200, claimIdleMs: 60_000, drainTimeoutMs: 500 });
    const system = new ActorSystem({ transport, pubsub: peers, shards: SHARDS, kinds, askTimeoutMs: 10_000 });
    await system.start();
    const manager = new ShardManager(store, system, {
      node,
      shards: SHARDS,
      leaseSeconds: opts.leaseSeconds ?? LEASE,
      peers,
      renewer: opts.thread ? { databaseUrl: database.url, stallSeconds: 10 } : undefined,
    });
    let down = false;
    const w: Worker = {
      node,
      store,
      recoveries: () => recoveries,
      system,
      transport,
      manager,
      async stop() {
        if (down) return;
        down = true;
        await manager.stop();
        await system.close();
        await transport.close();
        await store.close();
      },
      async crash() {
        if (down) return;
        down = true;
        // Database gone: every later tick fails, so nothing is renewed and nothing released.
        await store.close();
        // Redis gone: what it read and did not acknowledge stays pending for the next holder.
        await transport.close();
      },
    };
    workers.push(w);
    return w;
  }

  async function leaseShards(node: string): Promise<number[]> {
    return sorted((await admin.leasesHeldBy(node)).map((l) => l.shard));
  }

  async function epochs(): Promise<Map<number, number>> {
    const rows = await admin.db.selectFrom("shard_leases").select(["shard", "epoch"]).execute();
    return new Map(rows.map((r) => [r.shard, Number(r.epoch)]));
  }

  beforeEach(async () => {
    database = await freshDatabase();
    admin = await openStore();
    await admin.migrate(migrations);
    scope = `${redisRun.prefix}:cluster-${++scopes}`;
    peers = new MemoryPubSub();
  });

  afterEach(async () => {
    for (const w of workers.reverse()) {
      // A crashed worker's manager still has its timer; stop it quietly (its store is closed, so it releases nothing).
      await w.manager.stop().catch(() => {});
      await w.stop().catch(() => {});
      await w.system.close().catch(() => {});
    }
    workers = [];
    await admin.close();
    await database.drop();
    vi.restoreAllMocks();
  });

  const A = "worker-a";
  const B = "worker-b";
  const homeA = homeOf(A, [A, B]);
  const homeB = homeOf(B, [A, B]);

  /** Both workers started, each holding its home shards. */
  async function pair(): Promise<[Worker, Worker]> {
    const w0 = await worker(A);
    const w1 = await worker(B);
    await Promise.all([w0.manager.start(), w1.manager.start()]);
    await until(async () => sorted(w0.manager.heldShards()).join() === homeA.join(), 3000);
    return [w0, w1];
  }

  it("places shards by rendezvous hashing: balanced, and a member joining takes shards only for itself", () => {
    const members = ["n1", "n2", "n3"];
    const three = placeShards(256, members);
    const four = placeShards(256, [...members, "n4"]);
    for (const m of members) expect(three.filter((h) => h === m).length).toBeGreaterThan(256 / 3 / 2);
    // Every shard either stays where it was or moves to the newcomer, which gets about a quarter.
    expect(four.every((home, shard) => home === three[shard] || home === "n4")).toBe(true);
    expect(four.filter((h) => h === "n4").length).toBeGreaterThan(256 / 4 / 2);
    // The same members in any order place alike.
    expect(placeShards(256, [...members].reverse())).toEqual(three);
  });

  it("two workers split the shards by placement over their ids, and asks reach the owner with its lease's epoch", async () => {
    expect(homeA.length).toBeGreaterThan(1);
    expect(homeB.length).toBeGreaterThan(1);
    const [w0, w1] = await pair();
    await until(() => sorted(w1.manager.heldShards()).join() === homeB.join(), 3000);
    expect(sorted(w0.system.heldShards())).toEqual(homeA);
    expect(sorted(w1.system.heldShards())).toEqual(homeB);
    expect(await leaseShards(w0.node)).toEqual(homeA);
    expect(await leaseShards(w1.node)).toEqual(homeB);
    expect(w0.manager.liveMembers()).toEqual([A, B]);

    const epoch = await epochs();
    for (const shard of all) {
      const owner = homeA.includes(shard) ? w0 : w1;
      const asker = homeA.includes(shard) ? w1 : w0;
      expect(await at(asker.system, fenceActor(shard)).ask({})).toEqual({ shard, epoch: epoch.get(shard), node: owner.node });
    }
  });

  it("a worker joining at run time takes its share from the others with a higher epoch; the rest stay put", async () => {
    const [w0, w1] = await pair();
    await until(() => sorted(w1.manager.heldShards()).join() === homeB.join(), 3000);
    const before = await epochs();
    const C = "worker-c";
    const members = [A, B, C];
    const w2 = await worker(C);
    // Asked while the shards move: answered by whoever serves them once the move is over.
    const during = all.map((shard) => at(w0.system, fenceActor(shard)).ask({}));
    await w2.manager.start();
    for (const w of [w0, w1, w2]) await until(() => sorted(w.manager.heldShards()).join() === homeOf(w.node, members).join(), (LEASE + 2) * 1000);
    const after = await epochs();
    const moved = homeOf(C, members);
    expect(moved.length).toBeGreaterThan(0);
    for (const shard of all) expect(after.get(shard)).toBe(before.get(shard)! + (moved.includes(shard) ? 1 : 0));
    for (const shard of moved) expect(await at(w0.system, fenceActor(shard)).ask({})).toEqual({ shard, epoch: after.get(shard), node: C });
    const answered = await Promise.all(during);
    for (const answer of answered) expect(answer).toMatchObject({ epoch: expect.any(Number) });
  });

  it("when a worker stops gracefully, the other takes its shards promptly", async () => {
    const [w0, w1] = await pair();
    await until(() => sorted(w1.manager.heldShards()).join() === homeB.join(), 3000);
    const before = await epochs();
    const stopped = Date.now();
    await w1.stop();
    expect(await leaseShards(w1.node)).toEqual([]); // released, not left to expire
    await until(() => sorted(w0.manager.heldShards()).join() === all.join(), (LEASE + 2) * 1000);
    const tookMs = Date.now() - stopped;
    // Promptly: at the survivor's next tick (a renewal period), not a whole lease after the last heartbeat.
    const period = Math.max(200, (LEASE * 1000) / 3);
    expect(tookMs).toBeLessThan(period + 600);

    const after = await epochs();
    for (const shard of homeB) {
      expect(after.get(shard)).toBe(before.get(shard)! + 1);
      expect(await at(w0.system, fenceActor(shard)).ask({})).toEqual({ shard, epoch: after.get(shard), node: w0.node });
    }
    for (const shard of homeA) expect(after.get(shard)).toBe(before.get(shard));
  });

  describe.each([
    ["on the event loop", false],
    ["from a renewer thread", true],
  ])("with leases renewed %s", (_, thread) => {
    it("a joining worker gets its home shards at once, not at the holders' next tick; a stopping one's go as fast", async () => {
      // A tick every 10 s: what hearing of each other spares the workers waiting for. The bounds leave room for a
      // loaded 2-core machine (a join took 3.5 s on 2026-12-01 beside other test runs) and stay well under the tick.
      const opts = { leaseSeconds: 30, thread };
      const promptly = 7000;
      const w0 = await worker(A, opts);
      await w0.manager.start();
      expect(sorted(w0.manager.heldShards())).toEqual(all);
      const w1 = await worker(B, opts);
      const joining = Date.now();
      await w1.manager.start(); // resolves once it holds its home shards (or after two leases)
      expect(Date.now() - joining).toBeLessThan(promptly);
      expect(sorted(w1.manager.heldShards())).toEqual(homeB);
      expect(sorted(w0.manager.heldShards())).toEqual(homeA);

      await w1.stop();
      expect(await until(() => w0.manager.heldShards().length === SHARDS, promptly)).toBeLessThan(promptly);
    });
  });

  it("a crashed worker's shards are taken over after its lease expires with a higher epoch, its old fence is refused, and the shards go home when it is back", async () => {
    const logged = vi.spyOn(log, "error").mockImplementation(() => log);
    const [w0, w1] = await pair();
    await until(() => sorted(w1.manager.heldShards()).join() === homeB.join(), 3000);
    const before = await epochs();
    const shard = homeB[1]!;
    const oldFence: Fence = { shard, epoch: before.get(shard)!, node: w1.node };
    // The live owner's fence is accepted.
    await expect(admin.write(oldFence, async () => "written")).resolves.toBe("written");

    const recoveredBefore = w0.recoveries();
    await w1.crash();
    const crashed = Date.now();
    // An ask sent while nobody serves the shard waits in its stream for the next holder.
    const waiting = at(w0.system, fenceActor(shard)).ask({});
    // Nothing is released: the leases stay w1's until they expire.
    expect(await leaseShards(w1.node)).toEqual(homeB);
    expect(sorted(w1.system.heldShards())).toEqual(homeB); // the dead process still believes it owns them

    await until(() => sorted(w0.manager.heldShards()).join() === all.join(), (LEASE + 3) * 1000);
    const tookMs = Date.now() - crashed;
    expect(tookMs).toBeGreaterThan(LEASE * 1000 - 1000); // not before the lease could have expired
    const after = await epochs();
    for (const s of homeB) expect(after.get(s)).toBe(before.get(s)! + 1);
    // Whoever takes over a crashed worker's shards recovers what it may have left half-done (StoreComponent), in
    // the same tick, after the leases it took (which the wait above may see first).
    await until(() => w0.recoveries() > recoveredBefore, 5000);
    expect(await waiting).toEqual({ shard, epoch: after.get(shard), node: w0.node });

    // The stale owner's writes are refused, and change nothing.
    const err = await admin.write(oldFence, async () => "written").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChorusError);
    expect((err as ChorusError).code).toBe("FENCED");
    expect((err as ChorusError).status).toBe(503);
    await expect(admin.write({ shard, epoch: after.get(shard)!, node: w0.node }, async () => "ok")).resolves.toBe("ok");
    expect(logged.mock.calls.some((args: unknown[]) => args.includes("shard manager tick failed"))).toBe(true);

    // A worker comes back (a new process: a new node id) and gets its share, with a higher epoch again.
    const back = await worker("worker-b2");
    const homeBack = homeOf(back.node, [A, back.node]);
    expect(homeBack).toContain(shard);
    await back.manager.start();
    expect(sorted(back.manager.heldShards())).toEqual(homeBack);
    const homeA2 = homeOf(A, [A, back.node]);
    await until(() => sorted(w0.manager.heldShards()).join() === homeA2.join(), 3000);
    expect(sorted(w0.system.heldShards())).toEqual(homeA2);
    expect(await leaseShards(back.node)).toEqual(homeBack);
    const home = await epochs();
    for (const s of homeBack) expect(home.get(s)).toBe(after.get(s)! + 1);
    expect(await at(w0.system, fenceActor(shard)).ask({})).toEqual({ shard, epoch: home.get(shard), node: back.node });
    const stale = await admin.write({ shard, epoch: after.get(shard)!, node: w0.node }, async () => "ok").catch((e: unknown) => e);
    expect((stale as ChorusError).code).toBe("FENCED");
  });
});
