/**
 * The store's named statements on Postgres (runtime/store/db.ts NAMED_STATEMENT): a kysely statement that ends with
 * the marker is prepared once on its connection and reused by name, one that does not stays unnamed, and the answers
 * are the same either way; PGlite runs the marked statement as a plain one. Statements planned once
 * (queryPlannedOnce) run named on connections of their own that always take the generic plan.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import pg from "pg";
import { NAMED_STATEMENT, openDatabase, queryPlannedOnce } from "../../runtime/store/db.ts";
import { freshDatabase } from "../support/services.ts";

describe("named statements on Postgres", () => {
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let db: Kysely<any>;

  beforeAll(async () => {
    database = await freshDatabase();
    // One connection: what the statements prepared is seen by the next query.
    db = (await openDatabase({ databaseUrl: database.url, dataDir: "memory://", poolSize: 1 })).db as Kysely<any>;
  });
  afterAll(async () => {
    await db?.destroy();
    await database?.drop();
  });

  const prepared = async () => (await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(db)).rows.map((r) => r.statement);
  const square = (n: number, named: boolean) =>
    db
      .selectNoFrom(sql<number>`${n}::int * ${n}::int`.as("square"))
      .modifyEnd(sql.raw(named ? NAMED_STATEMENT : ""))
      .executeTakeFirstOrThrow();

  it("prepares a marked statement once and reuses it; leaves an unmarked one unnamed", async () => {
    expect(await square(3, false)).toEqual({ square: 9 });
    expect((await prepared()).filter((s) => s.includes("* $2"))).toEqual([]);
    expect(await square(4, true)).toEqual({ square: 16 });
    expect(await square(5, true)).toEqual({ square: 25 });
    const named = (await prepared()).filter((s) => s.includes("* $2"));
    expect(named).toHaveLength(1);
    expect(named[0]).toContain(NAMED_STATEMENT);
  });
});

describe("statements planned once, on Postgres", () => {
  it("run named on connections of their own that take the generic plan, without JIT; the main pool, transactions and PGlite keep the planner's choice", async () => {
    const database = await freshDatabase();
    try {
      const { db } = await openDatabase({ databaseUrl: database.url, dataDir: "memory://", poolSize: 1 });
      const mode = "select current_setting('plan_cache_mode') as mode, $1::int as n";
      // Two at once on a new connection: the setting is the connection's from its start, not a statement queued
      // before theirs on a busy client (which pg warns of: it will refuse it in pg@9).
      const warnings: string[] = [];
      const onWarning = (warning: Error) => warnings.push(warning.message);
      process.on("warning", onWarning);
      try {
        expect(await Promise.all([queryPlannedOnce(db, mode, [1]), queryPlannedOnce(db, mode, [2])])).toEqual([
          [{ mode: "force_generic_plan", n: 1 }],
          [{ mode: "force_generic_plan", n: 2 }],
        ]);
        await new Promise((resolve) => setImmediate(resolve)); // process warnings are emitted on the next tick
      } finally {
        process.off("warning", onWarning);
      }
      expect(warnings).toEqual([]);
      // Without JIT: a generic plan is compiled again at every execution, and at 10,000,000 messages the channel's
      // page was estimated dear enough for it (65-95 ms a batch, for 0.6 ms of running: docs/reads.md).
      expect(await queryPlannedOnce(db, "select current_setting('jit') as jit, $1::int as n", [1])).toEqual([{ jit: "off", n: 1 }]);
      const named = await queryPlannedOnce<{ statement: string }>(db, "select statement from pg_prepared_statements where $1::int = 1", [1]);
      expect(named.map((r) => r.statement)).toContain(mode);
      expect((await sql<{ mode: string }>`select current_setting('plan_cache_mode') as mode`.execute(db)).rows).toEqual([{ mode: "auto" }]);
      // Serial plans on both pools: parallel workers' start cost more than any of these reads (runtime/store/db.ts).
      const workers = "select current_setting('max_parallel_workers_per_gather') as workers";
      expect((await sql.raw<{ workers: string }>(workers).execute(db)).rows).toEqual([{ workers: "0" }]);
      expect(await queryPlannedOnce(db, `${workers}, $1::int as n`, [1])).toEqual([{ workers: "0", n: 1 }]);
      const inTransaction = await db.transaction().execute((trx) => queryPlannedOnce(trx, mode, [3]));
      expect(inTransaction).toEqual([{ mode: "auto", n: 3 }]);

      // Both pools end with the database's handle.
      await db.destroy();
      const admin = new pg.Client({ connectionString: database.url });
      await admin.connect();
      // A backend leaves pg_stat_activity a moment after its client hung up.
      const others = async () => (await admin.query("select count(*)::int as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()")).rows[0].n;
      for (let i = 0; i < 40 && (await others()) > 0; i++) await new Promise((r) => setTimeout(r, 50));
      const left = await others();
      await admin.end();
      expect(left).toBe(0);
    } finally {
      await database.drop();
    }
  });

  it("run named on PGlite with the generic plan for their own statement only, a failure rolled back", async () => {
    const { db } = await openDatabase({ dataDir: "memory://" });
    const mode = "select current_setting('plan_cache_mode') as mode, $1::int as n";
    expect(await queryPlannedOnce(db, mode, [4])).toEqual([{ mode: "force_generic_plan", n: 4 }]);
    expect(await queryPlannedOnce(db, mode, [5])).toEqual([{ mode: "force_generic_plan", n: 5 }]);
    const named = await queryPlannedOnce<{ statement: string }>(db, "select statement from pg_prepared_statements where $1::int = 1", [1]);
    expect(named.map((r) => r.statement)).toContain(mode);
    // The session's other statements keep the planner's choice, and are in no transaction.
    expect((await sql<{ mode: string }>`select current_setting('plan_cache_mode') as mode`.execute(db)).rows).toEqual([{ mode: "auto" }]);
    const inTransaction = await db.transaction().execute((trx) => queryPlannedOnce(trx, mode, [3]));
    expect(inTransaction).toEqual([{ mode: "auto", n: 3 }]);
    // A failing one leaves neither its transaction nor its setting behind.
    await expect(queryPlannedOnce(db, "select 1 / $1::int as n", [0])).rejects.toThrow(/division by zero/);
    expect((await sql<{ mode: string; xid: string | null }>`select current_setting('plan_cache_mode') as mode`.execute(db)).rows).toEqual([{ mode: "auto" }]);
    await db.transaction().execute(async (trx) => void (await sql`select 1`.execute(trx)));
    await db.destroy();
  }, 60_000);
});

describe("named statements on PGlite", () => {
  it("runs every statement named, parsed once, with the planner's choice of plan", async () => {
    const { db } = await openDatabase({ dataDir: "memory://" });
    const product = (a: number, b: number) => (db as Kysely<any>).selectNoFrom(sql<number>`${a}::int * ${b}::int`.as("product")).executeTakeFirstOrThrow();
    expect(await product(6, 7)).toEqual({ product: 42 });
    expect(await product(3, 5)).toEqual({ product: 15 });
    const prepared = await sql<{ statement: string; calls: number }>`select statement, generic_plans + custom_plans as calls from pg_prepared_statements`.execute(db);
    expect(prepared.rows).toContainEqual({ statement: expect.stringContaining(`"product"`), calls: 2 });
    expect((await sql<{ mode: string }>`select current_setting('plan_cache_mode') as mode`.execute(db)).rows).toEqual([{ mode: "auto" }]);
    await db.destroy();
  }, 60_000);

  it("keeps 500 statements prepared, closing the one run least lately", async () => {
    const { db } = await openDatabase({ dataDir: "memory://" });
    const k = db as Kysely<any>;
    const run = async (i: number) => (await sql<{ n: number }>`select ${sql.raw(String(i))}::int + ${1}::int as n`.execute(k)).rows[0]!.n;
    for (let i = 0; i < 520; i++) expect(await run(i)).toBe(i + 1);
    expect(await run(3)).toBe(4); // closed, prepared again
    const prepared = async () => (await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(k)).rows.map((r) => r.statement);
    const texts = await prepared();
    expect(texts.length).toBeLessThanOrEqual(500);
    expect(texts).toContain("select 3::int + $1::int as n");
    expect(texts).not.toContain("select 10::int + $1::int as n");
    expect(texts).toContain("select 519::int + $1::int as n");
    await db.destroy();
  }, 60_000);

  it("runs unnamed a statement whose generic plan Postgres refuses (an ON CONFLICT arbiter with a parameter)", async () => {
    const { db } = await openDatabase({ dataDir: "memory://" });
    const k = db as Kysely<any>;
    await sql`create table arbiters (kind int, key int)`.execute(k);
    await sql`create unique index arbiters_key on arbiters (key) where kind = 2`.execute(k);
    // Postgres plans a prepared statement's first five runs for their values; the sixth and later would be generic.
    for (let key = 0; key < 10; key++) {
      await k.insertInto("arbiters").values({ kind: 2, key }).onConflict((c) => c.column("key").where("kind", "=", 2).doNothing()).execute();
    }
    await k.insertInto("arbiters").values({ kind: 2, key: 3 }).onConflict((c) => c.column("key").where("kind", "=", 2).doNothing()).execute();
    expect((await sql<{ n: number }>`select count(*)::int as n from arbiters`.execute(k)).rows).toEqual([{ n: 10 }]);
    await db.destroy();
  }, 60_000);

  it("parses a statement again once its table's columns changed, in a transaction or not", async () => {
    const { db } = await openDatabase({ dataDir: "memory://" });
    const k = db as Kysely<any>;
    await sql`create table widened (a int)`.execute(k);
    await k.insertInto("widened").values({ a: 1 }).execute();
    const all = (on: Kysely<any> = k) => on.selectFrom("widened").selectAll().execute();
    expect(await all()).toEqual([{ a: 1 }]);
    await sql`alter table widened add column b text default 'x'`.execute(k);
    expect(await all()).toEqual([{ a: 1, b: "x" }]);
    await sql`alter table widened add column c int default 2`.execute(k);
    // In a transaction the first run fails (and with it the transaction); the next one is parsed anew.
    await expect(k.transaction().execute((trx) => all(trx))).rejects.toThrow(/cached plan must not change result type/);
    expect(await k.transaction().execute((trx) => all(trx))).toEqual([{ a: 1, b: "x", c: 2 }]);
    await db.destroy();
  }, 60_000);
});
