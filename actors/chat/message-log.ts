/**
 * Chat's message log, built on the store's seam (runtime/store/store.ts: fencing, group commit, prepared
 * statements): messages with their recipients' flag rows, recipient lists and their expansion, the users' durable
 * event streams, and message id blocks.
 *
 * Guarantees (checked by test/actors/chat/message-log.test.ts against PGlite and Postgres):
 * - `appendMessage` and `appendUserEvent` group-commit: concurrent appends share one transaction; each resolves
 *   once committed, or is refused with FENCED when its fence is stale (the others of its batch commit). Appending
 *   the same `send_key` twice commits once and resolves both with the first id. A write-behind event
 *   (`appendUserEventBehind`) waits a few milliseconds for others of its shard, and their one `BehindWrite` settles
 *   once every one of them is committed (tried again after any failure but FENCED, which refuses them all).
 * - A message appended with an `attempt` commits only if that attempt was not abandoned first (`abandonAttempt`),
 *   and is refused with NOT_SENT otherwise; `abandonAttempt` answers the id stored under the send key, if any. Of an
 *   append and the abandonment of its attempt, exactly one wins, so a gateway that lost track of a send can still
 *   tell its client the truth: stored with this id, or not stored and never to be.
 * - A message's recipients (`user_messages`) are readable as soon as its append resolves. Past `listAbove`
 *   recipients they are committed as one list row and expanded into per-user rows soon after (the view
 *   `user_messages` shows either, exactly once); a writer of flag rows calls `expandRecipientLists` first.
 * - A message appended with `owesFanOut` commits with a row in `pending_fan_outs` (its fence's shard and epoch),
 *   only if the message itself was inserted; `fanOutDone` deletes that row a few milliseconds later.
 * - Message id blocks are disjoint and each block is above every block handed out before it.
 * What it leaves out: reads of messages (actors/chat/reads), and edits, which are ordinary fenced writes.
 */
import { sql, type Kysely } from "kysely";
import { trace } from "@opentelemetry/api";
import type { Fence } from "../../runtime/actor.ts";
import { ChorusError } from "../../runtime/errors.ts";
import type { Prepared } from "../../runtime/store/db.ts";
import { column, GroupCommit, staleAgainst, type CommitOutcome, type LeaseRow } from "../../runtime/store/group-commit.ts";
import type { Store, StoreComponent } from "../../runtime/store/store.ts";
import type { Database } from "../schema.ts";
import { DEFAULT_EVENT_WRITE_DELAY_MS, DEFAULT_RECIPIENT_LIST_ABOVE, DEFAULT_RECIPIENT_LIST_DELAY_MS, type ChatConfig } from "./config.ts";
import type { MessageTable } from "./schema.ts";
import { log } from "../../runtime/log.ts";
import { metrics } from "../../runtime/metrics.ts";

const tracer = trace.getTracer("chorus.store");

export type NewMessage = Omit<MessageTable, "id" | "version"> & { id: number };

/** A recipient of a new message and their initial flags (a `user_messages` row, Zulip's UserMessage). */
export interface MessageRecipient {
  user_id: number;
  flags: number;
}

/** One event of a user's durable event stream (what a restored event queue is rebuilt from). */
export interface UserEvent {
  user_id: number;
  seq: number;
  payload: unknown;
}

/** Ids in one block of the message id sequence: must match its increment (migration 2026-11-22T0400-initial). */
export const ID_BLOCK = 256;
/** After a failed expansion of recipient lists, the next try waits this long (the lists stay readable meanwhile). */
const LIST_RETRY_MS = 1_000;
/**
 * Recipients one background expansion step writes: on PGlite a step holds the process, about 8 µs a row, so a
 * 10,000-recipient list goes in ten steps of 8-10 ms with requests served between them, not in one 80 ms stall.
 */
const LIST_EXPANSION_STEP = 1_000;

