/**
 * user:<id>: the user's event queues (Zulip's client queues).
 *
 * Every event for a user with queues goes into the matching queues at once and into one durable, per-user event
 * stream (sequence numbers are the event ids). The queues' definitions are a versioned snapshot. When the actor is
 * activated elsewhere (its worker died, or its shard moved), the queues are rebuilt from the snapshot and the
 * stream: no event is skipped. A queue that is not in the snapshot answers BAD_EVENT_QUEUE_ID.
 *
 * How an event reaches the stream depends on where it came from:
 * - delivered by another actor (deliverMessage, deliverEvent): the delivery is answered as soon as the event is in
 *   its queues, and the stream row is written behind. The transport entry that brought it is acknowledged only
 *   once the row is committed, so if this worker dies first, the entry reaches the shard's next holder again and
 *   the rebuilt queue gets the event from it (Redis Streams). Where no one can deliver it again (the memory
 *   transport after a crash, or Redis after losing its data), the actor drops its queues (on activation, or at
 *   once when the loss is noticed while it runs): their clients get BAD_EVENT_QUEUE_ID and register again, never
 *   a silent gap.
 * - caused by this actor's own operations (settings, drafts, views): the operation is answered only once the row is
 *   committed, since a repeated request would not cause the event again.
 * - on the memory transport (one process), delivered events are not written at all while the actor runs: a crash
 *   drops the queues anyway (above), so the rows would only serve a graceful restart, and the actor writes its
 *   queues' unacknowledged events when it deactivates instead. This saves the embedded engine a commit per burst of
 *   events.
 * Sequence numbers are reserved in blocks in the snapshot, so a rebuilt queue never hands out an id that an event
 * lost in a crash already had (a client that acknowledged it would skip the new one).
 *
 * A queue keeps its events until the client acknowledges them with `last_event_id`; one poll at a time waits on
 * it (a newer poll finishes the older one); a poll that waited the heartbeat interval gets a heartbeat event; a
 * queue nobody polled for the idle timeout is dropped.
 */
import { randomUUID } from "node:crypto";
import { sql } from "kysely";
import { DEACTIVATION_WAIT_MS, PARKED, type Actor, type ActorContext, type Deferred } from "../../../runtime/actor.ts";
import { settledWithin } from "../../../runtime/settled.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import { chatErrors } from "../errors.ts";
import type { BehindWrite, EventRowKeeper, UserEvent } from "../message-log.ts";
import { formatSharedMessage, type MessageRecord } from "../rendering/message-format.ts";
import { matchesNarrow } from "../reads/narrow.ts";
import { messageRecords } from "../reads/messages.ts";
import { dispatch, type Handlers, type MessageOf, type Op } from "../../../runtime/protocol.ts";
import { Channel } from "../conversations/channel.protocol.ts";
import { User, type UserProtocol, type CapabilityFilter, type AddPushToken, type AddView, type CreateSnippet, type DeliverMessage, type DraftFields, type EditSnippet, type Polled, type Register, type Registered, type RemovePushToken, type UpdateSettings, type UpdateView, type ChangeAlertWords, type UpdateStatus, type MuteUser } from "./user.protocol.ts";
import { checkDraft, checkNewView, checkViewUpdate, draftObject, ownDraft, mutedUsersOf, usersMutingCache } from "./user-data.ts";
import { ownSnippet, snippetObject, snippetText } from "./saved-snippets.ts";
import { alertWordsOf, newAlertWords, realmAlertWords } from "./alert-words.ts";
import type { ActorDeps } from "../../deps.ts";
import { USER_SETTINGS, USER_SETTINGS_DEFAULTS, type UserSettings } from "./settings.ts";
import { accessibleUsers, apiEmail, avatarUpdate, deliveryEmailVisibleTo } from "../organization/accounts.ts";
import { log } from "../../../runtime/log.ts";
import { gauges, metrics } from "../../../runtime/metrics.ts";
import type { ActorSystem } from "../../../runtime/system.ts";

/** An event as a queue holds it: queue-independent (each queue renders it with its own options). */
type StoredEvent =
  /** `observer`: the user is not a recipient; only queues following all public channels take it. */
  | { kind: "message"; message: MessageRecord; flags: string[]; queueId?: string; localId?: string; observer?: boolean }
  /**
   * `queueId`: for that queue only (a heartbeat). `bulkDeletion`: only for queues whose client has (true) or lacks
   * (false) the bulk_message_deletion capability. `capability`: only for queues whose client declared (or did not
   * declare) that client capability.
   */
  | { kind: "event"; event: Record<string, unknown>; queueId?: string; bulkDeletion?: boolean; capability?: CapabilityFilter };

/**
 * An event as the durable stream keeps it. A message event names its message instead of copying it: the message
 * row is committed before any delivery, so a fan-out to thousands of queues writes thousands of small rows, not
 * thousands of copies. Rebuilding a queue reads the messages back (as they are then: an edit or a move shows, and
 * its own update_message event follows; a deleted message's event is gone, its delete_message event stays).
 * Rows written before this form have the whole `message` and are read as they are.
 */
type PersistedEvent =
  | { kind: "message"; messageId: number; flags: string[]; queueId?: string; localId?: string; observer?: boolean }
  | { kind: "message"; message: MessageRecord; flags: string[]; queueId?: string; localId?: string; observer?: boolean }
  | { kind: "event"; event: Record<string, unknown>; queueId?: string; bulkDeletion?: boolean; capability?: CapabilityFilter };

/**
 * The queue event of a message delivery for one recipient. Recipients with the delivery's default flags share one
 * object (a fan-out to thousands of queues keeps one, not thousands): queue events are never mutated, and a
 * delivery is one read-only value for all the targets of its transport entry.
 */
const sharedMessageEvents = new WeakMap<DeliverMessage, StoredEvent>();
function messageEvent(msg: DeliverMessage, userId: number): StoredEvent {
  const own = msg.flagsFor?.[userId];
  const observer = msg.observers?.includes(userId) || undefined;
  if (own !== undefined || observer) return storedMessage(msg, own ?? msg.flags, observer);
  let shared = sharedMessageEvents.get(msg);
  if (!shared) sharedMessageEvents.set(msg, (shared = storedMessage(msg, msg.flags, undefined)));
  return shared;
}

/**
 * A module function rather than a closure in messageEvent, which runs once per recipient of a fan-out: tsx names
 * every named closure it compiles (esbuild's keepNames, a defineProperty per creation), 2.5% of a 10,000-queue
 * fan-out's server time (CPU profile, bench --scenario fanout --cpu-prof).
 */
function storedMessage(msg: DeliverMessage, flags: string[], observer: true | undefined): StoredEvent {
  return { kind: "message", message: msg.message, flags, queueId: msg.queueId, localId: msg.localId, observer };
}

function persisted(event: StoredEvent): PersistedEvent {
  if (event.kind === "event") return event;
  return { kind: "message", messageId: event.message.id, flags: event.flags, queueId: event.queueId, localId: event.localId, observer: event.observer };
}

