/**
 * Zulip's rate limits on /api/v1 (zerver/lib/rate_limiter.py, rules in config.rateLimits, counted by the node's
 * RateLimiter, so every worker shares them through Redis):
 * - every authenticated request counts against its user (`api_by_user`), every unauthenticated one against the
 *   client's address (`api_by_ip`); the answer carries `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
 *   `X-RateLimit-Reset` (Unix time at which the window ends) for the tightest rule;
 * - failed authentications count against the client's address (`authenticate_by_ip`) and the account tried
 *   (`authenticate_by_username`): past the limit the failure is answered 429 instead of 401. Password logins
 *   (POST /fetch_api_key) are refused while the account or address is over, even with the right password, as
 *   Zulip's login; a right API key is never refused (a key cannot be guessed, and refusing it would let anyone lock
 *   a user out by sending wrong keys in their name), so wrong keys and wrong passwords count separately.
 * Over a limit: 429 `RATE_LIMIT_HIT` with `retry-after` (seconds) in the body and a `Retry-After` header.
 */
import type { RateLimitRules, RateRule } from "../../runtime/config.ts";
import { ChorusError } from "../../runtime/errors.ts";
import { RateLimitExceeded, type RateLimiter, type RateState } from "../rate-limiter.ts";

/** Headers for the answer. */
export type RateHeaders = Record<string, string>;

/** Which failed credential an authentication failure was. */
export type Credential = "password" | "api_key";

export class ChatRateLimits {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly rules: RateLimitRules,
  ) {}

  /** Count an authenticated request against its user. */
  user(userId: number): Promise<RateHeaders> {
    return this.take(checks(this.rules.apiByUser, `api_by_user:${userId}`));
  }

  /** Count an unauthenticated request against the client's address. */
  anonymous(address: string): Promise<RateHeaders> {
    return this.take(checks(this.rules.apiByIp, `api_by_ip:${address}`));
  }

  /** Before a password is checked: 429 while the account or the address is over its failed-login limit. */
  async beforePasswordCheck(username: string, address: string): Promise<void> {
    const over = await this.limiter.exhausted(this.failureChecks("password", address, username));
    if (over) throw rateLimitHit(over);
  }

  /** A failed authentication: counted; 429 (thrown) once over a limit, else the caller answers its own failure. */
  async failed(credential: Credential, address: string, username?: string): Promise<void> {
    await this.take(this.failureChecks(credential, address, username));
  }

  private failureChecks(credential: Credential, address: string, username?: string) {
    return [
      ...checks(this.rules.authenticateByIp, `authenticate_by_ip:${address}`),
      ...(username === undefined ? [] : checks(this.rules.authenticateByUsername, `authenticate_by_username:${credential}:${username.toLowerCase()}`)),
    ];
  }

  private async take(list: Array<{ rule: RateRule; key: string }>): Promise<RateHeaders> {
    if (!list.length) return {};
    try {
      const tightest = await this.limiter.take(list);
      return tightest ? headersFor(tightest) : {};
    } catch (err) {
      if (err instanceof RateLimitExceeded) throw rateLimitHit(err.state);
      throw err;
    }
  }
}

function checks(rules: RateRule[], key: string): Array<{ rule: RateRule; key: string }> {
  return rules.map((rule) => ({ rule, key }));
}

function headersFor(state: RateState): RateHeaders {
  return {
    "x-ratelimit-limit": String(state.rule.calls),
    "x-ratelimit-remaining": String(state.remaining),
    "x-ratelimit-reset": String(Math.ceil((Date.now() + state.resetMs) / 1000)),
  };
}

/** Zulip's RateLimitedError; `headers` is taken out of the body by the envelope. */
function rateLimitHit(state: RateState): ChorusError {
  const retryAfter = Math.max(1, Math.ceil(state.resetMs / 1000));
  return new ChorusError("RATE_LIMIT_HIT", "API usage exceeded rate limit", 429, {
    "retry-after": retryAfter,
    headers: { ...headersFor({ ...state, remaining: 0 }), "retry-after": String(retryAfter) },
  });
}
