/**
 * What every conversation (a channel, a direct-message conversation) answers: sends, and edits, deletions,
 * reactions and widget submessages on its messages, their uploaded images' previews, and fan-outs left unfinished by
 * a crash. Handlers: Conversation.conversationHandlers in conversation.ts (edit, delete, react, addSubmessage,
 * refreshUploadPreview, redeliver); sends in ChannelActor.handlers (channel.ts) and DmActor.handlers (dm.ts). The kinds are in
 * channel.protocol.ts and dm.protocol.ts.
 */
import type { Empty, Op } from "../../../runtime/protocol.ts";
import type { UploadPreview } from "../rendering/thumbnails.ts";

export interface SendToChannel {
  op: "send";
  senderId: number;
  sender: { email: string; full_name: string };
  topic: string;
  content: string;
  client: string;
  /**
   * The message's identity for storing it once: a redelivered send, or a client's retry with the same
   * Idempotency-Key or queue_id + local_id, resolves with the first stored id.
   */
  sendKey: string;
  /**
   * This request's own id, when its gateway may abandon it (message-log.ts abandonAttempt): the message then never
   * commits under this attempt. Absent for sends no one waits on (scheduled messages, notices).
   */
  attempt?: string;
  /** The sender's queue for local echo, and the client's id for the message. */
  queueId?: string;
  localId?: string;
  readBySender: boolean;
  /** Guests need a subscription even to public channels. */
  senderIsGuest?: boolean;
  /** The sender is a person, not a bot: Zulip's automatic follow / unmute settings apply to their topic. */
  automaticVisibility?: boolean;
  /** Recipients for whom the message starts read (Zulip's mark_as_read_for_acting_user on notices). */
  readFor?: number[];
  /** When given, the only recipients for whom it starts unread (Zulip's limit_unread_user_ids). */
  unreadOnlyFor?: number[];
}

export interface Sent {
  id: number;
  /** The sender's new visibility policy for the topic, when the send changed it (Zulip's POST /messages field). */
  automatic_new_visibility_policy?: number;
}

/** Who acts, as the gateway authenticated them: permission checks happen in the owning actor. */
export interface Acting {
  id: number;
  role: number;
  email: string;
  full_name: string;
  is_bot: boolean;
}

export type PropagateMode = "change_one" | "change_later" | "change_all";

/** PATCH /messages/{id}, to the actor owning the message's conversation. */
export interface EditMessage {
  op: "edit";
  messageId: number;
  acting: Acting;
  content?: string;
  prevContentSha256?: string;
  topic?: string;
  streamId?: number;
  propagateMode: PropagateMode;
  /** Notification Bot notices in the old and the new topic after a move (Zulip's defaults: false, true). */
  notifyOldThread: boolean;
  notifyNewThread: boolean;
}

export interface Edited {
  detached_uploads: unknown[];
}

export interface DeleteMessage {
  op: "delete";
  messageId: number;
  acting: Acting;
}

export interface Reaction {
  emoji_name: string;
  emoji_code: string;
  reaction_type: string;
}

export interface React {
  op: "react";
  add: boolean;
  messageId: number;
  acting: Acting;
  reaction: Reaction;
}

/**
 * Zulip's POST /submessage: what a reader adds to a widget message (a vote, an option, a task), checked against the
 * widget's type (widgets.ts); its first submessage must be the message sender's.
 */
export interface AddSubmessage {
  op: "addSubmessage";
  messageId: number;
  acting: Acting;
  msgType: string;
  /** JSON text, stored and sent on as given. */
  content: string;
}

/**
 * An uploaded image's thumbnails are made (or it did not decode: `preview` null): the messages of this conversation
 * showing its placeholder show the thumbnail (or no preview), with a rendering-only update_message event.
 */
export interface RefreshUploadPreview {
  op: "refreshUploadPreview";
  messageIds: number[];
  pathId: string;
  urlPath: string;
  preview: UploadPreview | null;
}

/**
 * Committed messages whose fan-outs an earlier holder of the conversation's shard may have left unfinished (their rows
 * in pending_fan_outs): delivered again from the store, in id order (actors/chat/conversations/fan-outs.ts).
 */
export interface RedeliverMessages {
  op: "redeliver";
  messageIds: number[];
  /** What a node of the previous version sends during a rolling upgrade: one message. */
  messageId?: number;
}

export type ConversationProtocol = {
  edit: Op<EditMessage, Edited>;
  delete: Op<DeleteMessage, Empty>;
  react: Op<React, Empty>;
  addSubmessage: Op<AddSubmessage, Empty>;
  refreshUploadPreview: Op<RefreshUploadPreview, Empty>;
  redeliver: Op<RedeliverMessages, Empty>;
};
