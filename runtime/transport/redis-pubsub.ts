/**
 * The Redis pub/sub: the engine of many workers (the Redis Streams transport's partner). A channel is PUBLISHed
 * and SUBSCRIBEd under the deployment's prefix (`redisKeys(prefix).channel`).
 *
 * Two connections per instance: one that publishes, and one subscriber connection for every channel and handler of
 * the process (a connection in subscriber mode can do nothing else). Each node hears its own messages through
 * Redis like everyone else's, so every subscriber hears a channel in the order Redis ran the PUBLISHes; one
 * connection publishing in order is what keeps a publisher's order. After a reconnect ioredis SUBSCRIBEs again to
 * every channel the connection had (`autoResubscribe`); what was published meanwhile is lost, as the contract
 * allows. A PUBLISH cut off by a broken connection is not resent after the reconnect (it may have run already):
 * at most once.
 *
 * On a Redis Cluster, channels are sharded (SPUBLISH / SSUBSCRIBE): a channel lives on the master owning its
 * name's slot, so every publish of a channel runs on one server, in order. Classic PUBLISH would go to any master
 * and be relayed over the cluster bus, and two publishes by one node could arrive in either order.
 */
import { randomUUID } from "node:crypto";
import { Cluster } from "ioredis";
import { connectRedis, type RedisClient } from "./redis-connection.ts";
import { redisKeys, type Channel, type RedisKeys } from "./redis-keys.ts";
import { reportTo, runHandler, type ErrorReport, type MessageHandler, type PubSub } from "./pubsub.ts";

export interface RedisPubSubOptions {
  url: string;
  /** Prefix of every channel (tests use a unique one per run). */
  prefix: string;
  /** Names the connections in CLIENT LIST (`chorus:<name>:publish`, `chorus:<name>:subscribe`); the node id. */
  name?: string;
  /** Where connection and handler errors go. Default: the log (runtime/log.ts). */
  onError?: ErrorReport;
}

export class RedisPubSub implements PubSub {
  private readonly keys: RedisKeys;
  private readonly onError: ErrorReport;
  private readonly publisher: RedisClient;
  private readonly subscriber: RedisClient;
  /** On a Redis Cluster: sharded channels (see above). */
  private readonly sharded: boolean;
  /** Handlers by the channel's name on Redis. */
  private readonly handlers = new Map<string, Set<MessageHandler>>();
  private closing = false;
  private closed?: Promise<void>;

  constructor(options: RedisPubSubOptions) {
    this.keys = redisKeys(options.prefix);
    const name = options.name ?? `pubsub-${randomUUID()}`;
    this.onError = options.onError ?? reportTo(`redis pub/sub ${name}`);
    const report = (role: string) => (err: unknown) => {
      if (!this.closing) this.onError(err, `connection ${role}`);
    };
    this.publisher = connectRedis(options.url, `${name}:publish`, report("publish"), {
      autoResendUnfulfilledCommands: false, // at most once (see above)
      maxRetriesPerRequest: 1,
      commandTimeout: 5000,
    });
    this.subscriber = connectRedis(options.url, `${name}:subscribe`, report("subscribe"), { autoResubscribe: true }, { shardedSubscribers: true });
    this.sharded = this.subscriber instanceof Cluster;
    this.subscriber.on(this.sharded ? "smessage" : "message", (channel: string, message: string) => {
      for (const handler of this.handlers.get(channel) ?? []) runHandler(handler, message, channel, this.onError);
    });
  }

  async publish(channel: Channel, message: string): Promise<void> {
    if (this.closing) return;
    const name = this.keys.channel(channel);
    await (this.sharded ? this.publisher.spublish(name, message) : this.publisher.publish(name, message));
  }

  async subscribe(channel: Channel, handler: MessageHandler): Promise<void> {
    if (this.closing) throw new Error("pub/sub closed");
    const name = this.keys.channel(channel);
    let subscribed = this.handlers.get(name);
    if (!subscribed) this.handlers.set(name, (subscribed = new Set()));
    const added = !subscribed.has(handler);
    subscribed.add(handler);
    try {
      // Sent for every handler, even when the channel is subscribed already: it resolves once Redis confirmed,
      // after any SUBSCRIBE or UNSUBSCRIBE of the channel sent before it.
      await (this.sharded ? this.subscriber.ssubscribe(name) : this.subscriber.subscribe(name));
    } catch (err) {
      if (added) subscribed.delete(handler);
      throw err;
    }
  }

  async unsubscribe(channel: Channel, handler: MessageHandler): Promise<void> {
    const name = this.keys.channel(channel);
    const subscribed = this.handlers.get(name);
    if (!subscribed?.delete(handler) || subscribed.size > 0 || this.closing) return;
    this.handlers.delete(name);
    // Not awaited, so that a shutdown does not wait on a Redis that is down: the handler is gone already, and a
    // channel left subscribed on Redis only brings messages that no handler hears.
    (this.sharded ? this.subscriber.sunsubscribe(name) : this.subscriber.unsubscribe(name)).catch((err: unknown) => {
      if (!this.closing) this.onError(err, `unsubscribing from ${name}`);
    });
  }

  close(): Promise<void> {
    this.closed ??= (async () => {
      this.closing = true;
      this.handlers.clear();
      this.subscriber.disconnect();
      // QUIT lets publishes already sent finish; a Redis that does not answer is not waited for.
      await Promise.race([this.publisher.quit().catch(() => {}), new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
      this.publisher.disconnect();
    })();
    return this.closed;
  }
}
