/**
 * The store seam: everything durable. One implementation (SqlStore) over two engines chosen in db.ts.
 *
 * Guarantees (checked by test/runtime/store.contract.test.ts against PGlite and Postgres):
 * - A write resolves only after its transaction committed: the durability rule (success means committed) rests
 *   on this. PGlite never fsyncs, so the embedded engine survives a killed process, not a power cut.
 * - Every actor write carries a Fence; a write whose fence's epoch is not the shard's current epoch is refused
 *   with FENCED and changes nothing, so a worker that lost its lease cannot write behind its successor's back.
 * - Hot appends group-commit (group-commit.ts): concurrent appends share one transaction, each resolves once
 *   committed, and a stale fence's appends are refused with FENCED while the rest of their batch commits. A domain
 *   builds its appends on GroupCommit and `prepared` (chat's message log, actors/chat/message-log.ts).
 * - Components attached to the store (`attach`) recover after every migration and on `recover()` (a shard taken
 *   from a holder that never released it), and close before the database does.
 * - Snapshots are versioned: `saveSnapshot(…, expected)` succeeds only if the stored version is `expected`
 *   (0 = absent) and returns the new version; otherwise CONFLICT.
 * - Leases: at most one owner per shard; taking over an expired lease increments its epoch.
 * What it leaves out: caching (callers cache), any cross-shard transaction, and every domain's own tables.
 */
import type { Kysely, Migration, Transaction } from "kysely";
import type { Fence } from "../actor.ts";
import type { KernelTables } from "./schema.ts";
import type { Engine, Prepared } from "./db.ts";

/**
 * A domain's durable component built on the store (chat's message log): what a stopped or crashed process left
 * half-done is finished by `recover`, and what is pending is committed by `close`.
 */
export interface StoreComponent {
  /** Run after every migration, and when a shard is taken over from a holder that never released it. */
  recover(): Promise<void>;
  /** Commit whatever is pending; run by the store's close, before the database closes. */
  close(): Promise<void>;
}

export interface Lease {
  shard: number;
  epoch: number;
  /** Taken from a holder that never released it (crashed, or stopped renewing): set by acquireLease. */
  reclaimed?: boolean;
}

/**
 * `DB` is the whole database's type, composed by the caller (actors/schema.ts); the store itself uses only the
 * kernel's tables.
 */
export interface Store<DB extends KernelTables = KernelTables> {
  readonly engine: Engine;
  /** For reads, and for writes inside `write`. */
  readonly db: Kysely<DB>;
  /** Runs the group commits' statements as named prepared statements, prepared once per connection (see db.ts). */
  readonly prepared: Prepared;
  /**
   * Apply the caller's migrations not applied yet, in the order of their names (kysely records each by name, so
   * a name never changes), then run every component's `recover`. The store has no migrations of its own: the caller's
   * list creates the kernel's tables too.
   */
  migrate(migrations: Record<string, Migration>): Promise<void>;
  /** Attach a component: recovered after migrations and take-overs, closed before the database. */
  attach(component: StoreComponent): void;
  /** Run every attached component's `recover`. */
  recover(): Promise<void>;
  /**
   * Run `fn` in one transaction after checking the fence; commits before resolving. A take-over of the fence's shard
   * (acquireLease) waits for it to end, so it never lands behind the next holder's writes; a renewal of the lease
   * neither waits for it nor holds it up (on Postgres; PGlite runs one transaction at a time).
   */
  write<T>(fence: Fence, fn: (trx: Transaction<DB>) => Promise<T>): Promise<T>;
  loadSnapshot<S>(kind: string, key: string): Promise<{ version: number; state: S } | undefined>;
  saveSnapshot<S>(kind: string, key: string, expectedVersion: number, state: S, fence: Fence): Promise<number>;
  /** Make sure lease rows exist for shards [0, count). */
  ensureShards(count: number): Promise<void>;
  /**
   * Take the shard if its lease is free or expired (or unconditionally with `force`, for a single-process
   * deployment whose previous incarnation died holding it); returns the new epoch, or undefined if held.
   */
  acquireLease(shard: number, node: string, ttlSeconds: number, force?: boolean): Promise<Lease | undefined>;
  /** Extend a lease we hold; false if it was taken over (we must stop serving the shard). */
  renewLease(lease: Lease, node: string, ttlSeconds: number): Promise<boolean>;
  /** `renewLease` for many leases in one statement; answers the shards renewed (the others were taken over). */
  renewLeases(leases: Lease[], node: string, ttlSeconds: number): Promise<Set<number>>;
  releaseLease(lease: Lease, node: string): Promise<void>;
  /**
   * Record that this worker is alive; returns the node ids of every worker seen alive within `ttlSeconds`, this one
   * included (the cluster's membership: runtime/cluster.ts places shards on it).
   */
  heartbeat(node: string, ttlSeconds: number): Promise<Set<string>>;
  /** Forget this worker's heartbeat (graceful stop), so others take its released shards without waiting. */
  leave(node: string): Promise<void>;
  /** The leases `node` holds according to the store (for operators and tests; workers track their own). */
  leasesHeldBy(node: string): Promise<Lease[]>;
  /** Close every attached component, then the database. */
  close(): Promise<void>;
}
