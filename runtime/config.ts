/**
 * Every setting the kernel and the gateway read from the environment, read in one place (a product's own
 * settings are read beside it: actors/chat/config.ts, actors/assistant/config.ts).
 * The defaults make `npm start` an embedded single process: memory transport, PGlite under ./data.
 */
import path from "node:path";
import proxyAddr from "proxy-addr";
import { customCleanEnv, EnvError, makeValidator, str } from "envalid";

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
  /** Worker processes this host's primary forks (each joins the cluster's membership; hosts may differ). */
  workers: number;
  /**
   * What this process does (ROLE): `all` serves HTTP and hosts actors; `gateway` serves HTTP and hosts none (it asks
   * the workers through the transport); `worker` hosts actors and answers only the health probes over HTTP.
   */
  role: Role;
  shards: number;
  /** Seconds a shard lease lasts without renewal. */
  leaseSeconds: number;
  /**
   * How long a worker's event loop may stall (a long GC, a busy turn) and keep its shards (on Postgres, leases are
   * renewed from a thread of their own: runtime/lease-keeper.ts); past it they move within a lease. Default two leases.
   */
  leaseStallSeconds: number;
  /** Largest request body accepted (413 past it). */
  maxBodyBytes: number;
  /** Default ask timeout. */
  askTimeoutMs: number;
  /**
   * Where the workers of a host listen for each other's direct links (runtime/transport/peer-links.ts), with Redis
   * Streams: PEER_LINKS_DIR, a directory the host's workers share, private to their user. Unset (undefined): the
   * workers a primary forks (WORKERS > 1) get a default one (defaultPeerLinksDir), a process started alone has none.
   * `off` (false): no links, every ask between workers goes through Redis. See docs/scale-out.md, "Direct links
   * between the workers of a host".
   */
  peerLinksDir?: string | false;
  /**
   * How long a worker trusts credentials it checked without checking them again (AUTH_CACHE_SECONDS): a change to an
   * account drops every worker's cache at once by a notice, so this bounds only a worker that missed the notice.
   */
  authCacheMs: number;
  /** Secret used to encrypt API keys; generated into dataDir when absent. */
  secret?: string;
  /**
   * Reverse proxies whose `X-Forwarded-For` is believed (TRUSTED_PROXIES: addresses, CIDR ranges, or proxy-addr's
   * names `loopback`, `linklocal`, `uniquelocal`, comma-separated); none by default, so the socket's address counts.
   */
  trustedProxies: string[];
  /** The chat API's rate limits, named after Zulip's RATE_LIMITING_RULES; an empty list turns one off. */
  rateLimits: RateLimitRules;
  /** One log line per request (ACCESS_LOG=off turns it off). */
  accessLog: boolean;
  /** Prometheus metrics counted and served at GET /metrics (METRICS=off turns both off). */
  metrics: boolean;
  /** With WORKERS > 1, the primary serves every worker's metrics, gathered, at GET /metrics on this port. */
  metricsPort: number;
}

export type Role = "all" | "gateway" | "worker";

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

/** An on/off setting from the environment ("on" or "off"; unset or empty: the fallback). */
export function onOff(name: string, fallback: boolean): boolean {
  const raw = process.env[name]?.trim().toLowerCase();
  if (raw === undefined || raw === "") return fallback;
  if (raw !== "on" && raw !== "off") throw new Error(`${name} must be "on" or "off", got ${JSON.stringify(process.env[name])}`);
  return raw === "on";
}

/** Every problem found in the settings, one line each, so that an operator fixes them all in one go. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join("\n"));
    this.name = "ConfigError";
  }
}

const nonNegativeInt = makeValidator((raw) => {
  if (!/^\d+$/.test(raw.trim())) throw new EnvError(`must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return Number(raw);
});

/** A URL whose scheme is one of `schemes`; an empty value means the setting is off. */
const urlOf = (example: string, ...schemes: string[]) =>
  makeValidator((raw): string | undefined => {
    if (raw.trim() === "") return undefined;
    let url: URL | undefined;
    try {
      url = new URL(raw);
    } catch {
      // reported below
    }
    if (!url || !schemes.includes(url.protocol)) throw new EnvError(`must be a URL like ${example}, got ${JSON.stringify(raw)}`);
    return raw;
  });

