/** Limits on requests that e-mail an address someone chose, so that they cannot be used to spam it. */
import { chatErrors } from "../errors.ts";

/** (seconds, requests): Zulip's email_change_by_user limits — two an hour, five a day. */
export type RequestLimits = Array<[number, number]>;
export const EMAIL_REQUEST_LIMITS: RequestLimits = [
  [3600, 2],
  [86400, 5],
];

/** The longest window: how far back the earlier requests need to be read. */
export const longestWindow = (limits: RequestLimits) => Math.max(...limits.map(([seconds]) => seconds));

/**
 * Refuse (429, with when to retry) a request over any of the limits, given the times (seconds) of the earlier
 * requests within the longest window.
 */
export function refuseOverLimits(earlier: number[], limits: RequestLimits, now: number): void {
  const newestFirst = [...earlier].sort((a, b) => b - a);
  for (const [seconds, limit] of limits) {
    const inWindow = newestFirst.filter((t) => t > now - seconds);
    if (inWindow.length >= limit) throw chatErrors.rateLimited(inWindow[limit - 1]! + seconds - now);
  }
}
