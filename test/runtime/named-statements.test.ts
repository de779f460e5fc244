/**
 * The store's named statements on Postgres (runtime/store/db.ts NAMED_STATEMENT): a kysely statement that ends with
 * the marker is prepared once on its connection and reused by name, one that does not stays unnamed, and the answers
 * are the same either way; PGlite runs the marked statement as a plain one.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { NAMED_STATEMENT, openDatabase } from "../../runtime/store/db.ts";
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

describe("named statements on PGlite", () => {
  it("runs a marked statement as a plain one", async () => {
    const { db } = await openDatabase({ dataDir: "memory://" });
    const row = await (db as Kysely<any>).selectNoFrom(sql<number>`${6}::int * ${7}::int`.as("product")).modifyEnd(sql.raw(NAMED_STATEMENT)).executeTakeFirstOrThrow();
    expect(row).toEqual({ product: 42 });
    await db.destroy();
  }, 60_000);
});
