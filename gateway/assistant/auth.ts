/**
 * Operator authentication for the internal and mobile endpoints. Operators are the organization's owners and
 * administrators; they log in with their chat password (console session cookie) or use API keys they created.
 *
 * - `Authorization: Bearer <key>`: the key's HMAC is looked up (keys are stored hashed, never in clear).
 * - Cookie `chorus_console=<token>`: HttpOnly, SameSite=Strict; the token's hash is looked up. A cookie-
 *   authenticated request that changes state must also carry `X-CSRF-Token` equal to the session's CSRF token
 *   (returned by login, never in a cookie): a cross-site form or script cannot read it, so it cannot forge it.
 * The role is checked on every request (through a two-second cache), so a demoted operator loses access.
 * The mobile endpoints also take an agent's end users, with a user token (user-tokens.ts).
 */
import crypto from "node:crypto";
import { ChorusError } from "../../runtime/errors.ts";
import { Keyring, safeEqual } from "../../runtime/secrets.ts";
import type { Store } from "../../runtime/store/store.ts";
import { ROLE } from "../../actors/chat/organization/realm.ts";
import { operatorByApiKeyHash, operatorBySessionHash } from "../../actors/assistant/reads.ts";
import type { HttpRequest } from "../http.ts";
import { isUserToken, verifyUserToken } from "./user-tokens.ts";

export const SESSION_COOKIE = "chorus_console";
export const SESSION_SECONDS = 12 * 3600;
const CACHE_MS = 2000;

export interface Operator {
  userId: number;
  realmId: number;
  email: string;
  via: "key" | "cookie";
}

/**
 * Who calls a mobile endpoint: an operator (API key or console session), who sees the organization's agents and
 * sessions; or an agent's end user (a user token), who sees that agent and only their own sessions.
 */
export type MobileCaller = { kind: "operator"; operator: Operator } | { kind: "user"; agentId: string; userId: string };

/** Whether the caller may read and write a session (404 otherwise: no existence oracle). */
export function callerMayUse(caller: MobileCaller, session: { agent_id: string; user_id: string | null; realm_id: number }): boolean {
  if (caller.kind === "operator") return session.realm_id === caller.operator.realmId;
  return sessionBelongsTo(session, caller.agentId, caller.userId);
}

/**
 * An end user's rule, on every face: a session is theirs when it is of their agent and was started by them. An
 * anonymous caller (`null`: the embed widget without a verified user) owns only sessions started anonymously.
 */
export function sessionBelongsTo(session: { agent_id: string; user_id: string | null }, agentId: string, userId: string | null): boolean {
  return session.agent_id === agentId && session.user_id === userId;
}

interface Cached {
  operator: Operator;
  csrf?: string;
  until: number;
}

export function isOperatorRole(role: number): boolean {
  return role <= ROLE.administrator;
}

/** A new operator API key (shown once), its id, and the hash that is all the store keeps. */
export function newOperatorApiKey(keyring: Keyring): { key: string; keyId: string; keyHash: string } {
  const key = `chorus_${Keyring.newApiKey()}`;
  return { key, keyId: crypto.randomUUID(), keyHash: keyring.hashApiKey(key) };
}

export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}


export class OperatorAuth {
  private readonly cache = new Map<string, Cached>();

  constructor(
    private readonly db: Store["db"],
    private readonly keyring: Keyring,
  ) {}

  async authenticate(req: HttpRequest): Promise<Operator> {
    const header = req.headers.authorization;
    if (header) {
      const [scheme, key] = header.trim().split(/\s+/, 2);
      if (scheme?.toLowerCase() !== "bearer" || !key) throw unauthorized("Use Authorization: Bearer <API key>");
      return this.byApiKey(key);
    }
    const token = cookieValue(req.headers.cookie, SESSION_COOKIE);
    if (!token) throw unauthorized("Log in or send an API key");
    const { operator, csrf } = await this.bySession(token);
    if (req.method !== "GET" && req.method !== "HEAD" && req.method !== "OPTIONS") {
      const presented = req.headers["x-csrf-token"];
      if (!presented || !csrf || !safeEqual(presented, csrf)) {
        throw new ChorusError("CSRF_FAILED", "Missing or wrong X-CSRF-Token for a cookie-authenticated request", 403);
      }
    }
    return operator;
  }

  /** The console session of a cookie-authenticated request, with its CSRF token (the console reloads it after a page load). */
  async consoleSession(req: HttpRequest): Promise<{ operator: Operator; csrf: string; token: string } | undefined> {
    const token = cookieValue(req.headers.cookie, SESSION_COOKIE);
    if (!token) return undefined;
    const { operator, csrf } = await this.bySession(token);
    return { operator, csrf: csrf!, token };
  }

  /** Forget a signed-out session at once on this node (other nodes' caches expire within CACHE_MS). */
  forgetSession(token: string): void {
    this.cache.delete(`s:${this.keyring.hashApiKey(token)}`);
  }

  /** A mobile endpoint's caller: a user token (`Authorization: Bearer cut_…`), else an operator. */
  async authenticateMobile(req: HttpRequest): Promise<MobileCaller> {
    const [scheme, token] = (req.headers.authorization ?? "").trim().split(/\s+/, 2);
    if (scheme?.toLowerCase() === "bearer" && token && isUserToken(token)) return this.byBearer(token);
    return { kind: "operator", operator: await this.authenticate(req) };
  }

  /** A bearer token: a user token or an operator's API key (socket.io handshakes send it as `auth: {token}`). */
  async byBearer(token: string): Promise<MobileCaller> {
    if (!isUserToken(token)) return { kind: "operator", operator: await this.byApiKey(token) };
    const { agentId, userId } = verifyUserToken(this.keyring, token);
    return { kind: "user", agentId, userId };
  }

  async byApiKey(key: string): Promise<Operator> {
    const hash = this.keyring.hashApiKey(key);
    const hit = this.cached(`k:${hash}`);
    if (hit) return hit.operator;
    const row = await operatorByApiKeyHash(this.db, hash);
    if (!row || row.revoked || !row.is_active || row.deactivated || !isOperatorRole(row.role)) throw unauthorized("Invalid API key");
    const operator: Operator = { userId: row.id, realmId: row.realm_id, email: row.delivery_email, via: "key" };
    this.remember(`k:${hash}`, { operator, until: Date.now() + CACHE_MS });
    return operator;
  }

  private async bySession(token: string): Promise<Cached> {
    const hash = this.keyring.hashApiKey(token);
    const hit = this.cached(`s:${hash}`);
    if (hit) return hit;
    const row = await operatorBySessionHash(this.db, hash);
    if (!row || !row.is_active || row.deactivated || !isOperatorRole(row.role)) throw unauthorized("The console session is invalid or expired");
    const entry: Cached = { operator: { userId: row.id, realmId: row.realm_id, email: row.delivery_email, via: "cookie" }, csrf: row.csrf_token, until: Date.now() + CACHE_MS };
    this.remember(`s:${hash}`, entry);
    return entry;
  }

  private cached(key: string): Cached | undefined {
    const hit = this.cache.get(key);
    return hit && hit.until > Date.now() ? hit : undefined;
  }

  private remember(key: string, entry: Cached): void {
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(key, entry);
  }
}

function unauthorized(message: string): ChorusError {
  return new ChorusError("UNAUTHORIZED", message, 401);
}
