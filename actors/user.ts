/**
 * user:<id>: the user's event queues (Zulip's client queues). A queue keeps its events until the client
 * acknowledges them with `last_event_id`; one poll at a time waits on it (a newer poll finishes the older one);
 * a poll that waited the heartbeat interval gets a heartbeat event; a queue nobody polled for the idle timeout
 * is dropped.
 */
import { randomUUID } from "node:crypto";
import { PARKED, type Actor, type ActorContext, type Deferred } from "../runtime/actor.ts";
import { errors } from "../runtime/errors.ts";
import { formatMessage, type MessageRecord } from "./message-format.ts";
import { matchesNarrow } from "./narrow.ts";
import type { DeliverMessage, Narrow, Polled, Register, Registered, UserMessage } from "./protocol.ts";
import type { ActorDeps } from "./deps.ts";

type QueuedItem =
  | { id: number; kind: "message"; message: MessageRecord; flags: string[]; localId?: string }
  | { id: number; kind: "event"; event: Record<string, unknown> };

interface EventQueue {
  id: string;
  eventTypes: Set<string> | null;
  narrow: Narrow;
  applyMarkdown: boolean;
  clientGravatar: boolean;
  items: QueuedItem[];
  nextEventId: number;
  /** The waiting poll, if any. */
  poll?: { deferred: Deferred<Polled>; cancelHeartbeat: () => void; seq: number };
  pollSeq: number;
  /** When the last poll ended (or the queue was made): expiry counts from here while no poll waits. */
  idleSince: number;
}

type Internal = { op: "heartbeat"; queueId: string; seq: number } | { op: "expire" };

export class UserActor implements Actor {
  private readonly queues = new Map<string, EventQueue>();
  private readonly userId: number;
  private expiryScheduled = false;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.userId = Number(ctx.key);
  }

  canPassivate(): boolean {
    return this.queues.size === 0;
  }

  async deactivate(): Promise<void> {
    for (const q of this.queues.values()) q.poll?.deferred.reject(errors.badQueue(q.id));
  }

  receive(msg: UserMessage | Internal): unknown {
    switch (msg.op) {
      case "register":
        return this.register(msg);
      case "poll":
        return this.poll(msg.queueId, msg.lastEventId, msg.dontBlock);
      case "deleteQueue": {
        const q = this.queue(msg.queueId);
        q.poll?.deferred.resolve({ events: [] });
        q.poll?.cancelHeartbeat();
        this.queues.delete(q.id);
        return {};
      }
      case "deliverMessage":
        return this.deliverMessage(msg);
      case "deliverEvent":
        for (const q of this.queues.values()) {
          if (q.eventTypes && !q.eventTypes.has(String(msg.event.type))) continue;
          this.push(q, { id: q.nextEventId++, kind: "event", event: msg.event });
        }
        return {};
      case "heartbeat":
        return this.heartbeat(msg.queueId, msg.seq);
      case "expire":
        return this.expire();
    }
  }

  private register(msg: Register): Registered {
    const q: EventQueue = {
      id: randomUUID(),
      eventTypes: msg.eventTypes ? new Set(msg.eventTypes) : null,
      narrow: msg.narrow,
      applyMarkdown: msg.applyMarkdown,
      clientGravatar: msg.clientGravatar,
      items: [],
      nextEventId: 0,
      pollSeq: 0,
      idleSince: Date.now(),
    };
    this.queues.set(q.id, q);
    this.scheduleExpiry();
    return { queue_id: q.id, last_event_id: -1 };
  }

  private queue(queueId: string): EventQueue {
    const q = this.queues.get(queueId);
    if (!q) throw errors.badQueue(queueId);
    return q;
  }

  private poll(queueId: string, lastEventId: number, dontBlock: boolean): Polled | typeof PARKED {
    const q = this.queue(queueId);
    // Acknowledge: everything up to last_event_id is gone for good.
    let drop = 0;
    while (drop < q.items.length && q.items[drop]!.id <= lastEventId) drop++;
    if (drop) q.items.splice(0, drop);
    if (q.poll) this.finishPoll(q, { events: [] });
    if (q.items.length || dontBlock) {
      q.idleSince = Date.now();
      return { events: q.items.map((item) => this.render(q, item)) };
    }
    const seq = ++q.pollSeq;
    const deferred = this.ctx.defer<Polled>();
    const cancelHeartbeat = this.ctx.schedule(this.deps.config.heartbeatSeconds * 1000, { op: "heartbeat", queueId, seq });
    q.poll = { deferred, cancelHeartbeat, seq };
    return PARKED;
  }

  private heartbeat(queueId: string, seq: number): void {
    const q = this.queues.get(queueId);
    if (!q?.poll || q.poll.seq !== seq) return;
    this.push(q, { id: q.nextEventId++, kind: "event", event: { type: "heartbeat" } });
  }

  private deliverMessage(msg: DeliverMessage): void {
    const flags = msg.flagsFor?.[this.userId] ?? msg.flags;
    for (const q of this.queues.values()) {
      if (q.eventTypes && !q.eventTypes.has("message")) continue;
      if (!matchesNarrow(q.narrow, msg.message)) continue;
      const localId = msg.queueId === q.id ? msg.localId : undefined;
      this.push(q, { id: q.nextEventId++, kind: "message", message: msg.message, flags, localId });
    }
  }

  private push(q: EventQueue, item: QueuedItem): void {
    q.items.push(item);
    if (q.poll) this.finishPoll(q, { events: q.items.map((i) => this.render(q, i)) });
  }

  private finishPoll(q: EventQueue, reply: Polled): void {
    const poll = q.poll!;
    q.poll = undefined;
    poll.cancelHeartbeat();
    q.idleSince = Date.now();
    poll.deferred.resolve(reply);
  }

  private render(q: EventQueue, item: QueuedItem): Record<string, unknown> {
    if (item.kind === "event") return { ...item.event, id: item.id };
    const event: Record<string, unknown> = {
      type: "message",
      id: item.id,
      message: formatMessage(item.message, q),
      flags: item.flags,
    };
    if (item.localId !== undefined) event.local_message_id = item.localId;
    return event;
  }

  private scheduleExpiry(): void {
    if (this.expiryScheduled) return;
    this.expiryScheduled = true;
    const every = Math.min(60_000, this.deps.config.queueTimeoutSeconds * 1000);
    this.ctx.schedule(every, { op: "expire" });
  }

  private expire(): void {
    this.expiryScheduled = false;
    const cutoff = Date.now() - this.deps.config.queueTimeoutSeconds * 1000;
    for (const q of [...this.queues.values()]) {
      if (!q.poll && q.idleSince < cutoff) this.queues.delete(q.id);
    }
    if (this.queues.size) this.scheduleExpiry();
  }
}
