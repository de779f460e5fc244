/**
 * scheduler:<realm id>: the realm's scheduled messages and reminders. Handlers: SchedulerActor.handlers in scheduler.ts.
 */
import { actorKind, type Empty, type Op } from "../../../runtime/protocol.ts";
import type { Acting } from "./conversation.protocol.ts";

/** A scheduled message as the gateway validated it; the scheduler renders and stores it. */
export interface ScheduledSpec {
  type: "stream" | "private";
  streamId: number | null;
  /** Direct messages: the recipients named (the sender is added at delivery). */
  toUserIds: number[];
  topic: string;
  content: string;
  scheduledTimestamp: number;
  readBySender: boolean | null;
}

export interface CreateScheduled {
  op: "create";
  acting: Acting;
  spec: ScheduledSpec;
}

export interface EditScheduled {
  op: "edit";
  acting: Acting;
  id: number;
  spec: ScheduledSpec;
}

export interface DeleteScheduled {
  op: "delete";
  acting: Acting;
  id: number;
}

/** POST /reminders: `content` is the reminder's, made by reminders.ts; Notification Bot sends it to `acting`. */
export interface CreateReminder {
  op: "createReminder";
  acting: Acting;
  messageId: number;
  content: string;
  scheduledTimestamp: number;
}

export interface DeleteReminder {
  op: "deleteReminder";
  acting: Acting;
  id: number;
}

/** Activate (after a restart or a shard move) and deliver whatever is due. */
export interface WakeScheduler {
  op: "wake";
}

export type SchedulerProtocol = {
  create: Op<CreateScheduled, { scheduled_message_id: number }>;
  edit: Op<EditScheduled, Empty>;
  delete: Op<DeleteScheduled, Empty>;
  wake: Op<WakeScheduler, Empty>;
  createReminder: Op<CreateReminder, { reminder_id: number }>;
  deleteReminder: Op<DeleteReminder, Empty>;
};

export const Scheduler = actorKind<SchedulerProtocol>("scheduler");
