/**
 * presence:<realm id>: who is online in the realm. Handlers: PresenceActor.handlers in presence.ts.
 */
import { actorKind, type Op } from "../../../runtime/protocol.ts";

export interface Ping {
  op: "ping";
  userId: number;
  email: string;
  status: "active" | "idle";
  client: string;
  /** Answer with others' presence (false for ping_only). */
  fetch: boolean;
  /** Modern format, only entries updated after this id (<= 0: everything within the history limit). */
  lastUpdateId: number | null;
  historyLimitDays: number;
  modern: boolean;
}

export interface PresenceReply {
  presence_last_update_id: number;
  server_timestamp?: number;
  presences?: Record<string, unknown>;
}

export interface PresenceState {
  op: "state";
  modern: boolean;
  historyLimitDays: number;
}

/** One user's latest presence, or null if they never reported any. */
export interface UserPresence {
  op: "userPresence";
  userId: number;
}

/** When the user last reported (connectedTime) and whether they were active then. */
export interface UserPresenceReply {
  status: "active" | "idle";
  timestamp: number;
}

export type PresenceProtocol = {
  ping: Op<Ping, PresenceReply>;
  state: Op<PresenceState, PresenceReply>;
  userPresence: Op<UserPresence, UserPresenceReply | null>;
};

export const Presence = actorKind<PresenceProtocol>("presence");
