/**
 * Every Redis key and pub/sub channel name of Chorus, built here and nowhere else. All of them sit under one
 * prefix (REDIS_PREFIX, "chorus" by default; tests use a unique one per run), so that one SCAN pattern finds a
 * deployment's keys and deployments may share a Redis.
 */

/** The pub/sub channels (runtime/transport/pubsub.ts), by the name the code uses; `redisKeys().channel` places them. */
export const channels = {
  /** Short notices to every node (ActorSystem.announce): caches drop what changed elsewhere. */
  notices: "notices",
  /** A shard's number, published by the process that just took its lease (ActorSystem.holdShard). */
  shardHolders: "shard-holders",
  /** A worker's node id, published when it joined or left the deployment, or handed shards back (ShardManager). */
  members: "members",
  /** The assistant's socket.io room events, relayed to the rooms of every worker (gateway/assistant/sockets.ts). */
  assistantRoomEvents: "assistant:room-events",
} as const;

export type Channel = (typeof channels)[keyof typeof channels];

export function redisKeys(prefix: string) {
  if (!prefix) throw new Error("a Redis key prefix is required");
  return {
    /** A shard's stream of entries, read by the consumer group of the workers (redis-streams.ts). */
    shard: (n: number) => `${prefix}:shard:${n}`,
    /** A node's stream of replies, kept alive by a TTL while the node runs (redis-streams.ts). */
    reply: (node: string) => `${prefix}:reply:${node}`,
    /** A pub/sub channel as Redis names it: not a key, but named under the prefix like one. */
    channel: (name: Channel) => `${prefix}:${name}`,
    /** Key prefix of the rate limiter of one rule, named `calls:seconds` (rate-limiter-flexible appends `:<key>`). */
    rateLimit: (rule: string) => `${prefix}:ratelimit:${rule}`,
    /** SCAN pattern matching every key under the prefix (glob characters of the prefix escaped). */
    all: `${prefix.replace(/[*?[\]\\]/g, "\\$&")}:*`,
  };
}

export type RedisKeys = ReturnType<typeof redisKeys>;
