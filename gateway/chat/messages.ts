/**
 * Messages: send (channel and direct), fetch, edit / move, delete, flags (by id, by narrow, and the legacy
 * mark-as-read calls), rendering a draft, matching messages against a narrow, read receipts. Handlers
 * decode and check the request, find the actor owning the conversation, and ask it; reads go to the read modules in actors/chat/reads/.
 */
import { randomUUID } from "node:crypto";
import type { ActorRef } from "../../runtime/protocol.ts";
import type { ActorSystem } from "../../runtime/system.ts";
import { ChorusError, errors } from "../../runtime/errors.ts";
import { Channel } from "../../actors/chat/conversations/channel.protocol.ts";
import type { Acting, ConversationProtocol, PropagateMode, SendToChannel, Sent } from "../../actors/chat/conversations/conversation.protocol.ts";
import { Dm, type SendToDm } from "../../actors/chat/conversations/dm.protocol.ts";
import { Flags } from "../../actors/chat/conversations/flags.protocol.ts";
import type { Narrow } from "../../actors/chat/users/user.protocol.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import { abandonAttempt, notSent } from "../../actors/chat/message-log.ts";
import { dmKey } from "../../actors/chat/conversations/dm.ts";
import { checkEditableFlag } from "../../actors/chat/conversations/flags.ts";
import { parseNarrow } from "../../actors/chat/reads/narrow.ts";
import { MAX_REPORT_DESCRIPTION, moderationChannel, REPORT_TYPES, reportNotice } from "../../actors/chat/conversations/reports.ts";
import { EMPTY_TOPIC_DISPLAY_NAME } from "../../actors/chat/reads/topics.ts";
import {
  fetchMessages,
  LARGER_THAN_MAX_MESSAGE_ID,
  messageIdsInRange,
  messagesMatchingNarrow,
  readableMessage,
  readableMessages,
  readReceiptUserIds,
  receivedInTopic,
  type MessageJson,
} from "../../actors/chat/reads/messages.ts";
import { readableStream } from "../../actors/chat/reads/subscriptions.ts";
import { renderMarkdown } from "../../actors/chat/rendering/markdown.ts";
import { markdownContext } from "../../actors/chat/rendering/mentions.ts";
import { realmSettings } from "../../actors/chat/users/settings.ts";
import { requireStream } from "../../actors/chat/reads/channels.ts";
import { usersByRef, type UserRow } from "../../actors/chat/reads/users.ts";
import { ROLE } from "../../actors/chat/organization/groups.ts";
import { SerializedFields, type RouteSpec, type Services } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";
import { clientName, LIMITS } from "./zulip.ts";
import { truncateCharacters } from "../../actors/chat/conversations/characters.ts";

/** num_before / num_after: their sum is capped, as in Zulip, with one message for both ("Too many messages requested"). */
const COUNT = { type: "integer", minimum: 0 } as const;
const PROPAGATE = { type: "string", enum: ["change_one", "change_later", "change_all"] } as const;
const FLAG_OP = { type: "string", enum: ["add", "remove"] } as const;
/** Zulip's bound on the messages one POST /messages/flags/narrow changes (zerver/views/message_flags.py). */
const MAX_MESSAGES_PER_UPDATE = 5000;

/** `to` for a channel: JSON first (an int is an id; a string or one-element list is a name), else the raw name. */
function channelRef(to: unknown): { id?: number; name?: string } {
  const value = Array.isArray(to) ? (to.length === 1 ? to[0] : undefined) : to;
  refuseNullBytes(to);
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return { id: value };
  if (typeof value === "string" && value.trim()) return { name: value.trim() };
  throw errors.badRequest("Invalid channel: 'to' must be one channel name or id");
}

/** A NUL inside JSON text (`\u0000`) passes the raw-text check; Postgres would refuse it in a query. */
function refuseNullBytes(to: unknown): void {
  const strings = Array.isArray(to) ? to : [to];
  if (strings.some((s) => typeof s === "string" && s.includes("\u0000"))) throw errors.badRequest("to contains NULL (0x00) characters.");
}

/** `to` for a direct message: a JSON list of ids or e-mails, one id, or comma-separated e-mails. */
function directRefs(to: unknown): Array<number | string> {
  const list = Array.isArray(to) ? to : typeof to === "number" ? [to] : String(to).split(",");
  const refs = list.map((r) => (typeof r === "string" ? r.trim() : r)).filter((r) => r !== "");
  if (!refs.length) throw errors.badRequest("Message must have recipients");
  refuseNullBytes(refs);
  return refs as Array<number | string>;
}

