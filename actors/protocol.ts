/**
 * What the gateway (and actors) may send to each actor kind, and what comes back. Every message is plain JSON:
 * it may cross processes on the Redis transport.
 */
import type { MessageRecord } from "./chat/rendering/message-format.ts";

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
  isDefault: boolean;
  historyPublicToSubscribers: boolean | null;
  /** null: the realm's policy; -1: unlimited. */
  messageRetentionDays: number | null;
  /** topics_policy and the can_*_group values the request gave (checked); the rest take Zulip's defaults. */
  settings: Record<string, unknown>;
}
export interface EnsuredChannel {
  id: number;
  name: string;
  created: boolean;
}

/** PATCH /realm: the decoded parameters; the realm actor checks them against the current settings. */
export interface UpdateRealm {
  op: "updateRealm";
  actingId: number;
  settings: Record<string, unknown>;
}
/** What changed, as Zulip's PATCH /realm answers it. */
export type RealmUpdated = Record<string, unknown>;

/** PATCH /users/{user_id}: an administrator changes another user's role, name or custom profile values. */
export interface UpdateUser {
  op: "updateUser";
  actingId: number;
  userId: number;
  role?: number;
  fullName?: string;
  profileData?: ProfileDataEntry[];
}

/** POST /user_groups/create. Group-setting values are as the client sent them; the actor checks them. */
export interface CreateGroup {
  op: "createGroup";
  actingId: number;
  name: string;
  description: string;
  members: number[];
  subgroups: number[];
  settings: Record<string, unknown>;
}
export interface GroupCreated {
  group_id: number;
}

/** What an invitation (e-mail or link) gives the person who accepts it, as POST /invites and /invites/multiuse take it. */
export interface InviteTerms {
  actingId: number;
  inviteAs: number;
  streamIds: number[];
  groupIds: number[];
  /** null: never expires. */
  expiresInMinutes: number | null;
  includeRealmDefaultSubscriptions: boolean;
  welcomeMessageCustomText: string | null;
  /** For the link in the e-mail, or the reusable link. */
  siteUrl: string;
  /** One per HTTP request: a redelivered request invites nobody twice. */
  requestKey: string;
}

/** POST /invites, with the addresses already split. */
export interface Invite extends InviteTerms {
  op: "invite";
  emails: string[];
  notifyReferrerOnJoin: boolean;
}

/** POST /invites/multiuse: a reusable invitation link. */
export interface CreateInviteLink extends InviteTerms {
  op: "createInviteLink";
}
export interface InviteLinkCreated {
  invite_link: string;
}

/** DELETE /invites/{id} (`multiuse` false) and DELETE /invites/multiuse/{id} (`multiuse` true). */
export interface RevokeInvite {
  op: "revokeInvite";
  actingId: number;
  inviteId: number;
  multiuse: boolean;
}

/** POST /invites/{id}/resend. */
export interface ResendInvite {
  op: "resendInvite";
  actingId: number;
  inviteId: number;
  siteUrl: string;
  requestKey: string;
}

/** Sign up through a reusable link: an e-mail to the address, whose key then accepts as an e-mail invitation's does. */
export interface JoinInviteLink {
  op: "joinInviteLink";
  key: string;
  email: string;
  siteUrl: string;
  requestKey: string;
}

/** Accept an invitation: create the invited account. */
export interface AcceptInvite {
  op: "acceptInvite";
  key: string;
  fullName: string;
  passwordHash: string;
}

/** PATCH /settings with a new `email`: a pending change, and a confirmation e-mail to the new address. */
export interface StartEmailChange {
  op: "startEmailChange";
  userId: number;
  email: string;
  siteUrl: string;
}

/** POST /settings/email/confirm: the key from that e-mail. */
export interface ConfirmEmailChange {
  op: "confirmEmailChange";
  key: string;
}

export type EmailChanged = {
  user_id: number;
  old_email: string;
  new_email: string;
};

// Custom profile fields (actors/chat/organization/profile-fields.ts). The realm actor checks the permissions and values.

/** POST /realm/profile_fields. */
export interface CreateProfileField {
  op: "createProfileField";
  actingId: number;
  name: string;
  hint: string;
  fieldType: number;
  fieldData?: Record<string, unknown>;
  displayInProfileSummary: boolean;
  required: boolean;
  editableByUser: boolean;
}

