/**
 * Every setting the kernel and the gateway read from the environment, read in one place (a product's own
 * settings are read beside it: actors/chat/config.ts, actors/assistant/config.ts).
 * The defaults make `npm start` an embedded single process: memory transport, PGlite under ./data.
 */
import path from "node:path";

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
    ...overrides,
  };
}
