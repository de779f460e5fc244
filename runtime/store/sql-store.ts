/** The Store over kysely: the same SQL for PGlite and Postgres. See store.ts for the guarantees. */
import { Migrator, sql, type Kysely, type Transaction } from "kysely";
import { trace } from "@opentelemetry/api";
import type { Fence } from "../actor.ts";
import { DEFAULT_EVENT_WRITE_DELAY_MS, DEFAULT_RECIPIENT_LIST_ABOVE, DEFAULT_RECIPIENT_LIST_DELAY_MS } from "../config.ts";
import { errors } from "../errors.ts";
import type { Database } from "./schema.ts";
import type { Engine, OpenDatabase, Prepared } from "./db.ts";
import { migrations } from "./migrations/index.ts";
import type { Lease, MessageRecipient, NewMessage, Store, UserEvent } from "./store.ts";

const tracer = trace.getTracer("chorus.store");
const ID_BLOCK = 256; // must match the sequence's increment in the initial migration
/**
 * Rows of one group commit at most (a message counts with its flag rows). Rows travel as column arrays, so no
 * parameter limit applies; this keeps one statement's arrays modest while a whole 10,000-queue fan-out still fits.
 */
const MAX_BATCH_ROWS = 20_000;
/** After a failed expansion of recipient lists, the next try waits this long (the lists stay readable meanwhile). */
const LIST_RETRY_MS = 1_000;
/**
 * Recipients one background expansion step writes: on PGlite a step holds the process, about 8 µs a row, so a
 * 10,000-recipient list goes in ten steps of 8-10 ms with requests served between them, not in one 80 ms stall.
 */
const LIST_EXPANSION_STEP = 1_000;

/** A message waiting for the next group commit of messages. */
type PendingMessage = { message: NewMessage; recipients?: MessageRecipient[]; fence: Fence; resolve(id: number): void; reject(err: unknown): void };
/** An event of a user's durable event stream waiting for the next group commit of events. */
type PendingEvent = { event: UserEvent; fence: Fence; resolve(): void; reject(err: unknown): void };

export class SqlStore implements Store {
  /**
   * Messages and user events commit in two independent streams of group commits (each statement is cheaper to plan
   * alone, and on Postgres an events commit does not hold up the next messages commit).
   */
  private readonly messages = new GroupCommit<PendingMessage>(
    "messages",
    (p) => 1 + (p.recipients?.length ?? 0),
    (batch) => this.commitMessages(batch),
  );
  private readonly events = new GroupCommit<PendingEvent>("events", () => 1, (batch) => commitEvents(this.prepared, batch));
  readonly db: Kysely<Database>;
  readonly engine: Engine;
  /** Runs the group commits' statements, prepared once per connection (see db.ts). */
  readonly prepared: Prepared;

  /** Recipient lists this store committed may be unexpanded: an expansion is scheduled or running. */
  private listsWaiting = false;
  private listTimer?: NodeJS.Timeout;
  private expanding?: Promise<void>;
  private closed = false;

  /**
   * `eventWriteDelayMs`: how long a write-behind user event waits for company (see appendUserEvent): a fan-out's
   * thousands of events, or a busy second's hundreds, then share a few commits instead of one each.
   * `recipientListAbove`, `recipientListDelayMs`, `recipientListStep`: see DEFAULT_RECIPIENT_LIST_ABOVE,
   * expandListsLater and LIST_EXPANSION_STEP.
   */
  constructor(
    database: OpenDatabase,
    private readonly opts: { eventWriteDelayMs?: number; recipientListAbove?: number; recipientListDelayMs?: number; recipientListStep?: number } = {},
  ) {
    ({ db: this.db, engine: this.engine, prepared: this.prepared } = database);
  }

  async migrate(): Promise<void> {
    const migrator = new Migrator({ db: this.db, provider: { getMigrations: async () => migrations } });
    const { error, results } = await migrator.migrateToLatest();
    if (error) {
      const failed = results?.find((r) => r.status === "Error");
      throw new Error(`migration ${failed?.migrationName ?? "?"} failed`, { cause: error });
    }
    // Lists left by a process that stopped before expanding them.
    await this.expandRecipientLists(this.db);
  }

  async write<T>(fence: Fence, fn: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    return tracer.startActiveSpan("store.commit", async (span) => {
      try {
        return await this.db.transaction().execute(async (trx) => {
          const isStale = await fenceChecker(trx, [fence]);
          if (isStale(fence)) throw errors.fenced(fence.shard);
          return fn(trx);
        });
      } finally {
        span.end();
      }
    });
  }

