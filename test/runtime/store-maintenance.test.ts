/**
 * The store's vacuums and analyzes (runtime/store/store-maintenance.ts). On PGlite, which has no autovacuum: a table
 * past autovacuum's thresholds is vacuumed and analyzed, one that changed little is left alone, dead rows are
 * vacuumed away, an old oldest transaction id is frozen, and the passes run by themselves once the store has
 * recovered, and stop when it closes. On both engines: an empty table never analyzed is analyzed, once, and is then
 * known empty to the planner.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { openDatabase } from "../../runtime/store/db.ts";
import { SqlStore } from "../../runtime/store/sql-store.ts";
import { StoreMaintenance } from "../../runtime/store/store-maintenance.ts";
import { dropStoreDatabase, engines } from "../support/stores.ts";

describe("the embedded store's maintenance", () => {
  let store: SqlStore;
  let db: Kysely<any>;

  beforeAll(async () => {
    store = new SqlStore(await openDatabase({ dataDir: "memory://" }));
    db = store.db as Kysely<any>;
  });
  afterAll(async () => store?.close());

  /** What Postgres's statistics say of a table: when it was last vacuumed and analyzed, its dead rows, pages marked all-visible. */
  const stats = async (table: string) =>
    (
      await sql<{ last_vacuum: Date | null; last_analyze: Date | null; n_dead_tup: number; relallvisible: number; age: number }>`
        select s.last_vacuum, s.last_analyze, s.n_dead_tup::int, c.relallvisible, age(c.relfrozenxid) as age
        from pg_stat_user_tables s join pg_class c on c.oid = s.relid where s.relname = ${table}`.execute(db)
    ).rows[0]!;

  /** Statistics reach pg_stat_user_tables when the backend reports them (at most once a second): a pass until one does something. */
  const passUntil = async (maintenance: StoreMaintenance, done: (tables: string[]) => boolean) => {
    for (let i = 0; i < 40; i++) {
      const tables = (await maintenance.runOnce()).map((t) => t.table);
      if (done(tables)) return tables;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("no pass did what was expected");
  };

  it("vacuums and analyzes a table past autovacuum's thresholds, and leaves alone one that changed little", async () => {
    await sql`create table busy (id int primary key, note text)`.execute(db);
    await sql`create table quiet (id int primary key)`.execute(db);
    await sql`insert into busy select g, 'row ' || g from generate_series(1, 3000) g`.execute(db);
    await sql`insert into quiet select g from generate_series(1, 10) g`.execute(db);
    const maintenance = new StoreMaintenance(store, { autovacuum: true });
    const first = await passUntil(maintenance, (tables) => tables.includes("busy"));
    expect(first).not.toContain("quiet");
    const busy = await stats("busy");
    expect(busy.last_vacuum).not.toBeNull();
    expect(busy.last_analyze).not.toBeNull();
    expect(busy.relallvisible).toBeGreaterThan(0);
    expect(await stats("quiet")).toMatchObject({ last_vacuum: null, last_analyze: null });
    // Done: the next pass finds nothing to do for it.
    expect((await maintenance.runOnce()).map((t) => t.table)).not.toContain("busy");
  });

  it("vacuums the rows a delete left dead", async () => {
    const maintenance = new StoreMaintenance(store, { autovacuum: true });
    await sql`delete from busy where id <= 2000`.execute(db);
    await passUntil(maintenance, (tables) => tables.includes("busy"));
    expect((await stats("busy")).n_dead_tup).toBe(0);
  });

  it("vacuums a table whose oldest transaction id is older than the freeze age, however little changed", async () => {
    for (let i = 0; i < 5; i++) await sql`insert into quiet values (${100 + i})`.execute(db);
    const before = await stats("quiet");
    expect(before.age).toBeGreaterThan(3);
    expect(await new StoreMaintenance(store, { autovacuum: true }).runOnce()).not.toContainEqual(expect.objectContaining({ table: "quiet" }));
    const done = await new StoreMaintenance(store, { autovacuum: true, freezeAge: 3 }).runOnce();
    expect(done).toContainEqual(expect.objectContaining({ table: "quiet", vacuum: true }));
    expect((await stats("quiet")).age).toBeLessThan(before.age);
  });

  it("runs its passes by itself once the store recovers its components, and stops when the store closes", async () => {
    const own = new SqlStore(await openDatabase({ dataDir: "memory://" }));
    const ownDb = own.db as Kysely<any>;
    new StoreMaintenance(own, { autovacuum: true, intervalMs: 50 });
    await sql`create table grown (id int)`.execute(ownDb);
    await sql`insert into grown select generate_series(1, 2000)`.execute(ownDb);
    const analyzed = async () =>
      (await sql<{ at: Date | null }>`select last_analyze as at from pg_stat_user_tables where relname = 'grown'`.execute(ownDb)).rows[0]!.at;
    await new Promise((r) => setTimeout(r, 300));
    expect(await analyzed()).toBeNull(); // not started before the store recovers (after migrating)
    await own.recover();
    const deadline = Date.now() + 5_000;
    while (!(await analyzed()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(await analyzed()).not.toBeNull();
    await own.close(); // the close awaits a pass under way, and no pass starts after it
  });
});

/** What the planner expects of `select * from <table>`: its estimate of the rows. */
async function estimatedRows(db: Kysely<any>, table: string): Promise<number> {
  const { rows } = await sql<{ "QUERY PLAN": Array<{ Plan: { "Plan Rows": number } }> }>`explain (format json) select * from ${sql.id(table)}`.execute(db);
  return rows[0]!["QUERY PLAN"][0]!.Plan["Plan Rows"];
}

afterAll(dropStoreDatabase);

describe.each(engines)("the store's maintenance on $name: empty tables never analyzed", (engineCase) => {
  it("analyzes an empty table never analyzed, once, so the planner knows it empty; leaves one with rows to the thresholds", async () => {
    const store = await engineCase.open();
    const db = store.db as Kysely<any>;
    // Names of this engine's own (a Postgres database is shared by the suite's engines).
    const empty = `never_analyzed_empty_${engineCase.name}`;
    const small = `never_analyzed_small_${engineCase.name}`;
    try {
      await sql`create table ${sql.id(empty)} (id bigint primary key, n integer)`.execute(db);
      await sql`create table ${sql.id(small)} (id bigint primary key, n integer)`.execute(db);
      await sql`insert into ${sql.id(small)} select g, g from generate_series(1, 10) g`.execute(db);
      // Never analyzed, Postgres takes the empty table to hold 10 pages of these 12-byte rows (over 2,000).
      expect(await estimatedRows(db, empty)).toBeGreaterThan(1_000);
      const maintenance = new StoreMaintenance(store, { autovacuum: engineCase.name === "pglite" });
      const done = await maintenance.runOnce();
      expect(done).toContainEqual({ table: empty, vacuum: false, analyze: true, ms: expect.any(Number) });
      expect(done.map((t) => t.table)).not.toContain(small);
      expect(await estimatedRows(db, empty)).toBe(1);
      expect((await maintenance.runOnce()).map((t) => t.table)).not.toContain(empty); // once
      // Once it holds rows, the planner sizes it by its pages again.
      await sql`insert into ${sql.id(empty)} select g, g from generate_series(1, 5000) g`.execute(db);
      expect(await estimatedRows(db, empty)).toBeGreaterThan(1_000);
    } finally {
      await sql`drop table if exists ${sql.id(empty)}, ${sql.id(small)}`.execute(db);
      await store.close();
    }
  });
});
