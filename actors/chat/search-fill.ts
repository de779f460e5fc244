/**
 * Fills what migrations added to the messages a store held before them: `messages.search_document` (2026-11-28T0900)
 * and then `messages.scoped_document` (2026-12-05T1600): newest first (the ones searched most), SEARCH_FILL_STEP
 * rows per transaction of its own, so that no writer waits long on a row it locks and the work yields to requests
 * between steps. Every process runs one after migrating; one fills at a time (the state row is taken with SKIP
 * LOCKED), the others look again later in case that one stops. Until `message_search_fill.below` is null, a search
 * matches the document parsed again through the expression index, as before; until `scoped_below` is null, it does
 * not ask the scoped index (reads/messages.ts). Then it parses again the messages of realms whose language changed
 * (search_restems, migration 2026-12-05T2100), one realm at a time.
 */
import { sql, type Kysely, type RawBuilder } from "kysely";
import { log } from "../../runtime/log.ts";
import type { Store, StoreComponent } from "../../runtime/store/store.ts";
import type { Database } from "../schema.ts";
import { ID_BLOCK } from "./message-log.ts";

export const SEARCH_FILL_STEP = 1_000;
/** How long a process whose fill found the state row taken by another waits before looking again. */
const RETRY_MS = 30_000;

export type FillStep = "filled" | "done" | "busy";

/** The two fills, in the order they run: the documents, then the scoped documents (made from the documents). */
export type SearchFill = "documents" | "scoped";

/** A message's document, parsed in its realm's language (migration 2026-12-05T2100). */
const PARSED = sql`to_tsvector(realm_search_config(m.realm_id), m.topic || ' ' || m.content)`;
/** Each fill's bound in message_search_fill, the column it fills, its value, and whether it also records the words. */
const FILLS: Record<SearchFill, { below: RawBuilder<unknown>; column: RawBuilder<unknown>; value: RawBuilder<unknown>; words: boolean }> = {
  documents: { below: sql.raw("below"), column: sql.raw("search_document"), value: PARSED, words: true },
  scoped: {
    below: sql.raw("scoped_below"),
    column: sql.raw("scoped_document"),
    value: sql`message_scoped_document(coalesce(m.search_document, ${PARSED}), m.stream_id, m.recipient_id)`,
    words: false,
  },
};

/**
 * One step of a fill: the `step` messages below the state row's bound, newest first, get what it fills (those not
 * filled meanwhile by a trigger: an edit's, a move's); the bound moves to the lowest of them, or to null when fewer
 * were left. "busy" when another transaction holds the state row (another process filling).
 */
export async function fillSearchDocuments(db: Kysely<Database>, step = SEARCH_FILL_STEP, which: SearchFill = "documents"): Promise<FillStep> {
  const { below, column, value, words } = FILLS[which];
  const { rows } = await sql<{ state: FillStep }>`
    with fill as (
      select ${below} as below from message_search_fill where id = 1 and ${below} is not null for update skip locked
    ),
    batch as (
      -- The bound as a scalar: an index condition, where a join's filter walked every filled row again each step.
      select m.id from messages m where m.id < (select below from fill) order by m.id desc limit ${step}
    ),
    filled as (
      update messages m set ${column} = ${value} from batch where m.id = batch.id and m.${column} is null
    ),
    ${
      words
        ? // The words of the batch's documents stored already (migration 2026-11-28T1200); the update above adds its
          // own through the words trigger.
          sql`words as (
      insert into search_words (word)
      select distinct w.word from messages m join batch on m.id = batch.id, unnest(tsvector_to_array(m.search_document)) w(word)
      where m.search_document is not null and w.word !~ '^[0-9]+$'
      on conflict do nothing
    ),`
        : sql``
    }
    moved as (
      update message_search_fill f set ${below} = case when (select count(*) from batch) < ${step} then null else (select min(id) from batch) end
      where f.id = 1 and exists (select 1 from fill)
      returning f.${below} as below
    )
    select case
      when exists (select 1 from moved) then case when (select below from moved) is null then 'done' else 'filled' end
      when exists (select 1 from message_search_fill where id = 1 and ${below} is not null) then 'busy'
      else 'done' end as state`.execute(db);
  if (rows[0]!.state === "done" && which === "documents") await dropParsedIndex(db);
  return rows[0]!.state;
}

/**
 * A realm's language changed from `before` to `after` (PATCH /realm): its configuration is the new language's, and
 * when the two differ its messages are to be parsed again in the new one (restemSearchDocuments), in the change's own
 * transaction. The bound is above every message id handed out so far (message_id_blocks' last block): a message
 * parsed in the old language may still commit after this, with any id of a block already taken. A message inserted
 * after this commit is parsed in the new language by the document's trigger.
 */
