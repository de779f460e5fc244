/** Messages: POST /messages (to a channel) and GET /messages. */
import { randomUUID } from "node:crypto";
import { actorId } from "../../runtime/actor.ts";
import { errors } from "../../runtime/errors.ts";
import { CHANNEL, type SendToChannel, type Sent } from "../../actors/protocol.ts";
import { parseNarrow, badNarrow } from "../../actors/narrow.ts";
import { fetchMessages, findStream, requireStream, type StreamRow } from "../../actors/reads.ts";
import type { RouteSpec } from "../app.ts";
import { Bool, Id, Str } from "../params.ts";
import { LIMITS, truncate } from "../zulip.ts";

const COUNT = { type: "integer", minimum: 0, maximum: LIMITS.max_messages_per_fetch } as const;

/** `to` for a channel: JSON first (an int is an id; a string or one-element list is a name), else the raw name. */
function channelRef(to: unknown): { id?: number; name?: string } {
  const value = Array.isArray(to) ? (to.length === 1 ? to[0] : undefined) : to;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return { id: value };
  if (typeof value === "string" && value.trim()) return { name: value.trim() };
  throw errors.badRequest("Invalid channel: 'to' must be one channel name or id");
}

/** Zulip reads "(no topic)" as the empty topic. */
function normaliseTopic(raw: string | undefined): string {
  const topic = (raw ?? "").trim();
  if (topic.includes("\u0000")) throw errors.badRequest("Topic must not contain null bytes");
  return topic === "(no topic)" ? "" : truncate(topic, LIMITS.max_topic_length, "...");
}

export const messageRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/messages",
    params: {
      type: "object",
      properties: {
        type: { type: "string", enum: ["direct", "private", "channel", "stream"] },
        to: { oneOf: [Id, Str, { type: "array", items: { oneOf: [Id, Str] } }] },
        content: Str,
        topic: Str,
        subject: Str,
        queue_id: Str,
        local_id: Str,
        read_by_sender: Bool,
      },
      required: ["type", "to", "content"],
    },
    async handle({ params, user, services }) {
      if (params.type === "direct" || params.type === "private") {
        throw errors.badRequest("Direct messages are not available on this server yet");
      }
      const content = String(params.content).replace(/\s+$/, "").replace(/^\n+/, "");
      if (!content) throw errors.badRequest("Message must not be empty");
      if (content.includes("\u0000")) throw errors.badRequest("Message must not contain null bytes");
      if (params.queue_id !== undefined && params.local_id === undefined) throw errors.missing("local_id");
      const stream = await requireStream(services.store.db, user.realm_id, channelRef(params.to));
      const send: SendToChannel = {
        op: "send",
        senderId: user.id,
        sender: { email: user.email, full_name: user.full_name },
        topic: normaliseTopic(params.topic ?? params.subject),
        content: truncate(content, LIMITS.max_message_length, "\n[message truncated]"),
        client: "API",
        sendKey: randomUUID(),
        queueId: params.queue_id,
        localId: params.local_id,
        readBySender: params.read_by_sender ?? true,
      };
      const sent = await services.system.ask<Sent>(actorId(CHANNEL, stream.id), send);
      return { id: sent.id };
    },
  },
  {
    method: "GET",
    path: "/messages",
    params: {
      type: "object",
      properties: {
        anchor: Str,
        include_anchor: { ...Bool, default: true },
        num_before: COUNT,
        num_after: COUNT,
        narrow: { type: "array" },
        client_gravatar: { ...Bool, default: true },
        apply_markdown: { ...Bool, default: true },
        use_first_unread_anchor: { ...Bool, default: false },
        allow_empty_topic_name: { ...Bool, default: false },
      },
      required: ["num_before", "num_after"],
    },
    async handle({ params, user, services }) {
      if (params.num_before + params.num_after > LIMITS.max_messages_per_fetch) {
        throw errors.badRequest(`Too many messages requested (maximum ${LIMITS.max_messages_per_fetch}).`);
      }
      const anchor = parseAnchor(params.anchor, params.use_first_unread_anchor);
      const narrow = parseNarrow(params.narrow);
      let stream: StreamRow | undefined;
      let topic: string | undefined;
      for (const term of narrow) {
        if (term.negated) throw badNarrow(`Invalid narrow: negated ${term.operator} is not supported yet`);
        if (term.operator === "channel") {
          const ref = typeof term.operand === "number" ? { id: term.operand } : { name: String(term.operand) };
          stream = await findStream(services.store.db, user.realm_id, ref);
          if (!stream) throw badNarrow("Invalid narrow operator: unknown channel");
        } else if (term.operator === "topic") topic = String(term.operand);
      }
      return fetchMessages(services.store.db, user, {
        anchor,
        numBefore: params.num_before,
        numAfter: params.num_after,
        includeAnchor: params.include_anchor,
        stream,
        topic,
        format: { applyMarkdown: params.apply_markdown, clientGravatar: params.client_gravatar },
      });
    },
  },
];

function parseAnchor(raw: string | undefined, useFirstUnread: boolean): number | "newest" | "oldest" | "first_unread" {
  if (raw === undefined) {
    if (useFirstUnread) return "first_unread";
    throw errors.missing("anchor");
  }
  if (useFirstUnread) throw errors.badRequest("Cannot use both anchor and use_first_unread_anchor");
  if (raw === "newest" || raw === "oldest" || raw === "first_unread") return raw;
  if (/^\d{1,16}$/.test(raw) && Number.isSafeInteger(Number(raw))) return Number(raw);
  throw errors.badRequest("Invalid anchor");
}
