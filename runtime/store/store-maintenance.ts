/**
 * Autovacuum's work where nobody does it, and what autovacuum leaves undone.
 *
 * On PGlite (`autovacuum: true`): PGlite is a single-user Postgres backend: it has no autovacuum launcher, so
 * without this nothing would ever vacuum or analyze the store. Dead rows and their index entries (flags changed,
 * unread rows deleted, messages edited) would stay forever. The planner would have no column statistics. No page
 * would be marked all-visible. And the oldest unfrozen transaction id would keep ageing until Postgres refuses
 * writes to avoid wraparound (about 2 billion transactions: at 100 group commits a second, some 240 days).
 *
 * On both engines: a table never analyzed and still empty is analyzed, once. The planner takes a table never
 * vacuumed nor analyzed (`pg_class.reltuples` -1) to hold 10 pages of rows, and autovacuum analyzes a table only
 * after rows change in it, so a table the store leaves empty (chat's recipient lists, when every flag is a row) kept
 * that guess forever: every page reading it through a view was planned around thousands of rows that are not
 * there (a channel's first_unread anchor went to two parallel workers: 8.3 ms against 2.9 at 10,000,000 messages,
 * docs/reads.md, 2026-12-03). Not at migrate: then every table of a new store is empty, and plans made while the
 * tables fill took them for empty (the embedded fan-out's CPU per delivery went from 51 to 84 µs). A pass comes a
 * minute after the store started, when what the store uses has rows.
 *
 * Every `intervalMs` a pass asks the statistics Postgres keeps anyway (pg_stat_user_tables) which tables are due, and
 * runs VACUUM and/or ANALYZE on each, one table per statement. PGlite is one session, so requests wait for the
 * statement running, then go on between tables. A VACUUM costs what changed since the last one (the visibility map
 * skips the rest): 6 ms for a 300,000-message table vacuumed once already, against 202 ms the first time. An ANALYZE
 * reads a sample of at most 30,000 rows (321 ms for those messages): the figures of docs/operations.md, 2026-12-03.
 */
import { sql, type Kysely } from "kysely";
import { log } from "../log.ts";
import type { Store, StoreComponent } from "./store.ts";

/** What one pass did to one table. */
export interface TableMaintenance {
  table: string;
  vacuum: boolean;
  analyze: boolean;
  ms: number;
}

export interface StoreMaintenanceOptions {
  /** Whether to do autovacuum's work too (PGlite, which has no autovacuum), or only analyze the empty tables never analyzed (Postgres). */
  autovacuum: boolean;
  /** How often to look (default every minute). */
  intervalMs?: number;
  /**
   * Past this age of a table's oldest unfrozen transaction id, vacuum it whatever else changed. Postgres vacuums
   * such a table aggressively past vacuum_freeze_table_age (150,000,000 by default), freezing every old row.
   */
  freezeAge?: number;
}

/** A pass that took longer than this is logged at info: requests waited that long. */
const SLOW_MS = 100;

export class StoreMaintenance implements StoreComponent {
  private timer: NodeJS.Timeout | undefined;
  /** The pass under way, if any: the next tick skips while one runs. */
  private running: Promise<unknown> | undefined;
  private closed = false;
  private readonly intervalMs: number;
  private readonly freezeAge: number;
  private readonly autovacuum: boolean;

  constructor(
    private readonly store: Store,
    options: StoreMaintenanceOptions,
  ) {
    this.autovacuum = options.autovacuum;
    this.intervalMs = options.intervalMs ?? 60_000;
    this.freezeAge = options.freezeAge ?? 150_000_000;
    store.attach(this);
  }

  /** Starts the passes (the store recovers its components after migrating): idempotent. */
  async recover(): Promise<void> {
    if (this.closed || this.timer) return;
    this.timer = setInterval(() => {
      this.running ??= this.runOnce()
        .catch((err) => log.warn(`store maintenance: ${(err as Error).message}`))
        .finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** One pass: every table due, vacuumed and/or analyzed. Answers what was done. */
  async runOnce(): Promise<TableMaintenance[]> {
    const db = this.store.db as Kysely<any>;
    const done: TableMaintenance[] = [];
    for (const due of await dueTables(db, this.autovacuum, this.freezeAge)) {
      if (this.closed) break;
      const table = sql.id(due.schema, due.table);
      const statement = due.vacuum && due.analyze ? sql`vacuum (analyze) ${table}` : due.vacuum ? sql`vacuum ${table}` : sql`analyze ${table}`;
      const t0 = performance.now();
      await statement.execute(db);
      const ms = Math.round(performance.now() - t0);
      done.push({ table: due.table, vacuum: due.vacuum, analyze: due.analyze, ms });
      const line = `store maintenance: ${[due.vacuum && "vacuum", due.analyze && "analyze"].filter(Boolean).join(" and ")} of ${due.table} took ${ms} ms`;
      if (ms > SLOW_MS) log.info(line);
      else log.debug(line);
    }
    return done;
  }
}

/**
 * The tables due. With `autovacuum`, those autovacuum would process now with its defaults: vacuum past 50 + 20% of
 * the rows dead, or 1,000 + 20% inserted since the last vacuum, or an oldest transaction id older than `freezeAge`;
 * analyze past 50 + 10% of the rows changed since the last analyze (a table never vacuumed nor analyzed counts as
 * empty: reltuples -1). On every engine, a table never analyzed and empty, as its size says at once (the row counts
 * of pg_stat_user_tables come when a backend reports them, up to seconds later): analyzed.
 */
async function dueTables(db: Kysely<any>, autovacuum: boolean, freezeAge: number) {
  const { rows } = await sql<{ schema: string; table: string; vacuum: boolean; analyze: boolean }>`
    select s.schemaname as schema, s.relname as table,
      ${autovacuum} and (s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0)
        or s.n_ins_since_vacuum > 1000 + 0.2 * greatest(c.reltuples, 0)
        or age(c.relfrozenxid) > ${freezeAge}) as vacuum,
      (${autovacuum} and s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0))
        or (c.reltuples < 0 and pg_relation_size(c.oid) = 0) as analyze
    from pg_stat_user_tables s join pg_class c on c.oid = s.relid
    order by s.relname`.execute(db);
  return rows.filter((r) => r.vacuum || r.analyze);
}
