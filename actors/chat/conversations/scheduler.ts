/**
 * scheduler:<realm id>: the realm's scheduled messages and reminders (rows with a reminder_target_message_id,
 * which Notification Bot sends to their owner, with their own events and routes). Rows are durable (`scheduled_messages`); the actor keeps
 * one timer for the earliest pending one and delivers what is due through the owning conversation actor, with
 * the send key `scheduled:<id>`, then records the outcome. Exactly once: a delivery repeated after a crash
 * between the send and the record (or by a second activation after a shard move) reuses the send key, and the
 * store commits a send key once. Failures (channel gone, no longer allowed to post) are kept with `failed: true`.
 *
 * Nothing activates an actor by itself, so every node wakes the schedulers periodically (`wakeSchedulers`):
 * after a restart or a shard take-over pending messages are found within one wake interval.
 */
import type { Actor, ActorContext } from "../../../runtime/actor.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { Kysely } from "kysely";
import type { Store } from "../../../runtime/store/store.ts";
import type { ActorSystem } from "../../../runtime/system.ts";
import type { ActorDeps } from "../../deps.ts";
import { dmKey } from "./dm.ts";
import { renderMarkdown } from "../rendering/message-format.ts";
import { dispatch, type Empty, type Handlers, type MessageOf, type Op } from "../../../runtime/protocol.ts";
import { Channel } from "./channel.protocol.ts";
import type { Acting } from "./conversation.protocol.ts";
import { Dm, type SendToDm } from "./dm.protocol.ts";
import { Scheduler, type CreateReminder, type ScheduledSpec, type SchedulerProtocol } from "./scheduler.protocol.ts";
import { ensureSystemBot } from "../organization/system-bots.ts";
import { User } from "../users/user.protocol.ts";
import type { Database } from "../../schema.ts";

/** Longest single timer: the next check re-reads the store, so a far-off message is never left to setTimeout. */
const MAX_TIMER_MS = 60 * 60_000;
export const WAKE_INTERVAL_MS = 30_000;

type Row = {
  id: number;
  sender_id: number;
  type: string;
  stream_id: number | null;
  to_user_ids: number[];
  topic: string;
  content: string;
  rendered_content: string;
  scheduled_timestamp: number;
  read_by_sender: boolean | null;
  status: string;
  reminder_target_message_id: number | null;
};

/** Zulip's scheduled message object (GET /scheduled_messages and the scheduled_messages events). */
export function scheduledObject(r: Row) {
  return {
    scheduled_message_id: r.id,
    type: r.type,
    to: r.type === "stream" ? r.stream_id : r.to_user_ids,
    ...(r.type === "stream" ? { topic: r.topic } : {}),
    content: r.content,
    rendered_content: r.rendered_content,
    scheduled_delivery_timestamp: r.scheduled_timestamp,
    failed: r.status === "failed",
  };
}

/** Zulip's reminder object (GET /reminders and the reminders events). */
export function reminderObject(r: Row) {
  return {
    reminder_id: r.id,
    type: "private",
    to: [r.sender_id],
    content: r.content,
    rendered_content: r.rendered_content,
    scheduled_delivery_timestamp: r.scheduled_timestamp,
    failed: r.status === "failed",
    reminder_target_message_id: r.reminder_target_message_id!,
  };
}

/** The user's scheduled messages, or reminders, still to send or that failed, soonest first. */
function undelivered(db: Kysely<Database>, userId: number, reminders: boolean) {
  return db
    .selectFrom("scheduled_messages")
    .selectAll()
    .where("sender_id", "=", userId)
    .where("status", "in", ["pending", "failed"])
    .where("reminder_target_message_id", reminders ? "is not" : "is", null)
    .orderBy("scheduled_timestamp")
    .orderBy("id")
    .execute();
}

/** GET /scheduled_messages, POST /register. */
export async function scheduledMessagesOf(db: Kysely<Database>, userId: number) {
  return (await undelivered(db, userId, false)).map(scheduledObject);
}

/** GET /reminders, POST /register. */
export async function remindersOf(db: Kysely<Database>, userId: number) {
  return (await undelivered(db, userId, true)).map(reminderObject);
}

/** One of the user's scheduled messages still to send, or that failed (the ones PATCH /scheduled_messages/{id} may edit). */
export function editableScheduledMessage(db: Kysely<Database>, senderId: number, id: number) {
  return db
    .selectFrom("scheduled_messages")
    .selectAll()
    .where("id", "=", id)
    .where("sender_id", "=", senderId)
    .where("status", "in", ["pending", "failed"])
    .where("reminder_target_message_id", "is", null)
    .executeTakeFirst();
}

export const scheduledNotFound = () => new ChorusError("BAD_REQUEST", "Scheduled message does not exist", 404);
const reminderNotFound = () => new ChorusError("BAD_REQUEST", "Reminder does not exist", 404);

