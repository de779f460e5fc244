/** The Store over kysely: the same SQL for PGlite and Postgres. See store.ts for the guarantees. */
import { Migrator, sql, type Kysely, type Transaction } from "kysely";
import { trace } from "@opentelemetry/api";
import type { Fence } from "../actor.ts";
import { errors } from "../errors.ts";
import type { Database } from "./schema.ts";
import type { Engine } from "./db.ts";
import { migrations } from "./migrations/index.ts";
import type { Lease, MessageRecipient, NewMessage, Store, UserEvent } from "./store.ts";

const tracer = trace.getTracer("chorus.store");
const ID_BLOCK = 256; // must match the sequence's increment in the initial migration
/** Messages are inserted row by row (a dozen parameters each, under Postgres's 65535 per statement)... */
const MAX_BATCH_MESSAGES = 1000;
/** ...user events as column arrays, so a whole fan-out fits one commit. */
const MAX_BATCH = 20_000;

/** One row waiting for the next group commit: a message, or an event of a user's durable event stream. */
type PendingAppend = { fence: Fence; resolve(id: number): void; reject(err: unknown): void } & (
  | { message: NewMessage; recipients?: MessageRecipient[]; event?: undefined }
  | { event: UserEvent; message?: undefined }
);

export class SqlStore implements Store {
  private pending: PendingAppend[] = [];
  private flushing = false;

  constructor(
    readonly db: Kysely<Database>,
    readonly engine: Engine,
  ) {}

  async migrate(): Promise<void> {
    const migrator = new Migrator({ db: this.db, provider: { getMigrations: async () => migrations } });
    const { error, results } = await migrator.migrateToLatest();
    if (error) {
      const failed = results?.find((r) => r.status === "Error");
      throw new Error(`migration ${failed?.migrationName ?? "?"} failed`, { cause: error });
    }
  }

  async write<T>(fence: Fence, fn: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    return tracer.startActiveSpan("store.commit", async (span) => {
      try {
        return await this.db.transaction().execute(async (trx) => {
          const isStale = await fenceChecker(trx, [fence]);
          if (isStale(fence)) throw errors.fenced(fence.shard);
          return fn(trx);
        });
      } finally {
        span.end();
      }
    });
  }

  appendMessage(message: NewMessage, fence: Fence, recipients?: MessageRecipient[]): Promise<number> {
    return new Promise((resolve, reject) => {
      this.pending.push({ message, recipients, fence, resolve, reject });
      this.scheduleFlush();
    });
  }

  async appendUserEvent(event: UserEvent, fence: Fence): Promise<void> {
    await new Promise<number>((resolve, reject) => {
      this.pending.push({ event, fence, resolve, reject });
      this.scheduleFlush();
    });
  }

  async userEventsAfter(userId: number, afterSeq: number): Promise<UserEvent[]> {
    const rows = await this.db
      .selectFrom("user_events")
      .select(["user_id", "seq", "payload"])
      .where("user_id", "=", userId)
      .where("seq", ">", afterSeq)
      .orderBy("seq")
      .execute();
    return rows.map((r) => ({ user_id: r.user_id, seq: Number(r.seq), payload: r.payload }));
  }

  async pruneUserEvents(userId: number, throughSeq: number, fence: Fence): Promise<void> {
    await this.write(fence, (trx) => trx.deleteFrom("user_events").where("user_id", "=", userId).where("seq", "<=", throughSeq).execute());
  }

  /**
   * The next group commit starts on the next turn of the event loop, not now: a transaction on PGlite is a chain of
   * promise callbacks that would otherwise run to its end before the requests already waiting on the sockets are
   * read, so every commit would hold one message.
   */
  private scheduleFlush(): void {
    if (this.flushing) return;
    this.flushing = true;
    setImmediate(() => void this.flush());
  }

