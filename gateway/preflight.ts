/**
 * What `npm start` checks before it starts anything, so that a deployment that cannot work stops at once with one
 * line per problem (a ConfigError) instead of a stack from deep inside a driver, or workers restarting forever:
 * the data directory is writable, Postgres and Redis (when configured) answer within a short bounded retry, and the
 * port is free. Each check runs once; they run in parallel.
 */
import fs from "node:fs";
import path from "node:path";
import pg from "pg";
import { ConfigError, type Config } from "../runtime/config.ts";
import { connectRedis } from "../runtime/transport/redis-connection.ts";
import { ensurePortFree } from "./lock.ts";

/** A dependency that is starting alongside us (a compose file's Postgres) gets this long to answer. */
const ATTEMPTS = 3;
const ATTEMPT_TIMEOUT_MS = 2_000;
const BETWEEN_ATTEMPTS_MS = 1_000;

/** The URL without its password, to name it in a message. */
function redacted(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = "***";
  return parsed.toString();
}

/** `attempt` until it succeeds, at most ATTEMPTS times; the last failure's message otherwise. */
async function reachable(attempt: () => Promise<void>): Promise<string | undefined> {
  let reason = "";
  for (let i = 0; i < ATTEMPTS; i++) {
    if (i) await new Promise((r) => setTimeout(r, BETWEEN_ATTEMPTS_MS));
    try {
      await attempt();
      return undefined;
    } catch (err) {
      reason = describe(err);
    }
  }
  return reason;
}

function describe(err: unknown): string {
  // An AggregateError (a host name with several addresses, all refused) has an empty message.
  if (err instanceof AggregateError && !err.message) return err.errors.map(describe).join(", ");
  return (err as Error).message || String(err);
}

async function postgres(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: ATTEMPT_TIMEOUT_MS });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.query("select 1");
  } finally {
    await client.end().catch(() => {});
  }
}

async function redis(url: string): Promise<void> {
  // ioredis rejects connect() with "Connection is closed."; the cause (ECONNREFUSED, ENOTFOUND) is on "error".
  let cause: unknown;
  const conn = connectRedis(url, "preflight", (err) => (cause ??= err), {
    lazyConnect: true,
    retryStrategy: () => null,
    connectTimeout: ATTEMPT_TIMEOUT_MS,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
  try {
    await conn.connect();
    await conn.ping();
  } catch (err) {
    throw cause ?? err;
  } finally {
    conn.disconnect();
  }
}

/** Why `dir` (named by `setting`) cannot hold our files, or undefined when it can. */
function writable(setting: string, dir: string): string | undefined {
  const probe = path.join(dir, `.chorus-write-check-${process.pid}`);
  try {
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(probe, "");
    fs.unlinkSync(probe);
    return undefined;
  } catch (err) {
    return `${setting} ${dir} is not writable (${errnoReason(dir, err as NodeJS.ErrnoException)})`;
  }
}

/**
 * "EROFS: read-only file system" and the like. A recursive mkdir on a read-only file system fails with ENOENT, so
 * the nearest directory that exists is asked for write access to find the real cause.
 */
function errnoReason(dir: string, err: NodeJS.ErrnoException): string {
  let cause = err;
  if (err.code === "ENOENT") {
    let existing = dir;
    while (!fs.existsSync(existing) && path.dirname(existing) !== existing) existing = path.dirname(existing);
    try {
      fs.accessSync(existing, fs.constants.W_OK);
    } catch (access) {
      cause = access as NodeJS.ErrnoException;
    }
  }
  return cause.message.split(",")[0]!;
}

export async function preflight(config: Config): Promise<void> {
  const problems: Array<string | undefined> = [writable("DATA_DIR", config.dataDir)];
  if (config.uploadsDir !== path.join(config.dataDir, "uploads")) problems.push(writable("UPLOADS_DIR", config.uploadsDir));
  const checks: Array<Promise<string | undefined>> = [
    ensurePortFree(config.host, config.port).then(
      () => undefined,
      (err: Error) => err.message,
    ),
  ];
  const { databaseUrl, redisUrl } = config;
  if (databaseUrl) {
    checks.push(reachable(() => postgres(databaseUrl)).then((reason) => reason && `cannot reach Postgres at ${redacted(databaseUrl)} (DATABASE_URL): ${reason}`));
  }
  if (redisUrl) {
    checks.push(reachable(() => redis(redisUrl)).then((reason) => reason && `cannot reach Redis at ${redacted(redisUrl)} (REDIS_URL): ${reason}`));
  }
  problems.push(...(await Promise.all(checks)));
  const found = problems.filter((p): p is string => !!p);
  if (found.length) throw new ConfigError(found);
}
