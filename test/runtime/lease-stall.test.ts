/**
 * Leases renewed off the event loop (runtime/lease-keeper.ts): worker A is a process of its own whose event loop the
 * test blocks (a busy wait, as a long GC or a busy turn would), worker B runs in this process; both renew from their
 * own threads. Asks to A's shards sent while A is blocked wait in their streams. A blocked longer than a lease but
 * less than the stall bound keeps its shards (same epochs) and answers them itself, each turn run once; a worker
 * blocked past the bound loses its shards to B, which answers what was asked meanwhile (nothing lost), and gets
 * its home shards back once it runs again.
 *
 * Every turn of the test actor is recorded in `seen_turns` (test/support/lease-worker.ts), outside any fence.
 */
import { fork, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { sql } from "kysely";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { shardOf, type Fence } from "../../runtime/actor.ts";
import { placeShards } from "../../runtime/placement.ts";
import { openDatabase } from "../../runtime/store/db.ts";
import { SqlStore } from "../../runtime/store/sql-store.ts";
import { migrations } from "../../actors/migrations/index.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "../support/services.ts";
import { startLeaseWorker, type FromLeaseWorker, type LeaseWorker, type LeaseWorkerOptions, type ToLeaseWorker } from "../support/lease-worker.ts";
import { at } from "../support/untyped-actors.ts";

const SHARDS = 8;
const LEASE = 2;
const STALL_BOUND = 4;
const A = "stall-a";
const B = "stall-b";
const all = Array.from({ length: SHARDS }, (_, i) => i);
const homeA = all.filter((shard) => placeShards(SHARDS, [A, B])[shard] === A);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until(check: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > ms) throw new Error(`condition not met within ${ms} ms: ${check.toString()}`);
    await sleep(50);
  }
}

/** An actor id of kind `seen` on `shard`, the `n`th. */
function seenActor(shard: number, n: number): string {
  for (let i = 0, found = 0; ; i++) if (shardOf(`seen:${i}`, SHARDS) === shard && found++ === n) return `seen:${i}`;
}

const redisRun = freshRedisPrefix();
afterAll(() => redisRun.clean());

describe("leases renewed off the event loop", () => {
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let admin: SqlStore;
  let options: Omit<LeaseWorkerOptions, "node">;
  let child: ChildProcess | undefined;
  let peer: LeaseWorker | undefined;
  let scopes = 0;

  beforeEach(async () => {
    database = await freshDatabase();
    admin = new SqlStore(await openDatabase({ databaseUrl: database.url, dataDir: "unused", poolSize: 2 }));
    await admin.migrate(migrations);
    await sql`create table seen_turns (id text not null, node text not null, epoch bigint not null)`.execute(admin.db);
    options = { databaseUrl: database.url, redisUrl: REDIS_URL, redisPrefix: `${redisRun.prefix}:stall-${++scopes}`, shards: SHARDS, leaseSeconds: LEASE, stallSeconds: STALL_BOUND };
  });

  afterEach(async () => {
    if (child?.connected) {
      child.send({ stop: true } satisfies ToLeaseWorker);
      await Promise.race([once(child, "exit"), sleep(10_000)]);
    }
    child?.kill("SIGKILL");
    child = undefined;
    await peer?.stop();
    peer = undefined;
    await admin.close();
    await database.drop();
  });

  /** Worker A in a process of its own; resolves once it holds its shards. */
  async function forkA(): Promise<ChildProcess> {
    const proc = fork(new URL("../support/lease-worker-process.ts", import.meta.url), [JSON.stringify({ ...options, node: A })], {
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    child = proc;
    const [started] = (await once(proc, "message")) as [FromLeaseWorker];
    expect(started).toEqual({ started: true });
    return proc;
  }

  async function stall(proc: ChildProcess, ms: number): Promise<void> {
    proc.send({ stall: ms } satisfies ToLeaseWorker);
    const [answer] = (await once(proc, "message")) as [FromLeaseWorker];
    expect(answer).toEqual({ stalled: ms });
  }

  async function holders(): Promise<Map<number, { owner: string | null; epoch: number }>> {
    const rows = await admin.db.selectFrom("shard_leases").select(["shard", "owner", "epoch"]).execute();
    return new Map(rows.map((r) => [r.shard, { owner: r.owner, epoch: Number(r.epoch) }]));
  }

  async function turnsOf(id: string): Promise<Array<{ node: string; epoch: number }>> {
    const { rows } = await sql<{ node: string; epoch: string }>`select node, epoch from seen_turns where id = ${id}`.execute(admin.db);
    return rows.map((r) => ({ node: r.node, epoch: Number(r.epoch) }));
  }

  /** A and B up, each holding its home shards. */
  async function pair(): Promise<ChildProcess> {
    const proc = await forkA();
    peer = await startLeaseWorker({ ...options, node: B });
    await until(async () => {
      const now = await holders();
      return all.every((shard) => now.get(shard)?.owner === (homeA.includes(shard) ? A : B));
    }, 10_000);
    return proc;
  }

  it("a worker whose event loop is blocked past its lease, within the bound, keeps its shards, and runs each turn once", async () => {
    expect(homeA.length).toBeGreaterThan(0);
    const proc = await pair();
    const before = await holders();
    // Blocked for one and a half leases: a renewal on the event loop would have lost every shard to B.
    const blocked = stall(proc, LEASE * 1500);
    await sleep(200);
    const asked = homeA.map((shard) => ({ shard, id: seenActor(shard, 0), answer: at(peer!.system, seenActor(shard, 0)).ask({ id: `during-${shard}` }) }));
    await blocked;
    for (const { shard, answer } of asked) expect(await answer).toEqual({ shard, epoch: before.get(shard)!.epoch, node: A } satisfies Fence);
    await sleep(LEASE * 1000);
    expect(await holders()).toEqual(before);
    for (const { shard } of asked) expect(await turnsOf(`during-${shard}`)).toEqual([{ node: A, epoch: before.get(shard)!.epoch }]);
    expect(peer!.manager.liveMembers()).toEqual([A, B]);
  }, 60_000);

  it("a worker blocked past the bound loses its shards to the live peer, which answers what was asked meanwhile, and gets them back", async () => {
    const proc = await pair();
    const before = await holders();
    const blocked = stall(proc, (STALL_BOUND + LEASE + 3) * 1000);
    await sleep(200);
    const asked = homeA.map((shard) => ({ shard, answer: at(peer!.system, seenActor(shard, 1)).ask({ id: `during-${shard}` }) }));
    // Answered by B while A is still blocked: B took the shards over, each with a new epoch.
    const answers = await Promise.all(asked.map((a) => a.answer));
    for (const [i, { shard }] of asked.entries()) expect(answers[i]).toEqual({ shard, epoch: before.get(shard)!.epoch + 1, node: B } satisfies Fence);
    await blocked;
    for (const { shard } of asked) expect(await turnsOf(`during-${shard}`)).toEqual([{ node: B, epoch: before.get(shard)!.epoch + 1 }]);
    // A runs again, is a member again, and its home shards come back to it (taken from B: one more epoch).
    await until(async () => {
      const now = await holders();
      return homeA.every((shard) => now.get(shard)?.owner === A);
    }, 15_000);
    const after = await holders();
    for (const shard of homeA) {
      expect(after.get(shard)!.epoch).toBeGreaterThan(before.get(shard)!.epoch + 1);
      expect(await at(peer!.system, seenActor(shard, 1)).ask({ id: `after-${shard}` })).toEqual({ shard, epoch: after.get(shard)!.epoch, node: A } satisfies Fence);
    }
  }, 90_000);
});