/** The active users named, in the caller's realm; Zulip's errors for unknown ids and e-mails. */
export async function directRecipients(services: Services, caller: UserRow, refs: Array<number | string>): Promise<number[]> {
  const rows = await usersByRef(services.store.db, caller.realm_id, refs);
  return refs.map((r, i) => {
    const row = rows[i];
    if (!row || !row.is_active) throw errors.badRequest(typeof r === "number" ? `Invalid user ID ${r}` : `Invalid email '${r}'`);
    return row.id;
  });
}

/** Zulip reads "(no topic)" and the empty-topic display name as the empty topic. */
export function normaliseTopic(raw: string | undefined): string {
  const topic = (raw ?? "").trim();
  if (topic.includes("\u0000")) throw errors.badRequest("Topic must not contain null bytes");
  return topic === "(no topic)" || topic === EMPTY_TOPIC_DISPLAY_NAME ? "" : truncateCharacters(topic, LIMITS.max_topic_length, "...");
}

/** Content as Zulip stores it: trailing whitespace and leading blank lines dropped, truncated past the limit. */
export function normaliseContent(raw: string): string {
  const content = raw.replace(/\s+$/, "").replace(/^\n+/, "");
  if (content.includes("\u0000")) throw errors.badRequest("Message must not contain null bytes");
  return truncateCharacters(content, LIMITS.max_message_length, "\n[message truncated]");
}

/** Who acts, for the owning actor's permission checks. */
export function acting(user: UserRow): Acting {
  return { id: user.id, role: user.role, email: user.email, full_name: user.full_name, is_bot: user.is_bot };
}

/** The actor that owns a readable message's conversation. */
export function ownerOf(system: ActorSystem, row: { stream_id: number | null; dm_key: string | null }): ActorRef<ConversationProtocol> {
  return row.stream_id !== null ? system.ref(Channel, row.stream_id) : system.ref(Dm, row.dm_key!);
}

/** Past this length an Idempotency-Key is refused (a UUID is 36 characters). */
const MAX_IDEMPOTENCY_KEY = 255;

/**
 * What identifies a send across a client's retries, scoped to the sender: the `Idempotency-Key` header, else the
 * `queue_id` + `local_id` Zulip's clients send (unique per message of one event queue), else nothing repeatable
 * (a random key: the request is its only attempt).
 */
function sendKeyOf(senderId: number, idempotencyKey: string | undefined, queueId: string | undefined, localId: string | undefined): string {
  if (idempotencyKey !== undefined) {
    const key = idempotencyKey.trim();
    if (!key || key.length > MAX_IDEMPOTENCY_KEY || key.includes("\u0000")) {
      throw errors.badRequest(`Invalid Idempotency-Key header: 1 to ${MAX_IDEMPOTENCY_KEY} characters expected`);
    }
    return `${senderId}:key:${key}`;
  }
  if (queueId !== undefined && localId !== undefined) return `${senderId}:local:${queueId}:${localId}`;
  return randomUUID();
}

/** How long the gateway keeps trying to settle a send's outcome while the store does not answer. */
const SETTLE_TRIES_MS = 5_000;

/**
 * A send's answer, made true: when the ask failed without the owner refusing it (a timeout, the transport or the
 * store failing: 5xx), the message may yet be stored, or be stored later from an entry still in the transport.
 * The gateway then abandons the attempt (message-log.ts abandonAttempt): if the message committed first, the send
 * succeeded and is answered with its id; otherwise it never will, and the answer says it was not sent. Only when the
 * store cannot be asked either is the outcome unknown, and the answer says that, and how to retry safely.
 */
