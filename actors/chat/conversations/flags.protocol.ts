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

export type FlagsProtocol = {
  updateFlags: Op<UpdateFlags, UpdatedFlags>;
};

export const Flags = actorKind<FlagsProtocol>("flags");
