/**
 * Counting calls against rules, for both faces (rate-limiter-flexible): fixed windows, counted in Redis when the
 * node runs on Redis (so every worker shares the counts), in memory otherwise. Each face turns a refusal into its
 * own envelope and headers (gateway/chat/rate-limits.ts, gateway/assistant/limits.ts).
 * Redis being unreachable lets requests through (the limit is protection, not correctness) and is logged.
 *
 * And whose calls they are: the client's address is the socket's, or, when the socket is a trusted proxy
 * (`TRUSTED_PROXIES`), the address that proxy saw (`X-Forwarded-For`, read from the right past trusted hops only),
 * so that a client cannot pick its own address by sending the header itself.
 */
import type { IncomingMessage } from "node:http";
import net from "node:net";
import type { RedisClient } from "../runtime/transport/redis-connection.ts";
import proxyAddr from "proxy-addr";
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from "rate-limiter-flexible";
import type { Config, RateRule } from "../runtime/config.ts";
import { connectRedis } from "../runtime/transport/redis-connection.ts";
import { redisKeys, type RedisKeys } from "../runtime/transport/redis-keys.ts";
import type { HttpRequest } from "./http.ts";
import { log } from "../runtime/log.ts";

/** Where a key stands under a rule after a call was counted (or refused). */
export interface RateState {
  rule: RateRule;
  remaining: number;
  /** Milliseconds until the window ends and the count starts again. */
  resetMs: number;
}

/** A call over a rule's limit. */
export class RateLimitExceeded extends Error {
  constructor(readonly state: RateState) {
    super(`rate limit ${state.rule.calls}/${state.rule.seconds}s exceeded`);
  }
}

export class RateLimiter {
  private readonly limiters = new Map<string, RateLimiterAbstract>();
  private readonly redis?: { conn: RedisClient; keys: RedisKeys };

  constructor(opts: { redisUrl?: string; prefix: string }) {
    if (!opts.redisUrl) return;
    // Errors are reported per call; ioredis reconnects.
    const conn = connectRedis(opts.redisUrl, "ratelimit", () => {}, { maxRetriesPerRequest: 1 });
    this.redis = { conn, keys: redisKeys(opts.prefix) };
  }

  private limiter(rule: RateRule): RateLimiterAbstract {
    const name = `${rule.calls}:${rule.seconds}`;
    let limiter = this.limiters.get(name);
    if (!limiter) {
      const options = { points: rule.calls, duration: rule.seconds };
      limiter = this.redis
        ? new RateLimiterRedis({ storeClient: this.redis.conn, keyPrefix: this.redis.keys.rateLimit(name), ...options })
        : new RateLimiterMemory({ keyPrefix: `ratelimit:${name}`, ...options });
      this.limiters.set(name, limiter);
    }
    return limiter;
  }

  /**
   * Count one call for each key under its rule; throws RateLimitExceeded at the first key over its limit. Returns
   * the state of the key with the fewest calls left (undefined when none could be counted: the store failed).
   */
  async take(checks: Array<{ rule: RateRule; key: string }>): Promise<RateState | undefined> {
    let tightest: RateState | undefined;
    for (const { rule, key } of checks) {
      let res: RateLimiterRes;
      try {
        res = await this.limiter(rule).consume(key, 1);
      } catch (err) {
        if (err instanceof RateLimiterRes) throw new RateLimitExceeded(stateOf(rule, err));
        log.error({ err }, "rate limit store failed; letting the request through");
        continue;
      }
      const state = stateOf(rule, res);
      if (!tightest || state.remaining < tightest.remaining) tightest = state;
    }
    return tightest;
  }

  /** The state of the first key that has no call left under its rule, without counting one; else undefined. */
  async exhausted(checks: Array<{ rule: RateRule; key: string }>): Promise<RateState | undefined> {
    for (const { rule, key } of checks) {
      try {
        const res = await this.limiter(rule).get(key);
        if (res && res.consumedPoints >= rule.calls) return stateOf(rule, res);
      } catch (err) {
        log.error({ err }, "rate limit store failed; letting the request through");
      }
    }
    return undefined;
  }

  async close(): Promise<void> {
    this.redis?.conn.disconnect();
  }
}

function stateOf(rule: RateRule, res: RateLimiterRes): RateState {
  return { rule, remaining: Math.max(0, res.remainingPoints), resetMs: Math.max(0, res.msBeforeNext) };
}

const trustCache = new Map<string, ReturnType<typeof proxyAddr.compile>>();

/** The client's address: the socket's, or what trusted proxies in front of it say (config.trustedProxies). */
export function clientAddress(req: HttpRequest, config: Pick<Config, "trustedProxies">): string {
  const socketAddress = req.remoteAddress;
  const forwarded = req.headers["x-forwarded-for"];
  if (!config.trustedProxies.length || !forwarded) return socketAddress;
  const list = config.trustedProxies.join(",");
  let trust = trustCache.get(list);
  if (!trust) trustCache.set(list, (trust = proxyAddr.compile(config.trustedProxies)));
  try {
    const shape = { connection: { remoteAddress: socketAddress }, socket: { remoteAddress: socketAddress }, headers: { "x-forwarded-for": forwarded } };
    const address = proxyAddr(shape as unknown as IncomingMessage, trust);
    // A hop that is no address (a malformed header): the socket's address is the one we know.
    return net.isIP(address) ? address : socketAddress;
  } catch {
    return socketAddress;
  }
}