async function truthOf(services: Services, send: SendToDm, asked: Promise<Sent>): Promise<Sent> {
  try {
    return await asked;
  } catch (err) {
    const failure = ChorusError.wrap(err);
    if (failure.status < 500) throw failure;
    const giveUp = Date.now() + SETTLE_TRIES_MS;
    for (;;) {
      try {
        const id = await abandonAttempt(services.store.db, send.sendKey, send.attempt!);
        if (id === undefined) throw notSent();
        return { id };
      } catch (settling) {
        if (settling instanceof ChorusError) throw settling;
        if (Date.now() > giveUp) throw outcomeUnknown();
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }
}

/** The store could not be asked whether a failed send was stored. */
function outcomeUnknown(): ChorusError {
  return new ChorusError(
    "SEND_OUTCOME_UNKNOWN",
    "The server could not confirm whether the message was sent. Send it again with the same Idempotency-Key header (or queue_id and local_id) to have it stored once.",
    503,
  );
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
    async handle({ params, user, req, services }) {
      const content = normaliseContent(String(params.content));
      if (!content) throw errors.badRequest("Message must not be empty");
      if (params.queue_id !== undefined && params.local_id === undefined) throw chatErrors.missing("local_id");
      // The fields of both kinds of send. Spread last, never first: `{ ...fields, more }` made every send's object
      // outlive young-generation GCs (see docs/performance.md).
      const fields = {
        senderId: user.id,
        sender: { email: user.email, full_name: user.full_name },
        content,
        client: clientName(req.headers["user-agent"]),
        sendKey: sendKeyOf(user.id, req.headers["idempotency-key"], params.queue_id, params.local_id),
        attempt: randomUUID(),
        queueId: params.queue_id,
        localId: params.local_id,
        readBySender: params.read_by_sender ?? true,
      };
      if (params.type === "direct" || params.type === "private") {
        const ids = await directRecipients(services, user, directRefs(params.to));
        const send: SendToDm = { op: "send", ...fields };
        const sent = await truthOf(services, send, services.system.ref(Dm, dmKey([user.id, ...ids])).askDirect(send));
        return { id: sent.id };
      }
      const stream = await requireStream(services.store.db, user.realm_id, channelRef(params.to));
      const send: SendToChannel = {
        op: "send",
        topic: normaliseTopic(params.topic ?? params.subject),
        senderIsGuest: user.role === ROLE.guest,
        automaticVisibility: !user.is_bot,
        ...fields,
      };
      const sent = await truthOf(services, send, services.system.ref(Channel, stream.id).askDirect(send));
      return { ...sent };
    },
  },
  {
    method: "GET",
    path: "/messages",
    params: {
      type: "object",
      properties: {
        anchor: Str,
        include_anchor: Bool,
        num_before: COUNT,
        num_after: COUNT,
        narrow: { type: "array" },
        message_ids: { type: "array", items: Id, maxItems: LIMITS.max_messages_per_fetch },
        client_gravatar: { ...Bool, default: true },
        apply_markdown: { ...Bool, default: true },
        use_first_unread_anchor: Bool,
        allow_empty_topic_name: { ...Bool, default: false },
      },
    },
    async handle({ params, user, services }) {
      const narrow = parseNarrow(params.narrow);
      const format = { applyMarkdown: params.apply_markdown, clientGravatar: params.client_gravatar };
      const base = { narrow, format, allowEmptyTopicName: params.allow_empty_topic_name };
      if (params.message_ids !== undefined) {
        for (const name of ["anchor", "include_anchor", "use_first_unread_anchor", "num_before", "num_after"]) {
          if (params[name] !== undefined) throw errors.badRequest(`Unsupported parameter combination: ${name}, message_ids`);
        }
        return fetchedJson(await fetchMessages(services.store.db, user, { anchor: 0, numBefore: 0, numAfter: 0, includeAnchor: true, messageIds: params.message_ids, ...base }));
      }
      if (params.num_before === undefined) throw chatErrors.missing("num_before");
      if (params.num_after === undefined) throw chatErrors.missing("num_after");
      if (params.num_before + params.num_after > LIMITS.max_messages_per_fetch) {
        throw errors.badRequest(`Too many messages requested (maximum ${LIMITS.max_messages_per_fetch}).`);
      }
      const near = narrow.find((t) => t.operator === "near" && !t.negated);
      const anchor = near ? (near.operand as number) : parseAnchor(params.anchor, params.use_first_unread_anchor ?? false);
      return fetchedJson(
        await fetchMessages(services.store.db, user, {
          anchor,
          numBefore: params.num_before,
          numAfter: params.num_after,
          includeAnchor: params.include_anchor ?? true,
          ...base,
        }),
      );
    },
  },
  {
    // Zulip's json_fetch_raw_message: the same access rule as the routes acting on a message, and the message as
    // GET /messages shows it (flags ["read", "historical"] where the user has none), with its raw Markdown beside.
    method: "GET",
    path: "/messages/{message_id}",
    params: {
      type: "object",
      properties: { message_id: Id, apply_markdown: { ...Bool, default: true }, allow_empty_topic_name: { ...Bool, default: false } },
      required: ["message_id"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const row = await readableMessage(db, user, params.message_id);
      // Naming the channel reaches its history, as readableMessage does for public channels not subscribed to.
      const narrow: Narrow = row.stream_id === null ? [] : [{ operator: "channel", operand: row.stream_id, negated: false }];
      const { messages } = await fetchMessages(db, user, {
        anchor: 0,
        numBefore: 0,
        numAfter: 0,
        includeAnchor: true,
        messageIds: [row.id],
        narrow,
        format: { applyMarkdown: params.apply_markdown, clientGravatar: true },
        allowEmptyTopicName: params.allow_empty_topic_name,
      });
      if (!messages[0]) throw errors.badRequest("Invalid message(s)");
      return new SerializedFields(`"raw_content":${JSON.stringify(row.content)},"message":${messages[0]}`);
    },
  },
  {
    // Zulip's get_message_edit_history: the stored entries (newest first, each with what came before) replayed
    // from the current message back to the original, oldest first in the answer.
    method: "GET",
    path: "/messages/{message_id}/history",
    params: { type: "object", properties: { message_id: Id, allow_empty_topic_name: { ...Bool, default: false } }, required: ["message_id"] },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const row = await readableMessage(db, user, params.message_id);
      const stored = await db.selectFrom("messages").select(["rendered_content", "date_sent", "edit_history"]).where("id", "=", row.id).executeTakeFirstOrThrow();
      const topicName = (topic: string) => (topic === "" && !params.allow_empty_topic_name ? EMPTY_TOPIC_DISPLAY_NAME : topic);
      let content = row.content;
      let rendered = stored.rendered_content;
      let topic = topicName(row.topic);
      const history: Array<Record<string, unknown>> = [];
      for (const entry of (stored.edit_history ?? []) as Array<Record<string, any>>) {
        const snapshot: Record<string, unknown> = { content, rendered_content: rendered, timestamp: entry.timestamp, topic, user_id: entry.user_id };
        if (entry.prev_topic !== undefined) snapshot.prev_topic = topic = topicName(entry.prev_topic);
        if (entry.prev_content !== undefined) {
          // Zulip highlights the differences in this HTML; the new version, unhighlighted, until a diff is built.
          snapshot.content_html_diff = rendered;
          snapshot.prev_content = content = entry.prev_content;
          snapshot.prev_rendered_content = rendered = entry.prev_rendered_content;
        }
        if (entry.prev_stream !== undefined) Object.assign(snapshot, { prev_stream: entry.prev_stream, stream: entry.stream });
        history.push(snapshot);
      }
      history.push({ content, rendered_content: rendered, timestamp: stored.date_sent, topic, user_id: row.sender_id });
      return { message_history: history.reverse() };
    },
  },
  {
    method: "PATCH",
    path: "/messages/{message_id}",
    params: {
      type: "object",
      properties: {
        message_id: Id,
        topic: Str,
        subject: Str,
        propagate_mode: PROPAGATE,
        send_notification_to_old_thread: Bool,
        send_notification_to_new_thread: Bool,
        content: Str,
        prev_content_sha256: Str,
        stream_id: Id,
      },
      required: ["message_id"],
    },
    async handle({ params, user, services }) {
      const rawTopic: string | undefined = params.topic ?? params.subject;
      const propagateMode: PropagateMode = params.propagate_mode ?? "change_one";
      if (params.content !== undefined && params.stream_id !== undefined) throw errors.badRequest("Cannot change message content while changing channel");
      if (params.content === undefined && rawTopic === undefined && params.stream_id === undefined) throw errors.badRequest("Nothing to change");
      if (propagateMode !== "change_one" && rawTopic === undefined && params.stream_id === undefined) throw errors.badRequest("Invalid propagate_mode without topic edit");
      const row = await readableMessage(services.store.db, user, params.message_id);
      // Zulip keeps an emptied message as "(deleted)" rather than refusing the edit.
      const content = params.content === undefined ? undefined : normaliseContent(String(params.content)) || "(deleted)";
      const edited = await ownerOf(services.system, row).ask({
        op: "edit",
        messageId: row.id,
        acting: acting(user),
        content,
        prevContentSha256: params.prev_content_sha256,
        topic: rawTopic === undefined ? undefined : normaliseTopic(rawTopic),
        streamId: params.stream_id,
        propagateMode,
        notifyOldThread: params.send_notification_to_old_thread ?? false,
        notifyNewThread: params.send_notification_to_new_thread ?? true,
      });
      return { detached_uploads: edited.detached_uploads };
    },
  },
  {
    method: "DELETE",
    path: "/messages/{message_id}",
    params: { type: "object", properties: { message_id: Id }, required: ["message_id"] },
    async handle({ params, user, services }) {
      const row = await readableMessage(services.store.db, user, params.message_id);
      await ownerOf(services.system, row).ask({ op: "delete", messageId: row.id, acting: acting(user) });
      return {};
    },
  },
  {
    method: "POST",
    path: "/messages/{message_id}/report",
    params: {
      type: "object",
      properties: { message_id: Id, report_type: { type: "string", enum: [...REPORT_TYPES] }, description: { type: "string", maxLength: MAX_REPORT_DESCRIPTION } },
      required: ["message_id", "report_type"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const channel = await moderationChannel(db, user.realm_id);
      const description = String(params.description ?? "").trim();
      if (params.report_type === "other" && !description) throw errors.badRequest("For reason=other, an explanation must be provided.");
      const row = await readableMessage(db, user, params.message_id);
      const notice = await reportNotice(db, user.id, row, params.report_type, description);
      await services.system.ref(Channel, channel).ask({ op: "notify", ...notice });
      return {};
    },
  },
  {
    method: "POST",
    path: "/messages/flags",
    params: {
      type: "object",
      properties: { messages: { type: "array", items: Id, maxItems: 10_000 }, op: FLAG_OP, flag: Str },
      required: ["messages", "op", "flag"],
    },
    async handle({ params, user, services }) {
      const flag = checkEditableFlag(params.flag);
      const ids: number[] = [...new Set<number>(params.messages)];
      const rows = await readableMessages(services.store.db, user, ids);
      if (rows.length !== ids.length) throw errors.badRequest("Invalid message(s)");
      await services.system.ref(Flags, user.id).ask({ op: "updateFlags", add: params.op === "add", flag, messageIds: ids, details: unreadDetails(rows, user.id) });
      return { messages: ids };
    },
  },
  {
    // Zulip's update_message_flags_for_narrow: the range GET /messages would read (at most MAX_MESSAGES_PER_UPDATE
    // messages), then the same flag change as POST /messages/flags. The mobile app marks a narrow read with it,
    // anchored at the last processed id until found_newest.
    method: "POST",
    path: "/messages/flags/narrow",
    params: {
      type: "object",
      properties: {
        anchor: Str,
        include_anchor: { ...Bool, default: true },
        num_before: COUNT,
        num_after: COUNT,
        narrow: { type: "array" },
        op: FLAG_OP,
        flag: Str,
      },
      required: ["anchor", "num_before", "num_after", "narrow", "op", "flag"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const anchor = parseAnchor(params.anchor, false);
      const flag = checkEditableFlag(params.flag);
      if (params.num_before > 0 && params.num_after > 0 && !params.include_anchor) throw errors.badRequest("The anchor can only be excluded at an end of the range");
      // Zulip's clamp: num_before + num_after stays within the batch, num_before keeping at least half of it.
      const numBefore = Math.min(params.num_before, Math.max(MAX_MESSAGES_PER_UPDATE - params.num_after, MAX_MESSAGES_PER_UPDATE / 2));
      const numAfter = Math.min(params.num_after, MAX_MESSAGES_PER_UPDATE - numBefore);
      const range = await messageIdsInRange(db, user, { anchor, numBefore, numAfter, includeAnchor: params.include_anchor, narrow: parseNarrow(params.narrow) });
      const { ids } = range;
      const add = params.op === "add";
      // Only a mark-as-unread event carries where each message is.
      const details = !add && flag === "read" && ids.length ? unreadDetails(await readableMessages(db, user, ids), user.id) : undefined;
      const updated = ids.length ? await services.system.ref(Flags, user.id).ask({ op: "updateFlags", add, flag, messageIds: ids, details }) : { messages: [] };
      return {
        processed_count: ids.length,
        updated_count: updated.messages.length,
        first_processed_id: ids[0] ?? null,
        last_processed_id: ids.at(-1) ?? null,
        found_oldest: range.found_oldest,
        found_newest: range.found_newest,
      };
    },
  },
  {
    // Deprecated for POST /messages/flags/narrow, still what the Python bindings and zulip-terminal call.
    method: "POST",
    path: "/mark_all_as_read",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      await services.system.ref(Flags, user.id).ask({ op: "markAllRead" });
      return { complete: true };
    },
  },
  {
    method: "POST",
    path: "/mark_stream_as_read",
    params: { type: "object", properties: { stream_id: Id }, required: ["stream_id"] },
    async handle({ params, user, services }) {
      const stream = await readableStream(services.store.db, user, { id: params.stream_id });
      await services.system.ref(Flags, user.id).ask({ op: "markChannelRead", streamId: stream.id });
      return {};
    },
  },
  {
    method: "POST",
    path: "/mark_topic_as_read",
    params: { type: "object", properties: { stream_id: Id, topic_name: Str }, required: ["stream_id", "topic_name"] },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const stream = await readableStream(db, user, { id: params.stream_id });
      // The empty topic's display name names the empty topic, as everywhere a topic is named.
      const topic = params.topic_name === EMPTY_TOPIC_DISPLAY_NAME ? "" : params.topic_name;
      if (topic && !(await receivedInTopic(db, user.id, stream.id, topic))) throw errors.badRequest(`No such topic '${params.topic_name}'`);
      await services.system.ref(Flags, user.id).ask({ op: "markChannelRead", streamId: stream.id, topic });
      return {};
    },
  },
  {
    // Zulip's render_message_backend: the content rendered as a message of the caller's would be, the realm's
    // users, groups and channels resolved; nothing is stored.
    method: "POST",
    path: "/messages/render",
    params: { type: "object", properties: { content: Str }, required: ["content"] },
    async handle({ params, user, services }) {
      const content: string = params.content;
      return { rendered: renderMarkdown(content, await markdownContext(services.store.db, user.realm_id, content)).html };
    },
  },
  {
    // Zulip's messages_in_narrow_backend: clients ask which newly arrived messages belong in a view they cannot
    // decide themselves (a search), and get the search highlighting beside.
    method: "GET",
    path: "/messages/matches_narrow",
    params: {
      type: "object",
      properties: { msg_ids: { type: "array", items: Id, maxItems: LIMITS.max_messages_per_fetch }, narrow: { type: "array" } },
      required: ["msg_ids", "narrow"],
    },
    async handle({ params, user, services }) {
      return { messages: await messagesMatchingNarrow(services.store.db, user, [...new Set<number>(params.msg_ids)], parseNarrow(params.narrow)) };
    },
  },
  {
    // Zulip's read_receipts view: the message as the routes acting on it reach it, then who has it marked read.
    method: "GET",
    path: "/messages/{message_id}/read_receipts",
    params: { type: "object", properties: { message_id: Id }, required: ["message_id"] },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const row = await readableMessage(db, user, params.message_id);
      if (!(await realmSettings(db, user.realm_id)).realm_enable_read_receipts) throw errors.badRequest("Read receipts are disabled in this organization.");
      return { user_ids: await readReceiptUserIds(db, row) };
    },
  },
];