/** The stream's rows as queue events, reading referenced messages in one go. */
async function hydrate(db: ActorDeps["store"]["db"], rows: Array<{ seq: number; payload: unknown }>): Promise<Array<{ seq: number; event: StoredEvent }>> {
  const payloads = rows.map((r) => r.payload as PersistedEvent);
  const ids = payloads.flatMap((p) => (p.kind === "message" && "messageId" in p ? [p.messageId] : []));
  const records = await messageRecords(db, [...new Set(ids)]);
  const events: Array<{ seq: number; event: StoredEvent }> = [];
  rows.forEach((row, i) => {
    const p = payloads[i]!;
    if (p.kind === "event" || "message" in p) return events.push({ seq: row.seq, event: p });
    const { messageId, ...rest } = p;
    const message = records.get(messageId);
    if (message) events.push({ seq: row.seq, event: Object.assign({}, rest, { message }) });
  });
  return events;
}

/** A queue's definition, as the snapshot keeps it: what its register asked for, and its id. */
type QueueSpec = Omit<Register, "op"> & { id: string };

interface Snapshot {
  queues: QueueSpec[];
  /** Above every sequence number ever handed out, including pruned ones: ids never go backwards. */
  seqFloor: number;
  /** Sequence numbers below this may have been handed out (absent in snapshots written before reservations). */
  seqReserved?: number;
}

/**
 * The realm's users with a queue following all public channels (all_public_streams), read from their snapshots:
 * a channel actor activating starts its public listeners with them. It lives here because it reads this actor's
 * snapshot format (Snapshot and QueueSpec above); it reads rather than asks, since asking would activate every user
 * actor of the realm for a question their stored snapshots answer in one query (what the channel did before).
 */
export async function usersFollowingPublicChannels(db: ActorDeps["store"]["db"], realmId: number): Promise<number[]> {
  const rows = await db
    .selectFrom("actor_snapshots")
    .innerJoin("users", (j) => j.on(sql`users.id::text`, "=", sql.ref("actor_snapshots.key")))
    .select("users.id")
    .where("actor_snapshots.kind", "=", User.name)
    .where("users.realm_id", "=", realmId)
    .where(sql<boolean>`actor_snapshots.state @> '{"queues": [{"allPublicStreams": true}]}'::jsonb`)
    .execute();
  return rows.map((r) => r.id);
}

/** Sequence numbers reserved per snapshot write: one write per this many events a user receives. */
const SEQ_BLOCK = 1024;

/** An event in a queue; one object for all the queues that take it. */
interface QueuedEvent {
  seq: number;
  event: StoredEvent;
  /** Not in the durable stream yet: to be written when the actor deactivates (see the top of this file). */
  unwritten?: boolean;
}

interface EventQueue {
  spec: QueueSpec;
  eventTypes: Set<string> | null;
  items: QueuedEvent[];
  /** The waiting poll, if any. */
  poll?: ParkedPoll;
  /** A heartbeat timer is set for this queue (see heartbeat). */
  heartbeatSet: boolean;
  /** Highest event id the client acknowledged. */
  acked: number;
  /** When the last poll ended (or the queue was made): expiry counts from here while no poll waits. */
  idleSince: number;
}

/** A poll waiting on its queue: a long-poll's, answered once, or an event stream's (Poll.stream), pushed to. */
interface ParkedPoll {
  deferred: Deferred<Polled>;
  /** Events above this id are the poll's to hear (a stream's: the last id pushed to it). */
  after: number;
  /** An event stream's poll (Poll.stream): pushed to, not answered, by each delivery. */
  stream: boolean;
  /** Since when the poll has heard nothing (parked, or a stream's last batch): its heartbeat counts from here. */
  quietSince: number;
}

/**
 * Message ids an activation delivered lately. A delivery comes twice after a crash: the deliveries a dead worker
 * had not acknowledged come again, and so does the whole fan-out of a send whose channel's worker died before
 * acknowledging it (the send is redelivered, finds its stored message and delivers it again). Two generations of
 * RECENT_MESSAGES_MS (or RECENT_MESSAGES_CAP ids) each outlast the lease's expiry and the takeover that
 * redelivers; a user with no queue keeps none.
 */
const RECENT_MESSAGES_MS = 60_000;
export const RECENT_MESSAGES_CAP = 10_000;
export class RecentIds {
  private current = new IdGeneration();
  private previous = new IdGeneration();
  private since = Date.now();
  /**
   * The highest id added. A user's deliveries come mostly in id order, so most ids are above it and were never
   * added: they need no lookup. Lookups and inserts in sets of tens of thousands of ids per busy user (misses in
   * memory) were 3-5% of the server's CPU at a fan-out's saturation (docs/performance.md, 2026-12-05 18:37).
   */
  private highest = -Infinity;
  has(id: number): boolean {
    return id <= this.highest && (this.current.has(id) || this.previous.has(id));
  }
  add(id: number): void {
    if (this.current.size >= RECENT_MESSAGES_CAP || Date.now() - this.since > RECENT_MESSAGES_MS) {
      this.previous = this.current;
      this.current = new IdGeneration();
      this.since = Date.now();
    }
    this.current.add(id);
    if (id > this.highest) this.highest = id;
  }
}

/** One generation of RecentIds: the ids that came in rising order appended to an array (so sorted), the rest in a set. */
class IdGeneration {
  private readonly rising: number[] = [];
  private others?: Set<number>;
  get size(): number {
    return this.rising.length + (this.others?.size ?? 0);
  }
  add(id: number): void {
    const last = this.rising.length ? this.rising[this.rising.length - 1]! : -Infinity;
    if (id > last) this.rising.push(id);
    else if (id !== last && !this.has(id)) (this.others ??= new Set()).add(id);
  }
  has(id: number): boolean {
    if (this.others?.has(id)) return true;
    let low = 0;
    let high = this.rising.length - 1;
    while (low <= high) {
      const mid = (low + high) >> 1;
      const at = this.rising[mid]!;
      if (at === id) return true;
      if (at < id) low = mid + 1;
      else high = mid - 1;
    }
    return false;
  }
}

/** How long seesUser trusts the role it read: a role change reaches event filtering within this (as credentials). */
const VIEWER_TTL_MS = 2000;

/** What the actor's own timers tell it (private to it): a parked poll's heartbeat, the idle queues' expiry. */
type UserTimers = {
  heartbeat: Op<{ op: "heartbeat"; queueId: string }, void>;
  expire: Op<{ op: "expire" }, void>;
};