/**
 * How long a send attempt's row is kept (see abandonAttempt): far past any ask timeout and lease take-over, after
 * which no entry of the attempt is left in the transport to commit late. Pruned every ATTEMPT_PRUNE_EVERY_MS, in
 * statements of ATTEMPT_PRUNE_STEP rows (the oldest rows come first in the table, so each step's scan is short).
 */
const ATTEMPT_KEPT_MS = 24 * 3_600_000;
const ATTEMPT_PRUNE_EVERY_MS = 10 * 60_000;
const ATTEMPT_PRUNE_STEP = 10_000;

/** How long a done fan-out's row waits for others to be deleted with it (see fanOutDone). */
const FAN_OUT_DELETE_DELAY_MS = 20;

/** A message waiting for the next group commit of messages. */
type PendingMessage = {
  message: NewMessage;
  recipients?: MessageRecipient[];
  attempt?: string;
  /** Its commit records the fan-out as owed (pending_fan_outs) until `fanOutDone`. */
  owesFanOut?: boolean;
  fence: Fence;
  resolve(id: number): void;
  reject(err: unknown): void;
};
/** An event of a user's durable event stream waiting for the next group commit of events. */
type PendingEvent = { event: UserEvent; fence: Fence; resolve(): void; reject(err: unknown): void };

/**
 * Events written behind their deliveries, gathered for one shard over one wait (`eventWriteDelayMs`), settled as
 * one: `written` resolves once every row is committed, or rejects with FENCED at the first row refused so (the shard
 * is no longer this process's: its next holder redelivers them all). A row that fails otherwise (the store is down)
 * is tried again, with a doubling wait, until it is written or fenced: whoever holds a transport entry on `written`
 * must not see it settle while a crash could still lose the row.
 *
 * Why one for many: a fan-out hands the log one row per recipient, and a promise, two closures and a retry loop per
 * row were most of what a delivery kept alive until its commit, young objects that every scavenge in between copied
 * (a 10,000-queue fan-out's scavenges took 21-39 ms each: docs/performance.md, 2026-12-01). A row is now one object.
 */
export interface BehindWrite {
  readonly written: Promise<void>;
  /** Settled: written, or refused as FENCED. */
  readonly done: boolean;
}

/**
 * Who knows, when a write-behind batch goes to the store, whether a row of it is still wanted (the user actor): a
 * row is there to rebuild the event's queues after a crash, and an event that every queue's client has
 * acknowledged by then has nothing left to rebuild. A long-polling client acknowledges each answer with its next
 * poll, a few milliseconds later, most often before the batch's wait is over.
 */
export interface EventRowKeeper {
  rowWanted(seq: number): boolean;
}

/** The first wait before a failed write-behind row is tried again; it doubles up to the second. */
const BEHIND_RETRY_MS = 50;
const BEHIND_RETRY_MAX_MS = 5_000;

class BehindBatch implements BehindWrite {
  readonly written: Promise<void>;
  done = false;
  readonly rows: BehindRow[] = [];
  private unwritten = 0;
  private retryMs = BEHIND_RETRY_MS;
  private retrying?: BehindRow[];
  private settle!: (err?: unknown) => void;

  constructor(
    readonly epoch: number,
    private readonly submit: (row: BehindRow) => void,
  ) {
    this.written = new Promise<void>((resolve, reject) => (this.settle = (err) => (err ? reject(err) : resolve())));
    // Only FENCED, which each holder hears through its own hold: never an unhandled rejection.
    this.written.catch(() => {});
  }

  /** Into the group commit, once nothing more joins it: the rows still wanted; settled at once if none is. */
  start(): void {
    const wanted = this.rows.filter((row) => row.keeper?.rowWanted(row.event.seq) ?? true);
    if (wanted.length < this.rows.length) metrics().userEventRowsSkipped.inc(this.rows.length - wanted.length);
    this.unwritten = wanted.length;
    if (!wanted.length) {
      this.done = true;
      this.settle();
      return;
    }
    for (const row of wanted) this.submit(row);
  }