/** What the scheduler's timer tells it: deliver what is due (private to this actor). */
type SchedulerTimer = { tick: Op<{ op: "tick" }, Empty> };

export class SchedulerActor implements Actor {
  private readonly realmId: number;
  private cancelTimer?: () => void;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.realmId = Number(ctx.key);
  }

  async activate(): Promise<void> {
    await this.rearm();
  }

  /** The implementation of scheduler.protocol.ts, and of the timer's own message. */
  private static readonly handlers: Handlers<SchedulerProtocol & SchedulerTimer, SchedulerActor> = {
    create: (scheduler, msg) => scheduler.create(msg.acting, msg.spec),
    edit: (scheduler, msg) => scheduler.edit(msg.acting, msg.id, msg.spec),
    delete: (scheduler, msg) => scheduler.remove(msg.acting, msg.id),
    wake: (scheduler) => scheduler.deliverDue().then(() => ({})),
    tick: (scheduler) => scheduler.deliverDue().then(() => ({})),
    createReminder: (scheduler, msg) => scheduler.createReminder(msg),
    deleteReminder: (scheduler, msg) => scheduler.removeReminder(msg.acting, msg.id),
  };

  receive(msg: MessageOf<SchedulerProtocol & SchedulerTimer>): unknown {
    return dispatch(SchedulerActor.handlers, this, msg);
  }

  private values(spec: ScheduledSpec) {
    return {
      type: spec.type,
      stream_id: spec.streamId,
      to_user_ids: JSON.stringify(spec.toUserIds),
      topic: spec.topic,
      content: spec.content,
      rendered_content: renderMarkdown(spec.content),
      scheduled_timestamp: spec.scheduledTimestamp,
      read_by_sender: spec.readBySender,
    };
  }

  private async create(acting: Acting, spec: ScheduledSpec): Promise<{ scheduled_message_id: number }> {
    const row = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("scheduled_messages")
        .values({ realm_id: this.realmId, sender_id: acting.id, ...this.values(spec), delivered_message_id: null, failure_message: null })
        .returningAll()
        .executeTakeFirstOrThrow(),
    );
    await this.tellOwner(acting.id, { type: "scheduled_messages", op: "add", scheduled_messages: [scheduledObject(row)] });
    await this.rearm();
    return { scheduled_message_id: row.id };
  }

  private async edit(acting: Acting, id: number, spec: ScheduledSpec): Promise<Record<string, never>> {
    // Editing a failed message gives it another chance, as in Zulip.
    const row = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .updateTable("scheduled_messages")
        .set({ ...this.values(spec), status: "pending", failure_message: null })
        .where("id", "=", id)
        .where("sender_id", "=", acting.id)
        .where("status", "in", ["pending", "failed"])
        .where("reminder_target_message_id", "is", null)
        .returningAll()
        .executeTakeFirst(),
    );
    if (!row) throw scheduledNotFound();
    await this.tellOwner(acting.id, { type: "scheduled_messages", op: "update", scheduled_message: scheduledObject(row) });
    await this.rearm();
    return {};
  }

  private async remove(acting: Acting, id: number): Promise<Record<string, never>> {
    if (!(await this.deleteUndelivered(acting.id, id, false))) throw scheduledNotFound();
    await this.tellOwner(acting.id, { type: "scheduled_messages", op: "remove", scheduled_message_id: id });
    await this.rearm();
    return {};
  }

  /** Delete one of the user's scheduled messages (or reminders) still to send or failed; whether there was one. */
  private async deleteUndelivered(ownerId: number, id: number, reminder: boolean): Promise<boolean> {
    const gone = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .deleteFrom("scheduled_messages")
        .where("id", "=", id)
        .where("sender_id", "=", ownerId)
        .where("status", "in", ["pending", "failed"])
        .where("reminder_target_message_id", reminder ? "is not" : "is", null)
        .executeTakeFirst(),
    );
    return Number(gone.numDeletedRows) > 0;
  }

  private async createReminder(msg: CreateReminder): Promise<{ reminder_id: number }> {
    const row = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("scheduled_messages")
        .values({
          realm_id: this.realmId,
          sender_id: msg.acting.id,
          type: "private",
          stream_id: null,
          to_user_ids: JSON.stringify([msg.acting.id]),
          topic: "",
          content: msg.content,
          rendered_content: renderMarkdown(msg.content),
          scheduled_timestamp: msg.scheduledTimestamp,
          read_by_sender: null,
          delivered_message_id: null,
          failure_message: null,
          reminder_target_message_id: msg.messageId,
        })
        .returningAll()
        .executeTakeFirstOrThrow(),
    );
    await this.tellOwner(msg.acting.id, { type: "reminders", op: "add", reminders: [reminderObject(row)] });
    await this.rearm();
    return { reminder_id: row.id };
  }

  private async removeReminder(acting: Acting, id: number): Promise<Record<string, never>> {
    if (!(await this.deleteUndelivered(acting.id, id, true))) throw reminderNotFound();
    await this.tellOwner(acting.id, { type: "reminders", op: "remove", reminder_id: id });
    await this.rearm();
    return {};
  }

  /** Deliver every pending message that is due, oldest first, recording each outcome before the next. */
  private async deliverDue(): Promise<void> {
    const now = Math.floor(Date.now() / 1000);
    const due = await this.deps.store.db
      .selectFrom("scheduled_messages")
      .selectAll()
      .where("realm_id", "=", this.realmId)
      .where("status", "=", "pending")
      .where("scheduled_timestamp", "<=", now)
      .orderBy("scheduled_timestamp")
      .orderBy("id")
      .execute();
    for (const row of due) await this.deliver(row);
    await this.rearm();
  }

  private async deliver(row: Row): Promise<void> {
    let outcome: { status: "delivered"; messageId: number } | { status: "failed"; error: string };
    try {
      const sender = await this.deps.store.db.selectFrom("users").select(["email", "full_name", "is_active", "is_bot"]).where("id", "=", row.sender_id).executeTakeFirst();
      if (!sender?.is_active) throw errors.badRequest("Sender is deactivated");
      // A reminder comes from Notification Bot to its owner.
      const bot = row.reminder_target_message_id === null ? undefined : await ensureSystemBot(this.deps.store, this.ctx.fence(), this.deps.keyring, this.realmId);
      const from = bot ?? { id: row.sender_id, email: sender.email, full_name: sender.full_name };
      const send: SendToDm = {
        op: "send",
        senderId: from.id,
        sender: { email: from.email, full_name: from.full_name },
        content: row.content,
        client: bot ? "Internal" : "Zulip",
        sendKey: `scheduled:${row.id}`,
        readBySender: row.read_by_sender ?? true,
      };
      const sent =
        row.type === "stream"
          ? await this.deps.system().ref(Channel, row.stream_id!).ask({ ...send, topic: row.topic, automaticVisibility: !sender.is_bot })
          : await this.deps.system().ref(Dm, dmKey([from.id, ...row.to_user_ids])).ask(send);
      outcome = { status: "delivered", messageId: sent.id };
    } catch (err) {
      const error = ChorusError.wrap(err);
      // A lost worker or a fenced write says nothing about the message: leave it pending for the next tick.
      if (error.status >= 500) return;
      outcome = { status: "failed", error: error.message };
    }
    const updated = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .updateTable("scheduled_messages")
        .set(
          outcome.status === "delivered"
            ? { status: "delivered", delivered_message_id: outcome.messageId }
            : { status: "failed", failure_message: outcome.error },
        )
        .where("id", "=", row.id)
        .returningAll()
        .executeTakeFirstOrThrow(),
    );
    if (row.reminder_target_message_id !== null) {
      // Zulip's reminders events have no update: a failed reminder stays listed by GET /reminders with failed: true.
      if (outcome.status === "delivered") await this.tellOwner(row.sender_id, { type: "reminders", op: "remove", reminder_id: row.id });
      return;
    }
    await this.tellOwner(
      row.sender_id,
      outcome.status === "delivered"
        ? { type: "scheduled_messages", op: "remove", scheduled_message_id: row.id }
        : { type: "scheduled_messages", op: "update", scheduled_message: scheduledObject(updated) },
    );
  }

  /** One timer, for the earliest pending message. */
  private async rearm(): Promise<void> {
    this.cancelTimer?.();
    this.cancelTimer = undefined;
    const next = await this.deps.store.db
      .selectFrom("scheduled_messages")
      .select("scheduled_timestamp")
      .where("realm_id", "=", this.realmId)
      .where("status", "=", "pending")
      .orderBy("scheduled_timestamp")
      .limit(1)
      .executeTakeFirst();
    if (!next) return;
    const ms = Math.min(MAX_TIMER_MS, Math.max(0, next.scheduled_timestamp * 1000 - Date.now()));
    this.cancelTimer = this.ctx.schedule(ms, { op: "tick" } satisfies MessageOf<SchedulerTimer>);
  }

  private async tellOwner(userId: number, event: Record<string, unknown>): Promise<void> {
    await this.deps.system().broadcast(User, [userId], { op: "deliverEvent", event }); // in the queue before success
  }
}

/**
 * Wake every realm's scheduler now and every WAKE_INTERVAL_MS; returns the stop function. Every node runs it:
 * a wake is a no-op turn where nothing is due.
 */
export function wakeSchedulers(system: ActorSystem, store: Store<Database>, intervalMs = WAKE_INTERVAL_MS): () => void {
  const wake = async () => {
    const realms = await store.db.selectFrom("realms").select("id").where("deactivated", "=", false).execute();
    await Promise.all(realms.map((r) => system.ref(Scheduler, r.id).tell({ op: "wake" })));
  };
  const run = () => void wake().catch(() => {}); // shutting down, or the store is briefly away: the next wake retries
  run();
  const timer = setInterval(run, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
