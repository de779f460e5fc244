/**
 * Zulip's message object, built from what the store keeps: one function for GET /messages and for message
 * events, so both always agree. Markdown is rendered once, at send time, by markdown.ts (Zulip's dialect on
 * markdown-it).
 */
import crypto from "node:crypto";
import { renderMarkdown as renderZulipMarkdown, type MarkdownContext } from "./markdown.ts";

/**
 * The HTML alone. Without a context, mentions and channel links stay as written; senders that need the mention
 * lists (for flags) call markdown.ts directly.
 */
export function renderMarkdown(content: string, context: MarkdownContext = {}): string {
  return renderZulipMarkdown(content, context).html;
}

/** Everything about a message that does not depend on who reads it or how. */
export interface MessageRecord {
  id: number;
  type: "stream" | "private";
  sender_id: number;
  sender_email: string;
  sender_full_name: string;
  sender_realm_str: string;
  recipient_id: number;
  stream_id: number | null;
  /** Channel name, or the direct-message participants. */
  display_recipient: string | Array<{ id: number; email: string; full_name: string; is_mirror_dummy: boolean }>;
  subject: string;
  content: string;
  rendered_content: string;
  timestamp: number;
  client: string;
  /** Links in the topic (Zulip's topic_links), from the realm's linkifiers when the record was made. */
  topic_links?: Array<{ text: string; url: string }>;
  /** A widget message's submessages (actors/chat/conversations/widgets.ts); none on most messages. */
  submessages?: Submessage[];
}

/** Zulip's submessage as a message object lists it, and as its event names its fields. */
export interface Submessage {
  msg_type: string;
  content: string;
  message_id: number;
  sender_id: number;
  id: number;
}

export interface FormatOptions {
  applyMarkdown: boolean;
  clientGravatar: boolean;
}

export function gravatarUrl(email: string): string {
  return `${identicon(email.trim().toLowerCase())}&version=1`;
}

/**
 * A realm's icon while none is uploaded (realm_icon_source "G"): Zulip's get_realm_icon_url with Gravatar, the
 * identicon of the realm's id. Clients show it beside the organization's name (the mobile app's account list).
 */
export function realmIconUrl(realmId: number): string {
  return identicon(String(realmId));
}

const identicon = (key: string) => `https://secure.gravatar.com/avatar/${crypto.createHash("md5").update(key).digest("hex")}?d=identicon`;

/** Zulip's /me status message: content starting with "/me " (Message.is_status_message). */
export function isMeMessage(content: string): boolean {
  return content.startsWith("/me ");
}

export function formatMessage(m: MessageRecord, opts: FormatOptions) {
  const message: Record<string, unknown> = {
    id: m.id,
    type: m.type,
    sender_id: m.sender_id,
    sender_email: m.sender_email,
    sender_full_name: m.sender_full_name,
    sender_realm_str: m.sender_realm_str,
    avatar_url: opts.clientGravatar ? null : gravatarUrl(m.sender_email),
    recipient_id: m.recipient_id,
    display_recipient: m.display_recipient,
    subject: m.subject,
    content: opts.applyMarkdown ? m.rendered_content : m.content,
    content_type: opts.applyMarkdown ? "text/html" : "text/x-markdown",
    timestamp: m.timestamp,
    client: m.client,
    is_me_message: isMeMessage(m.content),
    reactions: [],
    submessages: m.submessages ?? [],
    topic_links: m.topic_links ?? [],
  };
  if (m.stream_id !== null) message.stream_id = m.stream_id;
  return message;
}

const shared = new WeakMap<MessageRecord, Array<Record<string, unknown> | undefined>>();

/**
 * formatMessage for a message event: one object per message record and format, shared by every queue that takes
 * the message in that format. A delivery to a channel's members hands each of their actors the same record (one
 * transport entry per shard), so the message is built once per shard rather than per member, and the gateway can
 * serialize it once (gateway/chat/events.ts). Nobody may change the object.
 */
export function formatSharedMessage(m: MessageRecord, opts: FormatOptions): Record<string, unknown> {
  let formats = shared.get(m);
  if (!formats) shared.set(m, (formats = []));
  const slot = (opts.applyMarkdown ? 2 : 0) + (opts.clientGravatar ? 1 : 0);
  return (formats[slot] ??= formatMessage(m, opts));
}