  rowWritten(): void {
    if (--this.unwritten === 0 && !this.done) {
      this.done = true;
      this.settle();
    }
  }

  rowFailed(row: BehindRow, err: unknown): void {
    if (this.done) return;
    if (ChorusError.wrap(err).code === "FENCED") {
      this.done = true;
      this.settle(err);
      return;
    }
    if (this.retrying) return void this.retrying.push(row);
    this.retrying = [row];
    log.warn(`store: writing ${this.rows.length} user events behind their deliveries failed (${(err as Error)?.message}); retrying in ${this.retryMs} ms`);
    setTimeout(() => {
      const again = this.retrying ?? [];
      this.retrying = undefined;
      this.retryMs = Math.min(this.retryMs * 2, BEHIND_RETRY_MAX_MS);
      for (const r of again) this.submit(r);
    }, this.retryMs);
  }
}

/** A row of a BehindBatch, as the group commit holds it: its answers go to the batch (methods, not closures per row). */
class BehindRow implements PendingEvent {
  constructor(
    readonly event: UserEvent,
    readonly fence: Fence,
    private readonly batch: BehindBatch,
    readonly keeper: EventRowKeeper | undefined,
  ) {}
  resolve(): void {
    this.batch.rowWritten();
  }
  reject(err: unknown): void {
    this.batch.rowFailed(this, err);
  }
}

/**
 * One per process, over the process's store, to which it attaches itself: the store recovers it after migrating and
 * on a shard take-over (lists a crashed holder left), and closes it before the database.
 */
export class MessageLog implements StoreComponent {
  /**
   * Messages and user events commit in two independent streams of group commits (each statement is cheaper to plan
   * alone, and on Postgres an events commit does not hold up the next messages commit).
   */
  private readonly messages = new GroupCommit<PendingMessage>(
    "messages",
    (p) => 1 + (p.recipients?.length ?? 0),
    (batch) => this.commitMessages(batch),
  );
  private readonly events = new GroupCommit<PendingEvent>("events", () => 1, (batch) => commitEvents(this.store.prepared, batch));
  /** Write-behind batches still gathering rows, by shard, and the one timer that starts them all. */
  private readonly behind = new Map<number, BehindBatch>();
  private behindTimer?: NodeJS.Timeout;
  /** Messages whose fan-out is done, their rows in pending_fan_outs not deleted yet, and the timer that deletes them. */
  private readonly doneFanOuts: number[] = [];
  private fanOutTimer?: NodeJS.Timeout;

  /** Recipient lists this log committed may be unexpanded: an expansion is scheduled or running. */
  private listsWaiting = false;
  private listTimer?: NodeJS.Timeout;
  private expanding?: Promise<void>;
  private closed = false;
  private readonly attemptPruner: NodeJS.Timeout;

  /**
   * `eventWriteDelayMs`: how long a write-behind user event waits for company (see appendUserEvent): a fan-out's
   * thousands of events, or a busy second's hundreds, then share a few commits instead of one each.
   * `recipientListAbove`, `recipientListDelayMs`, `recipientListStep`: see DEFAULT_RECIPIENT_LIST_ABOVE,
   * expandListsLater and LIST_EXPANSION_STEP. The defaults are ./config.ts's (tests set the step).
   */
  constructor(
    private readonly store: Store<Database>,
    private readonly opts: Partial<ChatConfig> & { recipientListStep?: number } = {},
  ) {
    store.attach(this);
    this.attemptPruner = setInterval(() => {
      this.pruneAttempts().catch((err) => log.error({ err }, "store: pruning send attempts failed; trying again later"));
    }, ATTEMPT_PRUNE_EVERY_MS);
    this.attemptPruner.unref();
  }