  /**
   * Group commit: whatever accumulated while the previous transaction ran goes into the next one. Under load a
   * batch grows to what arrives during one commit; idle, a message commits alone with no added delay.
   */
  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.pending.length) {
        const batch = this.takeBatch();
        await tracer.startActiveSpan("store.commit appends", async (span) => {
          span.setAttribute("chorus.batch_size", batch.length);
          try {
            const outcome = await this.db.transaction().execute(async (trx) => {
              const isStale = await fenceChecker(trx, batch.map((p) => p.fence));
              const ok = batch.filter((p): p is PendingAppend & { message: NewMessage } => !isStale(p.fence) && !!p.message);
              const events = batch.filter((p) => !isStale(p.fence) && p.event).map((p) => p.event!);
              // Rows as column arrays (unnest): one small statement whatever the batch size, nothing built per row.
              if (events.length) {
                await sql`insert into user_events (user_id, seq, payload)
                  select * from unnest(${events.map((e) => e.user_id)}::integer[], ${events.map((e) => e.seq)}::bigint[], ${events.map((e) => JSON.stringify(e.payload))}::jsonb[])
                  on conflict (user_id, seq) do nothing`.execute(trx);
              }
              const ids = new Map<string, number>();
              if (ok.length) {
                const rows = await trx
                  .insertInto("messages")
                  .values(ok.map((p) => p.message))
                  .onConflict((c) => c.column("send_key").doNothing())
                  .returning(["id", "send_key"])
                  .execute();
                const inserted = new Set(rows.map((r) => r.id));
                const recipientRows = ok
                  .filter((p) => p.recipients?.length && inserted.has(p.message.id))
                  .flatMap((p) => p.recipients!.map((r) => ({ user_id: r.user_id, message_id: p.message.id, flags: r.flags })));
                if (recipientRows.length) {
                  await sql`insert into user_messages (user_id, message_id, flags)
                    select * from unnest(${recipientRows.map((r) => r.user_id)}::integer[], ${recipientRows.map((r) => r.message_id)}::bigint[], ${recipientRows.map((r) => r.flags)}::integer[])
                    on conflict do nothing`.execute(trx);
                }
                const repeated = ok.filter((p) => p.message.send_key && !inserted.has(p.message.id));
                if (repeated.length) {
                  const earlier = await trx
                    .selectFrom("messages")
                    .select(["id", "send_key"])
                    .where("send_key", "in", repeated.map((p) => p.message.send_key!))
                    .execute();
                  for (const row of earlier) ids.set(row.send_key!, row.id);
                }
              }
              return { isStale, ids };
            });
            for (const p of batch) {
              if (outcome.isStale(p.fence)) p.reject(errors.fenced(p.fence.shard));
              else if (p.message) p.resolve((p.message.send_key && outcome.ids.get(p.message.send_key)) || p.message.id);
              else p.resolve(p.event.seq);
            }
          } catch (err) {
            for (const p of batch) p.reject(err);
          } finally {
            span.end();
          }
        });
      }
    } finally {
      this.flushing = false;
    }
  }

  private takeBatch(): PendingAppend[] {
    let messages = 0;
    let n = 0;
    while (n < this.pending.length && n < MAX_BATCH && (!this.pending[n]!.message || ++messages <= MAX_BATCH_MESSAGES)) n++;
    return this.pending.splice(0, n);
  }

  async allocateMessageIds(): Promise<{ first: number; size: number }> {
    const { rows } = await sql<{ first: number }>`select nextval('message_id_blocks') as first`.execute(this.db);
    return { first: Number(rows[0]!.first), size: ID_BLOCK };
  }

  async loadSnapshot<S>(kind: string, key: string): Promise<{ version: number; state: S } | undefined> {
    const row = await this.db
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
    return this.write(fence, async (trx) => {
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
              on conflict (shard) do nothing`.execute(this.db);
  }

  async acquireLease(shard: number, node: string, ttlSeconds: number, force = false): Promise<Lease | undefined> {
    const row = await this.db
      .updateTable("shard_leases")
      .set({
        owner: node,
        epoch: sql`epoch + 1`,
        expires_at: sql`now() + make_interval(secs => ${ttlSeconds})`,
      })
      .where("shard", "=", shard)
      .where((eb) =>
        force ? eb.lit(true) : eb.or([eb("owner", "is", null), eb("expires_at", "<", sql<Date>`now()`)]),
      )
      .returning(["shard", "epoch"])
      .executeTakeFirst();
    return row ? { shard: row.shard, epoch: Number(row.epoch) } : undefined;
  }

  async renewLease(lease: Lease, node: string, ttlSeconds: number): Promise<boolean> {
    const result = await this.db
      .updateTable("shard_leases")
      .set({ expires_at: sql`now() + make_interval(secs => ${ttlSeconds})` })
      .where("shard", "=", lease.shard)
      .where("owner", "=", node)
      .where("epoch", "=", lease.epoch)
      .executeTakeFirst();
    return result.numUpdatedRows > 0n;
  }

  async releaseLease(lease: Lease, node: string): Promise<void> {
    await this.db
      .updateTable("shard_leases")
      .set({ owner: null, expires_at: sql`now()` })
      .where("shard", "=", lease.shard)
      .where("owner", "=", node)
      .where("epoch", "=", lease.epoch)
      .execute();
  }

  async heartbeat(node: string, workerIndex: number, ttlSeconds: number): Promise<Set<number>> {
    await this.db
      .insertInto("cluster_nodes")
      .values({ node_id: node, worker_index: workerIndex, seen_at: sql`now()` as any })
      .onConflict((c) => c.column("node_id").doUpdateSet({ seen_at: sql`now()` as any, worker_index: workerIndex }))
      .execute();
    await this.db
      .deleteFrom("cluster_nodes")
      .where("seen_at", "<", sql<Date>`now() - make_interval(secs => ${ttlSeconds * 6})`)
      .execute();
    const alive = await this.db
      .selectFrom("cluster_nodes")
      .select("worker_index")
      .where("seen_at", ">", sql<Date>`now() - make_interval(secs => ${ttlSeconds})`)
      .execute();
    return new Set(alive.map((r) => r.worker_index));
  }

  async leave(node: string): Promise<void> {
    await this.db.deleteFrom("cluster_nodes").where("node_id", "=", node).execute();
  }

  async leasesHeldBy(node: string): Promise<Lease[]> {
    const rows = await this.db.selectFrom("shard_leases").select(["shard", "epoch"]).where("owner", "=", node).execute();
    return rows.map((r) => ({ shard: r.shard, epoch: Number(r.epoch) }));
  }

  async close(): Promise<void> {
    while (this.flushing || this.pending.length) await new Promise((r) => setTimeout(r, 5));
    await this.db.destroy();
  }
}

/**
 * Reads the leases of the fences' shards and answers whether a fence is stale (its epoch or owner is no longer
 * the shard's). Locks those lease rows for the rest of the transaction, so a takeover (which bumps the epoch)
 * waits until this write has committed.
 */
async function fenceChecker(trx: Transaction<Database>, fences: Fence[]): Promise<(fence: Fence) => boolean> {
  const shards = [...new Set(fences.map((f) => f.shard))];
  const rows = await trx
    .selectFrom("shard_leases")
    .select(["shard", "owner", "epoch"])
    .where("shard", "in", shards)
    .forShare()
    .execute();
  const current = new Map(rows.map((r) => [r.shard, r]));
  return (fence) => {
    const row = current.get(fence.shard);
    return !row || row.owner !== fence.node || Number(row.epoch) !== fence.epoch;
  };
}
