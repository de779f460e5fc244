/**
 * user-topics:<user id>: one user's per-topic visibility policies. Handlers: UserTopicsActor.handlers in
 * user-topics.ts.
 */
import { actorKind, type Op } from "../../../runtime/protocol.ts";

/** Set one topic's visibility policy; `require` makes the change conditional (the legacy "remove" of a mute). */
export interface SetTopicVisibility {
  op: "setVisibility";
  streamId: number;
  topic: string;
  policy: number;
  require?: { policy: number; error: string };
  /** Set by a send (Zulip's automatic follow / unmute): never lowers a followed topic. */
  automatic?: boolean;
}

export interface TopicVisibilitySet {
  changed: boolean;
}

export type UserTopicsProtocol = {
  setVisibility: Op<SetTopicVisibility, TopicVisibilitySet>;
};

export const UserTopics = actorKind<UserTopicsProtocol>("user-topics");
