/**
 * Probes for load balancers and orchestrators, answered before routing: no authentication, no rate limit, no actor.
 *
 * - `GET /health` (liveness): 200 while the process serves HTTP. It checks nothing else, so a probe that restarts
 *   on failure never restarts a worker because Postgres or Redis is away (restarting would not bring them back).
 * - `GET /ready` (readiness): 200 when the database answers, Redis answers (when configured), and this worker holds
 *   its home shards with a renewal that reached the store within the lease's lifetime (a process that hosts actors;
 *   a gateway-only one holds none); 503 otherwise, naming each failing check. Every check is bounded by CHECK_TIMEOUT_MS and they run in parallel.
 */
import { once } from "node:events";
import { sql } from "kysely";
import type { RedisClient } from "../runtime/transport/redis-connection.ts";
import type { Store } from "../runtime/store/store.ts";
import type { ShardManager } from "../runtime/cluster.ts";
import { connectRedis } from "../runtime/transport/redis-connection.ts";
import type { HttpRequest, HttpResult } from "./http.ts";

const CHECK_TIMEOUT_MS = 1_000;

export interface Probes {
  /** The probe's answer if the request is one (`GET` or `HEAD` of /health or /ready), else undefined. */
  handle(req: HttpRequest): Promise<HttpResult> | undefined;
  close(): void;
}

type Check = () => Promise<void>;

const json = (status: number, body: unknown): HttpResult => ({
  status,
  headers: { "content-type": "application/json", "cache-control": "no-store" },
  body: JSON.stringify(body),
});

function bounded(check: Check): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${CHECK_TIMEOUT_MS} ms`)), CHECK_TIMEOUT_MS);
  });
  return Promise.race([check(), timeout])
    .then(() => "ok")
    .catch((err: unknown) => (err instanceof Error ? err.message : String(err)) || "failed")
    .finally(() => clearTimeout(timer));
}

export function healthProbes(deps: { store: Store; shards?: ShardManager; redisUrl?: string }): Probes {
  // A connection of its own that fails at once while Redis is away instead of queueing the PING until it is back.
  let redis: RedisClient | undefined;
  if (deps.redisUrl) {
    redis = connectRedis(deps.redisUrl, "health", () => {}, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      lazyConnect: false,
      retryStrategy: (attempt) => Math.min(attempt * 200, 2_000),
    });
  }
  const checks: Record<string, Check> = {
    database: async () => {
      await sql`select 1`.execute(deps.store.db);
    },
    ...(redis && {
      redis: async () => {
        // The first connection attempt may still be under way just after start; a reconnection fails at once.
        if (redis.status === "connecting" || redis.status === "connect") await once(redis, "ready");
        await redis.ping();
      },
    }),
    ...(deps.shards && {
      shards: async () => {
        if (!deps.shards!.leasesCurrent()) throw new Error("this worker does not hold its shards' leases");
      },
    }),
  };
  const ready = async (): Promise<HttpResult> => {
    const names = Object.keys(checks);
    const results = await Promise.all(names.map((name) => bounded(checks[name]!)));
    const outcome = Object.fromEntries(names.map((name, i) => [name, results[i]!]));
    const ok = results.every((r) => r === "ok");
    return json(ok ? 200 : 503, { status: ok ? "ready" : "unavailable", checks: outcome });
  };
  return {
    handle(req) {
      if (req.method !== "GET" && req.method !== "HEAD") return undefined;
      if (req.path === "/health") return Promise.resolve(json(200, { status: "ok" }));
      if (req.path === "/ready") return ready();
      return undefined;
    },
    close() {
      redis?.disconnect();
    },
  };
}
