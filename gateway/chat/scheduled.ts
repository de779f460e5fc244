/**
 * Scheduled messages: create, list, edit, delete; and reminders (create, list, delete). Delivery is the realm's
 * scheduler actor's (actors/chat/conversations/scheduler.ts).
 */

import { errors } from "../../runtime/errors.ts";
import { editableScheduledMessage, remindersOf, scheduledMessagesOf, scheduledNotFound, scheduledObject } from "../../actors/chat/conversations/scheduler.ts";
import { reminderContent } from "../../actors/chat/conversations/reminders.ts";
import { readableMessage } from "../../actors/chat/reads/messages.ts";
import { LIMITS } from "./zulip.ts";
import { isSubscribed } from "../../actors/chat/reads/subscriptions.ts";
import { requireStream } from "../../actors/chat/reads/channels.ts";
import type { UserRow } from "../../actors/chat/reads/users.ts";
import { Scheduler, type ScheduledSpec } from "../../actors/chat/conversations/scheduler.protocol.ts";
import type { RouteSpec, Services } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";
import { acting, directRecipients, normaliseContent, normaliseTopic } from "./messages.ts";

const TYPE = { type: "string", enum: ["direct", "private", "channel", "stream"] } as const;
const TO = { oneOf: [Id, { type: "array", items: Id }] } as const;

interface Draft {
  type: string;
  to: number | number[];
  content: string;
  topic?: string;
  scheduled_delivery_timestamp: number;
  read_by_sender?: boolean | null;
}

/** Check a scheduled message as a send would be checked now, and shape it for the scheduler. */
function checkFuture(timestamp: number): void {
  if (timestamp <= Math.floor(Date.now() / 1000)) throw errors.badRequest("Scheduled delivery time must be in the future.");
}

async function specFor(services: Services, user: UserRow, d: Draft): Promise<ScheduledSpec> {
  const content = normaliseContent(d.content);
  if (!content) throw errors.badRequest("Message must not be empty");
  checkFuture(d.scheduled_delivery_timestamp);
  const base = { content, scheduledTimestamp: d.scheduled_delivery_timestamp, readBySender: d.read_by_sender ?? null };
  if (d.type === "direct" || d.type === "private") {
    const ids = await directRecipients(services, user, Array.isArray(d.to) ? d.to : [d.to]);
    if (!ids.length) throw errors.badRequest("Message must have recipients");
    return { type: "private", streamId: null, toUserIds: [...new Set(ids)], topic: "", ...base };
  }
  if (Array.isArray(d.to) && d.to.length !== 1) throw errors.badRequest("Invalid channel: 'to' must be one channel id");
  const streamId = Array.isArray(d.to) ? d.to[0]! : d.to;
  const stream = await requireStream(services.store.db, user.realm_id, { id: streamId });
  if (stream.invite_only && !(await isSubscribed(services.store.db, user.id, stream.id))) {
    throw errors.badRequest(`Not authorized to send to channel '${stream.name}'`);
  }
  return { type: "stream", streamId: stream.id, toUserIds: [], topic: normaliseTopic(d.topic), ...base };
}

export const scheduledRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/scheduled_messages",
    params: {
      type: "object",
      properties: { type: TYPE, to: TO, content: Str, topic: Str, scheduled_delivery_timestamp: Id, read_by_sender: Bool },
      required: ["type", "to", "content", "scheduled_delivery_timestamp"],
    },
    async handle({ params, user, services }) {
      const spec = await specFor(services, user, params as Draft);
      return services.system.ref(Scheduler, user.realm_id).ask({ op: "create", acting: acting(user), spec });
    },
  },
  {
    method: "GET",
    path: "/scheduled_messages",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { scheduled_messages: await scheduledMessagesOf(services.store.db, user.id) };
    },
  },
  {
    method: "PATCH",
    path: "/scheduled_messages/{scheduled_message_id}",
    params: {
      type: "object",
      properties: { scheduled_message_id: Id, type: TYPE, to: TO, content: Str, topic: Str, scheduled_delivery_timestamp: Id },
      required: ["scheduled_message_id"],
    },
    async handle({ params, user, services }) {
      const row = await editableScheduledMessage(services.store.db, user.id, params.scheduled_message_id);
      if (!row) throw scheduledNotFound();
      if (params.type !== undefined && params.to === undefined) throw errors.badRequest("Recipient required when updating type of scheduled message.");
      const current = scheduledObject(row);
      const spec = await specFor(services, user, {
        type: params.type ?? row.type,
        to: params.to ?? (current.to as number | number[]),
        content: params.content ?? row.content,
        topic: params.topic ?? row.topic,
        scheduled_delivery_timestamp: params.scheduled_delivery_timestamp ?? row.scheduled_timestamp,
        read_by_sender: row.read_by_sender,
      });
      return services.system.ref(Scheduler, user.realm_id).ask({ op: "edit", acting: acting(user), id: row.id, spec });
    },
  },
  {
    method: "DELETE",
    path: "/scheduled_messages/{scheduled_message_id}",
    params: { type: "object", properties: { scheduled_message_id: Id }, required: ["scheduled_message_id"] },
    async handle({ params, user, services }) {
      return services.system.ref(Scheduler, user.realm_id).ask({ op: "delete", acting: acting(user), id: params.scheduled_message_id });
    },
  },
  {
    method: "POST",
    path: "/reminders",
    params: {
      type: "object",
      properties: { message_id: Id, scheduled_delivery_timestamp: Id, note: Str },
      required: ["message_id", "scheduled_delivery_timestamp"],
    },
    async handle({ params, user, services, req }) {
      const db = services.store.db;
      const message = await readableMessage(db, user, params.message_id);
      checkFuture(params.scheduled_delivery_timestamp);
      const content = await reminderContent(db, services.siteUrl(req.headers.host), message, params.note, LIMITS.max_message_length);
      return services.system
        .ref(Scheduler, user.realm_id)
        .ask({ op: "createReminder", acting: acting(user), messageId: message.id, content, scheduledTimestamp: params.scheduled_delivery_timestamp });
    },
  },
  {
    method: "GET",
    path: "/reminders",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { reminders: await remindersOf(services.store.db, user.id) };
    },
  },
  {
    method: "DELETE",
    path: "/reminders/{reminder_id}",
    params: { type: "object", properties: { reminder_id: Id }, required: ["reminder_id"] },
    async handle({ params, user, services }) {
      return services.system.ref(Scheduler, user.realm_id).ask({ op: "deleteReminder", acting: acting(user), id: params.reminder_id });
    },
  },
];
