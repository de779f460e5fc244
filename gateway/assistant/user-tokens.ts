/**
 * User tokens: how an end user of an agent (a mobile app's user) reaches the mobile endpoints without an
 * operator's API key. The app's own backend vouches for its user exactly as for the embed widget, with
 * `user_hash` = hex HMAC-SHA256 of `user_id` under the agent's secret; `POST /chat/auth/token` trades that for
 * a bearer token scoped to that agent and user, valid USER_TOKEN_SECONDS.
 *
 * The token is stateless: `cut_<payload>.<mac>`, the payload base64url JSON `{a: agent_id, u: user_id, e:
 * expiry (unix seconds)}` and the MAC the keyring's (the server secret's, not the agent's: a user_hash the
 * customer's backend computes for a crafted user_id can never be a token's MAC). Tokens are not revocable before
 * they expire; that is why they are short-lived.
 */
import { ChorusError } from "../../runtime/errors.ts";
import { safeEqual, type Keyring } from "../../runtime/secrets.ts";

export const USER_TOKEN_PREFIX = "cut_";
export const USER_TOKEN_SECONDS = 3600;
const PURPOSE = "assistant-user-token.v1";

export interface UserToken {
  agentId: string;
  userId: string;
  /** Unix seconds. */
  expiresAt: number;
}

export function isUserToken(bearer: string): boolean {
  return bearer.startsWith(USER_TOKEN_PREFIX);
}

export function issueUserToken(keyring: Keyring, agentId: string, userId: string, now = Date.now()): { token: string; expiresAt: number } {
  const expiresAt = Math.floor(now / 1000) + USER_TOKEN_SECONDS;
  const payload = Buffer.from(JSON.stringify({ a: agentId, u: userId, e: expiresAt })).toString("base64url");
  return { token: `${USER_TOKEN_PREFIX}${payload}.${keyring.sign(PURPOSE, payload)}`, expiresAt };
}

/** The token's claims; 401 when it is malformed, forged or expired. */
export function verifyUserToken(keyring: Keyring, token: string, now = Date.now()): UserToken {
  const invalid = (why: string) => new ChorusError("UNAUTHORIZED", `Invalid user token: ${why}`, 401);
  const [payload, mac, ...rest] = token.slice(USER_TOKEN_PREFIX.length).split(".");
  if (!isUserToken(token) || !payload || !mac || rest.length) throw invalid("malformed");
  if (!safeEqual(mac, keyring.sign(PURPOSE, payload))) throw invalid("bad signature");
  let claims: { a?: unknown; u?: unknown; e?: unknown };
  try {
    claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  } catch {
    throw invalid("malformed");
  }
  if (typeof claims.a !== "string" || typeof claims.u !== "string" || typeof claims.e !== "number") throw invalid("malformed");
  if (claims.e <= Math.floor(now / 1000)) throw invalid("expired");
  return { agentId: claims.a, userId: claims.u, expiresAt: claims.e };
}
