/**
 * The store seam: everything durable. One implementation (SqlStore) over two engines chosen in db.ts.
 *
 * Guarantees (checked by test/runtime/store.contract.test.ts against PGlite and Postgres):
 * - A write resolves only after its transaction committed: the durability rule (success means committed) rests
 *   on this. PGlite never fsyncs, so the embedded engine survives a killed process, not a power cut.
 * - Every actor write carries a Fence; a write whose fence's epoch is not the shard's current epoch is refused
 *   with FENCED and changes nothing, so a worker that lost its lease cannot write behind its successor's back.
 * - `appendMessage` and `appendUserEvent` group-commit: concurrent appends share one transaction; each resolves
 *   once committed. Appending the same `send_key` twice commits once and resolves both with the first id. A
 *   write-behind event (`behind`) may wait a few milliseconds for others to commit with.
 * - A message's recipients (`user_messages`) are readable as soon as its append resolves. Past `listAbove`
 *   recipients they are committed as one list row and expanded into per-user rows soon after (the view
 *   `user_messages` shows either, exactly once); a writer of flag rows calls `expandRecipientLists` first.
 * - Message id blocks are disjoint and each block is above every block handed out before it.
 * - Snapshots are versioned: `saveSnapshot(…, expected)` succeeds only if the stored version is `expected`
 *   (0 = absent) and returns the new version; otherwise CONFLICT.
 * - Leases: at most one owner per shard; taking over an expired lease increments its epoch.
 * What it leaves out: caching (callers cache), and any cross-shard transaction.
 */
import type { Kysely, Transaction } from "kysely";
import type { Fence } from "../actor.ts";
import type { Database, MessageTable } from "./schema.ts";
import type { Engine } from "./db.ts";

export type NewMessage = Omit<MessageTable, "id"> & { id: number };

/** A recipient of a new message and their initial flags (a `user_messages` row, Zulip's UserMessage). */
export interface MessageRecipient {
  user_id: number;
  flags: number;
}

/** One event of a user's durable event stream (what a restored event queue is rebuilt from). */
export interface UserEvent {
  user_id: number;
  seq: number;
  payload: unknown;
}

export interface Lease {
  shard: number;
  epoch: number;
  /** Taken from a holder that never released it (crashed, or stopped renewing): set by acquireLease. */
  reclaimed?: boolean;
}

export interface Store {
  readonly engine: Engine;
  /** For reads, and for writes inside `write`. */
  readonly db: Kysely<Database>;
  migrate(): Promise<void>;
  /** Run `fn` in one transaction after checking the fence; commits before resolving. */
  write<T>(fence: Fence, fn: (trx: Transaction<Database>) => Promise<T>): Promise<T>;
  /**
   * Group-committed message insert; resolves with the stored id (the first one for a repeated send_key). The
   * recipients' rows commit in the same transaction, and only with a message actually inserted.
   */
  appendMessage(message: NewMessage, fence: Fence, recipients?: MessageRecipient[]): Promise<number>;
  /**
   * Expand the recipient lists of these messages (of every message, when omitted) into rows: first thing in a
   * write transaction that changes their `user_message_rows`, so that the rows to change exist; or on `db`, for
   * lists a crashed process left.
   */
  expandRecipientLists(trx: Kysely<Database>, messageIds?: readonly number[]): Promise<void>;
  /**
   * Group-committed; a repeated (user_id, seq) is stored once. `behind`: the caller does not wait on it before
   * answering anyone, so it may wait a few milliseconds to share its commit with later events.
   */
  appendUserEvent(event: UserEvent, fence: Fence, opts?: { behind?: boolean }): Promise<void>;
  /** The user's stored events after `afterSeq`, oldest first. */
  userEventsAfter(userId: number, afterSeq: number): Promise<UserEvent[]>;
  /** Drop the user's events up to and including `throughSeq` (every queue has acknowledged them). */
  pruneUserEvents(userId: number, throughSeq: number, fence: Fence): Promise<void>;
  /** A block of message ids [first, first + size), above every block handed out before. */
  allocateMessageIds(): Promise<{ first: number; size: number }>;
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
  releaseLease(lease: Lease, node: string): Promise<void>;
  /** Record that this worker is alive; returns the worker indexes seen alive within `ttlSeconds`. */
  heartbeat(node: string, workerIndex: number, ttlSeconds: number): Promise<Set<number>>;
  /** Forget this worker's heartbeat (graceful stop), so others take its released shards without waiting. */
  leave(node: string): Promise<void>;
  /** The leases `node` holds according to the store (for operators and tests; workers track their own). */
  leasesHeldBy(node: string): Promise<Lease[]>;
  close(): Promise<void>;
}
