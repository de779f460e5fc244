/**
 * flags:<user id>: one user's message flags. Handlers: FlagsActor.handlers in flags.ts.
 */
import { actorKind, type Op } from "../../../runtime/protocol.ts";

/** POST /messages/flags for messages the gateway found readable; `details` feeds Zulip's message_details. */
export interface UpdateFlags {
  op: "updateFlags";
  add: boolean;
  flag: string;
  messageIds: number[];
  details?: Record<string, Record<string, unknown>>;
}

export interface UpdatedFlags {
  messages: number[];
}

/** POST /mark_all_as_read: every unread message the user received becomes read. */
export interface MarkAllRead {
  op: "markAllRead";
}

/** POST /mark_stream_as_read and /mark_topic_as_read, for a channel the gateway found the user may read. */
export interface MarkChannelRead {
  op: "markChannelRead";
  streamId: number;
  /** Only this topic (matched as Zulip does, ignoring case); the whole channel when absent. */
  topic?: string;
}

/** How many messages became read. */
export interface MarkedRead {
  count: number;
}

export type FlagsProtocol = {
  updateFlags: Op<UpdateFlags, UpdatedFlags>;
  markAllRead: Op<MarkAllRead, MarkedRead>;
  markChannelRead: Op<MarkChannelRead, MarkedRead>;
};

export const Flags = actorKind<FlagsProtocol>("flags");
