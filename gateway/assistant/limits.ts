/**
 * Rate limits of the embed endpoint (rate-limiter-flexible): fixed one-minute windows, counted in Redis when the
 * node runs on Redis (so every worker shares the counts), in memory otherwise. A refusal is 429 with
 * `Retry-After` and the IETF draft `RateLimit-Limit/-Remaining/-Reset` headers; successes carry the same headers.
 * Redis being unreachable lets requests through (the limit is protection, not correctness) and is logged.
 */
import type { Redis } from "ioredis";
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from "rate-limiter-flexible";
import { ChorusError } from "../../runtime/errors.ts";
import { connectRedis } from "../../runtime/transport/redis-connection.ts";
import { redisKeys, type RedisKeys } from "../../runtime/transport/redis-keys.ts";

export interface Allowance {
  headers: Record<string, string>;
}

const WINDOW_SECONDS = 60;

export class RateLimits {
  private readonly limiters = new Map<number, RateLimiterAbstract>();
  private readonly redis?: { conn: Redis; keys: RedisKeys };

  constructor(opts: { redisUrl?: string; prefix: string }) {
    if (!opts.redisUrl) return;
    // Errors are reported per consume; ioredis reconnects.
    const conn = connectRedis(opts.redisUrl, "ratelimit", () => {}, { maxRetriesPerRequest: 1 });
    this.redis = { conn, keys: redisKeys(opts.prefix) };
  }

  private limiter(points: number): RateLimiterAbstract {
    let limiter = this.limiters.get(points);
    if (!limiter) {
      limiter = this.redis
        ? new RateLimiterRedis({ storeClient: this.redis.conn, keyPrefix: this.redis.keys.rateLimit(points), points, duration: WINDOW_SECONDS })
        : new RateLimiterMemory({ keyPrefix: `ratelimit:${points}`, points, duration: WINDOW_SECONDS });
      this.limiters.set(points, limiter);
    }
    return limiter;
  }

  /** Take one point from each key; throws 429 if any is exhausted. Headers describe the tightest key. */
  async consume(keys: string[], pointsPerMinute: number): Promise<Allowance> {
    const limiter = this.limiter(pointsPerMinute);
    let tightest: RateLimiterRes | undefined;
    for (const key of keys) {
      let res: RateLimiterRes;
      try {
        res = await limiter.consume(key, 1);
      } catch (err) {
        if (err instanceof RateLimiterRes) {
          const retryAfter = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
          throw new ChorusError("RATE_LIMITED", `Too many requests; retry in ${retryAfter} s`, 429, {
            headers: Object.assign(headersFor(pointsPerMinute, err), { "retry-after": String(retryAfter) }),
          });
        }
        console.error("rate limit store failed; letting the request through", err);
        continue;
      }
      if (!tightest || res.remainingPoints < tightest.remainingPoints) tightest = res;
    }
    return { headers: tightest ? headersFor(pointsPerMinute, tightest) : {} };
  }

  async close(): Promise<void> {
    this.redis?.conn.disconnect();
  }
}

function headersFor(limit: number, res: RateLimiterRes): Record<string, string> {
  return {
    "ratelimit-limit": String(limit),
    "ratelimit-remaining": String(Math.max(0, res.remainingPoints)),
    "ratelimit-reset": String(Math.max(0, Math.ceil(res.msBeforeNext / 1000))),
    "ratelimit-policy": `${limit};w=${WINDOW_SECONDS}`,
  };
}
