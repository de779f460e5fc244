/**
 * Where every Redis connection of Chorus is opened (the transport's, the pub/sub's, the rate limits'), with the
 * options they share; each use adds its own retry and timeout choices.
 */
import { Redis, type RedisOptions } from "ioredis";
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
export function connectRedis(url: string, name: string, onError: (err: unknown) => void, options: RedisOptions = {}): Redis {
  const conn = new Redis(url, { protocol: 2, enableAutoPipelining: false, connectionName: `chorus:${name}`, ...options });
  conn.on("error", onError);
  return conn;
}

/** SCAN and delete every key under `prefix` (tests and the bench clean up their run with it). */
export async function deleteRedisKeys(url: string, prefix: string): Promise<number> {
  const pattern = redisKeys(prefix).all;
  const conn = connectRedis(url, "cleanup", () => {}, { maxRetriesPerRequest: 1 });
  let deleted = 0;
  try {
    let cursor = "0";
    do {
      const [next, keys] = (await conn.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)) as [string, string[]];
      cursor = next;
      if (keys.length) deleted += (await conn.call("UNLINK", ...keys)) as number;
    } while (cursor !== "0");
  } finally {
    conn.disconnect();
  }
  return deleted;
}
