/**
 * Every setting Chorus reads from the environment, read in one place.
 * The defaults make `npm start` an embedded single process: memory transport, PGlite under ./data.
 */
import path from "node:path";

/** How long an event written behind its delivery waits for others to share its commit, by default. */
export const DEFAULT_EVENT_WRITE_DELAY_MS = 10;

/**
 * Past this many recipients a message's flags commit as one list row, expanded into rows after the send (see
 * actors/chat/message-log.ts): on PGlite a flag row costs 8-15 µs of the commit, so 100 rows cost about what a
 * separate commit does.
 */
export const DEFAULT_RECIPIENT_LIST_ABOVE = 100;
/** How long after its commit a recipient list is expanded: after the send's deliveries, which it would delay. */
export const DEFAULT_RECIPIENT_LIST_DELAY_MS = 50;

export interface Config {
  port: number;
  host: string;
  dataDir: string;
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
  /** Long-poll heartbeat: a poll that waited this long gets a heartbeat event. */
  heartbeatSeconds: number;
  /** An event queue expires this long after its last poll ended. */
  queueTimeoutSeconds: number;
  /** Largest request body accepted (413 past it). */
  maxBodyBytes: number;
  /** Default ask timeout. */
  askTimeoutMs: number;
  /**
   * How long an event written behind its delivery waits for others to share its commit (see actors/chat/users/user.ts). Tests
   * lengthen it to make sure a crash falls inside that window.
   */
  eventWriteDelayMs: number;
  /** Recipients past which a message's flag rows are written as one list and expanded behind; tests lower it. */
  recipientListAbove: number;
  /** How long a recipient list waits before its expansion; tests lengthen it to read and write around lists. */
  recipientListDelayMs: number;
  /** Secret used to encrypt API keys; generated into dataDir when absent. */
  secret?: string;
  /** SMTP server for outgoing e-mail (invitations), e.g. smtp://user:pass@host:587; none: e-mails stay in the outbox. */
  smtpUrl?: string;
  /** From address of outgoing e-mail. */
  mailFrom: string;
}

function int(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a non-negative integer, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

export function loadConfig(overrides: Partial<Config> = {}): Config {
  const env = process.env;
  return {
    port: int("PORT", 9991),
    host: env.HOST ?? "0.0.0.0",
    dataDir: path.resolve(env.DATA_DIR ?? "./data"),
    databaseUrl: env.DATABASE_URL || undefined,
    redisUrl: env.REDIS_URL || undefined,
    redisPrefix: env.REDIS_PREFIX ?? "chorus",
    workers: Math.max(1, int("WORKERS", 1)),
    shards: Math.max(1, int("SHARDS", 16)),
    leaseSeconds: Math.max(2, int("LEASE_SECONDS", 10)),
    heartbeatSeconds: Math.max(1, int("HEARTBEAT_SECONDS", 50)),
    queueTimeoutSeconds: Math.max(1, int("QUEUE_TIMEOUT_SECONDS", 600)),
    maxBodyBytes: int("MAX_BODY_BYTES", 25 * 1024 * 1024),
    askTimeoutMs: int("ASK_TIMEOUT_MS", 10_000),
    eventWriteDelayMs: Math.max(0, int("EVENT_WRITE_DELAY_MS", DEFAULT_EVENT_WRITE_DELAY_MS)),
    recipientListAbove: int("RECIPIENT_LIST_ABOVE", DEFAULT_RECIPIENT_LIST_ABOVE),
    recipientListDelayMs: int("RECIPIENT_LIST_DELAY_MS", DEFAULT_RECIPIENT_LIST_DELAY_MS),
    secret: env.CHORUS_SECRET || undefined,
    smtpUrl: env.SMTP_URL || undefined,
    mailFrom: env.MAIL_FROM ?? "Chorus <noreply@chorus.example>",
    ...overrides,
  };
}
