/**
 * realm:<realm id>: the organization (accounts, roles, settings, groups, invitations, e-mail changes, password
 * resets, custom profile fields, custom emoji, uploaded files, linkifiers, code playgrounds). Handlers:
 * RealmActor.handlers in realm.ts, which forwards the invitation, e-mail change, password reset, profile field, emoji,
 * attachment, linkifier and playground operations to Invitations.handlers (invites.ts), EmailChanges.handlers
 * (email-changes.ts), PasswordResets.handlers (password-resets.ts), ProfileFields.handlers (profile-fields.ts),
 * RealmEmojiChanges.handlers (realm-emoji.ts), RealmAttachments.handlers (attachments.ts), RealmLinkifiers.handlers
 * (linkifiers.ts), RealmPlaygrounds.handlers (realm-playgrounds.ts), ChannelFolders.handlers (channel-folders.ts) and
 * GroupChanges.handlers (group-changes.ts).
 */
import type { StoredThumbnail } from "../rendering/thumbnails.ts";
import { actorKind, type Empty, type Op } from "../../../runtime/protocol.ts";

export interface CreateUser {
  op: "createUser";
  email: string;
  fullName: string;
  /** Hashed by the caller: no password travels through the transport. */
  passwordHash: string | null;
  role: number;
}

/** Welcome Bot's message to an account created without the realm actor (the first owner, at first start); once only. */
export interface WelcomeUser {
  op: "welcomeUser";
  userId: number;
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

/**
 * POST and DELETE /default_streams (permission checked by the gateway) and archiving: whether a channel is one of
 * the realm's default channels, which new users join. Archived and private channels are never made default.
 */
export interface SetDefaultChannel {
  op: "setDefaultChannel";
  streamId: number;
  isDefault: boolean;
}

/**
 * Told by a channel it has just archived: the realm forgets it as a default channel and as its announcement or
 * moderation-request channel.
 */
export interface ChannelArchived {
  op: "channelArchived";
  streamId: number;
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

/**
 * DELETE /users/{user_id} and DELETE /users/me (active false), POST /users/{user_id}/reactivate (true). `own`: the
 * user deactivating their own account (DELETE /users/me), under Zulip's last-user rules rather than an
 * administrator's.
 */
export interface SetUserActive {
  op: "setUserActive";
  actingId: number;
  userId: number;
  active: boolean;
  own: boolean;
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

/** POST /password_reset: a reset e-mail to the address if an active account has it (nothing is said either way). */
export interface StartPasswordReset {
  op: "startPasswordReset";
  email: string;
  siteUrl: string;
}

/** POST /password_reset/confirm: the key from that e-mail and the new password (hashed by the caller). */
export interface ResetPassword {
  op: "resetPassword";
  key: string;
  passwordHash: string;
}

export type EmailChanged = {
  user_id: number;
  old_email: string;
  new_email: string;
};

// Custom profile fields (profile-fields.ts). The realm actor checks the permissions and values.

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

export interface ReorderProfileFields {
  op: "reorderProfileFields";
  actingId: number;
  order: number[];
}

export interface DeleteProfileField {
  op: "deleteProfileField";
  actingId: number;
  fieldId: number;
}

/** PATCH /users/me/profile_data, or an administrator's PATCH /users/{user_id} with profile_data. */
export interface SetProfileData {
  op: "setProfileData";
  actingId: number;
  userId: number;
  data: ProfileDataEntry[];
}

/** DELETE /users/me/profile_data. */
export interface RemoveProfileData {
  op: "removeProfileData";
  actingId: number;
  userId: number;
  fieldIds: number[];
}

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

// Uploaded files (attachments.ts): the bytes are stored by the gateway before the record is made.

/** POST /user_uploads, once the file is in the blob store: record it (within the realm's quota) for its owner. */
export interface RecordUpload {
  op: "recordUpload";
  actingId: number;
  /** Fresh for each upload (a random part): a redelivered request finds its row and records nothing twice. */
  pathId: string;
  urlPath: string;
  blobKey: string;
  fileName: string;
  contentType: string;
  size: number;
  /** The file's header read as an image to thumbnail: its image record (rendering/thumbnails.ts). */
  image?: { width: number; height: number; frames: number };
}

/**
 * DELETE /attachments/{attachment_id}: the owner only. Answers the blobs to delete (the file's and its thumbnails')
 * once the row is gone.
 */
export interface DeleteAttachment {
  op: "deleteAttachment";
  actingId: number;
  attachmentId: number;
}

/**
 * The thumbnail job's outcome for an uploaded image (no acting user: a background job): the thumbnails made and the
 * frames counted, or, with `thumbnails` null, that the image did not decode (its record goes, as in Zulip).
 */
export interface RecordThumbnails {
  op: "recordThumbnails";
  attachmentId: number;
  frames: number;
  thumbnails: StoredThumbnail[] | null;
}

// Linkifiers (linkifiers.ts) and code playgrounds (realm-playgrounds.ts): administrators only.

/** POST /realm/filters. */
export interface AddLinkifier {
  op: "addLinkifier";
  actingId: number;
  pattern: string;
  urlTemplate: string;
}

/** PATCH /realm/filters/{filter_id}. */
export interface UpdateLinkifier {
  op: "updateLinkifier";
  actingId: number;
  id: number;
  pattern: string;
  urlTemplate: string;
}

/** DELETE /realm/filters/{filter_id}. */
export interface RemoveLinkifier {
  op: "removeLinkifier";
  actingId: number;
  id: number;
}

/** PATCH /realm/linkifiers: every linkifier's id, in the new order. */
export interface ReorderLinkifiers {
  op: "reorderLinkifiers";
  actingId: number;
  order: number[];
}

/** POST /realm/playgrounds. */
export interface AddPlayground {
  op: "addPlayground";
  actingId: number;
  name: string;
  pygmentsLanguage: string;
  urlTemplate: string;
}

/** DELETE /realm/playgrounds/{playground_id}. */
export interface RemovePlayground {
  op: "removePlayground";
  actingId: number;
  id: number;
}

/** PATCH /user_groups/{user_group_id}: name, description and permission settings. */
export interface UpdateGroup {
  op: "updateGroup";
  actingId: number;
  groupId: number;
  name?: string;
  description?: string;
  /** Zulip's GroupSettingChangeRequest by setting: the new value, and the value the client believes is current. */
  settings: Record<string, { new: unknown; old?: unknown }>;
}

/** POST /user_groups/{user_group_id}/members (users and subgroups) and POST /user_groups/{user_group_id}/subgroups. */
export interface ChangeGroupMembership {
  op: "changeGroupMembership";
  actingId: number;
  groupId: number;
  add: number[];
  delete: number[];
  addSubgroups: number[];
  deleteSubgroups: number[];
}

/** POST /user_groups/{user_group_id}/deactivate. */
export interface DeactivateGroup {
  op: "deactivateGroup";
  actingId: number;
  groupId: number;
}

/** User group changes (group-changes.ts). */
export type GroupChangesProtocol = {
  updateGroup: Op<UpdateGroup, Empty>;
  changeGroupMembership: Op<ChangeGroupMembership, Empty>;
  deactivateGroup: Op<DeactivateGroup, Empty>;
};

/** Linkifiers (linkifiers.ts). */
export type LinkifiersProtocol = {
  addLinkifier: Op<AddLinkifier, { id: number }>;
  updateLinkifier: Op<UpdateLinkifier, Empty>;
  removeLinkifier: Op<RemoveLinkifier, Empty>;
  reorderLinkifiers: Op<ReorderLinkifiers, Empty>;
};

/** Code playgrounds (realm-playgrounds.ts). */
export type PlaygroundsProtocol = {
  addPlayground: Op<AddPlayground, { id: number }>;
  removePlayground: Op<RemovePlayground, Empty>;
};

/**
 * POST /realm/test_welcome_bot_custom_message: Welcome Bot sends the text to the administrator asking, as a new
 * user invited with it would get it. `requestKey`: one per request, so a redelivery sends it once.
 */
export interface TestWelcomeMessage {
  op: "testWelcomeMessage";
  actingId: number;
  text: string;
  requestKey: string;
}

/** POST /channel_folders/create. */
export interface CreateChannelFolder {
  op: "createChannelFolder";
  actingId: number;
  name: string;
  description: string;
}

/** PATCH /channel_folders/{channel_folder_id}: what is given changes. */
export interface UpdateChannelFolder {
  op: "updateChannelFolder";
  actingId: number;
  id: number;
  name?: string;
  description?: string;
  isArchived?: boolean;
}

/** PATCH /channel_folders: every folder of the organization, archived ones too, in their new order. */
export interface ReorderChannelFolders {
  op: "reorderChannelFolders";
  actingId: number;
  order: number[];
}

/** Channel folders (channel-folders.ts). */
export type ChannelFoldersProtocol = {
  createChannelFolder: Op<CreateChannelFolder, { channel_folder_id: number }>;
  updateChannelFolder: Op<UpdateChannelFolder, Empty>;
  reorderChannelFolders: Op<ReorderChannelFolders, Empty>;
};

/** Invitations (invites.ts). */
export type InvitesProtocol = {
  testWelcomeMessage: Op<TestWelcomeMessage, { message_id: number }>;
  invite: Op<Invite, Empty>;
  createInviteLink: Op<CreateInviteLink, InviteLinkCreated>;
  revokeInvite: Op<RevokeInvite, Empty>;
  resendInvite: Op<ResendInvite, Empty>;
  joinInviteLink: Op<JoinInviteLink, Empty>;
  acceptInvite: Op<AcceptInvite, CreatedUser>;
};

/** E-mail address changes (email-changes.ts). */
export type EmailChangesProtocol = {
  startEmailChange: Op<StartEmailChange, Empty>;
  confirmEmailChange: Op<ConfirmEmailChange, EmailChanged>;
};

/** Password resets by e-mail (password-resets.ts). */
export type PasswordResetsProtocol = {
  startPasswordReset: Op<StartPasswordReset, Empty>;
  resetPassword: Op<ResetPassword, { user_id: number }>;
};

/** Custom profile fields and their values (profile-fields.ts). */
export type ProfileFieldsProtocol = {
  createProfileField: Op<CreateProfileField, { id: number }>;
  updateProfileField: Op<UpdateProfileField, Empty>;
  reorderProfileFields: Op<ReorderProfileFields, Empty>;
  deleteProfileField: Op<DeleteProfileField, Empty>;
  setProfileData: Op<SetProfileData, Empty>;
  removeProfileData: Op<RemoveProfileData, Empty>;
};

/** Uploaded files (attachments.ts). */
export type AttachmentsProtocol = {
  recordUpload: Op<RecordUpload, { id: number }>;
  deleteAttachment: Op<DeleteAttachment, { blobKeys: string[] }>;
  recordThumbnails: Op<RecordThumbnails, Empty>;
};

/** Custom emoji (realm-emoji.ts). */
export type RealmEmojiProtocol = {
  uploadEmoji: Op<UploadEmoji, Empty>;
  deactivateEmoji: Op<DeactivateEmoji, Empty>;
};

/** PATCH /realm/user_settings_defaults: the settings (already checked) new users will start with. */
export interface UpdateUserSettingsDefaults {
  op: "updateUserSettingsDefaults";
  actingId: number;
  settings: Record<string, unknown>;
}

export type RealmProtocol = {
  createUser: Op<CreateUser, CreatedUser>;
  welcomeUser: Op<WelcomeUser, Empty>;
  updateUserSettingsDefaults: Op<UpdateUserSettingsDefaults, Empty>;
  ensureChannels: Op<EnsureChannels, EnsuredChannel[]>;
  setDefaultChannel: Op<SetDefaultChannel, Empty>;
  channelArchived: Op<ChannelArchived, Empty>;
  updateRealm: Op<UpdateRealm, RealmUpdated>;
  updateUser: Op<UpdateUser, Empty>;
  createGroup: Op<CreateGroup, GroupCreated>;
  setUserActive: Op<SetUserActive, Empty>;
} & InvitesProtocol &
  EmailChangesProtocol &
  PasswordResetsProtocol &
  ProfileFieldsProtocol &
  RealmEmojiProtocol &
  AttachmentsProtocol &
  LinkifiersProtocol &
  PlaygroundsProtocol &
  ChannelFoldersProtocol &
  GroupChangesProtocol;

export const Realm = actorKind<RealmProtocol>("realm");
