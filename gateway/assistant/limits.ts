/**
 * Rate limits of the assistant's endpoints (embed questions, user tokens, console logins): `points` a minute per
 * key, on the node's RateLimiter (gateway/rate-limiter.ts: shared by every worker through Redis). A refusal is 429
 * with `Retry-After` and the IETF draft `RateLimit-Limit/-Remaining/-Reset` headers; successes carry the same
 * headers. Keys name the client by clientAddress (so TRUSTED_PROXIES applies here too).
 */
import { ChorusError } from "../../runtime/errors.ts";
import { RateLimitExceeded, type RateLimiter, type RateState } from "../rate-limiter.ts";

export interface Allowance {
  headers: Record<string, string>;
}

const WINDOW_SECONDS = 60;

export class RateLimits {
  constructor(private readonly limiter: RateLimiter) {}

  /** Take one point from each key; throws 429 if any is exhausted. Headers describe the tightest key. */
  async consume(keys: string[], pointsPerMinute: number): Promise<Allowance> {
    const rule = { seconds: WINDOW_SECONDS, calls: pointsPerMinute };
    try {
      const tightest = await this.limiter.take(keys.map((key) => ({ rule, key })));
      return { headers: tightest ? headersFor(tightest) : {} };
    } catch (err) {
      if (!(err instanceof RateLimitExceeded)) throw err;
      const retryAfter = Math.max(1, Math.ceil(err.state.resetMs / 1000));
      throw new ChorusError("RATE_LIMITED", `Too many requests; retry in ${retryAfter} s`, 429, {
        headers: Object.assign(headersFor(err.state), { "retry-after": String(retryAfter) }),
      });
    }
  }
}

function headersFor(state: RateState): Record<string, string> {
  return {
    "ratelimit-limit": String(state.rule.calls),
    "ratelimit-remaining": String(state.remaining),
    "ratelimit-reset": String(Math.ceil(state.resetMs / 1000)),
    "ratelimit-policy": `${state.rule.calls};w=${WINDOW_SECONDS}`,
  };
}
