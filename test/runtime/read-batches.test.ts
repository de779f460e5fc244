/**
 * Read batches (runtime/store/read-batches.ts) on both engines, through queryPlannedOnce as the channel's page runs
 * them: concurrent reads share one statement, each gets its own rows and only them, a read whose value the store
 * refuses fails alone, and reads that arrive while the batches in flight are at their limit go together in the next.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Kysely } from "kysely";
import { openDatabase, queryPlannedOnce } from "../../runtime/store/db.ts";
import { ReadBatches } from "../../runtime/store/read-batches.ts";
import { freshDatabase } from "../support/services.ts";

/** Each read's x as two rows, x and 2x; none for x = 0. */
const MULTIPLES = `select q.n::int as n, q.x * g as value
  from unnest($1::bigint[]) with ordinality as q(x, n) cross join generate_series(1, 2) g
  where q.x <> 0 order by q.n, g`;

type Row = { n: number; value: number };

describe.each(["pglite", "postgres"] as const)("read batches on %s", (engine) => {
  let db: Kysely<any>;
  let drop: (() => Promise<void>) | undefined;
  /** The column arrays of every statement the batches ran. */
  let statements: unknown[][][];
  const batches = (maxInFlight: number) =>
    new ReadBatches<Row>(
      (on, columns) => {
        statements.push(columns);
        return queryPlannedOnce<Row>(on, MULTIPLES, columns);
      },
      { maxInFlight, maxBatch: 100 },
    );

  beforeAll(async () => {
    if (engine === "postgres") {
      const database = await freshDatabase();
      drop = database.drop;
      db = (await openDatabase({ databaseUrl: database.url, dataDir: "memory://", poolSize: 2 })).db as Kysely<any>;
    } else db = (await openDatabase({ dataDir: "memory://" })).db as Kysely<any>;
  });
  afterAll(async () => {
    await db?.destroy();
    await drop?.();
  });

  it("answers reads made together in one statement, each with its own rows", async () => {
    statements = [];
    const reads = batches(2);
    const answers = await Promise.all([3, 0, 5, 7].map((x) => reads.read(db, [x])));
    expect(answers).toEqual([
      [
        { n: 1, value: 3 },
        { n: 1, value: 6 },
      ],
      [],
      [
        { n: 3, value: 5 },
        { n: 3, value: 10 },
      ],
      [
        { n: 4, value: 7 },
        { n: 4, value: 14 },
      ],
    ]);
    expect(statements).toEqual([[[3, 0, 5, 7]]]);
  });

  it("fails only the read whose value the store refuses", async () => {
    statements = [];
    const reads = batches(2);
    const settled = await Promise.allSettled([reads.read(db, [2]), reads.read(db, ["not a number"]), reads.read(db, [4])]);
    expect(settled[0]).toEqual({ status: "fulfilled", value: [{ n: 1, value: 2 }, { n: 1, value: 4 }] });
    expect(settled[1]).toMatchObject({ status: "rejected", reason: { message: expect.stringContaining("invalid input syntax for type bigint") } });
    expect(settled[2]).toEqual({ status: "fulfilled", value: [{ n: 1, value: 4 }, { n: 1, value: 8 }] });
    // The batch, then each read on its own.
    expect(statements).toEqual([[[2, "not a number", 4]], [[2]], [["not a number"]], [[4]]]);
  });

  it("sends the reads that arrive while a batch is in flight together, once it ends", async () => {
    statements = [];
    const reads = batches(1);
    const first = reads.read(db, [1]);
    // After the first batch has started: these wait for it, then go as one.
    await new Promise((resolve) => setImmediate(resolve));
    const later = [2, 3, 4].map((x) => reads.read(db, [x]));
    expect(await first).toEqual([
      { n: 1, value: 1 },
      { n: 1, value: 2 },
    ]);
    expect((await Promise.all(later)).map((rows) => rows.map((r) => r.value))).toEqual([
      [2, 4],
      [3, 6],
      [4, 8],
    ]);
    expect(statements).toEqual([[[1]], [[2, 3, 4]]]);
  });
});