const kernelSettings = {
  PORT: nonNegativeInt({ default: 9991 }),
  HOST: str({ default: "0.0.0.0" }),
  DATA_DIR: str({ default: "./data" }),
  UPLOADS_DIR: str({ default: "" }),
  DATABASE_URL: urlOf("postgres://user@host:5432/database", "postgres:", "postgresql:")({ default: undefined }),
  REDIS_URL: urlOf("redis://host:6379", "redis:", "rediss:")({ default: undefined }),
  REDIS_PREFIX: str({ default: "chorus" }),
  WORKERS: nonNegativeInt({ default: 1 }),
  ROLE: str({ choices: ["all", "gateway", "worker"] as const, default: "all" }),
  SHARDS: nonNegativeInt({ default: 16 }),
  LEASE_SECONDS: nonNegativeInt({ default: 10 }),
  LEASE_STALL_SECONDS: nonNegativeInt({ default: 0 }),
  MAX_BODY_BYTES: nonNegativeInt({ default: 25 * 1024 * 1024 }),
  ASK_TIMEOUT_MS: nonNegativeInt({ default: 10_000 }),
  PEER_LINKS_DIR: str({ default: "" }),
  AUTH_CACHE_SECONDS: nonNegativeInt({ default: 30 }),
  CHORUS_SECRET: str({ default: "" }),
  ACCESS_LOG: str({ choices: ["on", "off"], default: "on" }),
  METRICS: str({ choices: ["on", "off"], default: "on" }),
  METRICS_PORT: nonNegativeInt({ default: 9464 }),
  LOG_LEVEL: str({ choices: ["trace", "debug", "info", "warn", "error", "fatal", "silent"], default: "info" }),
};

/**
 * The kernel's settings from the environment (`overrides` win, for tests and tools). Throws a ConfigError listing
 * every problem: a malformed value, or settings that cannot work together.
 */
export function loadConfig(overrides: Partial<Config> = {}): Config {
  const problems: string[] = [];
  // customCleanEnv without middleware: cleanEnv's strict proxy warns on reading a setting that failed validation.
  // An empty variable (`DATABASE_URL= npm run manage …`) is an unset one, as in the shell's `${VAR:-default}`.
  const given = Object.fromEntries(Object.entries(process.env).filter(([, value]) => value !== ""));
  const env = customCleanEnv(given, kernelSettings, (cleaned) => cleaned, {
    reporter: ({ errors }) => {
      for (const [name, err] of Object.entries(errors)) problems.push(`${name} ${(err as Error).message}`);
    },
  });
  const collect = <T>(read: () => T, fallback: T): T => {
    try {
      return read();
    } catch (err) {
      problems.push((err as Error).message);
      return fallback;
    }
  };
  const dataDir = overrides.dataDir ?? path.resolve(env.DATA_DIR);
  const config: Config = {
    port: env.PORT,
    host: env.HOST,
    dataDir,
    uploadsDir: env.UPLOADS_DIR ? path.resolve(env.UPLOADS_DIR) : path.join(dataDir, "uploads"),
    databaseUrl: env.DATABASE_URL,
    redisUrl: env.REDIS_URL,
    redisPrefix: env.REDIS_PREFIX,
    workers: Math.max(1, env.WORKERS),
    role: env.ROLE as Role,
    shards: Math.max(1, env.SHARDS),
    leaseSeconds: Math.max(2, env.LEASE_SECONDS),
    leaseStallSeconds: env.LEASE_STALL_SECONDS || 2 * Math.max(2, env.LEASE_SECONDS),
    maxBodyBytes: env.MAX_BODY_BYTES,
    askTimeoutMs: env.ASK_TIMEOUT_MS,
    peerLinksDir: env.PEER_LINKS_DIR === "off" ? false : env.PEER_LINKS_DIR ? path.resolve(env.PEER_LINKS_DIR) : undefined,
    authCacheMs: env.AUTH_CACHE_SECONDS * 1000,
    secret: env.CHORUS_SECRET || undefined,
    accessLog: env.ACCESS_LOG !== "off",
    metrics: env.METRICS !== "off",
    metricsPort: env.METRICS_PORT,
    trustedProxies: collect(trustedProxies, []),
    rateLimits: {
      apiByUser: collect(() => rateRules("RATE_LIMIT_API_BY_USER", ZULIP_RATE_LIMITS.apiByUser), []),
      apiByIp: collect(() => rateRules("RATE_LIMIT_API_BY_IP", ZULIP_RATE_LIMITS.apiByIp), []),
      authenticateByUsername: collect(() => rateRules("RATE_LIMIT_AUTHENTICATE_BY_USERNAME", ZULIP_RATE_LIMITS.authenticateByUsername), []),
      authenticateByIp: collect(() => rateRules("RATE_LIMIT_AUTHENTICATE_BY_IP", ZULIP_RATE_LIMITS.authenticateByIp), []),
    },
    ...overrides,
  };
  if (config.port > 65535) problems.push(`PORT must be at most 65535, got ${config.port}`);
  if (config.metricsPort > 65535) problems.push(`METRICS_PORT must be at most 65535, got ${config.metricsPort}`);
  if (config.workers > 1 && (!config.redisUrl || !config.databaseUrl)) {
    problems.push(`WORKERS=${config.workers} needs REDIS_URL and DATABASE_URL: the embedded engines (memory transport, PGlite) serve one process`);
  }
  if (config.role !== "all" && (!config.redisUrl || !config.databaseUrl)) {
    problems.push(`ROLE=${config.role} needs REDIS_URL and DATABASE_URL: gateways and workers meet through Redis and Postgres`);
  }
  if (problems.length) throw new ConfigError(problems);
  return config;
}