  /** Drop send attempts' rows older than `keptMs`; answers how many. Every process does it: a row goes once. */
  async pruneAttempts(keptMs = ATTEMPT_KEPT_MS): Promise<number> {
    const before = new Date(Date.now() - keptMs);
    let pruned = 0;
    for (;;) {
      const { numDeletedRows } = await this.store.db
        .deleteFrom("send_attempts")
        .where("attempt", "in", (db) => db.selectFrom("send_attempts").select("attempt").where("at", "<", before).limit(ATTEMPT_PRUNE_STEP))
        .executeTakeFirst();
      pruned += Number(numDeletedRows);
      if (Number(numDeletedRows) < ATTEMPT_PRUNE_STEP || this.closed) return pruned;
    }
  }

  /** Lists left by a process that stopped before expanding them (run after migrating, and on a shard take-over). */
  async recover(): Promise<void> {
    await this.expandRecipientLists(this.store.db);
  }

  /** Commits every pending append and expands the lists this log committed; before the database closes. */
  async close(): Promise<void> {
    clearInterval(this.attemptPruner);
    this.startBehind();
    await Promise.all([this.messages.drain(), this.events.drain()]);
    clearTimeout(this.fanOutTimer);
    await this.deleteDoneFanOuts().catch(() => {}); // left rows only mean a message delivered again
    this.closed = true;
    clearTimeout(this.listTimer);
    await this.expanding;
    if (this.listsWaiting) {
      // Should this fail, the lists stay readable as they are and the next start expands them.
      await this.expandRecipientLists(this.store.db).catch((err) => log.error({ err }, "store: expanding recipient lists on close failed"));
    }
  }

  /**
   * Group-committed message insert; resolves with the stored id (the first one for a repeated send_key). The
   * recipients' rows commit in the same transaction, and only with a message actually inserted. `attempt`: the
   * request's own id (see abandonAttempt); refused with NOT_SENT when it was abandoned first.
   */
  appendMessage(message: NewMessage, fence: Fence, recipients?: MessageRecipient[], attempt?: string, owesFanOut = false): Promise<number> {
    return new Promise((resolve, reject) => {
      const committed = (id: number) => {
        metrics().messagesSent.inc();
        resolve(id);
      };
      this.messages.add({ message, recipients, attempt, owesFanOut, fence, resolve: committed, reject });
    });
  }

  /**
   * The fan-out of message `id`, recorded as owed by its commit (appendMessage's `owesFanOut`), is done: every
   * recipient's queue has it, with what a crash would need to rebuild it. Its row goes in a batch of deletes a few
   * milliseconds later; a delete that fails is tried again with the next batch. Until it goes, the shard's next
   * holder would deliver the message again, which queues it once (the user actors drop a repeated id).
   */
  fanOutDone(id: number): void {
    this.doneFanOuts.push(id);
    this.fanOutTimer ??= setTimeout(() => void this.deleteDoneFanOuts(), FAN_OUT_DELETE_DELAY_MS);
  }

  /**
   * Delete the rows of the fan-outs done so far now, not after the batch's delay: a conversation's shard handed over
   * with them left would have its next holder deliver those messages again, after their queues may have
   * acknowledged them (and forgotten them) already.
   */
  async fanOutsDoneNow(): Promise<void> {
    clearTimeout(this.fanOutTimer);
    await this.deleteDoneFanOuts();
  }

  private async deleteDoneFanOuts(): Promise<void> {
    this.fanOutTimer = undefined;
    const ids = this.doneFanOuts.splice(0);
    if (!ids.length) return;
    try {
      await this.store.prepared("delete_done_fan_outs", "delete from pending_fan_outs where message_id = any($1::bigint[])", [column(ids, (id) => id)]);
    } catch (err) {
      if (this.closed) return;
      log.warn({ err }, `store: deleting ${ids.length} done fan-outs' rows failed; trying again`);
      for (const id of ids) this.fanOutDone(id);
    }
  }

