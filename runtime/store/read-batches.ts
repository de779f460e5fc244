/**
 * Read batches: concurrent runs of one hot read statement share one round trip to the store. Each read gives its
 * parameters as a row of scalars; a batch sends them as one array per column, and the statement (written for
 * this: `unnest($1::…[], $2::…[], …) with ordinality as q(…, n)`, each row it returns naming its read's `n`,
 * counting from 1) answers every read at once. What it saves is per round trip, not per row: a write to the
 * store's socket and the store's wake-up, one statement's protocol and executor start (docs/reads.md, 2026-12-03).
 *
 * Guarantees:
 * - A read gets exactly the rows its statement returns for its own parameters, in the statement's order.
 * - A read waits for no company: a batch starts on the next turn of the event loop when fewer than `maxInFlight` of
 *   this statement's batches are running on that database, else as soon as one ends, with whatever arrived
 *   meanwhile (at most `maxBatch` reads).
 * - A batch that fails is run again read by read, so a read whose values the store refuses fails alone, with the
 *   store's error.
 * - Reads of a batch are not one snapshot with one another (each read's rows are one statement's, as alone).
 */
import type { Kysely, Transaction } from "kysely";

/** Runs the batch's statement with its column arrays (a planned-once statement, typically). */
export type RunBatch<R> = (db: Kysely<any> | Transaction<any>, columns: unknown[][]) => Promise<R[]>;

interface PendingRead<R> {
  values: readonly unknown[];
  resolve(rows: R[]): void;
  reject(err: unknown): void;
}

interface DatabaseBatches<R> {
  pending: PendingRead<R>[];
  running: number;
  scheduled: boolean;
}

export class ReadBatches<R extends { n: number }> {
  private readonly byDatabase = new WeakMap<object, DatabaseBatches<R>>();

  constructor(
    private readonly run: RunBatch<R>,
    private readonly options: { maxInFlight: number; maxBatch: number } = { maxInFlight: 2, maxBatch: 100 },
  ) {}

  /** The rows of one read: `values` are its parameters, one per column of the statement's arrays. */
  read(db: Kysely<any> | Transaction<any>, values: readonly unknown[]): Promise<R[]> {
    let state = this.byDatabase.get(db);
    if (!state) this.byDatabase.set(db, (state = { pending: [], running: 0, scheduled: false }));
    const settled = new Promise<R[]>((resolve, reject) => state.pending.push({ values, resolve, reject }));
    this.schedule(db, state);
    return settled;
  }

  /**
   * On the next turn, not now: the reads of the requests already waiting on the sockets join the batch (the same
   * reason as GroupCommit's).
   */
  private schedule(db: Kysely<any> | Transaction<any>, state: DatabaseBatches<R>): void {
    if (state.scheduled || state.running >= this.options.maxInFlight || !state.pending.length) return;
    state.scheduled = true;
    setImmediate(() => {
      state.scheduled = false;
      if (state.running >= this.options.maxInFlight || !state.pending.length) return;
      const batch = state.pending.splice(0, this.options.maxBatch);
      state.running++;
      void this.answer(db, batch).finally(() => {
        state.running--;
        this.schedule(db, state);
      });
      this.schedule(db, state);
    });
  }

  private async answer(db: Kysely<any> | Transaction<any>, batch: PendingRead<R>[]): Promise<void> {
    let rows: R[];
    try {
      rows = await this.run(db, transpose(batch.map((r) => r.values)));
    } catch (err) {
      if (batch.length === 1) return batch[0]!.reject(err);
      // One read's values may be what the store refused: each on its own, so that only that one fails.
      await Promise.all(batch.map((read) => this.answer(db, [read])));
      return;
    }
    const answers: R[][] = batch.map(() => []);
    for (const row of rows) answers[row.n - 1]?.push(row);
    batch.forEach((read, i) => read.resolve(answers[i]!));
  }
}

/** Rows of values as one array per column. */
function transpose(rows: readonly (readonly unknown[])[]): unknown[][] {
  const columns: unknown[][] = rows[0]!.map(() => []);
  for (const row of rows) row.forEach((value, i) => columns[i]!.push(value));
  return columns;
}
