/**
 * POST /submessage: a reader's addition to a widget message (a poll's vote or option, a todo list's task), Zulip's
 * process_submessage. Who may read the message may add to it; the conversation's actor checks the rest
 * (Conversation.addSubmessage) and tells everyone who has the message.
 */
import { readableMessage } from "../../actors/chat/reads/messages.ts";
import type { RouteSpec } from "./app.ts";
import { Id, Str } from "../params.ts";
import { acting, ownerOf } from "./messages.ts";

export const submessageRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/submessage",
    params: {
      type: "object",
      properties: { message_id: Id, msg_type: Str, content: Str },
      required: ["message_id", "msg_type", "content"],
    },
    async handle({ params, user, services }) {
      const row = await readableMessage(services.store.db, user, params.message_id);
      await ownerOf(services.system, row).ask({ op: "addSubmessage", messageId: row.id, acting: acting(user), msgType: params.msg_type, content: params.content });
      return {};
    },
  },
];
