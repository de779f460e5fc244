/**
 * The real services the tests use, isolated per run: a fresh Postgres database (dropped afterwards) and a unique
 * Redis key prefix (deleted afterwards). Never a mock of either.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { deleteRedisKeys } from "../../runtime/transport/redis-connection.ts";
import { postgresTemplate } from "./store-templates.ts";

export const PG_ADMIN_URL = process.env.TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
export const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

export function uniqueName(kind: string): string {
  return `chorus_test_${kind}_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`;
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: PG_ADMIN_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * A new database, empty, or `migrated` (a copy of the run's migrated template, when it has one: see
 * store-templates.ts), or a copy of the database named `template`; `drop()` removes it (terminating connections
 * left open).
 */
export async function freshDatabase(opts: { migrated?: boolean; template?: string } = {}): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = uniqueName("db");
  const template = opts.template ?? (opts.migrated ? postgresTemplate() : undefined);
  await admin((c) => c.query(template ? `create database ${name} template ${template}` : `create database ${name}`));
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: () =>
      admin(async (c) => {
        await c.query(`select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`, [name]);
        await c.query(`drop database if exists ${name}`);
      }),
  };
}

/** A unique Redis key prefix; `clean()` deletes every key under it. */
export function freshRedisPrefix(): { prefix: string; clean(): Promise<void> } {
  const prefix = uniqueName("redis");
  return { prefix, clean: async () => void (await deleteRedisKeys(REDIS_URL, prefix)) };
}