/** PATCH /realm/profile_fields/{field_id}: what the request gave; the rest stays. */
export interface UpdateProfileField {
  op: "updateProfileField";
  actingId: number;
  fieldId: number;
  name?: string;
  hint?: string;
  fieldData?: Record<string, unknown>;
  displayInProfileSummary?: boolean;
  required?: boolean;
  editableByUser?: boolean;
}

/** One value: text, a users field's ids, or null to remove the value. */
export interface ProfileDataEntry {
  id: number;
  value: string | number[] | null;
}

export type ProfileFieldMessage =
  | CreateProfileField
  | UpdateProfileField
  | { op: "reorderProfileFields"; actingId: number; order: number[] }
  | { op: "deleteProfileField"; actingId: number; fieldId: number }
  /** PATCH /users/me/profile_data, or an administrator's PATCH /users/{user_id} with profile_data. */
  | { op: "setProfileData"; actingId: number; userId: number; data: ProfileDataEntry[] }
  /** DELETE /users/me/profile_data. */
  | { op: "removeProfileData"; actingId: number; userId: number; fieldIds: number[] };

/** POST /realm/emoji/{emoji_name}: the name and image already checked by the route (emojiNameOf, imageKind). */
export interface UploadEmoji {
  op: "uploadEmoji";
  actingId: number;
  name: string;
  kind: { contentType: string; ext: string; animated: boolean };
  /** The image bytes, base64: messages are JSON. */
  image: string;
  /** One per HTTP request: a redelivered request uploads nothing twice. */
  requestKey: string;
}

/** DELETE /realm/emoji/{emoji_name}. */
export interface DeactivateEmoji {
  op: "deactivateEmoji";
  actingId: number;
  name: string;
  /** One per HTTP request, as for uploads. */
  requestKey: string;
}

export type RealmMessage =
  | ProfileFieldMessage
  | CreateUser
  | EnsureChannels
  | UpdateRealm
  | UpdateUser
  | CreateGroup
  | Invite
  | CreateInviteLink
  | RevokeInvite
  | ResendInvite
  | JoinInviteLink
  | AcceptInvite
  | StartEmailChange
  | ConfirmEmailChange
  | UploadEmoji
  | DeactivateEmoji;

// ---- channel:<id> -------------------------------------------------------------------------------------------

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

export type ConversationMessage = EditMessage | DeleteMessage | React;
/** A user whose queues follow every public channel (all_public_streams) starts or stops doing so. */
export interface PublicListener {
  op: "publicListener";
  userId: number;
  listening: boolean;
}

export type ChannelMessage = Subscribe | Unsubscribe | UpdateSubscription | UpdateChannel | SendToChannel | ConversationMessage | MovedIn | Notify | PublicListener;

// ---- dm:<sorted user ids> -----------------------------------------------------------------------------------

export const DM = "dm";

/** A direct message; the conversation (and its participants) is the actor's key. */
export type SendToDm = Omit<SendToChannel, "topic">;
export type DmMessage = SendToDm | ConversationMessage;

// ---- scheduler:<realm id> -----------------------------------------------------------------------------------

export const SCHEDULER = "scheduler";

/** A scheduled message as the gateway validated it; the scheduler renders and stores it. */
export interface ScheduledSpec {
  type: "stream" | "private";
  streamId: number | null;
  /** Direct messages: the recipients named (the sender is added at delivery). */
  toUserIds: number[];
  topic: string;
  content: string;
  scheduledTimestamp: number;
  readBySender: boolean | null;
}
export type SchedulerMessage =
  | { op: "create"; acting: Acting; spec: ScheduledSpec }
  | { op: "edit"; acting: Acting; id: number; spec: ScheduledSpec }
  | { op: "delete"; acting: Acting; id: number }
  /** Activate (after a restart or a shard move) and deliver whatever is due. */
  | { op: "wake" };

// ---- user-topics:<user id> ----------------------------------------------------------------------------------

export const USER_TOPICS = "user-topics";

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

// ---- flags:<user id> ----------------------------------------------------------------------------------------

export const FLAGS = "flags";

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
  /** Users who get the message only because a queue of theirs follows all public channels (all_public_streams). */
  observers?: number[];
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

