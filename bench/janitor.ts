/**
 * What a bench run creates outside itself (temp directories, Postgres databases, Redis key prefixes) and how to
 * remove each. The bench process removes them itself when an engine stops; the load-generator child keeps the
 * same list and removes what is left if the bench process goes away without doing so (killed, or SIGKILLed by
 * tsx's signal relay when its event loop is too busy to answer a Ctrl-C in time).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { deleteRedisKeys } from "../runtime/transport/redis-connection.ts";
import { PG_ADMIN_URL } from "../test/support/services.ts";

export type Resource =
  | { kind: "dir"; path: string }
  | { kind: "database"; url: string }
  | { kind: "redis"; url: string; prefix: string };

export function resourceKey(r: Resource): string {
  return r.kind === "dir" ? `dir:${r.path}` : r.kind === "database" ? `database:${r.url}` : `redis:${r.url}#${r.prefix}`;
}

export function describeResource(r: Resource): string {
  return r.kind === "dir" ? `temp dir ${r.path}` : r.kind === "database" ? `database ${new URL(r.url).pathname.slice(1)}` : `Redis prefix ${r.prefix}`;
}

/** Remove one resource; refuses anything that does not look like what the bench creates. */
export async function removeResource(r: Resource): Promise<void> {
  if (r.kind === "dir") {
    const resolved = path.resolve(r.path);
    if (!resolved.startsWith(path.join(os.tmpdir(), "chorus-bench-"))) throw new Error(`not a bench temp dir: ${r.path}`);
    fs.rmSync(resolved, { recursive: true, force: true });
  } else if (r.kind === "database") {
    const name = new URL(r.url).pathname.slice(1);
    if (!/^chorus_test_db_[a-z0-9_]+$/.test(name)) throw new Error(`not a bench database: ${name}`);
    const client = new pg.Client({ connectionString: PG_ADMIN_URL });
    await client.connect();
    try {
      await client.query(`select pg_terminate_backend(pid) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`, [name]);
      await client.query(`drop database if exists ${name}`);
    } finally {
      await client.end();
    }
  } else {
    if (!r.prefix.startsWith("chorus_test_redis_")) throw new Error(`not a bench Redis prefix: ${r.prefix}`);
    await deleteRedisKeys(r.url, r.prefix);
  }
}

/** The bench process's side: tell the child what exists (watch) and what is gone (release). */
export interface Janitor {
  watch(r: Resource): void;
  release(r: Resource): void;
}
