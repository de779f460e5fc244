/**
 * What the gateway (and actors) may send to each actor kind, and what comes back. Every message is plain JSON:
 * it may cross processes on the Redis transport.
 */
import type { MessageRecord } from "./message-format.ts";

export const REALM = "realm";
export const CHANNEL = "channel";
export const USER = "user";

// ---- realm:<id> ---------------------------------------------------------------------------------------------

export interface CreateUser {
  op: "createUser";
  email: string;
  fullName: string;
  /** Hashed by the caller: no password travels through the transport. */
  passwordHash: string | null;
  role: number;
}
export interface CreatedUser {
  user_id: number;
  api_key: string;
}

export interface ChannelSpec {
  name: string;
  description: string;
}
export interface EnsureChannels {
  op: "ensureChannels";
  creatorId: number;
  channels: ChannelSpec[];
  inviteOnly: boolean;
  isWebPublic: boolean;
  historyPublicToSubscribers: boolean | null;
}
export interface EnsuredChannel {
  id: number;
  name: string;
  created: boolean;
}

export type RealmMessage = CreateUser | EnsureChannels;

// ---- channel:<id> -------------------------------------------------------------------------------------------

export interface Subscribe {
  op: "subscribe";
  userIds: number[];
}
export interface SubscribeResult {
  added: number[];
  already: number[];
}

export interface SendToChannel {
  op: "send";
  senderId: number;
  sender: { email: string; full_name: string };
  topic: string;
  content: string;
  client: string;
  /** One per HTTP request: a redelivered send commits once. */
  sendKey: string;
  /** The sender's queue for local echo, and the client's id for the message. */
  queueId?: string;
  localId?: string;
  readBySender: boolean;
}
export interface Sent {
  id: number;
}

export type ChannelMessage = Subscribe | SendToChannel;

// ---- user:<id> ----------------------------------------------------------------------------------------------

export type Narrow = Array<{ operator: string; operand: unknown; negated?: boolean }>;

export interface Register {
  op: "register";
  eventTypes: string[] | null;
  narrow: Narrow;
  applyMarkdown: boolean;
  clientGravatar: boolean;
  allPublicStreams: boolean;
  clientCapabilities: Record<string, unknown>;
}
export interface Registered {
  queue_id: string;
  last_event_id: number;
}

export interface Poll {
  op: "poll";
  queueId: string;
  /** Acknowledges (drops) every event up to this id. */
  lastEventId: number;
  dontBlock: boolean;
  /** Answer only events above this id (default lastEventId): a stream reads ahead of what it acknowledges. */
  after?: number;
}
export interface Polled {
  events: Array<Record<string, unknown>>;
}

export interface DeleteQueue {
  op: "deleteQueue";
  queueId: string;
}

/** A message for this user's queues; `localId` goes only to the queue named by `queueId`. */
export interface DeliverMessage {
  op: "deliverMessage";
  message: MessageRecord;
  flags: string[];
  /** Per recipient user id: flags that differ from `flags` (the sender's `read`). */
  flagsFor?: Record<string, string[]>;
  queueId?: string;
  localId?: string;
}

/** Any other event, queued as given (Zulip's payload without `id`). */
export interface DeliverEvent {
  op: "deliverEvent";
  event: Record<string, unknown>;
}

/** PATCH /settings, already validated: the settings, and the changes that live on the account row. */
export interface UpdateSettings {
  op: "updateSettings";
  settings: Record<string, unknown>;
  fullName?: string;
  passwordHash?: string;
}

export interface DraftFields {
  type: "" | "stream" | "private";
  to: number[];
  topic: string;
  content: string;
  timestamp?: number;
}
export interface CreateDrafts {
  op: "createDrafts";
  drafts: DraftFields[];
}
export interface EditDraft {
  op: "editDraft";
  id: number;
  draft: DraftFields;
}
export interface DeleteDraft {
  op: "deleteDraft";
  id: number;
}

export interface AddView {
  op: "addView";
  fragment: string;
  isPinned: boolean;
  name: string | null;
}
export interface UpdateView {
  op: "updateView";
  fragment: string;
  isPinned?: boolean;
  name?: string;
}
export interface RemoveView {
  op: "removeView";
  fragment: string;
}

export interface AddPushToken {
  op: "addPushToken";
  kind: "apns" | "fcm";
  token: string;
  appid: string | null;
}
export interface RemovePushToken {
  op: "removePushToken";
  kind: "apns" | "fcm";
  token: string;
}

export type UserMessage =
  | AddPushToken
  | RemovePushToken
  | Register
  | Poll
  | DeleteQueue
  | DeliverMessage
  | DeliverEvent
  | UpdateSettings
  | CreateDrafts
  | EditDraft
  | DeleteDraft
  | AddView
  | UpdateView
  | RemoveView;
