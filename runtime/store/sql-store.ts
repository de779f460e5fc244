/** The Store over kysely: the same SQL for PGlite and Postgres. See store.ts for the guarantees. */
import { Migrator, sql, type Kysely, type Migration, type Transaction } from "kysely";
import { trace } from "@opentelemetry/api";
import type { Fence } from "../actor.ts";
import { errors } from "../errors.ts";
import type { KernelTables } from "./schema.ts";
import type { Engine, OpenDatabase, Prepared } from "./db.ts";
import { staleAgainst } from "./group-commit.ts";
import type { Lease, Store, StoreComponent } from "./store.ts";

const tracer = trace.getTracer("chorus.store");

export class SqlStore<DB extends KernelTables = KernelTables> implements Store<DB> {
  readonly db: Kysely<DB>;
  /**
   * The same database seen through the kernel's tables only, for the store's own statements: kysely cannot type a
   * query on the known tables of a generic `DB`.
   */
  private readonly kernel: Kysely<KernelTables>;
  readonly engine: Engine;
  readonly prepared: Prepared;
  /** What domains built on this store (chat's message log), in the order attached. */
  private readonly components: StoreComponent[] = [];

  constructor(database: OpenDatabase) {
    ({ db: this.kernel, engine: this.engine, prepared: this.prepared } = database);
    // The caller names the whole database's type; the tables are its migrations' business.
    this.db = database.db as unknown as Kysely<DB>;
  }

  async migrate(migrations: Record<string, Migration>): Promise<void> {
    const migrator = new Migrator({ db: this.kernel, provider: { getMigrations: async () => migrations } });
    const { error, results } = await migrator.migrateToLatest();
    if (error) {
      const failed = results?.find((r) => r.status === "Error");
      throw new Error(`migration ${failed?.migrationName ?? "?"} failed`, { cause: error });
    }
    await this.recover();
  }

  attach(component: StoreComponent): void {
    this.components.push(component);
  }

  async recover(): Promise<void> {
    for (const component of this.components) await component.recover();
  }

  write<T>(fence: Fence, fn: (trx: Transaction<DB>) => Promise<T>): Promise<T> {
    return this.writeKernel(fence, fn as unknown as (trx: Transaction<KernelTables>) => Promise<T>);
  }

  private async writeKernel<T>(fence: Fence, fn: (trx: Transaction<KernelTables>) => Promise<T>): Promise<T> {
    return tracer.startActiveSpan("store.commit", async (span) => {
      try {
        return await this.kernel.transaction().execute(async (trx) => {
          const isStale = await fenceChecker(trx, [fence]);
          if (isStale(fence)) throw errors.fenced(fence.shard);
          return fn(trx);
        });
      } finally {
        span.end();
      }
    });
  }

  async loadSnapshot<S>(kind: string, key: string): Promise<{ version: number; state: S } | undefined> {
    const row = await this.kernel
      .selectFrom("actor_snapshots")
      .select(["version", "state"])
      .where("kind", "=", kind)
      .where("key", "=", key)
      .executeTakeFirst();
    return row ? { version: row.version, state: row.state as S } : undefined;
  }

  async saveSnapshot<S>(kind: string, key: string, expectedVersion: number, state: S, fence: Fence): Promise<number> {
    const next = expectedVersion + 1;
    const json = JSON.stringify(state);
    const now = Math.floor(Date.now() / 1000);
    return this.writeKernel(fence, async (trx) => {
      const result =
        expectedVersion === 0
          ? await trx
              .insertInto("actor_snapshots")
              .values({ kind, key, version: next, state: json, updated_at: now })
              .onConflict((c) => c.columns(["kind", "key"]).doNothing())
              .executeTakeFirst()
          : await trx
              .updateTable("actor_snapshots")
              .set({ version: next, state: json, updated_at: now })
              .where("kind", "=", kind)
              .where("key", "=", key)
              .where("version", "=", expectedVersion)
              .executeTakeFirst();
      const changed = "numInsertedOrUpdatedRows" in result ? result.numInsertedOrUpdatedRows : result.numUpdatedRows;
      if (!changed) throw errors.conflict(`${kind}:${key}`);
      return next;
    });
  }

  async ensureShards(count: number): Promise<void> {
    await sql`insert into shard_leases (shard, owner, epoch, expires_at)
              select s, null, 0, now() from generate_series(0, ${count - 1}::int) as s
              on conflict (shard) do nothing`.execute(this.kernel);
  }

