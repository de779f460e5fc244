/**
 * POST /typing: typing notifications, for a direct conversation or a channel topic. Soft state: no actor owns
 * them; the event goes straight to the recipients' user actors, which drop it for users who turned
 * receives_typing_notifications off. The sender is not notified of their own typing.
 */

import { errors } from "../../runtime/errors.ts";
import { requireStream } from "../../actors/chat/reads/channels.ts";
import { subscribersOf } from "../../actors/chat/reads/subscriptions.ts";
import { activeUsersAmong } from "../../actors/chat/reads/users.ts";
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
];
