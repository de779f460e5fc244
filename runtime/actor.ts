/**
 * Actor identity and placement. An actor is a (kind, key) pair written `kind:key` (`channel:42`, `user:7`);
 * which shard hosts it is a pure function of that string and the shard count, so every process agrees
 * without asking anyone.
 */
import type { ChorusError } from "./errors.ts";

export type ActorId = string;

export function actorId(kind: string, key: string | number): ActorId {
  return `${kind}:${key}`;
}

export function parseActorId(id: ActorId): { kind: string; key: string } {
  const at = id.indexOf(":");
  if (at <= 0) throw new Error(`not an actor id: ${id}`);
  return { kind: id.slice(0, at), key: id.slice(at + 1) };
}

/** FNV-1a, 32 bits: fast, stable across processes and versions, well spread for short keys. */
export function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function shardOf(id: ActorId, shards: number): number {
  return hash32(id) % shards;
}

/**
 * A reply handle for an ask the actor answers later (a parked long-poll). Answer it exactly once (resolve or
 * reject); before that, an ask made with askStream may also be given interim answers (push), each heard by the
 * asker as it comes while the ask stays open (an event stream's batches). Other asks ignore interim answers.
 */
export interface Deferred<T = unknown> {
  resolve(value: T): void;
  reject(error: ChorusError): void;
  push(value: T): void;
}

/** Returned by `receive` instead of a value when the ask was parked with `ctx.defer()`. */
export const PARKED: unique symbol = Symbol("parked");

/** Proof of shard ownership that every durable write carries; the store refuses stale epochs. */
export interface Fence {
  shard: number;
  epoch: number;
  node: string;
}

export interface ActorContext {
  readonly id: ActorId;
  readonly kind: string;
  readonly key: string;
  /** Park the current ask; the reply is sent when the handle is resolved. */
  defer<T>(): Deferred<T>;
  /** Deliver `message` to this actor after `ms`, as an ordinary turn. Returns a cancel function. */
  schedule(ms: number, message: unknown): () => void;
  /** The ownership proof of this actor's shard, to pass to store writes. */
  fence(): Fence;
  /**
   * End the current turn now but answer it (reply, broadcast completion, transport acknowledgement) only once
   * `work` settles: the mailbox moves on while a commit is in flight, and the next turns' commits can share its
   * group commit. A rejection answers the turn with that error.
   */
  completeWhen(work: Promise<unknown>): void;
  /**
   * Answer the current turn as usual, but acknowledge the transport entry that brought it only once `work` settles:
   * for a write-behind whose loss a second delivery of the entry would repair (the entry's holder crashing before
   * the write commits leaves the entry unacknowledged, so the shard's next holder receives it again). Only sound for
   * turns whose whole effect the entry reproduces; a no-op in turns that no entry brought (timers).
   */
  holdAcknowledgement(work: Promise<unknown>): void;
  /**
   * Whether entries of this actor's shard may be lost that no one will deliver again: the shard was taken from a
   * holder that stopped without releasing it, on a transport that cannot deliver that holder's unacknowledged
   * entries again (memory: they died with the process), or the transport lost entries while this process held the
   * shard (Redis lost its data; see `entriesLost`). Work held with holdAcknowledgement before then, or an entry
   * addressed to this actor, may be missing, and an actor relying on them must say so.
   */
  readonly unacknowledgedLost: boolean;
  /**
   * Whether the transport delivers this actor's unacknowledged entries again after this process dies (Redis
   * Streams) or loses them with it (memory, one process: everything in memory dies with it anyway).
   */
  readonly transportRedelivers: boolean;
}

export interface Actor {
  /** Load state before the first turn. */
  activate?(): Promise<void>;
  /** One turn. The value returned answers an ask (ignored for a tell); return PARKED after ctx.defer(). */
  receive(message: any, ctx: ActorContext): unknown | Promise<unknown>;
  /** Whether the actor holds nothing in memory that would be lost by passivating it now. */
  canPassivate?(): boolean;
  /**
   * The transport lost entries of this actor's shard that were not yet handled, and cannot tell which (Redis lost
   * its data: flushed, or restarted without it). Runs as a turn of its own, after those already queued. An actor
   * whose memory such an entry would have changed, and which cannot rebuild it, says so to its clients (event
   * queues are refused rather than left with a silent gap). Actors activated on the shard afterwards see
   * `unacknowledgedLost` instead.
   */
  entriesLost?(): unknown;
  /**
   * Called before the actor is dropped (passivation, shard release, shutdown). It holds its shard's hand-over and
   * the process's shutdown: work of its own it waits for is waited for at most DEACTIVATION_WAIT_MS.
   */
  deactivate?(): Promise<void>;
}

/**
 * How long a deactivating actor waits for its work in flight (rows written behind, fan-outs under way). Bounded, so
 * that a store or a peer that does not answer cannot hold a shard's hand-over, and the shard manager's tick with it.
 */
export const DEACTIVATION_WAIT_MS = 5_000;

export type ActorFactory = (ctx: ActorContext) => Actor;