  async acquireLease(shard: number, node: string, ttlSeconds: number, force = false): Promise<Lease | undefined> {
    // The row as it was, read under the update's lock: whether its previous holder had released it.
    const { rows } = await sql<{ shard: number; epoch: number; previous: string | null }>`
      with before as (select shard, owner from shard_leases where shard = ${shard} for update)
      update shard_leases l set owner = ${node}, epoch = l.epoch + 1, expires_at = now() + make_interval(secs => ${ttlSeconds})
      from before
      where l.shard = before.shard and (${force}::boolean or l.owner is null or l.expires_at < now())
      returning l.shard, l.epoch, before.owner as previous`.execute(this.kernel);
    const row = rows[0];
    return row ? { shard: row.shard, epoch: Number(row.epoch), reclaimed: row.previous !== null } : undefined;
  }

  async renewLease(lease: Lease, node: string, ttlSeconds: number): Promise<boolean> {
    const result = await this.kernel
      .updateTable("shard_leases")
      .set({ expires_at: sql`now() + make_interval(secs => ${ttlSeconds})` })
      .where("shard", "=", lease.shard)
      .where("owner", "=", node)
      .where("epoch", "=", lease.epoch)
      .executeTakeFirst();
    return result.numUpdatedRows > 0n;
  }

  async renewLeases(leases: Lease[], node: string, ttlSeconds: number): Promise<Set<number>> {
    if (leases.length === 0) return new Set();
    const rows = await this.kernel
      .updateTable("shard_leases")
      .set({ expires_at: sql`now() + make_interval(secs => ${ttlSeconds})` })
      .where("owner", "=", node)
      .where((eb) => eb.or(leases.map((l) => eb.and([eb("shard", "=", l.shard), eb("epoch", "=", l.epoch)]))))
      .returning("shard")
      .execute();
    return new Set(rows.map((r) => r.shard));
  }

  async releaseLease(lease: Lease, node: string): Promise<void> {
    await this.kernel
      .updateTable("shard_leases")
      .set({ owner: null, expires_at: sql`now()` })
      .where("shard", "=", lease.shard)
      .where("owner", "=", node)
      .where("epoch", "=", lease.epoch)
      .execute();
  }

  async heartbeat(node: string, ttlSeconds: number): Promise<Set<string>> {
    await this.kernel
      .insertInto("cluster_nodes")
      .values({ node_id: node, seen_at: sql`now()` as any })
      .onConflict((c) => c.column("node_id").doUpdateSet({ seen_at: sql`now()` as any }))
      .execute();
    await this.kernel
      .deleteFrom("cluster_nodes")
      .where("seen_at", "<", sql<Date>`now() - make_interval(secs => ${ttlSeconds * 6})`)
      .execute();
    const alive = await this.kernel
      .selectFrom("cluster_nodes")
      .select("node_id")
      .where("seen_at", ">", sql<Date>`now() - make_interval(secs => ${ttlSeconds})`)
      .execute();
    return new Set(alive.map((r) => r.node_id));
  }

  async leave(node: string): Promise<void> {
    await this.kernel.deleteFrom("cluster_nodes").where("node_id", "=", node).execute();
  }

  async leasesHeldBy(node: string): Promise<Lease[]> {
    const rows = await this.kernel.selectFrom("shard_leases").select(["shard", "epoch"]).where("owner", "=", node).execute();
    return rows.map((r) => ({ shard: r.shard, epoch: Number(r.epoch) }));
  }

  async close(): Promise<void> {
    for (const component of this.components) await component.close();
    await this.kernel.destroy();
  }
}

/**
 * Reads the leases of the fences' shards and answers whether a fence is stale (its epoch or owner is no longer
 * the shard's). Locks those lease rows for the rest of the transaction, so a takeover (acquireLease's FOR UPDATE,
 * which bumps the epoch) waits until this write has committed. FOR KEY SHARE, not FOR SHARE: it conflicts with FOR
 * UPDATE only, so a renewal (an UPDATE of `expires_at`, which takes FOR NO KEY UPDATE) and a write under the lease
 * do not wait for each other. A release (likewise) does not wait either; a write then still under way commits before
 * the next holder's take-over can, and one that locks the row after the release sees it and is FENCED.
 */
async function fenceChecker(trx: Transaction<KernelTables>, fences: Fence[]): Promise<(fence: Fence) => boolean> {
  const shards = [...new Set(fences.map((f) => f.shard))];
  const rows = await trx
    .selectFrom("shard_leases")
    .select(["shard", "owner", "epoch"])
    .where("shard", "in", shards)
    .forKeyShare()
    .execute();
  return staleAgainst(rows);
}