  appendMessage(message: NewMessage, fence: Fence, recipients?: MessageRecipient[]): Promise<number> {
    return new Promise((resolve, reject) => this.messages.add({ message, recipients, fence, resolve, reject }));
  }

  async expandRecipientLists(trx: Kysely<Database>, messageIds?: readonly number[]): Promise<void> {
    await expandLists(trx, messageIds ? column(messageIds, (id) => id) : null, null);
  }

  /**
   * The recipient lists this store committed are expanded a little later, together, in steps of their own
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
          while (!this.closed && (await expandLists(this.db, null, step)) > 0) await new Promise((r) => setImmediate(r));
        } finally {
          span.end();
        }
      });
      if (this.closed) this.listsWaiting = true; // close() finishes it
    } catch (err) {
      this.listsWaiting = true;
      if (this.closed) return;
      console.error("store: expanding recipient lists failed; retrying", err);
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
    const rows = await this.prepared<{ kind: "lease" | "inserted"; shard: number | null; owner: string | null; epoch: number | null; id: number | null; send_key: string | null }>(
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
      ],
    );
    const isStale = staleAgainst(rows.filter((r) => r.kind === "lease") as LeaseRow[]);
    // Every send_key's stored id: a repeated key (earlier, or twice in this batch) resolves to the one row.
    const ids = new Map<string, number>();
    for (const r of rows) if (r.kind === "inserted" && r.send_key) ids.set(r.send_key, Number(r.id));
    const earlier = batch.filter((p) => p.message.send_key && !ids.has(p.message.send_key) && !isStale(p.fence)).map((p) => p.message.send_key!);
    if (earlier.length) {
      // Committed: a conflicting insert waits for the other transaction to end before skipping its row.
      const stored = await this.db.selectFrom("messages").select(["id", "send_key"]).where("send_key", "in", earlier).execute();
      for (const r of stored) ids.set(r.send_key!, Number(r.id));
    }
    const listedIds = new Set(listed.map((p) => p.message.id));
    if (rows.some((r) => r.kind === "inserted" && listedIds.has(Number(r.id)))) this.expandListsLater();
    return {
      isStale,
      valueOf: (p) => (p.message.send_key && ids.get(p.message.send_key)) || p.message.id,
    };
  }

  appendUserEvent(event: UserEvent, fence: Fence, opts?: { behind?: boolean }): Promise<void> {
    return new Promise((resolve, reject) => this.events.add({ event, fence, resolve, reject }, opts?.behind ? (this.opts.eventWriteDelayMs ?? DEFAULT_EVENT_WRITE_DELAY_MS) : 0));
  }

  async userEventsAfter(userId: number, afterSeq: number): Promise<UserEvent[]> {
    const rows = await this.db
      .selectFrom("user_events")
      .select(["user_id", "seq", "payload"])
      .where("user_id", "=", userId)
      .where("seq", ">", afterSeq)
      .orderBy("seq")
      .execute();
    return rows.map((r) => ({ user_id: r.user_id, seq: Number(r.seq), payload: r.payload }));
  }

  async pruneUserEvents(userId: number, throughSeq: number, fence: Fence): Promise<void> {
    await this.write(fence, (trx) => trx.deleteFrom("user_events").where("user_id", "=", userId).where("seq", "<=", throughSeq).execute());
  }

  async allocateMessageIds(): Promise<{ first: number; size: number }> {
    const { rows } = await sql<{ first: number }>`select nextval('message_id_blocks') as first`.execute(this.db);
    return { first: Number(rows[0]!.first), size: ID_BLOCK };
  }

  async loadSnapshot<S>(kind: string, key: string): Promise<{ version: number; state: S } | undefined> {
    const row = await this.db
      .selectFrom("actor_snapshots")
      .select(["version", "state"])
      .where("kind", "=", kind)
      .where("key", "=", key)
      .executeTakeFirst();
    return row ? { version: row.version, state: row.state as S } : undefined;
  }

  async saveSnapshot<S>(kind: string, key: string, expectedVersion: number, state: S, fence: Fence): Promise<number> {
    const next = expectedVersion + 1;
    const json = JSON.stringify(state);
    const now = Math.floor(Date.now() / 1000);
    return this.write(fence, async (trx) => {
      const result =
        expectedVersion === 0
          ? await trx
              .insertInto("actor_snapshots")
              .values({ kind, key, version: next, state: json, updated_at: now })
              .onConflict((c) => c.columns(["kind", "key"]).doNothing())
              .executeTakeFirst()
          : await trx
              .updateTable("actor_snapshots")
              .set({ version: next, state: json, updated_at: now })
              .where("kind", "=", kind)
              .where("key", "=", key)
              .where("version", "=", expectedVersion)
              .executeTakeFirst();
      const changed = "numInsertedOrUpdatedRows" in result ? result.numInsertedOrUpdatedRows : result.numUpdatedRows;
      if (!changed) throw errors.conflict(`${kind}:${key}`);
      return next;
    });
  }

  async ensureShards(count: number): Promise<void> {
    await sql`insert into shard_leases (shard, owner, epoch, expires_at)
              select s, null, 0, now() from generate_series(0, ${count - 1}::int) as s
              on conflict (shard) do nothing`.execute(this.db);
  }

  async acquireLease(shard: number, node: string, ttlSeconds: number, force = false): Promise<Lease | undefined> {
    // The row as it was, read under the update's lock: whether its previous holder had released it.
    const { rows } = await sql<{ shard: number; epoch: number; previous: string | null }>`
      with before as (select shard, owner from shard_leases where shard = ${shard} for update)
      update shard_leases l set owner = ${node}, epoch = l.epoch + 1, expires_at = now() + make_interval(secs => ${ttlSeconds})
      from before
      where l.shard = before.shard and (${force}::boolean or l.owner is null or l.expires_at < now())
      returning l.shard, l.epoch, before.owner as previous`.execute(this.db);
    const row = rows[0];
    return row ? { shard: row.shard, epoch: Number(row.epoch), reclaimed: row.previous !== null } : undefined;
  }

  async renewLease(lease: Lease, node: string, ttlSeconds: number): Promise<boolean> {
    const result = await this.db
      .updateTable("shard_leases")
      .set({ expires_at: sql`now() + make_interval(secs => ${ttlSeconds})` })
      .where("shard", "=", lease.shard)
      .where("owner", "=", node)
      .where("epoch", "=", lease.epoch)
      .executeTakeFirst();
    return result.numUpdatedRows > 0n;
  }

  async releaseLease(lease: Lease, node: string): Promise<void> {
    await this.db
      .updateTable("shard_leases")
      .set({ owner: null, expires_at: sql`now()` })
      .where("shard", "=", lease.shard)
      .where("owner", "=", node)
      .where("epoch", "=", lease.epoch)
      .execute();
  }

  async heartbeat(node: string, workerIndex: number, ttlSeconds: number): Promise<Set<number>> {
    await this.db
      .insertInto("cluster_nodes")
      .values({ node_id: node, worker_index: workerIndex, seen_at: sql`now()` as any })
      .onConflict((c) => c.column("node_id").doUpdateSet({ seen_at: sql`now()` as any, worker_index: workerIndex }))
      .execute();
    await this.db
      .deleteFrom("cluster_nodes")
      .where("seen_at", "<", sql<Date>`now() - make_interval(secs => ${ttlSeconds * 6})`)
      .execute();
    const alive = await this.db
      .selectFrom("cluster_nodes")
      .select("worker_index")
      .where("seen_at", ">", sql<Date>`now() - make_interval(secs => ${ttlSeconds})`)
      .execute();
    return new Set(alive.map((r) => r.worker_index));
  }

  async leave(node: string): Promise<void> {
    await this.db.deleteFrom("cluster_nodes").where("node_id", "=", node).execute();
  }

  async leasesHeldBy(node: string): Promise<Lease[]> {
    const rows = await this.db.selectFrom("shard_leases").select(["shard", "epoch"]).where("owner", "=", node).execute();
    return rows.map((r) => ({ shard: r.shard, epoch: Number(r.epoch) }));
  }

  async close(): Promise<void> {
    await Promise.all([this.messages.drain(), this.events.drain()]);
    this.closed = true;
    clearTimeout(this.listTimer);
    await this.expanding;
    if (this.listsWaiting) {
      // Should this fail, the lists stay readable as they are and the next start expands them.
      await this.expandRecipientLists(this.db).catch((err) => console.error("store: expanding recipient lists on close failed", err));
    }
    await this.db.destroy();
  }
}

/**
 * One stream of group commits: whatever accumulated while the previous commit ran goes into the next one. Under load
 * a batch grows to what arrives during one commit; idle, an append commits alone with no added delay. An append may
 * instead ask to wait up to `delayMs` for company (a write-behind), unless an earlier commit takes it along.
 */
/** What a commit tells its appends: which fences the store refused (FENCED), and each other append's result. */
interface CommitOutcome<P> {
  isStale(fence: Fence): boolean;
  valueOf(p: P): unknown;
}

class GroupCommit<P extends { fence: Fence; resolve(value: never): void; reject(err: unknown): void }> {
  private pending: P[] = [];
  /** A commit is running or about to. */
  private running = false;
  /** Some pending append may not wait any longer. */
  private due = false;
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly name: string,
    private readonly rowsOf: (p: P) => number,
    private readonly commit: (batch: P[]) => Promise<CommitOutcome<P>>,
  ) {}

