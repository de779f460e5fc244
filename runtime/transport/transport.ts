/**
 * The transport seam: how an entry addressed to a shard reaches the process that holds the shard, and how a
 * reply reaches the process that asked.
 *
 * Guarantees every engine gives (checked by test/runtime/transport.contract.test.ts):
 * - `send` resolves only once the entry is accepted: a crash of the sender after that does not lose it.
 * - Entries sent to one shard are handed to `onEntry` in the order they were accepted, one call at a time;
 *   `onEntry` enqueues synchronously and returns a promise for the end of the turns it started.
 * - An entry is acknowledged only after that promise settles, and not at all when it rejects with
 *   `LeftForNextHolder`. An entry whose holder died before acknowledging is delivered again to the next holder of
 *   the shard: delivery is at least once, so handlers must be idempotent.
 * - Entries of a shard are delivered only while this process holds the shard (between `acquire` and `release`);
 *   entries sent to a shard nobody holds wait until someone acquires it.
 * - A reply is delivered to the node named in the address, at most once; replies to a node that is gone are dropped
 *   (the asker's timeout covers them).
 * - When the engine finds it lost what it held (entries not yet delivered, replies not yet read), it calls
 *   `onLost` once it serves again.
 * What it leaves out: ordering across shards, exactly-once delivery, and durability beyond the engine's own
 * (Redis on these machines keeps nothing on disk: durable state lives in the store, never in the transport), and
 * messages to every node (those are pub/sub: pubsub.ts).
 */
import type { ErrorJSON } from "../errors.ts";

/**
 * What `onEntry`'s promise rejects with when the entry's work was refused here because this process no longer owns
 * the shard (a write refused as FENCED): the entry stays unacknowledged, for the shard's next holder to claim. An
 * acknowledgement sent before that holder's claim would take the entry from it, and its work would be lost.
 */
export class LeftForNextHolder extends Error {
  override readonly name = "LeftForNextHolder";
}

export interface ReplyAddress {
  node: string;
  corr: string;
}

export interface Entry {
  /** Actor ids on this shard that each receive `body` (one for an ask, many for a shard-batched fan-out). */
  targets: string[];
  body: unknown;
  /** Present when the sender waits for an answer. */
  replyTo?: ReplyAddress;
  /** W3C trace context of the sender, carried across processes. */
  trace?: Record<string, string>;
}

export interface Reply {
  corr: string;
  value?: unknown;
  /** An interim answer of a streaming ask (Deferred.push): the ask stays open for more. */
  more?: true;
  error?: ErrorJSON;
}

export interface TransportHandlers {
  onEntry(shard: number, entry: Entry): Promise<void>;
  onReply(reply: Reply): void;
  /**
   * The engine lost entries or replies in flight, and cannot tell which (Redis flushed, or restarted without its
   * data). Asks waiting for a reply may wait for nothing: the asker sends those it may send twice again. Entries
   * to the shards held here may be gone too: their actors hear of it (Actor.entriesLost).
   */
  onLost?(): void;
}

export interface Transport {
  /** This process's address for replies; unique per process start. */
  readonly nodeId: string;
  /**
   * Whether entries a holder left unacknowledged when it died reach the shard's next holder (Redis Streams: they
   * wait in the stream) or died with it (memory: there is no other process to take them over).
   */
  readonly redeliversAfterCrash: boolean;
  start(handlers: TransportHandlers): Promise<void>;
  send(shard: number, entry: Entry): Promise<void>;
  /**
   * Best effort, and never rejects: a reply that cannot be written (its engine is down, or slower than its command
   * timeout) is reported by the transport and dropped; the asker's timeout stands for it.
   */
  reply(to: ReplyAddress, reply: Reply): Promise<void>;
  /** Start delivering the shard's entries here, including those a previous holder left unacknowledged. */
  acquire(shard: number): Promise<void>;
  /** Stop delivering the shard's entries; resolves once in-flight entries have been acknowledged or abandoned. */
  release(shard: number): Promise<void>;
  close(): Promise<void>;
}
