/**
 * HTTP Basic authentication for /api/v1 (`email:api_key`). Every failure is 401 UNAUTHORIZED with
 * `WWW-Authenticate: Basic realm="zulip"`; only the message differs, as in Zulip. Successful lookups are cached
 * (keyed by the whole header, so a changed key or e-mail misses) for `cacheMs` (AUTH_CACHE_SECONDS, 30 s): the hot
 * path does no query. A change to an account drops every worker's cache at once (`forget`, a transport notice);
 * `cacheMs` is the bound only for a worker that missed the notice. It was 2 s: every long-polling client came back
 * to the store every 2 s, 1,000 queries a second for a 2,000-member channel's members (docs/performance.md,
 * 2026-12-02). Requests with the same header that arrive while its lookup runs wait for that one
 * lookup: when an entry expired under 50 concurrent senders, each of them used to query the store.
 */
import { ChorusError, errors } from "../runtime/errors.ts";
import type { Keyring } from "../runtime/secrets.ts";
import { findUserByEmail, type UserRow } from "../actors/chat/reads/users.ts";
import { forgetDmParticipants } from "../actors/chat/conversations/dm.ts";
import type { Store } from "../runtime/store/store.ts";
import { log } from "../runtime/log.ts";

export type AuthUser = UserRow;

/** The notice that tells every worker to drop its cached credentials. */
const CREDENTIALS_CHANGED = "credentials-changed";

/** The e-mail address and key of an HTTP Basic `Authorization` header; undefined for anything else. */
export function basicCredentials(header: string): { email: string; key: string } | undefined {
  const [scheme, encoded] = header.trim().split(/\s+/, 2);
  if (scheme?.toLowerCase() !== "basic") return undefined;
  const decoded = Buffer.from(encoded ?? "", "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  return colon < 0 ? undefined : { email: decoded.slice(0, colon), key: decoded.slice(colon + 1) };
}

export class Authenticator {
  private readonly cache = new Map<string, { user: AuthUser; until: number }>();
  /** Lookups running, by header: what a request with that header waits for instead of a query of its own. */
  private readonly checking = new Map<string, Promise<AuthUser>>();
  /** Moves on at every `forget`: a lookup that began before it is answered, but not cached. */
  private generation = 0;

  constructor(
    private readonly db: Store["db"],
    private readonly keyring: Keyring,
    /** Tells every worker, this one included (ActorSystem.announce). */
    private readonly announce: (notice: string) => Promise<void>,
    /** How long a checked header is trusted without a query (Config.authCacheMs). */
    private readonly cacheMs: number,
  ) {}

  async authenticate(header: string | undefined): Promise<AuthUser> {
    if (!header) throw errors.unauthorized("Not logged in: API authentication or user session required");
    const hit = this.cache.get(header);
    if (hit && hit.until > Date.now()) return hit.user;
    let check = this.checking.get(header);
    if (!check) {
      check = this.check(header, hit?.user).finally(() => {
        if (this.checking.get(header) === check) this.checking.delete(header);
      });
      this.checking.set(header, check);
    }
    return check;
  }

  /** The account a header names, checked against the store; `before`: what the same header matched last time. */
  private async check(header: string, before: AuthUser | undefined): Promise<AuthUser> {
    const generation = this.generation;
    if (header.trim().split(/\s+/, 1)[0]?.toLowerCase() !== "basic") {
      throw new ChorusError("BAD_REQUEST", "This endpoint requires HTTP basic authentication.", 400);
    }
    const credentials = basicCredentials(header);
    if (!credentials) throw errors.unauthorized("Invalid authorization header for basic auth");
    const { email, key } = credentials;
    // No account has a NUL in its address or key (and Postgres refuses one in a query's text).
    if (email.includes("\0") || key.includes("\0")) throw errors.unauthorized("Invalid API key");
    const user = await findUserByEmail(this.db, email);
    // The same header matched this very hash before (an expired entry): the key check, a hash, would say so again.
    // A long-polling client comes back here every `cacheMs` (the hash was 0.9% of a 500-member long-poll cell).
    const matchedBefore = before !== undefined && user !== undefined && before.api_key_hash === user.api_key_hash;
    if (!user || !(matchedBefore || this.keyring.apiKeyMatches(key, user.api_key_hash))) throw errors.unauthorized("Invalid API key");
    // Zulip's UserDeactivatedError and RealmDeactivatedError.
    if (!user.is_active) throw new ChorusError("USER_DEACTIVATED", "Account is deactivated", 401);
    if (user.realm_deactivated) throw new ChorusError("REALM_DEACTIVATED", "This organization has been deactivated", 401);
    if (generation !== this.generation) return user; // read before an account changed: good for this request only
    if (this.cache.size > 10_000) this.cache.clear();
    this.cache.set(header, { user, until: Date.now() + this.cacheMs });
    return user;
  }

  /**
   * An account changed: this worker's next request reads it again, and so do the other workers' once the notice
   * reaches them (it is published before this resolves; a worker that misses it serves the old row for `cacheMs`).
   * Direct-message conversations read their participants' names and e-mails again alike.
   */
  async forget(): Promise<void> {
    this.forgetAccounts();
    await this.announce(CREDENTIALS_CHANGED).catch((err) => log.error({ err }, "auth: telling the other workers to drop cached credentials failed"));
  }

  onNotice(notice: string): void {
    if (notice === CREDENTIALS_CHANGED) this.forgetAccounts();
  }

  /** What this process caches about accounts: credentials here, and direct-message conversations' participants. */
  private forgetAccounts(): void {
    this.generation++;
    this.cache.clear();
    this.checking.clear();
    forgetDmParticipants();
  }
}