  add(p: P, delayMs = 0): void {
    this.pending.push(p);
    if (delayMs <= 0) this.start();
    else
      this.timer ??= setTimeout(() => {
        this.timer = undefined;
        this.start();
      }, delayMs);
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
    this.due = true;
    if (this.running) return;
    this.running = true;
    setImmediate(() => void this.run());
  }

  private async run(): Promise<void> {
    try {
      while (this.due && this.pending.length) {
        const batch = takeBatch(this.pending, this.rowsOf);
        if (!this.pending.length) this.due = false;
        await tracer.startActiveSpan(`store.commit ${this.name}`, async (span) => {
          span.setAttribute("chorus.batch_size", batch.length);
          try {
            const outcome = await this.commit(batch);
            for (const p of batch) {
              if (outcome.isStale(p.fence)) p.reject(errors.fenced(p.fence.shard));
              else (p.resolve as (value: unknown) => void)(outcome.valueOf(p));
            }
          } catch (err) {
            for (const p of batch) p.reject(err);
          } finally {
            span.end();
          }
        });
      }
      this.due = false;
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
function column<T>(rows: readonly T[], f: (row: T) => string | number | null | undefined): string {
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
 * (chorus_append_user_events) do, as one plain statement. The function call cost PGlite about 50 µs more per
 * one-message commit (190 against 240 µs; `return query` copies the answer through a tuplestore, and PL/pgSQL plans
 * and runs its statement under its own executor). The functions stay in the schema, for a node of the previous
 * version during a rolling upgrade.
 */
const APPEND_MESSAGES = `
  with lease as (
    select l.shard, l.owner, l.epoch from shard_leases l where l.shard = any($13::integer[]) for share
  ),
  message_rows as (
    select t.* from unnest($1::bigint[], $2::integer[], $3::integer[], $4::text[], $5::integer[], $6::integer[], $7::text[],
        $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::integer[], $14::bigint[], $15::text[])
      with ordinality as t(id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content,
        rendered_content, date_sent, sending_client, send_key, f_shard, f_epoch, f_node, ord)
    join lease l on l.shard = t.f_shard and l.epoch = t.f_epoch and l.owner = t.f_node
  ),
  new_messages as (
    insert into messages as m (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content,
        rendered_content, date_sent, sending_client, send_key)
    select r.id, r.realm_id, r.sender_id, r.recipient_type, r.recipient_id, r.stream_id, r.topic, r.content,
        r.rendered_content, r.date_sent, r.sending_client, r.send_key
    from message_rows r
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
    select l.shard, l.owner, l.epoch from shard_leases l where l.shard = any($4::integer[]) for share
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

/**
 * Reads the leases of the fences' shards and answers whether a fence is stale (its epoch or owner is no longer
 * the shard's). Locks those lease rows for the rest of the transaction, so a takeover (which bumps the epoch)
 * waits until this write has committed.
 */
async function fenceChecker(trx: Transaction<Database>, fences: Fence[]): Promise<(fence: Fence) => boolean> {
  const shards = [...new Set(fences.map((f) => f.shard))];
  const rows = await trx
    .selectFrom("shard_leases")
    .select(["shard", "owner", "epoch"])
    .where("shard", "in", shards)
    .forShare()
    .execute();
  return staleAgainst(rows);
}

interface LeaseRow {
  shard: number | null;
  owner: string | null;
  epoch: number | null;
}

/** A fence is stale unless its shard's lease, as read under the commit's lock, is still its node's at its epoch. */
function staleAgainst(leases: LeaseRow[]): (fence: Fence) => boolean {
  const current = new Map(leases.map((r) => [r.shard, r]));
  return (fence) => {
    const row = current.get(fence.shard);
    return !row || row.owner !== fence.node || Number(row.epoch) !== fence.epoch;
  };
}