export class UserActor implements Actor, EventRowKeeper {
  private readonly queues = new Map<string, EventQueue>();
  private readonly userId: number;
  private nextSeq = 1;
  private seqFloor = 1;
  /** Sequence numbers below this are reserved by the stored snapshot (a restart starts there): the ones to hand out. */
  private seqReserved = 1;
  /**
   * How many sequence numbers may be left before the next block is reserved: a point of the block's middle half,
   * drawn per activation. The members of a channel receive its messages in lockstep: with one threshold for all,
   * every member wrote its snapshot at the same message (a 100-member channel: 100 transactions in one turn of the
   * loop, a 127 ms stall on PGlite; docs/performance.md, 2026-12-02).
   */
  private readonly reserveAhead = Math.floor(SEQ_BLOCK * (0.25 + Math.random() * 0.5));
  /** The snapshot write in progress: writes go one at a time, each expecting the version the last one left. */
  private saving?: Promise<void>;
  /** Messages this activation queued lately (or restored), so that a delivery arriving twice is queued once. */
  private recentMessages?: RecentIds;
  private snapshotVersion = 0;
  private expiryScheduled = false;
  private typingWanted?: boolean;
  /** The user's realm and role, as seesUser last read them. */
  private viewer?: { realm_id: number; role: number; until: number };
  /**
   * Sequence numbers handed out whose events may still be committing (pruning must not pass them), in order, and
   * their writes; the written ones at the front are forgotten as events come (forgetWritten).
   */
  private readonly inFlight = new Map<number, BehindWrite>();

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.userId = Number(ctx.key);
  }

  async activate(): Promise<void> {
    const saved = await this.deps.store.loadSnapshot<Snapshot>(User.name, this.ctx.key);
    this.snapshotVersion = saved?.version ?? 0;
    this.seqFloor = saved?.state.seqFloor ?? 1;
    this.seqReserved = Math.max(this.seqFloor, saved?.state.seqReserved ?? 0);
    this.nextSeq = this.seqReserved;
    if (!saved?.state.queues.length) return;
    if (this.ctx.unacknowledgedLost) {
      // Events written behind may have died with the previous process: these queues cannot be rebuilt whole.
      await this.saveSnapshot();
      return;
    }
    const rows = await this.deps.messageLog.userEventsAfter(this.userId, 0);
    this.nextSeq = Math.max(this.nextSeq, (rows.at(-1)?.seq ?? 0) + 1);
    const stored = await hydrate(this.deps.store.db, rows);
    this.recentMessages = new RecentIds();
    for (const item of stored) if (item.event.kind === "message") this.recentMessages.add(item.event.message.id);
    for (const spec of saved.state.queues) {
      const q = this.makeQueue(spec);
      for (const item of stored) if (this.accepts(q, item.event)) q.items.push(item);
      this.queues.set(spec.id, q);
    }
    // Reserve this activation's first block now (nextSeq starts at the old reservation): activations follow the
    // clients' first polls after a restart, so the first message to a big channel then finds every block reserved
    // instead of waiting on one snapshot write per recipient.
    await this.saveSnapshot();
    this.scheduleExpiry();
  }

  /**
   * Redis lost deliveries to this user that no one will make again: the queues cannot be known whole, so they go
   * (their clients get BAD_EVENT_QUEUE_ID and register again, as Zulip's do) rather than keep a silent gap.
   */
  async entriesLost(): Promise<void> {
    await this.dropQueues();
  }

  canPassivate(): boolean {
    return this.queues.size === 0;
  }

  async deactivate(): Promise<void> {
    await this.saving; // a reservation ahead, written while the shard is still ours
    // Rows still gathering go now, not at the end of their wait: the wait below is bounded, and a delivery whose row
    // it outlasts is settled only when the row is refused after the hand-over (then delivered again, late).
    if (this.inFlight.size) this.deps.messageLog.writeBehindNow(this.ctx.fence().shard);
    // Rows written behind, committed while the shard is still ours: a poll may have handed their events out already,
    // and a row lost to the lease's release would have the shard's next holder queue the redelivered event again,
    // under a new id (a repeat the client sees). A shard handed over gracefully repeats nothing. Bounded: a store
    // that does not answer must not hold the hand-over (nor a shutdown) forever.
    await settledWithin(new Set([...this.inFlight.values()].map((w) => w.written)), DEACTIVATION_WAIT_MS);
    // The queues live on in the store; an empty answer sends the client straight back to poll the new owner.
    for (const q of this.queues.values()) if (q.poll) this.finishPoll(q, { events: [] });
    const unwritten = new Map<number, QueuedEvent>();
    for (const q of this.queues.values()) for (const item of q.items) if (item.unwritten) unwritten.set(item.seq, item);
    if (!unwritten.size) return;
    const fence = this.ctx.fence();
    await Promise.all([...unwritten.values()].map((item) => this.deps.messageLog.appendUserEvent({ user_id: this.userId, seq: item.seq, payload: persisted(item.event) }, fence)));
  }

  /** The implementation of user.protocol.ts, and of the timers' own messages. */
  private static readonly handlers: Handlers<UserProtocol & UserTimers, UserActor> = {
    register: (user, msg) => user.register(msg),
    poll: (user, msg) => user.poll(msg.queueId, msg.lastEventId, msg.dontBlock, msg.after ?? msg.lastEventId, msg.stream === true),
    deleteQueue: (user, msg) => user.deleteQueue(msg.queueId),
    dropQueues: (user) => user.dropQueues(),
    deliverMessage: (user, msg) => user.deliverMessage(msg),
    deliverEvent: (user, msg) => user.deliverEvent(msg.event, msg.capability),
    updateSettings: (user, msg) => user.updateSettings(msg),
    createDrafts: (user, msg) => user.createDrafts(msg.drafts),
    editDraft: (user, msg) => user.editDraft(msg.id, msg.draft),
    deleteDraft: (user, msg) => user.deleteDraft(msg.id),
    createSnippet: (user, msg) => user.createSnippet(msg),
    editSnippet: (user, msg) => user.editSnippet(msg),
    deleteSnippet: (user, msg) => user.deleteSnippet(msg.id),
    addView: (user, msg) => user.addView(msg),
    updateView: (user, msg) => user.updateView(msg),
    removeView: (user, msg) => user.removeView(msg.fragment),
    addPushToken: (user, msg) => user.addPushToken(msg),
    removePushToken: (user, msg) => user.removePushToken(msg),
    changeAlertWords: (user, msg) => user.changeAlertWords(msg),
    updateStatus: (user, msg) => user.updateStatus(msg),
    muteUser: (user, msg) => user.muteUser(msg),
    heartbeat: (user, msg) => user.heartbeat(msg.queueId),
    expire: (user) => user.expire(),
  };

  receive(msg: MessageOf<UserProtocol & UserTimers>): unknown {
    return dispatch(UserActor.handlers, this, msg);
  }

  private deliverMessage(msg: DeliverMessage): Promise<void> | undefined {
    if (this.recentMessages?.has(msg.message.id)) return this.holdForRowsInFlight();
    metrics().deliveries.inc();
    if (this.queues.size) (this.recentMessages ??= new RecentIds()).add(msg.message.id);
    return this.deliver(messageEvent(msg, this.userId), true);
  }

  /**
   * A repeated delivery is dropped, but its entry (or its sender's record of the fan-out it owes) is acknowledged only
   * once the rows written behind by then are committed: the first delivery's row may be one of them, and a repeat
   * acknowledged before it would let a crash lose the event (after a crash, a redelivery whose ask timed out is made
   * again while the first one's rows still wait for company). Rare, so every write in flight is waited for.
   */
  private holdForRowsInFlight(): undefined {
    const writing = [...this.inFlight.values()].filter((w) => !w.done).map((w) => w.written);
    if (writing.length) this.ctx.holdAcknowledgement(Promise.all(writing));
    return undefined;
  }

  /** Its queues, and those with a poll waiting (sampled at scrape: sampleEventQueues). */
  get queueFigures(): { queues: number; parked: number } {
    let parked = 0;
    for (const q of this.queues.values()) if (q.poll) parked++;
    return { queues: this.queues.size, parked };
  }

  private makeQueue(spec: QueueSpec): EventQueue {
    return { spec, eventTypes: spec.eventTypes ? new Set(spec.eventTypes) : null, items: [], heartbeatSet: false, acked: -1, idleSince: Date.now() };
  }

  /** Write the queues and the sequence numbers' floor and reservation, after any write still in progress. */
  private saveSnapshot(): Promise<void> {
    const write = async () => {
      // Every save reserves another block when fewer than `reserveAhead` are left; it counts once it is stored.
      const low = this.seqReserved - this.nextSeq < this.reserveAhead;
      const reserved = low ? Math.max(this.seqReserved, this.nextSeq) + SEQ_BLOCK : this.seqReserved;
      const state: Snapshot = { queues: [...this.queues.values()].map((q) => q.spec), seqFloor: this.seqFloor, seqReserved: reserved };
      this.snapshotVersion = await this.deps.store.saveSnapshot(User.name, this.ctx.key, this.snapshotVersion, state, this.ctx.fence());
      this.seqReserved = Math.max(this.seqReserved, reserved);
    };
    const written = this.saving ? this.saving.then(write) : write();
    const saving = written.catch(() => {});
    this.saving = saving;
    void saving.then(() => {
      if (this.saving === saving) this.saving = undefined;
    });
    return written;
  }

  private async register(msg: Register): Promise<Registered> {
    const spec: QueueSpec = {
      id: randomUUID(),
      eventTypes: msg.eventTypes,
      narrow: msg.narrow,
      applyMarkdown: msg.applyMarkdown,
      clientGravatar: msg.clientGravatar,
      allPublicStreams: msg.allPublicStreams,
      clientCapabilities: msg.clientCapabilities,
    };
    this.queues.set(spec.id, this.makeQueue(spec));
    try {
      await this.saveSnapshot();
    } catch (err) {
      this.queues.delete(spec.id);
      throw err;
    }
    this.scheduleExpiry();
    // Not awaited in the turn: a channel may be waiting on this actor (a subscription event) meanwhile.
    if (spec.allPublicStreams) this.ctx.completeWhen(this.tellPublicChannels(true));
    return { queue_id: spec.id, last_event_id: -1 };
  }

  private async deleteQueue(queueId: string): Promise<Record<string, never>> {
    const q = this.queue(queueId);
    if (q.poll) this.finishPoll(q, { events: [] });
    this.queues.delete(queueId);
    await this.saveSnapshot();
    if (q.spec.allPublicStreams) this.ctx.completeWhen(this.tellPublicChannels(this.followsPublicChannels()));
    return {};
  }

  /**
   * A deactivated user's queues go at once (their later requests fail authentication with USER_DEACTIVATED); a
   * parked poll learns its queue is gone, as a client whose queue expired does, and registering again fails.
   */
  private async dropQueues(): Promise<Record<string, never>> {
    if (!this.queues.size) return {};
    const followed = this.followsPublicChannels();
    for (const q of this.queues.values()) {
      if (!q.poll) continue;
      const poll = q.poll;
      q.poll = undefined;
      poll.deferred.reject(chatErrors.badQueue(q.spec.id));
    }
    this.queues.clear();
    await this.saveSnapshot();
    if (followed) this.ctx.completeWhen(this.tellPublicChannels(false));
    return {};
  }

  private followsPublicChannels(): boolean {
    return [...this.queues.values()].some((q) => q.spec.allPublicStreams);
  }

  /**
   * all_public_streams: the realm's public channels deliver their new messages here too. Asked after the queue is
   * saved (a channel activating meanwhile reads it from the snapshot), so no message sent after registering is missed.
   */
  private async tellPublicChannels(listening: boolean): Promise<void> {
    const { realm_id } = await this.account();
    const channels = await this.deps.store.db.selectFrom("streams").select("id").where("realm_id", "=", realm_id).where("invite_only", "=", false).execute();
    await this.deps.system().broadcast(
      Channel,
      channels.map((c) => c.id),
      { op: "publicListener", userId: this.userId, listening },
    );
  }

  private queue(queueId: string): EventQueue {
    const q = this.queues.get(queueId);
    if (!q) throw chatErrors.badQueue(queueId);
    return q;
  }

  private poll(queueId: string, lastEventId: number, dontBlock: boolean, after: number, stream: boolean): Polled | typeof PARKED {
    const q = this.queue(queueId);
    this.acknowledge(q, lastEventId);
    if (q.poll) this.finishPoll(q, { events: [] });
    const ready = (q.items.at(-1)?.seq ?? -1) > after; // items are in id order
    if ((ready && !stream) || dontBlock) {
      q.idleSince = Date.now();
      return { events: this.render(q, after) };
    }
    q.poll = { deferred: this.ctx.defer<Polled>(), after, stream, quietSince: Date.now() };
    this.setHeartbeat(q, this.deps.chat.heartbeatSeconds * 1000);
    if (ready) this.pushToStream(q);
    return PARKED;
  }

  /**
   * Acknowledge: everything up to `lastEventId` is gone for good. An id above every one handed out acknowledges
   * those only: the events after it are still to be heard (and their rows written, see rowWanted).
   */
  private acknowledge(q: EventQueue, lastEventId: number): void {
    const heard = Math.min(lastEventId, this.nextSeq - 1);
    if (heard > q.acked) q.acked = heard;
    let drop = 0;
    while (drop < q.items.length && q.items[drop]!.seq <= lastEventId) drop++;
    if (drop) q.items.splice(0, drop);
  }

  private setHeartbeat(q: EventQueue, ms: number): void {
    if (q.heartbeatSet) return;
    q.heartbeatSet = true;
    this.ctx.schedule(ms, { op: "heartbeat", queueId: q.spec.id } satisfies MessageOf<UserTimers>);
  }

  /**
   * A parked poll that heard nothing for the heartbeat interval gets a heartbeat event. A queue has at most one
   * heartbeat timer, set when a poll parks and none is set, never cleared: when it fires it finds how long the
   * poll parked now (if any) has been quiet, and waits for the rest of the interval if that is less. Setting and
   * clearing a timer for each poll (a long-poll's every answer, a stream's every batch) cost more than the check.
   */
  private async heartbeat(queueId: string): Promise<void> {
    const q = this.queues.get(queueId);
    if (!q) return;
    q.heartbeatSet = false;
    if (!q.poll) return;
    const every = this.deps.chat.heartbeatSeconds * 1000;
    const quietFor = Date.now() - q.poll.quietSince;
    if (quietFor < every) return this.setHeartbeat(q, every - quietFor);
    await this.deliver({ kind: "event", event: { type: "heartbeat" }, queueId }, true);
    if (q.poll && this.queues.get(queueId) === q) this.setHeartbeat(q, every); // a stream goes on
  }

  /**
   * Push the events a stream has not heard yet. Nothing is acknowledged here: a pushed batch may never reach its
   * stream (cut by the runtime, or not taken by a full socket), and only the stream knows what it wrote; it
   * acknowledges by polling again every so many batches (see streamQueue in gateway/chat/events.ts).
   */
  private pushToStream(q: EventQueue): void {
    const poll = q.poll!;
    const events = this.render(q, poll.after);
    if (!events.length) return;
    poll.after = q.items.at(-1)!.seq;
    poll.quietSince = Date.now();
    poll.deferred.push({ events });
  }

  private async deliverEvent(event: Record<string, unknown>, capability?: CapabilityFilter): Promise<void> {
    if (event.type === "typing" && !(await this.receivesTyping())) return;
    const about =
      event.type === "realm_user" ? (event.person as { user_id: number }).user_id : event.type === "presence" || event.type === "user_status" ? (event.user_id as number) : undefined;
    if (about !== undefined && this.queues.size && !(await this.seesUser(about))) return;
    if (event.type === "delete_message") return this.deliverDeletion(event);
    await this.deliver(capability ? { kind: "event", event, capability } : { kind: "event", event }, true);
  }

  /**
   * Clients with the bulk_message_deletion capability get one event listing every id; older clients get one
   * event per message with `message_id` (Zulip's two forms).
   */
  private async deliverDeletion(event: Record<string, unknown>): Promise<void> {
    const { message_id, message_ids, ...rest } = event;
    const ids = (message_ids as number[] | undefined) ?? [message_id as number];
    await this.deliver({ kind: "event", event: Object.assign({}, rest, { message_ids: ids }), bulkDeletion: true }, true);
    for (const id of ids) await this.deliver({ kind: "event", event: Object.assign({}, rest, { message_id: id }), bulkDeletion: false }, true);
  }

  /**
   * Whether this user may see another (the realm's can_access_all_users_group): Zulip sends realm_user and
   * presence events only to those who can access their user. Only guests can be left out, so the user's role is
   * kept for VIEWER_TTL_MS (presence events are frequent); a restricted guest's set is read per event, since it
   * changes with every subscription.
   */
  private async seesUser(userId: number): Promise<boolean> {
    if (userId === this.userId) return true;
    if (!this.viewer || this.viewer.until < Date.now()) this.viewer = { ...(await this.account()), until: Date.now() + VIEWER_TTL_MS };
    const access = await accessibleUsers(this.deps.store.db, { id: this.userId, ...this.viewer });
    return !access || access.has(userId);
  }

  /**
   * The user's receives_typing_notifications setting, read once per activation. Settings are written through this
   * actor (PATCH /settings), which keeps this copy current.
   */
  private async receivesTyping(): Promise<boolean> {
    if (this.typingWanted === undefined) {
      const saved = await this.deps.store.loadSnapshot<Partial<UserSettings>>(USER_SETTINGS, this.ctx.key);
      this.typingWanted = saved?.state.receives_typing_notifications ?? USER_SETTINGS_DEFAULTS.receives_typing_notifications;
    }
    return this.typingWanted;
  }

  // ---- settings, drafts and navigation views: the user's own data, with events to the user's own queues ----------

  private async account(): Promise<{ realm_id: number; email: string; role: number }> {
    return this.deps.store.db.selectFrom("users").select(["realm_id", "email", "role"]).where("id", "=", this.userId).executeTakeFirstOrThrow();
  }

  private async updateSettings(msg: UpdateSettings): Promise<Record<string, never>> {
    const { store } = this.deps;
    const saved = await store.loadSnapshot<Record<string, unknown>>(USER_SETTINGS, this.ctx.key);
    const current: Record<string, unknown> = Object.assign({}, USER_SETTINGS_DEFAULTS, saved?.state);
    const changed = Object.entries(msg.settings).filter(([k, v]) => current[k] !== v);
    if (changed.length) {
      await store.saveSnapshot(USER_SETTINGS, this.ctx.key, saved?.version ?? 0, Object.assign({}, saved?.state, Object.fromEntries(changed)), this.ctx.fence());
    }
    const timezone = msg.settings.timezone as string | undefined;
    if (msg.fullName !== undefined || msg.passwordHash !== undefined || (timezone !== undefined && changed.some(([k]) => k === "timezone"))) {
      await store.write(this.ctx.fence(), (trx) =>
        trx
          .updateTable("users")
          .set({
            ...(msg.fullName !== undefined ? { full_name: msg.fullName } : {}),
            ...(msg.passwordHash !== undefined ? { password_hash: msg.passwordHash } : {}),
            ...(timezone !== undefined ? { timezone } : {}),
          })
          .where("id", "=", this.userId)
          .execute(),
      );
    }
    if ("receives_typing_notifications" in msg.settings) this.typingWanted = msg.settings.receives_typing_notifications as boolean;
    for (const [property, value] of changed) {
      const event: Record<string, unknown> = { type: "user_settings", op: "update", property, value };
      if (property === "default_language") event.language_name = languageName(String(value));
      await this.deliver({ kind: "event", event });
    }
    // Zulip sends one realm_user update per changed field of the person.
    if (msg.fullName !== undefined) await this.tellRealmUsers({ type: "realm_user", op: "update", person: { user_id: this.userId, full_name: msg.fullName } });
    if (changed.some(([k]) => k === "timezone")) await this.tellRealmUsers({ type: "realm_user", op: "update", person: { user_id: this.userId, timezone } });
    const visibility = changed.find(([k]) => k === "email_address_visibility");
    if (visibility) await this.changeEmailVisibility(Number(current.email_address_visibility), Number(visibility[1]), msg.siteUrl);
    if (changed.some(([k, v]) => k === "enable_drafts_synchronization" && v === false)) await this.deleteAllDrafts();
    return {};
  }

  /**
   * Zulip's do_change_user_setting for email_address_visibility: delivery_email to those who now see the address,
   * null to those who no longer do; and when the API `email` changes between the real address and the placeholder,
   * the new one (new_email) and the avatar (a client computing Gravatars can no longer, or now can) to everyone.
   */
  private async changeEmailVisibility(before: number, after: number, siteUrl: string): Promise<void> {
    const db = this.deps.store.db;
    const me = await db.selectFrom("users").select(["id", "realm_id", "email", "delivery_email", "is_bot", "avatar_version"]).where("id", "=", this.userId).executeTakeFirstOrThrow();
    const active = await db.selectFrom("users").select(["id", "role"]).where("realm_id", "=", me.realm_id).where("is_active", "=", true).execute();
    const gained: number[] = [];
    const lost: number[] = [];
    for (const viewer of active) {
      const saw = deliveryEmailVisibleTo(viewer, me, before);
      const sees = deliveryEmailVisibleTo(viewer, me, after);
      if (saw !== sees) (sees ? gained : lost).push(viewer.id);
    }
    const tell = (ids: number[], person: Record<string, unknown>) =>
      this.deps.system().broadcast(User, ids, { op: "deliverEvent", event: { type: "realm_user", op: "update", person: { user_id: me.id, ...person } } });
    // The user always sees their own address, so is in neither list (no self-ask).
    await tell(gained, { delivery_email: me.delivery_email });
    await tell(lost, { delivery_email: null });
    const email = apiEmail(me, after, siteUrl);
    if (email === me.email) return;
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("users").set({ email }).where("id", "=", me.id).execute());
    await this.tellRealmUsers({ type: "realm_user", op: "update", person: { user_id: me.id, new_email: email } });
    await this.tellRealmUsers({ type: "realm_user", op: "update", person: avatarUpdate(me) });
  }

  /** An event for every active user of the realm, this one included (delivered here directly: no self-ask). */
  private async tellRealmUsers(event: Record<string, unknown>): Promise<void> {
    const { realm_id } = await this.account();
    const others = await this.deps.store.db.selectFrom("users").select("id").where("realm_id", "=", realm_id).where("is_active", "=", true).where("id", "!=", this.userId).execute();
    await this.deliver({ kind: "event", event });
    await this.deps.system().broadcast(User, others.map((u) => u.id), { op: "deliverEvent", event });
  }

  private async draftsEnabled(): Promise<boolean> {
    const saved = await this.deps.store.loadSnapshot<Record<string, unknown>>(USER_SETTINGS, this.ctx.key);
    return (saved?.state.enable_drafts_synchronization ?? USER_SETTINGS_DEFAULTS.enable_drafts_synchronization) !== false;
  }

  private async createDrafts(drafts: DraftFields[]): Promise<{ ids: number[] }> {
    if (!(await this.draftsEnabled())) throw errors.badRequest("User has disabled synchronizing drafts.");
    const { realm_id } = await this.account();
    const db = this.deps.store.db;
    const rows: Array<Awaited<ReturnType<typeof checkDraft>>> = [];
    for (const draft of drafts) rows.push(await checkDraft(db, this.userId, realm_id, draft));
    const stored = rows.length
      ? await this.deps.store.write(this.ctx.fence(), (trx) => trx.insertInto("drafts").values(rows).returningAll().execute())
      : [];
    if (stored.length) await this.deliver({ kind: "event", event: { type: "drafts", op: "add", drafts: stored.map(draftObject) } });
    return { ids: stored.map((r) => r.id) };
  }

  private async editDraft(id: number, draft: DraftFields): Promise<Record<string, never>> {
    const db = this.deps.store.db;
    await ownDraft(db, this.userId, id);
    const { realm_id } = await this.account();
    const row = await checkDraft(db, this.userId, realm_id, draft);
    const stored = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.updateTable("drafts").set(row).where("id", "=", id).where("user_id", "=", this.userId).returningAll().executeTakeFirstOrThrow(),
    );
    await this.deliver({ kind: "event", event: { type: "drafts", op: "update", draft: draftObject(stored) } });
    return {};
  }

  private async deleteDraft(id: number): Promise<Record<string, never>> {
    await ownDraft(this.deps.store.db, this.userId, id);
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("drafts").where("id", "=", id).where("user_id", "=", this.userId).execute());
    await this.deliver({ kind: "event", event: { type: "drafts", op: "remove", draft_id: id } });
    return {};
  }

  private async createSnippet(msg: CreateSnippet): Promise<{ saved_snippet_id: number }> {
    const row = { user_id: this.userId, title: snippetText(msg.title, "Title"), content: snippetText(msg.content, "Content"), date_created: Math.floor(Date.now() / 1000) };
    const stored = await this.deps.store.write(this.ctx.fence(), (trx) => trx.insertInto("saved_snippets").values(row).returningAll().executeTakeFirstOrThrow());
    await this.deliver({ kind: "event", event: { type: "saved_snippets", op: "add", saved_snippet: snippetObject(stored) } });
    return { saved_snippet_id: stored.id };
  }

  /** Zulip's edit_saved_snippet: nothing given, nothing changes and no event. */
  private async editSnippet(msg: EditSnippet): Promise<Record<string, never>> {
    const data = {
      ...(msg.title !== undefined ? { title: snippetText(msg.title, "Title") } : {}),
      ...(msg.content !== undefined ? { content: snippetText(msg.content, "Content") } : {}),
    };
    if (!Object.keys(data).length) return {};
    await ownSnippet(this.deps.store.db, this.userId, msg.id);
    const stored = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.updateTable("saved_snippets").set(data).where("id", "=", msg.id).where("user_id", "=", this.userId).returningAll().executeTakeFirstOrThrow(),
    );
    await this.deliver({ kind: "event", event: { type: "saved_snippets", op: "update", saved_snippet: snippetObject(stored) } });
    return {};
  }

  private async deleteSnippet(id: number): Promise<Record<string, never>> {
    await ownSnippet(this.deps.store.db, this.userId, id);
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("saved_snippets").where("id", "=", id).where("user_id", "=", this.userId).execute());
    await this.deliver({ kind: "event", event: { type: "saved_snippets", op: "remove", saved_snippet_id: id } });
    return {};
  }

  private async deleteAllDrafts(): Promise<void> {
    const removed = await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("drafts").where("user_id", "=", this.userId).returning("id").execute());
    for (const { id } of removed) await this.deliver({ kind: "event", event: { type: "drafts", op: "remove", draft_id: id } });
  }

  private async addView(msg: AddView): Promise<Record<string, never>> {
    await checkNewView(this.deps.store.db, this.userId, msg.fragment, msg.name);
    const view = { fragment: msg.fragment, is_pinned: msg.isPinned, name: msg.name };
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.insertInto("navigation_views").values({ user_id: this.userId, ...view }).execute());
    await this.deliver({ kind: "event", event: { type: "navigation_view", op: "add", navigation_view: view } });
    return {};
  }

  private async updateView(msg: UpdateView): Promise<Record<string, never>> {
    await checkViewUpdate(this.deps.store.db, this.userId, msg.fragment, msg.name);
    const data = { ...(msg.isPinned !== undefined ? { is_pinned: msg.isPinned } : {}), ...(msg.name !== undefined ? { name: msg.name } : {}) };
    if (!Object.keys(data).length) return {};
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.updateTable("navigation_views").set(data).where("user_id", "=", this.userId).where("fragment", "=", msg.fragment).execute(),
    );
    await this.deliver({ kind: "event", event: { type: "navigation_view", op: "update", fragment: msg.fragment, data } });
    return {};
  }

  private async removeView(fragment: string): Promise<Record<string, never>> {
    await checkViewUpdate(this.deps.store.db, this.userId, fragment, undefined);
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("navigation_views").where("user_id", "=", this.userId).where("fragment", "=", fragment).execute());
    await this.deliver({ kind: "event", event: { type: "navigation_view", op: "remove", fragment } });
    return {};
  }

  /** Registering the same token again refreshes its app id (Zulip treats it as an update). */
  private async addPushToken(msg: AddPushToken): Promise<Record<string, never>> {
    const row = { user_id: this.userId, kind: msg.kind, token: msg.token, appid: msg.appid, date_created: Math.floor(Date.now() / 1000) };
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.insertInto("push_devices").values(row).onConflict((c) => c.columns(["user_id", "kind", "token"]).doUpdateSet({ appid: msg.appid })).execute(),
    );
    return {};
  }

  private async removePushToken(msg: RemovePushToken): Promise<Record<string, never>> {
    const removed = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.deleteFrom("push_devices").where("user_id", "=", this.userId).where("kind", "=", msg.kind).where("token", "=", msg.token).executeTakeFirst(),
    );
    if (!removed.numDeletedRows) throw errors.badRequest("Token does not exist");
    return {};
  }

  /** Zulip's do_add_alert_words / do_remove_alert_words: the whole list, in the answer and in an alert_words event. */
  private async changeAlertWords(msg: ChangeAlertWords): Promise<{ alert_words: string[] }> {
    const db = this.deps.store.db;
    const existing = await alertWordsOf(db, this.userId);
    const { realm_id } = await this.account();
    const fresh = msg.add ? newAlertWords(existing, msg.words) : [];
    const removed = msg.add ? [] : [...new Set(msg.words.map((w) => w.toLowerCase()))].filter((w) => existing.some((e) => e.toLowerCase() === w));
    if (fresh.length) {
      const rows = fresh.map((word) => ({ user_id: this.userId, realm_id, word }));
      await this.deps.store.write(this.ctx.fence(), (trx) => trx.insertInto("alert_words").values(rows).execute());
    }
    if (removed.length) {
      await this.deps.store.write(this.ctx.fence(), (trx) => trx.deleteFrom("alert_words").where("user_id", "=", this.userId).where(sql`lower(word)`, "in", removed).execute());
    }
    if (fresh.length || removed.length) await realmAlertWords.changed(this.deps.system(), realm_id);
    const words = await alertWordsOf(db, this.userId);
    await this.deliver({ kind: "event", event: { type: "alert_words", alert_words: words } });
    return { alert_words: words };
  }

  /**
   * Zulip's do_update_user_status: the parts given replace the stored ones; the deprecated `away` is the
   * presence_enabled setting turned off (with its own user_settings event). Everyone who can see the user hears it.
   */
  private async updateStatus(msg: UpdateStatus): Promise<Record<string, never>> {
    if (msg.away !== undefined) await this.updateSettings({ op: "updateSettings", settings: { presence_enabled: !msg.away }, siteUrl: "" });
    const parts = { ...(msg.statusText !== undefined ? { status_text: msg.statusText } : {}), ...msg.emoji };
    const row = { user_id: this.userId, timestamp: Math.floor(Date.now() / 1000), ...parts };
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.insertInto("user_status").values(row).onConflict((c) => c.column("user_id").doUpdateSet({ timestamp: row.timestamp, ...parts })).execute(),
    );
    const event: Record<string, unknown> = { type: "user_status", user_id: this.userId };
    if (msg.away !== undefined) event.away = msg.away;
    Object.assign(event, parts);
    await this.tellRealmUsers(event);
    return {};
  }

  /** Zulip's do_mute_user / do_unmute_user: the whole list in a muted_users event to the user's own queues. */
  private async muteUser(msg: MuteUser): Promise<Record<string, never>> {
    const mute = { user_id: this.userId, muted_user_id: msg.mutedUserId };
    const existing = await this.deps.store.db.selectFrom("muted_users").select("date_muted").where("user_id", "=", mute.user_id).where("muted_user_id", "=", mute.muted_user_id).executeTakeFirst();
    if (msg.mute && existing) throw errors.badRequest("User already muted");
    if (!msg.mute && !existing) throw errors.badRequest("User is not muted");
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      if (msg.mute) await trx.insertInto("muted_users").values({ ...mute, date_muted: Math.floor(Date.now() / 1000) }).execute();
      else await trx.deleteFrom("muted_users").where("user_id", "=", mute.user_id).where("muted_user_id", "=", mute.muted_user_id).execute();
    });
    await usersMutingCache.changed(this.deps.system(), (await this.account()).realm_id);
    await this.deliver({ kind: "event", event: { type: "muted_users", muted_users: await mutedUsersOf(this.deps.store.db, this.userId) } });
    return {};
  }

  /**
   * Into every queue that wants it and into the durable stream; nothing is stored for a user with no queue.
   * `behind`: the event came from another actor's delivery, whose transport entry stays unacknowledged until the
   * row is committed (see the top of this file); otherwise the turn is answered only once it is committed.
   */
  private async deliver(event: StoredEvent, behind = false): Promise<void> {
    const targets: EventQueue[] = [];
    for (const q of this.queues.values()) if (this.accepts(q, event)) targets.push(q);
    if (!targets.length) return;
    if (this.nextSeq >= this.seqReserved) await this.saveSnapshot();
    const seq = this.nextSeq++;
    // Reserve the next block while this one lasts: a delivery that found it spent would wait for a snapshot write
    // (a few ms on Postgres, every SEQ_BLOCK events of a busy user). A failed attempt is tried again at the next event.
    if (this.seqReserved - this.nextSeq < this.reserveAhead && !this.saving) this.saveSnapshot().catch(() => {});
    const unwritten = behind && !this.ctx.transportRedelivers;
    const item: QueuedEvent = unwritten ? { seq, event, unwritten } : { seq, event };
    for (const q of targets) {
      q.items.push(item);
      if (q.poll?.stream) this.pushToStream(q);
      else if (q.poll) this.finishPoll(q, { events: this.render(q, q.poll.after) });
    }
    if (unwritten) return;
    // The turn ends while the row commits, so the next deliveries join the same group commit.
    const row: UserEvent = { user_id: this.userId, seq, payload: persisted(event) };
    this.forgetWritten();
    if (behind) {
      // Tried again until written or the shard is lost (FENCED: its next owner restores the queue and gets the
      // entry again): the transport entry is acknowledged once it settles, so giving up on a failing store would
      // acknowledge an event that a crash could then lose. The event is in the queues meanwhile; only the row waits.
      const write = this.deps.messageLog.appendUserEventBehind(row, this.ctx.fence(), this);
      this.inFlight.set(seq, write);
      return this.ctx.holdAcknowledgement(write.written);
    }
    const write = { written: this.deps.messageLog.appendUserEvent(row, this.ctx.fence()), done: false };
    const settled = () => void (write.done = true);
    write.written.then(settled, settled);
    this.inFlight.set(seq, write);
    this.ctx.completeWhen(write.written);
  }

  /**
   * Whether the row of event `seq`, written behind, is still wanted when its batch goes to the store: not once every
   * queue has acknowledged the event (a long-poll's next poll), since no rebuilt queue would hold it. A queue gone
   * meanwhile wants nothing. The row's other use, telling a rebuilt activation which redelivered messages it queued
   * already, is lost with it: a crash before the delivery's transport entry is acknowledged then shows the client the
   * message again under a new id, the repeat docs/chaos.md counts ("A message event repeated under a new event id").
   */
  rowWanted(seq: number): boolean {
    for (const q of this.queues.values()) if (q.acked < seq) return true;
    return false;
  }

  /** Drop the written events at the front of inFlight (in sequence order): what is left may still be committing. */
  private forgetWritten(): void {
    for (const [seq, write] of this.inFlight) {
      if (!write.done) return;
      this.inFlight.delete(seq);
    }
  }

  /** The lowest sequence number whose event may still be committing, if any. */
  private firstInFlight(): number | undefined {
    this.forgetWritten();
    for (const [seq, write] of this.inFlight) if (!write.done) return seq;
    return undefined;
  }

  private accepts(q: EventQueue, event: StoredEvent): boolean {
    if (event.kind === "message") {
      return (!q.eventTypes || q.eventTypes.has("message")) && (!event.observer || q.spec.allPublicStreams) && matchesNarrow(q.spec.narrow, event.message);
    }
    if (event.queueId) return event.queueId === q.spec.id;
    if (event.bulkDeletion !== undefined && event.bulkDeletion !== !!q.spec.clientCapabilities.bulk_message_deletion) return false;
    if (event.capability && event.capability.declared !== !!q.spec.clientCapabilities[event.capability.name]) return false;
    return !q.eventTypes || q.eventTypes.has(String(event.event.type));
  }

  private finishPoll(q: EventQueue, reply: Polled): void {
    const poll = q.poll!;
    q.poll = undefined;
    q.idleSince = Date.now();
    poll.deferred.resolve(reply);
  }

  private render(q: EventQueue, after: number): Array<Record<string, unknown>> {
    return q.items.filter((i) => i.seq > after).map(({ seq, event }) => {
      // Object.assign, not `{ ...event, id }`: see docs/performance.md on spreads in objects made per event.
      if (event.kind === "event" && event.event.type === "presence") return Object.assign(presenceEvent(q.spec, event.event), { id: seq });
      if (event.kind === "event" && isGroupDeactivation(event.event) && q.spec.clientCapabilities.include_deactivated_groups !== true) {
        // Zulip tells clients that do not list deactivated groups that the group is gone.
        return { type: "user_group", op: "remove", group_id: event.event.group_id, id: seq };
      }
      if (event.kind === "event") return Object.assign({}, event.event, { id: seq });
      const rendered: Record<string, unknown> = {
        type: "message",
        id: seq,
        message: formatSharedMessage(event.message, q.spec),
        flags: event.flags,
      };
      if (event.localId !== undefined && event.queueId === q.spec.id) rendered.local_message_id = event.localId;
      return rendered;
    });
  }

  private scheduleExpiry(): void {
    if (this.expiryScheduled) return;
    this.expiryScheduled = true;
    const every = Math.min(60_000, this.deps.chat.queueTimeoutSeconds * 1000);
    this.ctx.schedule(every, { op: "expire" } satisfies MessageOf<UserTimers>);
  }

  /** Drop idle queues, then the stream's events every remaining queue has acknowledged. */
  private async expire(): Promise<void> {
    this.expiryScheduled = false;
    const cutoff = Date.now() - this.deps.chat.queueTimeoutSeconds * 1000;
    let changed = false;
    let expiredPublic = false;
    for (const q of [...this.queues.values()]) {
      if (!q.poll && q.idleSince < cutoff) {
        this.queues.delete(q.spec.id);
        changed = true;
        expiredPublic ||= q.spec.allPublicStreams;
      }
    }
    const held = [...this.queues.values()].map((q) => (q.items[0] ? q.items[0].seq - 1 : this.nextSeq - 1));
    const committing = this.firstInFlight();
    const settled = Math.min(this.nextSeq - 1, ...held, ...(committing === undefined ? [] : [committing - 1]));
    if (settled >= this.seqFloor) {
      // The floor goes into the snapshot before the rows go: ids never repeat, even after a crash in between.
      this.seqFloor = settled + 1;
      changed = true;
    }
    if (changed) {
      await this.saveSnapshot();
      await this.deps.messageLog.pruneUserEvents(this.userId, this.seqFloor - 1, this.ctx.fence());
    }
    // Best effort: a channel that still lists this user delivers to no queue.
    if (expiredPublic && !this.followsPublicChannels()) this.tellPublicChannels(false).catch(() => {});
    if (this.queues.size) this.scheduleExpiry();
  }
}

