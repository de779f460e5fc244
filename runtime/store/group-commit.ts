/**
 * Group commit, the store's batching for hot appends: concurrent appends of one kind share one transaction (one
 * statement, one round trip, one commit) and each resolves once committed, or is refused with FENCED when the lease
 * its fence names, read under the commit's lock, is no longer its own. A domain builds its append streams on this
 * (chat's message log: actors/chat/message-log.ts) with its own statement, sent through the store's `prepared`.
 */
import { trace } from "@opentelemetry/api";
import type { Fence } from "../actor.ts";
import { errors } from "../errors.ts";
import { metrics, secondsSince } from "../metrics.ts";

const tracer = trace.getTracer("chorus.store");

/**
 * Rows of one group commit at most (a message counts with its flag rows). Rows travel as column arrays, so no
 * parameter limit applies; this keeps one statement's arrays modest while a whole 10,000-queue fan-out still fits.
 */
const MAX_BATCH_ROWS = 20_000;

/**
 * What a commit tells its appends: which fences the store refused (FENCED), which appends the domain's statement
 * refused (and why), and each other append's result.
 */
export interface CommitOutcome<P> {
  isStale(fence: Fence): boolean;
  refusalOf?(p: P): unknown;
  valueOf(p: P): unknown;
}

/**
 * One stream of group commits: whatever accumulated while the previous commit ran goes into the next one. Under load
 * a batch grows to what arrives during one commit; idle, an append commits alone with no added delay. (A write-behind
 * that waits for company gathers it before adding: the message log's BehindBatch.)
 */
export class GroupCommit<P extends { fence: Fence; resolve(value: never): void; reject(err: unknown): void }> {
  private pending: P[] = [];
  /** A commit is running or about to. */
  private running = false;

  constructor(
    private readonly name: string,
    private readonly rowsOf: (p: P) => number,
    private readonly commit: (batch: P[]) => Promise<CommitOutcome<P>>,
  ) {}

  add(p: P): void {
    this.pending.push(p);
    this.start();
  }

  /** Commit everything pending now; resolves once nothing is pending or committing. */
  async drain(): Promise<void> {
    if (this.pending.length) this.start();
    while (this.running || this.pending.length) await new Promise((r) => setTimeout(r, 5));
  }

  /**
   * The next group commit starts on the next turn of the event loop, not now: a transaction on PGlite is a chain of
   * promise callbacks that would otherwise run to its end before the requests already waiting on the sockets are
   * read, so every commit would hold one append.
   */
  private start(): void {
    if (this.running) return;
    this.running = true;
    setImmediate(() => void this.run());
  }

  private async run(): Promise<void> {
    try {
      while (this.pending.length) {
        const batch = takeBatch(this.pending, this.rowsOf);
        await tracer.startActiveSpan(`store.commit ${this.name}`, async (span) => {
          span.setAttribute("chorus.batch_size", batch.length);
          const started = performance.now();
          try {
            const outcome = await this.commit(batch);
            for (const p of batch) {
              const refusal = outcome.isStale(p.fence) ? errors.fenced(p.fence.shard) : outcome.refusalOf?.(p);
              if (refusal) p.reject(refusal);
              else (p.resolve as (value: unknown) => void)(outcome.valueOf(p));
            }
          } catch (err) {
            for (const p of batch) p.reject(err);
          } finally {
            span.end();
            const count = metrics();
            count.commitBatch(this.name).observe(batch.length);
            count.commitSeconds(this.name).observe(secondsSince(started));
          }
        });
      }
    } finally {
      this.running = false;
    }
  }
}

/** The oldest pending rows up to MAX_BATCH_ROWS, and always at least one; taken out of `pending`. */
function takeBatch<P>(pending: P[], rowsOf: (p: P) => number): P[] {
  let rows = 0;
  let n = 0;
  while (n < pending.length) {
    rows += rowsOf(pending[n]!);
    if (n > 0 && rows > MAX_BATCH_ROWS) break;
    n++;
  }
  return pending.splice(0, n);
}

/**
 * Rows travel as column arrays (unnest): no parameter limit applies. Each column goes as a Postgres array literal
 * built here rather than by the driver: pg quotes and escapes every element of an array parameter with two regular
 * expressions (a 10,000-recipient fan-out spent 7% of a worker's CPU there), where a number needs no quoting and a
 * string repeated down the column (a batch's fence node) is quoted once.
 */
export function column<T>(rows: readonly T[], f: (row: T) => string | number | null | undefined): string {
  const parts = new Array<string>(rows.length);
  let raw: string | undefined;
  let quoted = "";
  for (let i = 0; i < rows.length; i++) {
    const v = f(rows[i]!);
    if (v === null || v === undefined) parts[i] = "NULL";
    else if (typeof v === "number") parts[i] = String(v);
    else {
      if (v !== raw) quoted = `"${(raw = v).replace(/[\\"]/g, "\\$&")}"`;
      parts[i] = quoted;
    }
  }
  return `{${parts.join(",")}}`;
}

/** A shard's lease as a commit read it (a group commit's statement answers the leases of its fences' shards). */
export interface LeaseRow {
  shard: number | null;
  owner: string | null;
  epoch: number | null;
}

/** A fence is stale unless its shard's lease, as read under the commit's lock, is still its node's at its epoch. */
export function staleAgainst(leases: LeaseRow[]): (fence: Fence) => boolean {
  const current = new Map(leases.map((r) => [r.shard, r]));
  return (fence) => {
    const row = current.get(fence.shard);
    return !row || row.owner !== fence.node || Number(row.epoch) !== fence.epoch;
  };
}