  /**
   * Expand the recipient lists of these messages (of every message, when omitted) into rows: first thing in a
   * write transaction that changes their `user_message_rows`, so that the rows to change exist; or on `db`, for
   * lists a crashed process left.
   */
  async expandRecipientLists(trx: Kysely<Database>, messageIds?: readonly number[]): Promise<void> {
    await expandLists(trx, messageIds ? column(messageIds, (id) => id) : null, null);
  }

  /**
   * The recipient lists this log committed are expanded a little later, together, in steps of their own
   * transactions: not right away, because on PGlite the expansion holds the process (and the database) for as long
   * as the flag rows would have held the send, and the send's deliveries come first. Every list still unexpanded
   * then goes, including any a crashed process left. A failure is retried: until then the lists are read as they are.
   */
  private expandListsLater(delayMs = this.opts.recipientListDelayMs ?? DEFAULT_RECIPIENT_LIST_DELAY_MS): void {
    this.listsWaiting = true;
    if (this.closed) return;
    this.listTimer ??= setTimeout(() => {
      this.listTimer = undefined;
      this.expanding = this.expandWaitingLists().finally(() => (this.expanding = undefined));
    }, delayMs);
  }

  private async expandWaitingLists(): Promise<void> {
    this.listsWaiting = false;
    const step = this.opts.recipientListStep ?? LIST_EXPANSION_STEP;
    try {
      await tracer.startActiveSpan("store.expand recipient lists", async (span) => {
        try {
          // Each step yields to the event loop before the next: what arrived meanwhile is served in between.
          while (!this.closed && (await expandLists(this.store.db, null, step)) > 0) await new Promise((r) => setImmediate(r));
        } finally {
          span.end();
        }
      });
      if (this.closed) this.listsWaiting = true; // close() finishes it
    } catch (err) {
      this.listsWaiting = true;
      if (this.closed) return;
      log.error({ err }, "store: expanding recipient lists failed; retrying");
      this.expandListsLater(LIST_RETRY_MS);
    }
  }

  /**
   * One batch of messages as one statement, so one round trip and one commit (a transaction of separate statements
   * took five round trips; with fsync each commit is most of a send's latency): APPEND_MESSAGES writes the messages
   * whose fence holds, skipping a send_key already stored (a redelivered send), and the recipients' flag rows of the
   * messages it inserted, as one list per message past `recipientListAbove` recipients. It answers the leases it read
   * and the messages it inserted; the ids of send_keys stored before are looked up after, in the rare batch that has
   * one.
   */
  private async commitMessages(batch: PendingMessage[]): Promise<CommitOutcome<PendingMessage>> {
    const listAbove = this.opts.recipientListAbove ?? DEFAULT_RECIPIENT_LIST_ABOVE;
    const isListed = (p: PendingMessage) => (p.recipients?.length ?? 0) > listAbove;
    const recipients = batch.filter((p) => !isListed(p)).flatMap((p) => (p.recipients ?? []).map((r) => ({ user_id: r.user_id, flags: r.flags, message_id: p.message.id })));
    // Each listed message's recipients as a slice [first, last] (1-based, as SQL's) of one array.
    const listed = batch.filter(isListed);
    const listedRecipients = listed.flatMap((p) => p.recipients!);
    const [first, last]: number[][] = [[], []];
    for (const p of listed) {
      first.push((last.at(-1) ?? 0) + 1);
      last.push(first.at(-1)! + p.recipients!.length - 1);
    }
    const m = (f: (p: PendingMessage) => string | number | null | undefined) => column(batch, f);
    const rows = await this.store.prepared<{ kind: "lease" | "inserted"; shard: number | null; owner: string | null; epoch: number | null; id: number | null; send_key: string | null }>(
      "append_messages",
      APPEND_MESSAGES,
      [
        m((p) => p.message.id), m((p) => p.message.realm_id), m((p) => p.message.sender_id),
        m((p) => p.message.recipient_type), m((p) => p.message.recipient_id), m((p) => p.message.stream_id ?? null),
        m((p) => p.message.topic), m((p) => p.message.content), m((p) => p.message.rendered_content),
        m((p) => p.message.date_sent), m((p) => p.message.sending_client), m((p) => p.message.send_key ?? null),
        m((p) => p.fence.shard), m((p) => p.fence.epoch), m((p) => p.fence.node),
        column(recipients, (r) => r.user_id), column(recipients, (r) => r.message_id), column(recipients, (r) => r.flags),
        column(listed, (p) => p.message.id), column(first, (n) => n), column(last, (n) => n),
        column(listedRecipients, (r) => r.user_id), column(listedRecipients, (r) => r.flags),
        m((p) => p.attempt), m((p) => (p.owesFanOut ? "t" : "f")),
      ],
    );
    const isStale = staleAgainst(rows.filter((r) => r.kind === "lease") as LeaseRow[]);
    // Every send_key's stored id: a repeated key (earlier, or twice in this batch) resolves to the one row.
    const ids = new Map<string, number>();
    for (const r of rows) if (r.kind === "inserted" && r.send_key) ids.set(r.send_key, Number(r.id));
    const earlier = batch.filter((p) => p.message.send_key && !ids.has(p.message.send_key) && !isStale(p.fence)).map((p) => p.message.send_key!);
    if (earlier.length) {
      // Committed: a conflicting insert waits for the other transaction to end before skipping its row.
      const stored = await this.store.db.selectFrom("messages").select(["id", "send_key"]).where("send_key", "in", earlier).execute();
      for (const r of stored) ids.set(r.send_key!, Number(r.id));
    }
    const listedIds = new Set(listed.map((p) => p.message.id));
    if (rows.some((r) => r.kind === "inserted" && listedIds.has(Number(r.id)))) this.expandListsLater();
    return {
      isStale,
      // An abandoned attempt inserted nothing, and no other attempt stored its key.
      refusalOf: (p) => (p.attempt && !ids.has(p.message.send_key!) ? notSent() : undefined),
      valueOf: (p) => (p.message.send_key && ids.get(p.message.send_key)) || p.message.id,
    };
  }