// ---- the assistant: agent:<uuid>, agent-session:<uuid>, operator:<user id> ---------------------------------

export const AGENT = "agent";
export const AGENT_SESSION = "agent-session";
export const OPERATOR = "operator";

export interface CreateAgent {
  op: "create";
  realmId: number;
  name: string;
  allowedOrigins: string[];
  rateLimitPerMinute: number;
  mobileWebhookUrl: string | null;
}
/** The secrets are returned once, to the creating operator; a redelivered create returns the same ones. */
export interface CreatedAgent {
  agent_id: string;
  agent_key: string;
  secret: string;
  mobile_webhook_secret?: string;
}

export interface KnowledgeDocument {
  title: string;
  text: string;
}
export interface AddVersion {
  op: "addVersion";
  versionId: string;
  instructions: string;
  settings: Record<string, unknown>;
  documents: KnowledgeDocument[];
}
export interface AddWebhook {
  op: "addWebhook";
  webhookId: string;
  url: string;
  events: string[];
}
export interface Publish {
  op: "publish";
  versionId: string;
}
export interface Rollback {
  op: "rollback";
}
export interface Published {
  agent_id: string;
  version_id: string;
  published_at: number;
}
export interface GetManifest {
  op: "manifest";
}
/** The runtime manifest as canonical JSON text (sorted keys), and its ETag. */
export interface Manifest {
  json: string;
  etag: string;
}
export interface SyncMobile {
  op: "syncMobile";
}
/** What a session needs to answer: the published version (from the agent's memory, no query). */
export interface GetRuntime {
  op: "runtime";
}
export interface AgentRuntime {
  version_id: string;
  instructions: string;
  settings: Record<string, unknown>;
}
export interface SyncQueued {
  delivery_id: string;
  url: string;
}

export type AgentMessage = CreateAgent | AddVersion | AddWebhook | Publish | Rollback | GetManifest | SyncMobile | GetRuntime;

export interface Source {
  document_id: number;
  chunk_id: number;
  title: string;
  score: number;
}

export interface StartSession {
  op: "start";
  agentId: string;
  userId: string | null;
}
export interface SessionStarted {
  session_id: string;
  created: boolean;
}

/**
 * One question: answered from the agent's published version, the question and the answer committed together
 * (with their webhook events) before the reply. `create` starts the session when it does not exist yet; ids are
 * chosen by the gateway so a redelivered ask finds its first answer instead of answering twice.
 */
export interface AskQuestion {
  op: "ask";
  agentId?: string;
  create?: { userId: string | null };
  question: string;
  questionId: string;
  answerId: string;
}
export interface Answered {
  session_id: string;
  created: boolean;
  message: { id: string; role: "user"; content: string };
  reply: { id: string; role: "assistant"; content: string; sources: Source[] };
}

/**
 * The two halves of an ask, for answers streamed from the gateway (so that pieces go out as they are produced and
 * production stops when the client goes away): `prepare` says what to answer from; `record` commits the
 * exchange, and a new session with it (idempotent by its ids, like `ask`).
 */
export interface PrepareAnswer {
  op: "prepare";
  agentId?: string;
  /** The session is new (it is created by `record`, with the same `create`). */
  create?: { userId: string | null };
  /** Return the latest exchanges too (for the generator's context). */
  withHistory?: boolean;
}
export interface Prepared {
  session_id: string;
  created: boolean;
  runtime: AgentRuntime;
  /** The latest exchanges, oldest first (for the generator's context). */
  history: Array<{ role: "user" | "assistant"; content: string }>;
}
export interface RecordAnswer {
  op: "record";
  agentId?: string;
  create?: { userId: string | null };
  question: string;
  questionId: string;
  answerId: string;
  answer: string;
  sources: Source[];
}

export type AgentSessionMessage = StartSession | AskQuestion | PrepareAnswer | RecordAnswer;

export interface OpenConsoleSession {
  op: "openSession";
  tokenHash: string;
  csrfToken: string;
  expiresAt: number;
}
export interface CreateApiKey {
  op: "createApiKey";
  keyId: string;
  keyHash: string;
}
export type OperatorMessage = OpenConsoleSession | CreateApiKey;
