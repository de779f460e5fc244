/**
 * The pub/sub seam: short messages to every node of a deployment listening on a channel, for what is cheap to
 * miss: the notices that tell every node's caches to drop what changed elsewhere (ActorSystem.announce), and the
 * assistant's socket.io room events, relayed to the workers whose clients sit in the room. Nothing that must not
 * be lost travels here: that goes through the transport (at least once) or the store. Channels are the names in
 * redis-keys.ts (`channels`).
 *
 * Guarantees every engine gives (checked by test/runtime/pubsub.contract.test.ts):
 * - A message published on a channel reaches every handler subscribed to that channel on every node of the
 *   deployment (one Redis prefix; one MemoryPubSub), the publisher's own node included, at most once each. Other
 *   channels and other deployments hear nothing of it.
 * - A handler hears what is published after its `subscribe` resolved; nothing published before is replayed.
 * - The messages of one publisher (one engine instance) reach each handler in the order they were published.
 * - `publish` resolves once the message is on its way to every subscriber (Redis: once PUBLISH ran); it does not
 *   wait for handlers. Handlers run later, never on the publisher's stack, one message at a time; a handler that
 *   throws is reported to `onError` and the others still run.
 * - After `unsubscribe` the handler hears nothing more. After `close`, `publish` does nothing and no handler runs.
 * What it leaves out:
 * - No delivery to a node that is not connected, and no replay: a message published while a subscriber's
 *   connection is down, or before it has subscribed again after a reconnect, is lost for it.
 * - No retry: a publish cut off by a broken connection rejects and is not sent again (it may or may not have
 *   reached the subscribers, never twice).
 * - No order across publishers, no acknowledgement, no persistence, no back-pressure.
 */
import type { Channel } from "./redis-keys.ts";
import { log } from "../log.ts";

export type MessageHandler = (message: string) => void;

export interface PubSub {
  /** Send `message` to every handler of `channel` on every node (see the guarantees above). */
  publish(channel: Channel, message: string): Promise<void>;
  /** Add a handler; resolves once the channel's messages reach it. */
  subscribe(channel: Channel, handler: MessageHandler): Promise<void>;
  /** Remove a handler added with `subscribe`; it hears nothing from the moment of the call. Never waits on Redis. */
  unsubscribe(channel: Channel, handler: MessageHandler): Promise<void>;
  close(): Promise<void>;
}

export type ErrorReport = (err: unknown, where: string) => void;

/** Where an engine's errors go by default. */
export function reportTo(engine: string): ErrorReport {
  return (err, where) => log.error({ err }, `${engine}: ${where} failed`);
}

/** Run one handler; what it throws is reported, so that the channel's other handlers still run. */
export function runHandler(handler: MessageHandler, message: string, channel: string, onError: ErrorReport): void {
  try {
    handler(message);
  } catch (err) {
    onError(err, `handler on ${channel}`);
  }
}