  /** Group-committed; a repeated (user_id, seq) is stored once. */
  appendUserEvent(event: UserEvent, fence: Fence): Promise<void> {
    return new Promise((resolve, reject) => this.events.add({ event, fence, resolve, reject }));
  }

  /**
   * An event written behind its delivery (the caller answers before it is committed): it waits a few milliseconds
   * for others of its shard, and the answer is the batch they share (BehindWrite). A repeated (user_id, seq) is
   * stored once. `keeper`, asked when the wait is over, may say the row is no longer wanted: it is then not written
   * (and counts as written for the batch).
   */
  appendUserEventBehind(event: UserEvent, fence: Fence, keeper?: EventRowKeeper): BehindWrite {
    let batch = this.behind.get(fence.shard);
    if (!batch || batch.epoch !== fence.epoch) {
      batch?.start();
      this.behind.set(fence.shard, (batch = new BehindBatch(fence.epoch, (row) => this.events.add(row))));
      this.behindTimer ??= setTimeout(() => this.startBehind(), this.opts.eventWriteDelayMs ?? DEFAULT_EVENT_WRITE_DELAY_MS);
    }
    batch.rows.push(new BehindRow(event, fence, batch, keeper));
    return batch;
  }

  /**
   * The shard's gathering write-behind batch goes to the group commit now, not when its wait is over: its shard is
   * being handed over, and the deliveries whose entries wait on it are settled only once it is (or, after the
   * hand-over, once it is refused as FENCED and they are delivered again: the whole wait later).
   */
  writeBehindNow(shard: number): void {
    const batch = this.behind.get(shard);
    if (!batch) return;
    this.behind.delete(shard);
    batch.start();
  }

  /** The gathering write-behind batches go to the group commit. */
  private startBehind(): void {
    clearTimeout(this.behindTimer);
    this.behindTimer = undefined;
    const batches = [...this.behind.values()];
    this.behind.clear();
    for (const batch of batches) batch.start();
  }