/** Zulip's message_details of a mark-as-unread event: where each message is, for the client's unread counts. */
function unreadDetails(rows: Array<{ id: number; stream_id: number | null; topic: string; dm_key: string | null }>, userId: number) {
  return Object.fromEntries(
    rows.map((r) => [
      r.id,
      r.stream_id !== null
        ? { type: "stream", stream_id: r.stream_id, topic: r.topic, unmuted_stream_msg: true }
        : { type: "private", user_ids: r.dm_key!.split(",").map(Number).filter((u) => u !== userId) },
    ]),
  );
}

/**
 * Zulip's parse_anchor_value: `use_first_unread_anchor` wins over any `anchor` (zulip-terminal sends both, with
 * anchor=0); a negative anchor is read as 0 and one past the largest id as "newest".
 */
function parseAnchor(raw: string | undefined, useFirstUnread: boolean): number | "newest" | "oldest" | "first_unread" {
  if (useFirstUnread) return "first_unread";
  if (raw === undefined) throw chatErrors.missing("anchor");
  if (raw === "newest" || raw === "oldest" || raw === "first_unread") return raw;
  if (!/^[-+]?\d+$/.test(raw.trim())) throw errors.badRequest("Invalid anchor");
  const anchor = Number(raw.trim());
  return anchor < 0 ? 0 : anchor >= LARGER_THAN_MAX_MESSAGE_ID ? "newest" : anchor;
}

/** GET /messages' answer: its fields, and its messages as the JSON texts fetchMessages made of them. */
function fetchedJson({ messages, ...fields }: { messages: MessageJson[] } & Record<string, unknown>): SerializedFields {
  return new SerializedFields(`${JSON.stringify(fields).slice(1, -1)},"messages":[${messages.join(",")}]`);
}
