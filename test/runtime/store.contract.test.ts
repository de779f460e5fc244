/**
 * The store contract (runtime/store/store.ts), one behaviour suite run against every engine: PGlite in memory and
 * a real Postgres at 127.0.0.1:5432 (TEST_PG_URL overrides) in a database created for this run and dropped after.
 * Every test takes its own shards and ids, so nothing one test leaves behind changes what another observes.
 */
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../../runtime/actor.ts";
import type { ChorusError } from "../../runtime/errors.ts";
import type { Database } from "../../actors/schema.ts";
import type { SqlStore } from "../../runtime/store/sql-store.ts";
import { migrations } from "../../actors/migrations/index.ts";
import pg from "pg";
import { PG_ADMIN_URL } from "../support/services.ts";
import { dropStoreDatabase, engines, expectCode, pgUrl, rejection, shardLeaser } from "../support/stores.ts";

const SHARDS = 64;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

afterAll(dropStoreDatabase);

describe.each(engines)("Store on $name", (engineCase) => {
  let store: SqlStore<Database>;
  let nextName = 0;
  /** A shard no other test uses, and one leased to `node` with its fence. */
  const { shard, fenceOn } = shardLeaser(SHARDS, () => store);

  function uniqueKey(label: string): string {
    return `${engineCase.name}-${label}-${nextName++}`;
  }

  async function realmNamed(stringId: string) {
    return store.db.selectFrom("realms").selectAll().where("string_id", "=", stringId).executeTakeFirst();
  }

  /** A write under `fence` that has inserted a realm named `key` and stays open until `openGate()`; answers "written". */
  async function writeHeldOpen(fence: Fence, key: string): Promise<{ writing: Promise<string>; openGate: () => void }> {
    let openGate!: () => void;
    const gate = new Promise<void>((r) => (openGate = r));
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    const writing = store.write(fence, async (trx) => {
      await trx.insertInto("realms").values(realmRow(key)).execute();
      entered();
      await gate;
      return "written";
    });
    await inside;
    return { writing, openGate };
  }

  function realmRow(stringId: string) {
    return { string_id: stringId, name: stringId, date_created: 1_700_000_000, settings: "{}" };
  }

  beforeAll(async () => {
    store = await engineCase.open();
    await store.migrate(migrations);
    await store.ensureShards(SHARDS);
  });

  afterAll(async () => {
    await store?.close();
  });

  describe("migrate", () => {
    it("reports its engine and runs again without error, keeping the data", async () => {
      expect(store.engine).toBe(engineCase.name);
      const fence = await fenceOn();
      const key = uniqueKey("migrate");
      await store.write(fence, (trx) => trx.insertInto("realms").values(realmRow(key)).execute());
      await store.migrate(migrations);
      await store.migrate(migrations);
      expect(await realmNamed(key)).toBeDefined();
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from kysely_migration`.execute(store.db);
      expect(rows[0]!.n).toBe(Object.keys(migrations).length); // each applied once
    });
  });

  describe("components", () => {
    it("recovers attached components after every migration and on recover(), and closes them before the database", async () => {
      const own = await engineCase.open();
      const calls: string[] = [];
      own.attach({
        recover: async () => void calls.push("recover"),
        close: async () => {
          // The database is still open: a component commits what it holds pending here.
          await sql`select 1`.execute(own.db);
          calls.push("close");
        },
      });
      await own.migrate(migrations);
      await own.recover();
      await own.close();
      expect(calls).toEqual(["recover", "recover", "close"]);
    });
  });

  describe("write", () => {
    it("commits before it resolves and returns what fn returned", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("commit");
      const id = await store.write(fence, async (trx) => {
        const row = await trx.insertInto("realms").values(realmRow(key)).returning("id").executeTakeFirstOrThrow();
        return row.id;
      });
      expect(typeof id).toBe("number");
      expect((await realmNamed(key))?.id).toBe(id);
      if (engineCase.reopen) {
        // Seen from another process's connections too: it is committed, not merely visible to its own session.
        const other = await engineCase.reopen();
        try {
          const row = await other.db.selectFrom("realms").select("id").where("string_id", "=", key).executeTakeFirst();
          expect(row?.id).toBe(id);
        } finally {
          await other.close();
        }
      }
    });

    it.runIf(engineCase.name === "postgres")("survives Postgres closing its idle connections, and writes again", async () => {
      const fence = await fenceOn();
      await store.write(fence, (trx) => sql`select 1`.execute(trx));
      const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
      await admin.connect();
      try {
        const { rows } = await admin.query(
          "select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()",
          [new URL(await pgUrl()).pathname.slice(1)],
        );
        expect(rows[0].n).toBeGreaterThan(0);
      } finally {
        await admin.end();
      }
      await sleep(200); // the pool's 'error' event arrives meanwhile; unhandled, it would end the test process
      const value = await store.write(fence, async (trx) => (await sql<{ v: number }>`select 41 + 1 as v`.execute(trx)).rows[0]!.v);
      expect(value).toBe(42);
    });

    it("rolls back everything fn wrote when fn throws, and rejects with fn's error", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("rollback");
      const boom = new Error("boom");
      const err = await rejection(
        store.write(fence, async (trx) => {
          await trx.insertInto("realms").values(realmRow(key)).execute();
          await trx.insertInto("realms").values(realmRow(`${key}-second`)).execute();
          throw boom;
        }),
      );
      expect(err).toBe(boom);
      expect(await realmNamed(key)).toBeUndefined();
      expect(await realmNamed(`${key}-second`)).toBeUndefined();
    });

    it("refuses a fence with a stale epoch, a wrong owner or an unknown shard with FENCED, without running fn", async () => {
      const fence = await fenceOn("node-a");
      const stale: Fence[] = [
        { ...fence, epoch: fence.epoch - 1 },
        { ...fence, epoch: fence.epoch + 1 },
        { ...fence, node: "node-b" },
        { shard: SHARDS + 1000, epoch: 1, node: "node-a" },
      ];
      for (const bad of stale) {
        const key = uniqueKey("fenced");
        let ran = false;
        await expectCode(
          store.write(bad, async (trx) => {
            ran = true;
            await trx.insertInto("realms").values(realmRow(key)).execute();
          }),
          "FENCED",
        );
        expect(ran).toBe(false);
        expect(await realmNamed(key)).toBeUndefined();
      }
      // The right fence still writes.
      const key = uniqueKey("fence-ok");
      await store.write(fence, (trx) => trx.insertInto("realms").values(realmRow(key)).execute());
      expect(await realmNamed(key)).toBeDefined();
    });

    it("makes a takeover wait for a write in flight, so that write never lands behind its successor", async () => {
      const fence = await fenceOn("node-a");
      const key = uniqueKey("inflight");
      const { writing, openGate } = await writeHeldOpen(fence, key);
      let takenOver = false;
      const takeover = store.acquireLease(fence.shard, "node-b", 60, true).then((lease) => {
        takenOver = true;
        return lease;
      });
      await sleep(100);
      expect(takenOver).toBe(false);
      openGate();
      expect(await writing).toBe("written");
      expect(await takeover).toEqual({ shard: fence.shard, epoch: fence.epoch + 1, reclaimed: true });
      expect(await realmNamed(key)).toBeDefined();
      // And from now on the old owner is refused.
      await expectCode(store.write(fence, async () => undefined), "FENCED");
    });
  });

  describe("renewals beside writes", () => {
    // A renewal changes no owner and no epoch: writes under the lease and its renewals need not wait for each other.
    // (When they did, every renewal held the shard's commits for its own commit's time, a few times a lease.)
    // PGlite runs one transaction at a time: there, everything waits for the write.
    it.skipIf(engineCase.name === "pglite")("renews a lease while a write under it is in flight, and the write then commits", async () => {
      const fence = await fenceOn("node-a");
      const key = uniqueKey("renewed-beside");
      const { writing, openGate } = await writeHeldOpen(fence, key);
      const renewal = store.renewLeases([{ shard: fence.shard, epoch: fence.epoch }], "node-a", 60);
      const first = await Promise.race([renewal.then(() => "renewed"), sleep(2_000).then(() => "still waiting")]);
      openGate();
      expect(first).toBe("renewed");
      expect(await renewal).toEqual(new Set([fence.shard]));
      expect(await writing).toBe("written");
      expect(await realmNamed(key)).toBeDefined();
    });
  });

  describe("snapshots", () => {
    it("loads an absent snapshot as undefined", async () => {
      expect(await store.loadSnapshot("channel", uniqueKey("absent"))).toBeUndefined();
    });

    it("creates version 1 from expected 0, then increments only from the stored version", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("snap");
      const v1 = { name: "general", members: [1, 2, 3], nested: { topic: "ünïcode ✓" } };
      expect(await store.saveSnapshot("channel", key, 0, v1, fence)).toBe(1);
      expect(await store.loadSnapshot("channel", key)).toEqual({ version: 1, state: v1 });
      // The same key under another kind is another snapshot.
      expect(await store.loadSnapshot("user", key)).toBeUndefined();

      expect(await store.saveSnapshot("channel", key, 1, { name: "v2" }, fence)).toBe(2);
      expect(await store.saveSnapshot("channel", key, 2, { name: "v3" }, fence)).toBe(3);
      expect(await store.loadSnapshot("channel", key)).toEqual({ version: 3, state: { name: "v3" } });

      for (const wrong of [0, 1, 2, 4]) {
        await expectCode(store.saveSnapshot("channel", key, wrong, { name: `wrong ${wrong}` }, fence), "CONFLICT");
      }
      expect(await store.loadSnapshot("channel", key)).toEqual({ version: 3, state: { name: "v3" } });
    });

    it("refuses an expected version on an absent snapshot with CONFLICT and creates nothing", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("absent-expected");
      await expectCode(store.saveSnapshot("channel", key, 3, { x: 1 }, fence), "CONFLICT");
      expect(await store.loadSnapshot("channel", key)).toBeUndefined();
    });

    it("lets exactly one of several concurrent saves from the same version win", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("race");
      for (const expected of [0, 1]) {
        const settled = await Promise.allSettled(
          Array.from({ length: 5 }, (_, i) => store.saveSnapshot("channel", key, expected, { writer: i }, fence)),
        );
        const won = settled.filter((s) => s.status === "fulfilled");
        expect(won).toHaveLength(1);
        expect((won[0] as PromiseFulfilledResult<number>).value).toBe(expected + 1);
        for (const s of settled) {
          if (s.status === "rejected") expect((s.reason as ChorusError).code).toBe("CONFLICT");
        }
        const winner = settled.findIndex((s) => s.status === "fulfilled");
        expect(await store.loadSnapshot("channel", key)).toEqual({ version: expected + 1, state: { writer: winner } });
      }
    });

    it("refuses a stale fence with FENCED and leaves the snapshot as it was", async () => {
      const fence = await fenceOn("node-a");
      const key = uniqueKey("snap-fenced");
      const newKey = uniqueKey("snap-fenced-new");
      await store.saveSnapshot("user", key, 0, { n: 1 }, fence);
      for (const bad of [{ ...fence, epoch: fence.epoch + 1 }, { ...fence, node: "node-b" }]) {
        await expectCode(store.saveSnapshot("user", key, 1, { n: 2 }, bad), "FENCED");
        await expectCode(store.saveSnapshot("user", newKey, 0, { n: 2 }, bad), "FENCED");
      }
      expect(await store.loadSnapshot("user", key)).toEqual({ version: 1, state: { n: 1 } });
      expect(await store.loadSnapshot("user", newKey)).toBeUndefined();
    });
  });

  describe("leases", () => {
    it("ensureShards creates free lease rows idempotently", async () => {
      const s = shard();
      await store.ensureShards(SHARDS);
      await store.ensureShards(SHARDS + 4);
      await store.ensureShards(SHARDS + 4);
      const rows = await store.db.selectFrom("shard_leases").select(["shard", "owner", "epoch"]).orderBy("shard").execute();
      expect(rows.map((r) => r.shard)).toEqual(Array.from({ length: SHARDS + 4 }, (_, i) => i));
      // A held lease survives ensureShards.
      const lease = await store.acquireLease(s, "node-a", 60);
      await store.ensureShards(SHARDS + 4);
      const row = await store.db.selectFrom("shard_leases").selectAll().where("shard", "=", s).executeTakeFirstOrThrow();
      expect(row.owner).toBe("node-a");
      expect(row.epoch).toBe(lease!.epoch);
      // The new rows are free.
      expect(await store.acquireLease(SHARDS + 2, "node-a", 60)).toEqual({ shard: SHARDS + 2, epoch: 1, reclaimed: false });
    });

    it("gives a free shard epoch 1 and refuses a second node while the lease is live", async () => {
      const s = shard();
      expect(await store.acquireLease(s, "node-a", 60)).toEqual({ shard: s, epoch: 1, reclaimed: false });
      expect(await store.acquireLease(s, "node-b", 60)).toBeUndefined();
      // Concurrent attempts on a free shard: exactly one owner.
      const t = shard();
      const attempts = await Promise.all(["n1", "n2", "n3", "n4"].map((n) => store.acquireLease(t, n, 60)));
      expect(attempts.filter((a) => a !== undefined)).toEqual([{ shard: t, epoch: 1, reclaimed: false }]);
      expect(await store.leasesHeldBy("node-a")).toContainEqual({ shard: s, epoch: 1 });
    });

    it("renews a held lease, and releasing lets another node take it at once with the next epoch", async () => {
      const s = shard();
      const lease = (await store.acquireLease(s, "node-a", 60))!;
      expect(await store.renewLease(lease, "node-a", 60)).toBe(true);
      expect(await store.renewLease(lease, "node-b", 60)).toBe(false);
      expect(await store.renewLease({ ...lease, epoch: lease.epoch + 1 }, "node-a", 60)).toBe(false);
      // Many at once: only those held by the node at their epoch.
      const other = (await store.acquireLease(shard(), "node-a", 60))!;
      const foreign = (await store.acquireLease(shard(), "node-b", 60))!;
      const renewed = await store.renewLeases([lease, { ...other, epoch: other.epoch + 1 }, foreign], "node-a", 60);
      expect([...renewed]).toEqual([lease.shard]);
      expect(await store.renewLeases([], "node-a", 60)).toEqual(new Set());
      // Releasing as someone else, or with a wrong epoch, does nothing.
      await store.releaseLease(lease, "node-b");
      await store.releaseLease({ ...lease, epoch: lease.epoch + 1 }, "node-a");
      expect(await store.acquireLease(s, "node-b", 60)).toBeUndefined();
      await store.releaseLease(lease, "node-a");
      expect(await store.leasesHeldBy("node-a")).not.toContainEqual(lease);
      const next = await store.acquireLease(s, "node-b", 60);
      // Released: the next holder knows nothing was left behind.
      expect(next).toEqual({ shard: s, epoch: lease.epoch + 1, reclaimed: false });
      expect(await store.renewLease(lease, "node-a", 60)).toBe(false);
      await expectCode(store.write({ shard: s, epoch: lease.epoch, node: "node-a" }, async () => undefined), "FENCED");
      await store.write({ shard: s, epoch: next!.epoch, node: "node-b" }, async () => undefined);
    });

    it("with force, takes even a live lease and bumps the epoch, fencing the previous holder", async () => {
      const s = shard();
      const old = (await store.acquireLease(s, "node-a", 60))!;
      const forced = await store.acquireLease(s, "node-b", 60, true);
      // Never released: the new holder knows it took over from a holder that may have left work unfinished.
      expect(forced).toEqual({ shard: s, epoch: old.epoch + 1, reclaimed: true });
      expect(await store.renewLease(old, "node-a", 60)).toBe(false);
      await expectCode(store.write({ shard: s, epoch: old.epoch, node: "node-a" }, async () => undefined), "FENCED");
      // A restarted single process forcing its own shard back also gets a new epoch.
      expect(await store.acquireLease(s, "node-b", 60, true)).toEqual({ shard: s, epoch: old.epoch + 2, reclaimed: true });
    });

    it("after expiry: another node takes over with epoch + 1, the old holder can neither renew nor write; heartbeats expire too", async () => {
      const s = shard();
      const old = (await store.acquireLease(s, "node-a", 1))!;
      const oldFence: Fence = { shard: s, epoch: old.epoch, node: "node-a" };
      expect(await store.acquireLease(s, "node-b", 1)).toBeUndefined();
      const hbKey = uniqueKey("hb");
      expect(await store.heartbeat(`${hbKey}-old`, 1)).toContain(`${hbKey}-old`);
      await sleep(1100); // the one wait of the suite: the lease and the heartbeat above are now older than 1 s

      const taken = await store.acquireLease(s, "node-b", 60);
      expect(taken).toEqual({ shard: s, epoch: old.epoch + 1, reclaimed: true });
      expect(await store.renewLease(old, "node-a", 60)).toBe(false);
      const key = uniqueKey("after-takeover");
      await expectCode(
        store.write(oldFence, (trx) => trx.insertInto("realms").values(realmRow(key)).execute()),
        "FENCED",
      );
      expect(await realmNamed(key)).toBeUndefined();
      await expectCode(store.saveSnapshot("channel", key, 0, {}, oldFence), "FENCED");
      // The new holder writes.
      await store.write({ shard: s, epoch: taken!.epoch, node: "node-b" }, (trx) => trx.insertInto("realms").values(realmRow(key)).execute());
      expect(await realmNamed(key)).toBeDefined();
      expect(await store.leasesHeldBy("node-b")).toContainEqual({ shard: s, epoch: taken!.epoch });
      expect(await store.leasesHeldBy("node-a")).not.toContainEqual(old);

      const alive = await store.heartbeat(`${hbKey}-new`, 1);
      expect(alive.has(`${hbKey}-new`)).toBe(true);
      expect(alive.has(`${hbKey}-old`)).toBe(false);
    });
  });

  describe("heartbeat", () => {
    it("returns the node ids seen alive, the caller's included", async () => {
      const key = uniqueKey("hb-live");
      const first = await store.heartbeat(`${key}-0`, 60);
      expect(first).toBeInstanceOf(Set);
      expect(first.has(`${key}-0`)).toBe(true);
      await store.heartbeat(`${key}-1`, 60);
      const seen = await store.heartbeat(`${key}-2`, 60);
      for (const i of [0, 1, 2]) expect(seen.has(`${key}-${i}`)).toBe(true);
      expect(seen.has(`${key}-5`)).toBe(false);
      // A repeated heartbeat keeps one entry for the node; a node that left is no longer seen.
      await store.leave(`${key}-1`);
      const again = await store.heartbeat(`${key}-0`, 60);
      expect([0, 1, 2].map((i) => again.has(`${key}-${i}`))).toEqual([true, false, true]);
      const rows = await store.db.selectFrom("cluster_nodes").select("node_id").where("node_id", "=", `${key}-0`).execute();
      expect(rows).toHaveLength(1);
    });
  });
});
