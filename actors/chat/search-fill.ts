/**
 * Fills `messages.search_document` of the messages a store held before migration 2026-11-28T0900 added the column:
 * newest first (the ones searched most), SEARCH_FILL_STEP rows per transaction of its own, so that no writer waits
 * long on a row it locks and the work yields to requests between steps. Every process runs one after migrating;
 * one fills at a time (the state row is taken with SKIP LOCKED), the others look again later in case that one
 * stops. Until `message_search_fill.below` is null, a search matches the document parsed again through the
 * expression index, as before (reads/search.ts).
 */
import { sql, type Kysely } from "kysely";
import { log } from "../../runtime/log.ts";
import type { Store, StoreComponent } from "../../runtime/store/store.ts";
import type { Database } from "../schema.ts";

export const SEARCH_FILL_STEP = 1_000;
/** How long a process whose fill found the state row taken by another waits before looking again. */
const RETRY_MS = 30_000;

export type FillStep = "filled" | "done" | "busy";

/**
 * One step: the `step` messages below the state row's `below`, newest first, get their document (those not filled
 * meanwhile by an edit's trigger); `below` moves to the lowest of them, or to null when fewer were left. "busy" when
 * another transaction holds the state row (another process filling).
 */
export async function fillSearchDocuments(db: Kysely<Database>, step = SEARCH_FILL_STEP): Promise<FillStep> {
  const { rows } = await sql<{ state: FillStep }>`
    with fill as (
      select below from message_search_fill where id = 1 and below is not null for update skip locked
    ),
    batch as (
      -- The bound as a scalar: an index condition, where a join's filter walked every filled row again each step.
      select m.id from messages m where m.id < (select below from fill) order by m.id desc limit ${step}
    ),
    filled as (
      update messages m set search_document = to_tsvector('english'::regconfig, m.topic || ' ' || m.content)
      from batch where m.id = batch.id and m.search_document is null
    ),
    -- The words of the batch's documents stored already (migration 2026-11-28T1200); the update above adds its own
    -- through the words trigger.
    words as (
      insert into search_words (word)
      select distinct w.word from messages m join batch on m.id = batch.id, unnest(tsvector_to_array(m.search_document)) w(word)
      where m.search_document is not null and w.word !~ '^[0-9]+$'
      on conflict do nothing
    ),
    moved as (
      update message_search_fill f set below = case when (select count(*) from batch) < ${step} then null else (select min(id) from batch) end
      where f.id = 1 and exists (select 1 from fill)
      returning f.below
    )
    select case
      when exists (select 1 from moved) then case when (select below from moved) is null then 'done' else 'filled' end
      when exists (select 1 from message_search_fill where id = 1 and below is not null) then 'busy'
      else 'done' end as state`.execute(db);
  if (rows[0]!.state === "done") await dropParsedIndex(db);
  return rows[0]!.state;
}

/**
 * Once every document is stored (and its words), the expression index of 2026-11-28T0100 serves no search: dropped,
 * so that an insert computes its document once (the trigger) instead of twice. Its lock is brief but exclusive: given
 * up after a second behind a long reader, tried again at the next start.
 */
export async function dropParsedIndex(db: Kysely<Database>): Promise<void> {
  try {
    await db.transaction().execute(async (tx) => {
      const { rows } = await sql<{ below: string | null }>`select below from message_search_fill where id = 1`.execute(tx);
      if (rows[0]?.below !== null) return;
      await sql`set local lock_timeout = '1s'`.execute(tx);
      await sql`drop index if exists messages_search`.execute(tx);
    });
  } catch (err) {
    log.warn({ err }, "store: dropping the parsed search index failed; tried again at the next start");
  }
}

/** The background fill of one process (a store component: started after migrating, stopped before closing). */
export class SearchDocumentFill implements StoreComponent {
  private running?: Promise<void>;
  private timer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly store: Store<Database>,
    private readonly opts: { step?: number; pauseMs?: number } = {},
  ) {
    store.attach(this);
  }

  async recover(): Promise<void> {
    await dropParsedIndex(this.store.db);
    this.schedule(0);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Resolves when this process's fill stops: done, taken by another process, or closed. */
  whenIdle(): Promise<void> {
    return this.running ?? Promise.resolve();
  }

  private schedule(delayMs: number): void {
    if (this.closed || this.running || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.running = this.run().finally(() => (this.running = undefined));
    }, delayMs);
    this.timer.unref?.();
  }

  private async run(): Promise<void> {
    let state: FillStep = "filled";
    try {
      while (!this.closed && (state = await fillSearchDocuments(this.store.db, this.opts.step)) === "filled") {
        // Between steps, what arrived meanwhile is served.
        await new Promise((r) => setTimeout(r, this.opts.pauseMs ?? 0));
      }
    } catch (err) {
      if (this.closed) return;
      log.error({ err }, "store: filling search documents failed; retrying");
      state = "busy";
    }
    if (state === "busy" && !this.closed) setImmediate(() => this.schedule(RETRY_MS));
  }
}