/** The language's own name, for user_settings events about default_language. */
function languageName(code: string): string {
  try {
    return new Intl.DisplayNames([code], { type: "language" }).of(code) ?? code;
  } catch {
    return code;
  }
}

/** A group's deactivation (Zulip's update with `data.deactivated`), which some clients get as a removal. */
function isGroupDeactivation(event: Record<string, unknown>): boolean {
  return event.type === "user_group" && event.op === "update" && (event.data as { deactivated?: boolean } | undefined)?.deactivated === true;
}

/** A presence event in the queue's format: modern for clients with simplified_presence_events, else legacy. */
function presenceEvent(spec: QueueSpec, e: Record<string, any>): Record<string, unknown> {
  if (spec.clientCapabilities.simplified_presence_events) return { type: "presence", presences: { [e.user_id]: e.modern } };
  const { aggregated, ...perClient } = e.legacy;
  return { type: "presence", user_id: e.user_id, email: e.email, server_timestamp: e.server_timestamp, presence: perClient };
}

/** Feed the event queue gauges from this system's user actors, at scrape; returns the removal. */
export function sampleEventQueues(system: ActorSystem): () => void {
  const sum = (figure: "queues" | "parked") => {
    let total = 0;
    for (const actor of system.actorsOf(User.name)) total += (actor as UserActor).queueFigures[figure];
    return total;
  };
  const removals = [gauges.eventQueues.add(() => sum("queues")), gauges.parkedPolls.add(() => sum("parked"))];
  return () => removals.forEach((remove) => remove());
}