export async function restemRealm(trx: Kysely<Database>, realmId: number, before: string | undefined, after: string): Promise<void> {
  await sql`update realms set search_config = search_config(${after}) where id = ${realmId}`.execute(trx);
  await sql`
    insert into search_restems (realm_id, below)
    select ${realmId}, (select last_value from message_id_blocks) + ${ID_BLOCK}
    where search_config(${before ?? null}) is distinct from search_config(${after})
    on conflict (realm_id) do update set below = excluded.below`.execute(trx);
}

/**
 * One step of parsing again the messages of a realm whose language changed: the `step` newest below its bound get
 * their document and scoped document in the realm's configuration (the words trigger records new words), and the bound
 * moves to the lowest of them; the realm's row goes when fewer were left. "busy" when another transaction holds every
 * row left; "done" when none is left.
 */
export async function restemSearchDocuments(db: Kysely<Database>, step = SEARCH_FILL_STEP): Promise<FillStep> {
  const { rows } = await sql<{ state: FillStep }>`
    with job as (
      select realm_id, below from search_restems order by realm_id limit 1 for update skip locked
    ),
    batch as (
      select m.id from messages m where m.realm_id = (select realm_id from job) and m.id < (select below from job) order by m.id desc limit ${step}
    ),
    restemmed as (
      -- Parsed in the update itself, twice: an edit committed meanwhile is what the update reads (it reads a row
      -- changed since its snapshot again), where a document parsed beforehand would put the old text back.
      update messages m set search_document = ${PARSED}, scoped_document = message_scoped_document(${PARSED}, m.stream_id, m.recipient_id)
      from batch where m.id = batch.id
    ),
    moved as (
      update search_restems s set below = (select min(id) from batch) from job
      where s.realm_id = job.realm_id and (select count(*) from batch) = ${step}
      returning s.realm_id
    ),
    finished as (
      delete from search_restems s using job where s.realm_id = job.realm_id and (select count(*) from batch) < ${step}
      returning s.realm_id
    )
    select case
      when exists (select 1 from moved) or exists (select 1 from finished) then 'filled'
      when exists (select 1 from search_restems) then 'busy'
      else 'done' end as state`.execute(db);
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

/** Each store's fill in this process (tests run several stores in one process). */
const fills = new WeakMap<Store<Database>, SearchDocumentFill>();

/** The background fill of one process (a store component: started after migrating, stopped before closing). */
export class SearchDocumentFill implements StoreComponent {
  private running?: Promise<void>;
  /** Woken while running: run again once this run ends. */
  private again = false;
  private timer?: NodeJS.Timeout;
  private closed = false;

  constructor(
    private readonly store: Store<Database>,
    private readonly opts: { step?: number; pauseMs?: number } = {},
  ) {
    store.attach(this);
    fills.set(store, this);
  }

  /** Start this process's fill of `store` now, if it has one and it is not running (a realm's language changed). */
  static wake(store: Store<Database>): void {
    const fill = fills.get(store);
    if (!fill) return;
    // A run ending may have looked for work before this work was there: it looks again when it ends.
    if (fill.running) fill.again = true;
    else fill.schedule(0);
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
      this.running = this.run().finally(() => {
        this.running = undefined;
        if (this.again) {
          this.again = false;
          this.schedule(0);
        }
      });
    }, delayMs);
    this.timer.unref?.();
  }

  private async run(): Promise<void> {
    let state: FillStep = "done";
    try {
      for (const which of ["documents", "scoped"] as const) {
        while (!this.closed && (state = await fillSearchDocuments(this.store.db, this.opts.step, which)) === "filled") {
          // Between steps, what arrived meanwhile is served.
          await new Promise((r) => setTimeout(r, this.opts.pauseMs ?? 0));
        }
        // The scoped documents are made from the documents: not before those are done.
        if (state !== "done") break;
      }
      // Realms whose language changed: after the fills, which parse in the realm's language already.
      if (state === "done") {
        while (!this.closed && (state = await restemSearchDocuments(this.store.db, this.opts.step)) === "filled") {
          await new Promise((r) => setTimeout(r, this.opts.pauseMs ?? 0));
        }
      }
    } catch (err) {
      if (this.closed) return;
      log.error({ err }, "store: filling search documents failed; retrying");
      state = "busy";
    }
    if (state === "busy" && !this.closed) setImmediate(() => this.schedule(RETRY_MS));
  }
}
