/**
 * POST /typing: typing notifications, for a direct conversation or a channel topic. Soft state: no actor owns
 * them; the event goes straight to the recipients' user actors, which drop it for users who turned
 * receives_typing_notifications off. The sender is not notified of their own typing.
 *
 * POST /messages/{message_id}/typing: "editing this message" notifications (typing_edit_message), allowed to whoever
 * may edit the message's content now; as Zulip's, they reach everyone the saved edit would reach, the editor too.
 */

import { errors } from "../../runtime/errors.ts";
import { requireStream } from "../../actors/chat/reads/channels.ts";
import { subscribersOf } from "../../actors/chat/reads/subscriptions.ts";
import { activeUsersAmong, typingReceiversAmong } from "../../actors/chat/reads/users.ts";
import { readableMessage } from "../../actors/chat/reads/messages.ts";
import { contentEditRefusal, messageRules } from "../../actors/chat/conversations/message-rules.ts";
import { storedUserSettings, USER_SETTINGS_DEFAULTS } from "../../actors/chat/users/settings.ts";
import { User } from "../../actors/chat/users/user.protocol.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import type { RouteSpec } from "./app.ts";
import { Id } from "../params.ts";
import { LIMITS } from "./zulip.ts";

export const typingRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/typing",
    params: {
      type: "object",
      properties: {
        type: { type: "string", enum: ["direct", "private", "stream", "channel"], default: "direct" },
        op: { type: "string", enum: ["start", "stop"] },
        to: { type: "array", items: Id, minItems: 1 },
        stream_id: Id,
        topic: { type: "string", maxLength: LIMITS.max_topic_length },
      },
      required: ["op"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const sender = { user_id: user.id, email: user.email };
      let event: Record<string, unknown>;
      let notify: number[];
      if (params.type === "stream" || params.type === "channel") {
        if (params.stream_id === undefined) throw chatErrors.missing("stream_id");
        if (params.topic === undefined) throw chatErrors.missing("topic");
        const stream = await requireStream(db, user.realm_id, { id: params.stream_id });
        notify = (await subscribersOf(db, [stream.id])).get(stream.id) ?? [];
        if (stream.invite_only && !notify.includes(user.id)) throw errors.badRequest("Invalid channel ID");
        event = { type: "typing", op: params.op, message_type: "stream", sender, stream_id: stream.id, topic: params.topic };
      } else {
        if (!params.to) throw chatErrors.missing("to");
        const ids = [...new Set<number>([...params.to, user.id])];
        const rows = await activeUsersAmong(db, user.realm_id, ids);
        if (rows.length !== ids.length) throw errors.badRequest("Invalid user ID");
        const recipients = rows.map((r) => ({ user_id: r.id, email: r.email })).sort((a, b) => a.user_id - b.user_id);
        notify = recipients.map((r) => r.user_id);
        event = { type: "typing", op: params.op, message_type: "direct", sender, recipients };
      }
      const targets = notify.filter((id) => id !== user.id);
      await services.system.broadcast(User, targets, { op: "deliverEvent", event });
      return {};
    },
  },
  {
    method: "POST",
    path: "/messages/{message_id}/typing",
    params: { type: "object", properties: { message_id: Id, op: { type: "string", enum: ["start", "stop"] } }, required: ["message_id", "op"] },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const message = await readableMessage(db, user, params.message_id);
      const { date_sent } = await db.selectFrom("messages").select("date_sent").where("id", "=", message.id).executeTakeFirstOrThrow();
      const refusal = contentEditRefusal(await messageRules(db, user.realm_id), { sender_id: message.sender_id, date_sent }, user.id, Math.floor(Date.now() / 1000));
      if (refusal) throw refusal;
      const own = { ...USER_SETTINGS_DEFAULTS, ...(await storedUserSettings(services.store, user.id)) };
      let recipient: Record<string, unknown>;
      let notify: number[];
      if (message.stream_id !== null) {
        if (!own.send_stream_typing_notifications) throw errors.badRequest("User has disabled typing notifications for channel messages");
        const subscribers = (await subscribersOf(db, [message.stream_id])).get(message.stream_id) ?? [];
        notify = await typingReceiversAmong(db, user.realm_id, subscribers);
        recipient = { type: "channel", channel_id: message.stream_id, topic: message.topic };
      } else {
        if (!own.send_private_typing_notifications) throw errors.badRequest("User has disabled typing notifications for direct messages");
        const participants = (message.dm_key ?? "").split(",").filter(Boolean).map(Number);
        notify = await typingReceiversAmong(db, user.realm_id, participants);
        recipient = { type: "direct", user_ids: notify };
      }
      const event = { type: "typing_edit_message", op: params.op, sender_id: user.id, message_id: message.id, recipient };
      await services.system.broadcast(User, notify, { op: "deliverEvent", event });
      return {};
    },
  },
];