  /** The user's stored events after `afterSeq`, oldest first. */
  async userEventsAfter(userId: number, afterSeq: number): Promise<UserEvent[]> {
    const rows = await this.store.db
      .selectFrom("user_events")
      .select(["user_id", "seq", "payload"])
      .where("user_id", "=", userId)
      .where("seq", ">", afterSeq)
      .orderBy("seq")
      .execute();
    return rows.map((r) => ({ user_id: r.user_id, seq: Number(r.seq), payload: r.payload }));
  }

  /** Drop the user's events up to and including `throughSeq` (every queue has acknowledged them). */
  async pruneUserEvents(userId: number, throughSeq: number, fence: Fence): Promise<void> {
    await this.store.write(fence, (trx) => trx.deleteFrom("user_events").where("user_id", "=", userId).where("seq", "<=", throughSeq).execute());
  }

  /** A block of message ids [first, first + size), above every block handed out before. */
  async allocateMessageIds(): Promise<{ first: number; size: number }> {
    const { rows } = await sql<{ first: number }>`select nextval('message_id_blocks') as first`.execute(this.store.db);
    return { first: Number(rows[0]!.first), size: ID_BLOCK };
  }
}

/**
 * Settle a send whose outcome its gateway could not learn: abandon `attempt` unless its message committed first,
 * then answer the id stored under `sendKey` (this attempt's message, or another attempt's with the same key), or
 * undefined when none is and this attempt can no longer commit. Two statements: the insert waits for an append of
 * the attempt in progress to end, and the select after it sees what that append committed.
 */
export async function abandonAttempt(db: Kysely<Database>, sendKey: string, attempt: string): Promise<number | undefined> {
  await db.insertInto("send_attempts").values({ attempt, abandoned: true }).onConflict((c) => c.column("attempt").doNothing()).execute();
  const row = await db.selectFrom("messages").select("id").where("send_key", "=", sendKey).executeTakeFirst();
  return row ? Number(row.id) : undefined;
}

/** An attempt refused because its gateway abandoned it first (and told its client the message was not sent). */
export function notSent(): ChorusError {
  return new ChorusError("NOT_SENT", "The message was not sent: the server did not store it in time. Sending it again is safe.", 503);
}

/** Expand recipient lists (see the migration 2026-11-24T1000-recipient-lists); answers how many are left listed. */
async function expandLists(db: Kysely<Database>, messageIds: string | null, limit: number | null): Promise<number> {
  const { rows } = await sql<{ left: number }>`select chorus_expand_recipient_lists(${messageIds}::bigint[], ${limit}::integer) as left`.execute(db);
  return Number(rows[0]!.left);
}

/** One batch of user events as one statement, fenced like commitMessages; a repeated (user_id, seq) is kept once. */
async function commitEvents(prepared: Prepared, batch: PendingEvent[]): Promise<CommitOutcome<PendingEvent>> {
  const e = (f: (p: PendingEvent) => string | number | null | undefined) => column(batch, f);
  const rows = await prepared<LeaseRow>("append_user_events", APPEND_USER_EVENTS, [
    e((p) => p.event.user_id), e((p) => p.event.seq), JSON.stringify(batch.map((p) => p.event.payload)),
    e((p) => p.fence.shard), e((p) => p.fence.epoch), e((p) => p.fence.node),
  ]);
  return { isStale: staleAgainst(rows), valueOf: () => undefined };
}

/**
 * The group commits' statements, each sent as a named prepared statement: what the PL/pgSQL functions of the
 * migrations 2026-11-24T1000-recipient-lists (chorus_append_messages) and T0000-user-events-json
 * (chorus_append_user_events) do, as one plain statement (the messages' one also records send attempts, migration
 * 2026-11-27T2120-send-attempts). The function call cost PGlite about 50 µs more per
 * one-message commit (190 against 240 µs; `return query` copies the answer through a tuplestore, and PL/pgSQL plans
 * and runs its statement under its own executor). The functions stay in the schema, for a node of the previous
 * version during a rolling upgrade. These two constants are the one live definition of the append statements: the
 * migrations' function bodies are frozen snapshots of what shipped, never called by this code. Each reads its
 * fences' leases FOR KEY SHARE, as a store write does (fenceChecker, runtime/store/sql-store.ts, says why).
 */
