/**
 * user:<user id>: one user's event queues, settings, drafts, saved snippets, navigation views, push tokens, alert
 * words, status and muted users. Handlers:
 * UserActor.handlers in user.ts.
 */
import { actorKind, type Empty, type Op } from "../../../runtime/protocol.ts";
import type { MessageRecord } from "../rendering/message-format.ts";

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
  /**
   * An event stream's poll (asked with askStream): it stays parked and each batch of events is pushed to it as it
   * comes, instead of answering once. It acknowledges nothing beyond its lastEventId (its asker polls again to
   * acknowledge more); a heartbeat comes only after the heartbeat interval without a batch. It ends like any parked poll: with
   * an answer (a newer poll of the queue, the actor handed over) or an error (the queue dropped).
   */
  stream?: boolean;
}

export interface Polled {
  events: Array<Record<string, unknown>>;
}

export interface DeleteQueue {
  op: "deleteQueue";
  queueId: string;
}

/** The user was deactivated: every queue goes, and a parked poll is answered BAD_EVENT_QUEUE_ID. */
export interface DropQueues {
  op: "dropQueues";
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
  /** Users who get the message only because a queue of theirs follows all public channels (all_public_streams). */
  observers?: number[];
}

/** An event only for queues whose client declared (`declared`) or did not declare a client capability. */
export interface CapabilityFilter {
  name: string;
  declared: boolean;
}

/** Any other event, queued as given (Zulip's payload without `id`). */
export interface DeliverEvent {
  op: "deliverEvent";
  event: Record<string, unknown>;
  /** Zulip sends some events in two forms, by client capability (archived_channels: is_archived or a delete). */
  capability?: CapabilityFilter;
}

/** PATCH /settings, already validated: the settings, and the changes that live on the account row. */
export interface UpdateSettings {
  op: "updateSettings";
  settings: Record<string, unknown>;
  fullName?: string;
  passwordHash?: string;
  /** The server's site URL: its host names the placeholder e-mail of a user hiding their address. */
  siteUrl: string;
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

/** POST /saved_snippets: title and content as given (the actor trims and checks them). */
export interface CreateSnippet {
  op: "createSnippet";
  title: string;
  content: string;
}

/** PATCH /saved_snippets/{saved_snippet_id}: what the request gave. */
export interface EditSnippet {
  op: "editSnippet";
  id: number;
  title?: string;
  content?: string;
}

export interface DeleteSnippet {
  op: "deleteSnippet";
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

/** Alert words already validated (trimmed, none empty or too long). */
export interface ChangeAlertWords {
  op: "changeAlertWords";
  add: boolean;
  words: string[];
}

/** POST /users/me/status, validated: only the parts given change ("" clears one). */
export interface UpdateStatus {
  op: "updateStatus";
  away?: boolean;
  statusText?: string;
  emoji?: { emoji_name: string; emoji_code: string; reaction_type: string };
}

/** The muted user exists in the realm (checked by the route). */
export interface MuteUser {
  op: "muteUser";
  mute: boolean;
  mutedUserId: number;
}

export type UserProtocol = {
  register: Op<Register, Registered>;
  poll: Op<Poll, Polled>;
  deleteQueue: Op<DeleteQueue, Empty>;
  dropQueues: Op<DropQueues, Empty>;
  deliverMessage: Op<DeliverMessage, void>;
  deliverEvent: Op<DeliverEvent, void>;
  updateSettings: Op<UpdateSettings, Empty>;
  createDrafts: Op<CreateDrafts, { ids: number[] }>;
  editDraft: Op<EditDraft, Empty>;
  deleteDraft: Op<DeleteDraft, Empty>;
  createSnippet: Op<CreateSnippet, { saved_snippet_id: number }>;
  editSnippet: Op<EditSnippet, Empty>;
  deleteSnippet: Op<DeleteSnippet, Empty>;
  addView: Op<AddView, Empty>;
  updateView: Op<UpdateView, Empty>;
  removeView: Op<RemoveView, Empty>;
  addPushToken: Op<AddPushToken, Empty>;
  removePushToken: Op<RemovePushToken, Empty>;
  changeAlertWords: Op<ChangeAlertWords, { alert_words: string[] }>;
  updateStatus: Op<UpdateStatus, Empty>;
  muteUser: Op<MuteUser, Empty>;
};

export const User = actorKind<UserProtocol>("user");
