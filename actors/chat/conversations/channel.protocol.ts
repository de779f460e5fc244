/**
 * channel:<stream id>: a channel's settings, subscribers, topics and messages. Handlers: ChannelActor.handlers in
 * channel.ts (edit, delete and react: Conversation.conversationHandlers in conversation.ts).
 */
import { actorKind, type Empty, type Op } from "../../../runtime/protocol.ts";
import type { ConversationProtocol, SendToChannel, Sent } from "./conversation.protocol.ts";

/** The client capability of clients that list archived channels (and take is_archived updates instead of deletes). */
export const ARCHIVED_CHANNELS = "archived_channels";

export interface Subscribe {
  op: "subscribe";
  userIds: number[];
}

export interface SubscribeResult {
  added: number[];
  already: number[];
}

export interface Unsubscribe {
  op: "unsubscribe";
  userIds: number[];
}

export interface UnsubscribeResult {
  removed: number[];
  notSubscribed: number[];
}

/** PATCH /streams/{stream_id}: the changes, checked by the gateway; the channel applies them and tells who sees it. */
export interface UpdateChannel {
  op: "updateChannel";
  name?: string;
  description?: string;
  inviteOnly?: boolean;
  historyPublic?: boolean;
  /** topics_policy and can_*_group values. */
  settings?: Record<string, unknown>;
  /** Group settings whose current value the caller named (`old`): the change applies only if it still is. */
  expected?: Record<string, unknown>;
}

/** POST /users/me/subscriptions/properties: one property of one user's subscription, already validated. */
export interface UpdateSubscription {
  op: "updateSubscription";
  userId: number;
  property: string;
  value: boolean | string;
}

/** Told to a channel when messages were moved into it: later sends must take ids above them. */
export interface MovedIn {
  op: "movedIn";
  maxId: number;
}

/** A message from Notification Bot into this channel (message reports); the bot needs no subscription. */
export interface Notify {
  op: "notify";
  topic: string;
  content: string;
  readFor?: number[];
  unreadOnlyFor?: number[];
}

/** A user whose queues follow every public channel (all_public_streams) starts or stops doing so. */
export interface PublicListener {
  op: "publicListener";
  userId: number;
  listening: boolean;
}

/**
 * DELETE /streams/{stream_id}, permission checked by the gateway: the channel is archived (Zulip's
 * do_deactivate_stream). The reply is Notification Bot's notice in the channel, sent once the archive is committed.
 */
export interface Archive {
  op: "archive";
}

/**
 * PATCH /streams/{stream_id} with is_archived false, permission checked by the gateway: the archived channel takes
 * sends again (Zulip's do_unarchive_stream). The reply is Notification Bot's notice in the channel.
 */
export interface Unarchive {
  op: "unarchive";
}

/**
 * POST /streams/{stream_id}/delete_topic: one batch, newest first, of the topic's messages `actingId` can read.
 * `complete`: nothing of the topic was left for them to delete.
 */
export interface DeleteTopic {
  op: "deleteTopic";
  actingId: number;
  topic: string;
  batchSize: number;
}

export type ChannelProtocol = {
  archive: Op<Archive, Sent>;
  unarchive: Op<Unarchive, Sent>;
  deleteTopic: Op<DeleteTopic, { complete: boolean }>;
  subscribe: Op<Subscribe, SubscribeResult>;
  unsubscribe: Op<Unsubscribe, UnsubscribeResult>;
  updateSubscription: Op<UpdateSubscription, Empty>;
  updateChannel: Op<UpdateChannel, Empty>;
  send: Op<SendToChannel, Sent>;
  movedIn: Op<MovedIn, Empty>;
  notify: Op<Notify, Sent>;
  publicListener: Op<PublicListener, void>;
} & ConversationProtocol;

export const Channel = actorKind<ChannelProtocol>("channel");
