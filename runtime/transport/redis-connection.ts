/**
 * Where every Redis connection of Chorus is opened (the transport's, the pub/sub's, the rate limits'), with the
 * options they share; each use adds its own retry and timeout choices.
 */
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from "ioredis";
import { redisKeys } from "./redis-keys.ts";

/**
 * Opens a connection named `chorus:<name>` in CLIENT LIST (tests find a node's connections by that name). Errors go
 * to `onError`; ioredis reconnects by itself either way.
 *
 * Shared options:
 * - RESP2 (`protocol: 2`): ioredis 6 defaults to RESP3, whose "legacy" mapping flattens XREAD's map reply to
 *   `[key, entries]` instead of `[[key, entries]]`.
 * - No auto-pipelining: ioredis builds a Pipeline per event-loop turn (it copies the client's commands onto
 *   itself and defines an accessor), and at 1,000 chat messages a second that made the server promote 8 MB/s into
 *   the old generation against 0.25 MB/s without it (scavenges 3.1 → 1.2 ms). Commands of one turn are rare here:
 *   a shard's loop issues one at a time, and acknowledgements are batched.
 */
export function connectRedis(
  url: string,
  name: string,
  onError: (err: unknown) => void,
  options: RedisOptions = {},
  /** Only when REDIS_URL names a cluster. */
  clusterOptions: ClusterOptions = {},
): RedisClient {
  const target = redisTarget(url);
  const shared = { protocol: 2 as const, enableAutoPipelining: false, connectionName: `chorus:${name}` };
  let conn: RedisClient;
  if (target.cluster) {
    // The cluster client's own settings sit at its top level; the rest apply to each node's connection.
    const { retryStrategy, enableOfflineQueue, lazyConnect, ...perNode } = options;
    conn = new Cluster([target.url], {
      enableAutoPipelining: false,
      clusterRetryStrategy: retryStrategy,
      enableOfflineQueue,
      lazyConnect,
      redisOptions: { ...shared, ...perNode },
      ...clusterOptions,
    });
  } else {
    conn = new Redis(target.url, { ...shared, ...options });
  }
  conn.on("error", onError);
  return conn;
}

/** A connection to one Redis server, or to a Redis Cluster (which routes each command to its key's slot). */
export type RedisClient = Redis | Cluster;

/**
 * REDIS_URL names one server, or with `?cluster=on` any node of a Redis Cluster, from which the client learns the
 * others. Every command and script of Chorus touches one key, so none crosses slots.
 */
export function redisTarget(url: string): { url: string; cluster: boolean } {
  const parsed = new URL(url);
  const cluster = ["on", "true", "1"].includes(parsed.searchParams.get("cluster") ?? "");
  parsed.searchParams.delete("cluster");
  return { url: parsed.toString().replace(/\?$/, ""), cluster };
}

/** Each master of a cluster, or the one server: where a SCAN must run to see every key. */
function scanTargets(conn: RedisClient): Redis[] {
  return conn instanceof Cluster ? conn.nodes("master") : [conn];
}

/** SCAN and delete every key under `prefix` (tests and the bench clean up their run with it). */
export async function deleteRedisKeys(url: string, prefix: string): Promise<number> {
  const pattern = redisKeys(prefix).all;
  const conn = connectRedis(url, "cleanup", () => {}, { maxRetriesPerRequest: 1 });
  let deleted = 0;
  try {
    if (conn instanceof Cluster) await new Promise<void>((resolve, reject) => conn.once("ready", resolve).once("error", reject));
    for (const node of scanTargets(conn)) {
      let cursor = "0";
      do {
        const [next, keys] = (await node.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)) as [string, string[]];
        cursor = next;
        // One key per UNLINK: in a cluster, keys of one call must share a slot.
        for (const key of keys) deleted += (await node.call("UNLINK", key)) as number;
      } while (cursor !== "0");
    }
  } finally {
    conn.disconnect();
  }
  return deleted;
}
