/**
 * Every setting the kernel and the gateway read from the environment, read in one place (a product's own
 * settings are read beside it: actors/chat/config.ts, actors/assistant/config.ts).
 * The defaults make `npm start` an embedded single process: memory transport, PGlite under ./data.
 */
import path from "node:path";
import proxyAddr from "proxy-addr";

export interface Config {
  port: number;
  host: string;
  dataDir: string;
  /** Where uploaded files' bytes live (the blob store): DATA_DIR/uploads, or UPLOADS_DIR (a volume all hosts share). */
  uploadsDir: string;
  /** Postgres connection string; PGlite under dataDir when absent. */
  databaseUrl?: string;
  /** Redis connection string; the memory transport when absent. */
  redisUrl?: string;
  /** Prefix of every Redis key this deployment uses (tests give each run its own). */
  redisPrefix: string;
  workers: number;
  shards: number;
  /** Seconds a shard lease lasts without renewal. */
  leaseSeconds: number;
  /** Largest request body accepted (413 past it). */
  maxBodyBytes: number;
  /** Default ask timeout. */
  askTimeoutMs: number;
  /** Secret used to encrypt API keys; generated into dataDir when absent. */
  secret?: string;
  /**
   * Reverse proxies whose `X-Forwarded-For` is believed (TRUSTED_PROXIES: addresses, CIDR ranges, or proxy-addr's
   * names `loopback`, `linklocal`, `uniquelocal`, comma-separated); none by default, so the socket's address counts.
   */
  trustedProxies: string[];
  /** The chat API's rate limits, named after Zulip's RATE_LIMITING_RULES; an empty list turns one off. */
  rateLimits: RateLimitRules;
}

/** At most `calls` in `seconds` (one entry of a Zulip rate limiting rule). */
export interface RateRule {
  seconds: number;
  calls: number;
}

export interface RateLimitRules {
  /** Every authenticated request, per user. */
  apiByUser: RateRule[];
  /** Every unauthenticated request, per client address. */
  apiByIp: RateRule[];
  /** Failed password logins per account (POST /fetch_api_key); while over it, even the right password is refused. */
  authenticateByUsername: RateRule[];
  /** Failed authentications (a wrong password, a wrong API key) per client address. */
  authenticateByIp: RateRule[];
}

/**
 * Zulip's defaults (zproject/default_settings.py, DEFAULT_RATE_LIMITING_RULES); authenticate_by_ip is ours, since
 * Zulip counts failed logins per username only: 50 failures in 30 minutes from one address.
 */
export const ZULIP_RATE_LIMITS: RateLimitRules = {
  apiByUser: [{ seconds: 60, calls: 200 }],
  apiByIp: [{ seconds: 60, calls: 100 }],
  authenticateByUsername: [{ seconds: 1800, calls: 5 }],
  authenticateByIp: [{ seconds: 1800, calls: 50 }],
};

/**
 * Rules from a setting: `seconds:calls`, several separated by commas (`60:200,3600:2000`); `off` for none. Anything
 * else stops the start, so that a typo never silently drops a limit.
 */
export function rateRules(name: string, fallback: RateRule[]): RateRule[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  if (raw.trim().toLowerCase() === "off") return [];
  return raw.split(",").map((part) => {
    const m = /^\s*(\d+)\s*:\s*(\d+)\s*$/.exec(part);
    if (!m || Number(m[1]) === 0 || Number(m[2]) === 0) throw new Error(`${name} must be seconds:calls[,seconds:calls...] or "off", got ${JSON.stringify(raw)}`);
    return { seconds: Number(m[1]), calls: Number(m[2]) };
  });
}

function trustedProxies(): string[] {
  const list = (process.env.TRUSTED_PROXIES ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  try {
    proxyAddr.compile(list);
  } catch (err) {
    throw new Error(`TRUSTED_PROXIES: ${(err as Error).message}`);
  }
  return list;
}

/** An integer setting from the environment (also for a domain's own settings, e.g. actors/chat/config.ts). */
export function int(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

export function loadConfig(overrides: Partial<Config> = {}): Config {
  const env = process.env;
  const dataDir = overrides.dataDir ?? path.resolve(env.DATA_DIR ?? "./data");
  return {
    port: int("PORT", 9991),
    host: env.HOST ?? "0.0.0.0",
    dataDir,
    uploadsDir: env.UPLOADS_DIR ? path.resolve(env.UPLOADS_DIR) : path.join(dataDir, "uploads"),
    databaseUrl: env.DATABASE_URL || undefined,
    redisUrl: env.REDIS_URL || undefined,
    redisPrefix: env.REDIS_PREFIX ?? "chorus",
    workers: Math.max(1, int("WORKERS", 1)),
    shards: Math.max(1, int("SHARDS", 16)),
    leaseSeconds: Math.max(2, int("LEASE_SECONDS", 10)),
    maxBodyBytes: int("MAX_BODY_BYTES", 25 * 1024 * 1024),
    askTimeoutMs: int("ASK_TIMEOUT_MS", 10_000),
    secret: env.CHORUS_SECRET || undefined,
    trustedProxies: trustedProxies(),
    rateLimits: {
      apiByUser: rateRules("RATE_LIMIT_API_BY_USER", ZULIP_RATE_LIMITS.apiByUser),
      apiByIp: rateRules("RATE_LIMIT_API_BY_IP", ZULIP_RATE_LIMITS.apiByIp),
      authenticateByUsername: rateRules("RATE_LIMIT_AUTHENTICATE_BY_USERNAME", ZULIP_RATE_LIMITS.authenticateByUsername),
      authenticateByIp: rateRules("RATE_LIMIT_AUTHENTICATE_BY_IP", ZULIP_RATE_LIMITS.authenticateByIp),
    },
    ...overrides,
  };
}