const APPEND_MESSAGES = `
  with lease as (
    select l.shard, l.owner, l.epoch from shard_leases l where l.shard = any($13::integer[]) for key share
  ),
  message_rows as (
    select t.* from unnest($1::bigint[], $2::integer[], $3::integer[], $4::text[], $5::integer[], $6::integer[], $7::text[],
        $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::integer[], $14::bigint[], $15::text[], $24::text[],
        $25::boolean[])
      with ordinality as t(id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content,
        rendered_content, date_sent, sending_client, send_key, f_shard, f_epoch, f_node, attempt, owes_fan_out, ord)
    join lease l on l.shard = t.f_shard and l.epoch = t.f_epoch and l.owner = t.f_node
  ),
  -- An attempt's row first: one the gateway abandoned is there already, and its message is not inserted.
  attempts as (
    insert into send_attempts (attempt, abandoned)
    select r.attempt, false from message_rows r where r.attempt is not null
    on conflict (attempt) do nothing
    returning attempt
  ),
  new_messages as (
    insert into messages as m (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content,
        rendered_content, date_sent, sending_client, send_key)
    select r.id, r.realm_id, r.sender_id, r.recipient_type, r.recipient_id, r.stream_id, r.topic, r.content,
        r.rendered_content, r.date_sent, r.sending_client, r.send_key
    from message_rows r
    where r.attempt is null or r.attempt in (select a.attempt from attempts a)
    order by r.ord -- of two rows with one send_key, the first appended is the one kept
    on conflict (send_key) do nothing
    returning m.id, m.send_key
  ),
  new_flags as (
    insert into user_message_rows (user_id, message_id, flags)
    select r.user_id, r.message_id, r.flags from unnest($16::integer[], $17::bigint[], $18::integer[]) as r(user_id, message_id, flags)
    -- A message inserted just now has no flag rows yet: a plain insert, cheaper than ON CONFLICT's speculative one.
    where r.message_id in (select n.id from new_messages n)
  ),
  new_fan_outs as (
    insert into pending_fan_outs (message_id, shard, epoch)
    select n.id, r.f_shard, r.f_epoch from new_messages n join message_rows r on r.id = n.id where r.owes_fan_out
  ),
  new_lists as (
    insert into user_message_lists (message_id, user_ids, flags)
    select l.message_id, ($22::integer[])[l.first:l.last], ($23::integer[])[l.first:l.last]
    from unnest($19::bigint[], $20::integer[], $21::integer[]) as l(message_id, first, last)
    where l.message_id in (select n.id from new_messages n)
  )
  select 'lease'::text as kind, l.shard, l.owner, l.epoch, null::bigint as id, null::text as send_key from lease l
  union all select 'inserted', null, null, null, n.id, n.send_key from new_messages n`;
const APPEND_USER_EVENTS = `
  with lease as (
    select l.shard, l.owner, l.epoch from shard_leases l where l.shard = any($4::integer[]) for key share
  ),
  new_events as (
    insert into user_events (user_id, seq, payload)
    select t.user_id, t.seq, p.payload
    from unnest($1::integer[], $2::bigint[], $4::integer[], $5::bigint[], $6::text[])
      with ordinality as t(user_id, seq, f_shard, f_epoch, f_node, ord)
    join jsonb_array_elements($3::jsonb) with ordinality as p(payload, ord) on p.ord = t.ord
    join lease l on l.shard = t.f_shard and l.epoch = t.f_epoch and l.owner = t.f_node
    on conflict (user_id, seq) do nothing
  )
  select l.shard, l.owner, l.epoch from lease l`;

