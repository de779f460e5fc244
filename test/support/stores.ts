/**
 * The engines a store suite runs against (test/runtime/store.contract.test.ts, test/actors/chat/message-log.test.ts):
 * PGlite in memory, and a real Postgres at 127.0.0.1:5432 (TEST_PG_URL overrides) in a database created on first
 * use and dropped by `dropStoreDatabase`.
 */
import { expect } from "vitest";
import type { Fence } from "../../runtime/actor.ts";
import { ChorusError } from "../../runtime/errors.ts";
import { openDatabase, type Engine } from "../../runtime/store/db.ts";
import { SqlStore } from "../../runtime/store/sql-store.ts";
import type { Database } from "../../actors/schema.ts";
import { freshDatabase } from "./services.ts";

/** The Postgres database of this run's engines, created on first use. */
let pgDatabase: Awaited<ReturnType<typeof freshDatabase>> | undefined;
export async function pgUrl(): Promise<string> {
  pgDatabase ??= await freshDatabase();
  return pgDatabase.url;
}

/** Drop the Postgres database the engines made (afterAll of a suite). */
export async function dropStoreDatabase(): Promise<void> {
  await pgDatabase?.drop();
  pgDatabase = undefined; // a later suite in this process makes its own
}

export interface EngineCase {
  name: Engine;
  open(): Promise<SqlStore<Database>>;
  /** A second, independent store over the same data (a restarted process), where the engine allows one. */
  reopen?: () => Promise<SqlStore<Database>>;
}

export const engines: EngineCase[] = [
  {
    name: "pglite",
    open: async () => new SqlStore<Database>(await openDatabase({ dataDir: "memory://" })),
  },
  {
    name: "postgres",
    open: async () => new SqlStore<Database>(await openDatabase({ databaseUrl: await pgUrl(), dataDir: "unused" })),
    reopen: async () => new SqlStore<Database>(await openDatabase({ databaseUrl: await pgUrl(), dataDir: "unused", poolSize: 2 })),
  },
];

export async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected a rejection, got a result");
    },
    (err: unknown) => err,
  );
}

export async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  const err = await rejection(p);
  expect(err).toBeInstanceOf(ChorusError);
  expect((err as ChorusError).code).toBe(code);
}

/** Shards [0, count) handed out one per caller, each leased to its caller's node: a test's own fence. */
export function shardLeaser(count: number, store: () => SqlStore<Database>) {
  let next = 0;
  const shard = (): number => {
    if (next >= count) throw new Error("raise the shard count");
    return next++;
  };
  const fenceOn = async (node = "node-a"): Promise<Fence> => {
    const s = shard();
    const lease = await store().acquireLease(s, node, 60);
    if (!lease) throw new Error(`shard ${s} not free`);
    return { shard: s, epoch: lease.epoch, node };
  };
  return { shard, fenceOn };
}
