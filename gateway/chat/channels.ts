/**
 * Channels and subscriptions: POST, GET, PATCH and DELETE /users/me/subscriptions, POST
 * /users/me/subscriptions/properties, GET /users/{user_id}/subscriptions/{stream_id}, POST /channels/create, GET
 * /streams, GET /get_stream_id, PATCH and DELETE /streams/{stream_id}, POST /streams/{stream_id}/delete_topic, POST
 * and DELETE /default_streams. Permission rules are actors/chat/conversations/channel-access.ts's; the channel
 * actors write the subscriptions and send their events, the realm actor creates channels and keeps the default ones.
 */
import { ChorusError, errors } from "../../runtime/errors.ts";
import { Channel } from "../../actors/chat/conversations/channel.protocol.ts";
import { Realm, type EnsuredChannel } from "../../actors/chat/organization/realm.protocol.ts";
import { ROLE } from "../../actors/chat/organization/realm.ts";
import { canAddSubscribers, canRemoveSubscribers, channelGroupSetting, hasContentAccess, hasMetadataAccess } from "../../actors/chat/conversations/channel-access.ts";
import { CHANNEL_GROUP_SETTINGS, channelSettingRule, checkGroupSetting, inGroupSetting, type GroupSettingValue } from "../../actors/chat/organization/groups.ts";
import { realmSettings } from "../../actors/chat/users/settings.ts";
import { isSubscribed, subscribersOf, subscriptionsOf } from "../../actors/chat/reads/subscriptions.ts";
import { channelsByName, findStream, streamObjects, visibleStreams, type StreamRow } from "../../actors/chat/reads/channels.ts";
import { userInRealm, usersByIdOrEmail, type UserRow } from "../../actors/chat/reads/users.ts";
import { accessibleUsers } from "../../actors/chat/organization/accounts.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import { normaliseTopic } from "./messages.ts";
import { askRealm, type RouteSpec, type Services } from "./app.ts";
import { activeChannelFolder, channelFolderObjects, MAX_CHANNEL_FOLDER_DESCRIPTION_LENGTH, MAX_CHANNEL_FOLDER_NAME_LENGTH } from "../../actors/chat/organization/channel-folders.ts";
import { Bool, Id, Str } from "../params.ts";
import { LIMITS } from "./zulip.ts";

type DB = Services["store"]["db"];

const IdList = { type: "array", items: Id } as const;
const Principals = { anyOf: [IdList, { type: "array", items: Str }] };

/** A group-setting value: a group id, or `{direct_members, direct_subgroups}`. */
const GroupSetting = {
  oneOf: [
    Id,
    {
      type: "object",
      properties: { direct_members: IdList, direct_subgroups: IdList },
      required: ["direct_members", "direct_subgroups"],
      additionalProperties: false,
    },
  ],
};

const TOPICS_POLICIES = ["inherit", "allow_empty_topic", "disable_empty_topic", "empty_topic_only"];

/** Zulip's check_stream_name: stripped, not empty, no control characters. */
function channelName(raw: string): string {
  const name = raw.trim();
  if (!name) throw errors.badRequest("Channel name can't be empty.");
  const bad = name.search(/[\u0000-\u001f\u007f]/);
  if (bad >= 0) throw errors.badRequest(`Invalid character in channel name, at position ${bad + 1}.`);
  return name;
}

/** Users named by id or API e-mail (bots included; Zulip's access_user_by_email), all active members of the caller's realm. */
async function resolvePrincipals(db: DB, caller: UserRow, principals: Array<number | string>): Promise<Array<{ id: number; is_bot: boolean; bot_owner_id: number | null }>> {
  if (!principals.length) throw errors.badRequest("principals cannot be empty");
  const byId = principals.filter((p): p is number => typeof p === "number");
  const byEmail = principals.filter((p): p is string => typeof p === "string").map((e) => e.toLowerCase());
  const rows = await usersByIdOrEmail(db, caller.realm_id, byId, byEmail);
  const byKey = new Map<number | string, (typeof rows)[number]>();
  for (const r of rows) byKey.set(r.id, r).set(r.email.toLowerCase(), r);
  const users = new Map<number, (typeof rows)[number]>();
  for (const p of principals) {
    const row = byKey.get(typeof p === "number" ? p : p.toLowerCase());
    if (!row || !row.is_active) throw errors.badRequest(`No such user: ${p}`);
    users.set(row.id, row);
  }
  return [...users.values()];
}

/** Zulip's parse_message_retention_days: a positive number of days, "unlimited" (-1) or "realm_default" (null). */
function retentionDays(value: number | string): number | null {
  if (value === "realm_default") return null;
  if (value === "unlimited") return -1;
  if (typeof value === "number" && value > 0) return value;
  throw errors.badRequest(`Bad value for 'message_retention_days': ${value}`);
}

/**
 * Zulip's access_stream_by_id / access_stream_by_name: a channel of the caller's realm, not archived, that they may
 * read (or, `metadata`, see); anything else, missing included, is the same error, so that a private channel's
 * existence does not leak.
 */
async function accessChannel(db: DB, user: UserRow, ref: { id: number } | { name: string }, needs: "content" | "metadata" = "content") {
  const error = "name" in ref ? `Invalid channel name '${ref.name}'` : "Invalid channel ID";
  const stream = await findStream(db, user.realm_id, ref);
  if (!stream || stream.deactivated) throw errors.badRequest(error);
  const subscribed = await isSubscribed(db, user.id, stream.id);
  const access = needs === "content" ? hasContentAccess : hasMetadataAccess;
  if (!(await access(db, user, stream, subscribed))) throw errors.badRequest(error);
  return { stream, subscribed };
}

/**
 * Zulip's access_stream_for_delete_or_update_requiring_metadata_access: administrators administer every channel,
 * others through its can_administer_channel_group. Whoever cannot even see the channel is told it does not exist.
 */
async function administeredChannel(db: DB, user: UserRow, streamId: number) {
  const stream = await findStream(db, user.realm_id, { id: streamId });
  if (!stream) throw errors.badRequest("Invalid channel ID");
  const subscribed = await isSubscribed(db, user.id, stream.id);
  const administers = user.role <= ROLE.administrator || (user.role !== ROLE.guest && (await inGroupSetting(db, channelGroupSetting(stream, "can_administer_channel_group"), user.id)));
  if (!administers) {
    if (!(await hasMetadataAccess(db, user, stream, subscribed))) throw errors.badRequest("Invalid channel ID");
    throw errors.badRequest("You do not have permission to administer this channel.");
  }
  return { stream, subscribed };
}

/** Zulip's RETENTION_STREAM_MESSAGE_BATCH_SIZE, and how long delete_topic works before answering `complete: false`. */
const DELETE_TOPIC_BATCH = 100;
const DELETE_TOPIC_BUDGET_MS = 50_000;

/** Zulip's require_realm_admin (and can_manage_default_streams, which is the same role). */
export function requireAdministrator(user: Pick<UserRow, "role">): void {
  if (user.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
}

/**
 * Zulip's check_channel_creation_permissions and the request's settings for new channels, checked only when a
 * channel is about to be created. Returns the settings the realm actor stores.
 */
/** A channel's folder_id: an active folder of the organization (Zulip's get_channel_folder_by_id), or null. */
const FolderId = { oneOf: [Id, { type: "null" }] };

async function checkFolder(db: DB, user: UserRow, folderId: number | null): Promise<number | null> {
  if (folderId !== null && !(await activeChannelFolder(db, user.realm_id, folderId))) throw errors.badRequest("Invalid channel folder ID");
  return folderId;
}

async function newChannelSettings(db: DB, user: UserRow, params: Record<string, any>) {
  const realm = await realmSettings(db, user.realm_id);
  const mayCreate = (setting: string) => inGroupSetting(db, realm[`realm_${setting}`] as GroupSettingValue, user.id);
  if (params.is_web_public) {
    if (params.invite_only) throw errors.badRequest("Invalid parameters");
    if (!realm.realm_enable_spectator_access) throw errors.badRequest("Web-public channels are not enabled.");
    if (!(await mayCreate("can_create_web_public_channel_group"))) throw errors.badRequest("Insufficient permission");
  } else if (!(await mayCreate(params.invite_only ? "can_create_private_channel_group" : "can_create_public_channel_group"))) {
    throw errors.badRequest("Insufficient permission");
  }
  if (params.is_default_stream) {
    requireAdministrator(user);
    if (params.invite_only) throw errors.badRequest("A default channel cannot be private.");
  }
  const messageRetentionDays = retentionDays(params.message_retention_days);
  if (params.message_retention_days !== "realm_default" && user.role !== ROLE.owner) throw errors.badRequest("Must be an organization owner");
  const settings: Record<string, unknown> = {};
  if (params.topics_policy !== undefined) settings.topics_policy = params.topics_policy;
  if (params.folder_id !== undefined && params.folder_id !== null) settings.folder_id = await checkFolder(db, user, params.folder_id);
  for (const name of Object.keys(CHANNEL_GROUP_SETTINGS)) {
    if (params[name] === undefined) continue;
    settings[name] = await checkGroupSetting(db, user.realm_id, name, params[name], channelSettingRule(name));
  }
  return {
    inviteOnly: params.invite_only as boolean,
    isWebPublic: params.is_web_public as boolean,
    isDefault: params.is_default_stream as boolean,
    historyPublicToSubscribers: (params.history_public_to_subscribers as boolean | undefined) ?? null,
    messageRetentionDays,
    settings,
  };
}

/**
 * `announce`: Notification Bot tells the realm's new-channel announcements channel, if it has one, in Zulip's
 * words (zerver/views/streams.py send_messages_for_new_subscribers).
 */
async function announceNewChannels(services: Services, user: UserRow, created: EnsuredChannel[]): Promise<void> {
  const target = Number((await realmSettings(services.store.db, user.realm_id)).realm_new_stream_announcements_stream_id);
  if (!(target > 0)) return;
  const links = created.map((c) => `#**${c.name}**`).join(", ");
  const who = `@_**${user.full_name}|${user.id}**`;
  const content = created.length > 1 ? `${who} created the following channels: ${links}.` : `${who} created a new channel ${links}.`;
  await services.system.ref(Channel, target).ask({ op: "notify", topic: "new channels", content });
}

/**
 * POST /users/me/subscriptions (and PATCH's `add`): subscribe the caller, or `principals`, to the channels named,
 * creating those that do not exist with the request's settings.
 */
async function addSubscriptions(services: Services, user: UserRow, params: Record<string, any>) {
  if (user.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
  const db = services.store.db;
  const specs = new Map<string, { name: string; description: string }>();
  for (const s of params.subscriptions as Array<{ name: string; description?: string }>) {
    const name = channelName(s.name);
    // Zulip keeps descriptions to one line.
    if (!specs.has(name.toLowerCase())) specs.set(name.toLowerCase(), { name, description: (s.description ?? "").replace(/\n/g, " ") });
  }
  const principals: Array<number | string> | undefined = params.principals;
  const subscribingOthers = !!principals && principals.some((p) => p !== user.id && (typeof p !== "string" || p.toLowerCase() !== user.email.toLowerCase()));

  // Existing channels need content access (else `unauthorized`), and adding others the permission to.
  const existing = await channelsByName(db, user.realm_id, [...specs.keys()]);
  const authorized: StreamRow[] = [];
  const unauthorized: string[] = [];
  for (const stream of existing.values()) {
    if (await hasContentAccess(db, user, stream, await isSubscribed(db, user.id, stream.id))) authorized.push(stream);
    else unauthorized.push(stream.name);
  }
  if (unauthorized.length && params.authorization_errors_fatal) throw errors.badRequest(`Unable to access channel (${unauthorized[0]}).`);
  if (subscribingOthers) {
    for (const stream of authorized) if (!(await canAddSubscribers(db, user, stream))) throw errors.badRequest("Insufficient permission");
  }

  const subscribers = principals ? (await resolvePrincipals(db, user, principals)).map((u) => u.id) : [user.id];
  const missing = [...specs.entries()].filter(([key]) => !existing.has(key)).map(([, spec]) => spec);
  const created = missing.length
    ? await services.system.ref(Realm, user.realm_id).ask({
        op: "ensureChannels",
        creatorId: user.id,
        channels: missing,
        ...(await newChannelSettings(db, user, params)),
      })
    : [];
  const channels = [...authorized.map((s) => ({ id: s.id, name: s.name })), ...created];
  const results = await Promise.all(channels.map((c) => services.system.ref(Channel, c.id).ask({ op: "subscribe", userIds: subscribers })));
  const subscribed: Record<string, string[]> = {};
  const already: Record<string, string[]> = {};
  channels.forEach((c, i) => {
    for (const id of results[i]!.added) (subscribed[id] ??= []).push(c.name);
    for (const id of results[i]!.already) (already[id] ??= []).push(c.name);
  });
  const newlyCreated = created.filter((c) => c.created);
  if (params.announce && newlyCreated.length) await announceNewChannels(services, user, newlyCreated);
  return { subscribed, already_subscribed: already, ...(params.authorization_errors_fatal ? {} : { unauthorized }) };
}

/** Zulip's list_to_streams without autocreate: every channel named must exist (`found` by lower-cased name). */
function requireAllFound(names: string[], found: Map<string, StreamRow>): void {
  const missing = names.filter((n) => !found.has(n.toLowerCase()));
  if (missing.length) throw new ChorusError("STREAM_DOES_NOT_EXIST", `Channel(s) (${missing.join(", ")}) do not exist`, 400, { stream: missing[0] });
}

/** DELETE /users/me/subscriptions (and PATCH's `delete`): unsubscribe the caller, or `principals`, from the channels named. */
async function removeSubscriptions(services: Services, user: UserRow, params: Record<string, any>) {
  const db = services.store.db;
  const names = [...new Set((params.subscriptions as string[]).map((n) => n.trim()))];
  const targets = params.principals ? await resolvePrincipals(db, user, params.principals) : [{ id: user.id, is_bot: user.is_bot, bot_owner_id: user.bot_owner_id }];
  // Oneself and one's own bots are not "others" (Zulip's user_directly_controls_user).
  const ownBots = targets.some((t) => t.id !== user.id && t.is_bot && t.bot_owner_id === user.id);
  const others = targets.some((t) => t.id !== user.id && !(t.is_bot && t.bot_owner_id === user.id));
  const found = await channelsByName(db, user.realm_id, names);
  for (const stream of found.values()) {
    if (!others && !ownBots) continue;
    const subscribed = await isSubscribed(db, user.id, stream.id);
    const allowed = others ? await canRemoveSubscribers(db, user, stream, subscribed) : await hasMetadataAccess(db, user, stream, subscribed);
    if (!allowed) throw errors.badRequest("Insufficient permission");
  }
  requireAllFound(names, found);
  const removed: string[] = [];
  const notRemoved: string[] = [];
  const userIds = targets.map((t) => t.id);
  for (const stream of found.values()) {
    const result = await services.system.ref(Channel, stream.id).ask({ op: "unsubscribe", userIds });
    // One entry per user and channel, as Zulip lists them.
    removed.push(...result.removed.map(() => stream.name));
    notRemoved.push(...result.notSubscribed.map(() => stream.name));
  }
  return { removed, not_removed: notRemoved };
}

/** A channel named to subscribe to (created if it does not exist). */
const ChannelSpecParam = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: LIMITS.max_stream_name_length },
    description: { type: "string", maxLength: LIMITS.max_stream_description_length },
    color: Str,
  },
  required: ["name"],
} as const;

/** The settings of channels a request creates (POST /users/me/subscriptions, POST /channels/create). */
const NEW_CHANNEL_PARAMS = {
  announce: { ...Bool, default: false },
  invite_only: { ...Bool, default: false },
  is_web_public: { ...Bool, default: false },
  is_default_stream: { ...Bool, default: false },
  history_public_to_subscribers: Bool,
  message_retention_days: { anyOf: [{ type: "integer" }, Str], default: "realm_default" },
  // JSON-encoded in Zulip's API; a bare word is accepted too.
  topics_policy: { anyOf: [{ type: "string", enum: TOPICS_POLICIES }] },
  folder_id: FolderId,
  ...Object.fromEntries(Object.keys(CHANNEL_GROUP_SETTINGS).map((name) => [name, GroupSetting])),
};

const ADD_SUBSCRIPTIONS_PARAMS = { authorization_errors_fatal: { ...Bool, default: true }, ...NEW_CHANNEL_PARAMS };

/** The defaults of POST /users/me/subscriptions, which PATCH's `add` takes (Zulip calls the same view). */
const ADD_SUBSCRIPTIONS_DEFAULTS = Object.fromEntries(
  Object.entries(ADD_SUBSCRIPTIONS_PARAMS).flatMap(([name, schema]) => ("default" in schema ? [[name, schema.default]] : [])),
);

/** Settings of POST /users/me/subscriptions/properties, and how each value is checked. */
const BOOLEAN_PROPERTIES = new Set(["in_home_view", "is_muted", "desktop_notifications", "audible_notifications", "push_notifications", "email_notifications", "pin_to_top", "wildcard_mentions_notify"]);

function checkProperty(property: string, value: unknown): void {
  if (property === "color") {
    if (typeof value !== "string" || !/^#[0-9a-fA-F]{6}$/.test(value)) throw errors.badRequest("color is not a valid hex color code");
  } else if (BOOLEAN_PROPERTIES.has(property)) {
    if (typeof value !== "boolean") throw errors.badRequest(`${property} is not a boolean`);
  } else throw errors.badRequest(`Unknown subscription property: ${property}`);
}

export const channelRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/users/me/subscriptions",
    params: {
      type: "object",
      properties: { subscriptions: { type: "array", minItems: 1, items: ChannelSpecParam }, principals: Principals, ...ADD_SUBSCRIPTIONS_PARAMS },
      required: ["subscriptions"],
    },
    handle: ({ params, user, services }) => addSubscriptions(services, user, params),
  },
  {
    method: "DELETE",
    path: "/users/me/subscriptions",
    params: {
      type: "object",
      properties: { subscriptions: { type: "array", items: Str }, principals: Principals },
      required: ["subscriptions"],
    },
    handle: ({ params, user, services }) => removeSubscriptions(services, user, params),
  },
  {
    method: "POST",
    path: "/users/me/subscriptions/properties",
    params: {
      type: "object",
      properties: {
        subscription_data: {
          type: "array",
          items: {
            type: "object",
            properties: { stream_id: Id, property: Str, value: { type: ["boolean", "string"] } },
            required: ["stream_id", "property", "value"],
          },
        },
      },
      required: ["subscription_data"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const changes = params.subscription_data as Array<{ stream_id: number; property: string; value: boolean | string }>;
      // Everything is checked before anything changes.
      for (const change of changes) {
        checkProperty(change.property, change.value);
        const stream = await findStream(db, user.realm_id, { id: change.stream_id });
        const subscribed = !!stream && (await isSubscribed(db, user.id, stream.id));
        if (!stream || !(await hasContentAccess(db, user, stream, subscribed))) throw errors.badRequest("Invalid channel ID");
        if (!subscribed) throw errors.badRequest(`Not subscribed to channel ID ${stream.id}`);
      }
      for (const change of changes) {
        await services.system.ref(Channel, change.stream_id).ask({ op: "updateSubscription", userId: user.id, property: change.property, value: change.value });
      }
      return {};
    },
  },
  {
    method: "PATCH",
    path: "/streams/{stream_id}",
    params: {
      type: "object",
      properties: {
        stream_id: Id,
        new_name: { type: "string", maxLength: LIMITS.max_stream_name_length },
        description: { type: "string", maxLength: LIMITS.max_stream_description_length },
        is_private: Bool,
        history_public_to_subscribers: Bool,
        is_archived: Bool,
        folder_id: FolderId,
        topics_policy: { anyOf: [{ type: "string", enum: TOPICS_POLICIES }] },
        ...Object.fromEntries(
          Object.keys(CHANNEL_GROUP_SETTINGS).map((name) => [name, { type: "object", properties: { new: GroupSetting, old: GroupSetting }, required: ["new"], additionalProperties: false }]),
        ),
      },
      required: ["stream_id"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const { stream, subscribed } = await administeredChannel(db, user, params.stream_id);
      // Zulip's update_stream_backend: is_archived only unarchives (archiving is DELETE /streams/{stream_id}).
      if (params.is_archived === true) throw errors.badRequest("Invalid parameters");
      if (params.is_archived === false) {
        await services.system.ref(Channel, stream.id).ask({ op: "unarchive" });
        if (Object.keys(params).every((k) => k === "stream_id" || k === "is_archived")) return {};
      }
      // Zulip's update_stream_backend: the proposed privacy must be coherent.
      const inviteOnly: boolean = params.is_private ?? stream.invite_only;
      const historyPublic: boolean = params.history_public_to_subscribers ?? (params.is_private !== undefined ? !params.is_private : stream.history_public_to_subscribers);
      if ((!inviteOnly && !historyPublic) || (stream.is_web_public && (inviteOnly || !historyPublic))) throw errors.badRequest("Invalid parameters");
      if (params.is_private !== undefined) {
        if (!(await hasContentAccess(db, user, stream, subscribed))) throw errors.badRequest("Channel content access is required.");
        const realm = await realmSettings(db, user.realm_id);
        const group = params.is_private ? "realm_can_create_private_channel_group" : "realm_can_create_public_channel_group";
        if (!(await inGroupSetting(db, realm[group] as GroupSettingValue, user.id))) throw errors.badRequest("Insufficient permission");
      }
      let name: string | undefined;
      if (params.new_name !== undefined) {
        name = channelName(params.new_name);
        if (name === stream.name) throw errors.badRequest("Channel already has that name.");
      }
      const settings: Record<string, unknown> = {};
      const expected: Record<string, unknown> = {};
      // Two channel settings need a realm permission besides administering the channel (administrators have both).
      const needs = [
        ...(params.topics_policy !== undefined ? ["realm_can_set_topics_policy_group"] : []),
        ...(params.can_delete_any_message_group || params.can_delete_own_message_group ? ["realm_can_set_delete_message_policy_group"] : []),
      ];
      if (needs.length && user.role > ROLE.administrator) {
        const realm = await realmSettings(db, user.realm_id);
        for (const group of needs) if (!(await inGroupSetting(db, realm[group] as GroupSettingValue, user.id))) throw errors.badRequest("Insufficient permission");
      }
      if (params.topics_policy !== undefined) settings.topics_policy = params.topics_policy;
      if (params.folder_id !== undefined) settings.folder_id = await checkFolder(db, user, params.folder_id);
      for (const setting of Object.keys(CHANNEL_GROUP_SETTINGS)) {
        const change = params[setting] as { new: GroupSettingValue; old?: GroupSettingValue } | undefined;
        if (!change) continue;
        settings[setting] = await checkGroupSetting(db, user.realm_id, setting, change.new, channelSettingRule(setting));
        if (change.old !== undefined) expected[setting] = change.old;
      }
      await services.system.ref(Channel, stream.id).ask({
        op: "updateChannel",
        name,
        description: params.description?.replace(/\n/g, " "),
        inviteOnly: params.is_private,
        historyPublic: params.history_public_to_subscribers ?? (params.is_private !== undefined ? historyPublic : undefined),
        settings,
        expected,
      });
      return {};
    },
  },
  {
    method: "GET",
    path: "/users/me/subscriptions",
    params: { type: "object", properties: { include_subscribers: { ...Bool, default: false } } },
    async handle({ params, user, services }) {
      return { subscriptions: await subscriptionsOf(services.store.db, user.id, params.include_subscribers) };
    },
  },
  {
    method: "GET",
    path: "/streams",
    params: {
      type: "object",
      properties: {
        include_public: { ...Bool, default: true },
        include_web_public: { ...Bool, default: false },
        include_subscribed: { ...Bool, default: true },
        include_all: { ...Bool, default: false },
        include_all_active: { ...Bool, default: false },
        include_default: { ...Bool, default: false },
        include_can_access_content: { ...Bool, default: false },
        exclude_archived: { ...Bool, default: true },
      },
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const rows = await visibleStreams(db, user, {
        public: params.include_public,
        webPublic: params.include_web_public,
        subscribed: params.include_subscribed,
        defaults: params.include_default,
        all: params.include_all || params.include_all_active,
        canAccessContent: params.include_can_access_content,
        archived: !params.exclude_archived,
      });
      return { streams: streamObjects(rows) };
    },
  },
  {
    method: "PATCH",
    path: "/users/me/subscriptions",
    params: {
      type: "object",
      properties: { add: { type: "array", items: ChannelSpecParam }, delete: { type: "array", items: Str } },
    },
    // Zulip's update_subscriptions_backend: the caller's own subscriptions, added then removed, one answer for both.
    async handle({ params, user, services }) {
      const add = (params.add ?? []) as Array<{ name: string }>;
      const remove = (params.delete ?? []) as string[];
      if (!add.length && !remove.length) throw errors.badRequest('Nothing to do. Specify at least one of "add" or "delete".');
      // Zulip rolls the additions back when a removal fails: here the removals' channels are checked first.
      requireAllFound(remove.map((n) => n.trim()), await channelsByName(services.store.db, user.realm_id, remove.map((n) => n.trim())));
      const added = add.length ? await addSubscriptions(services, user, { ...ADD_SUBSCRIPTIONS_DEFAULTS, subscriptions: add }) : { subscribed: {}, already_subscribed: {} };
      const removed = remove.length ? await removeSubscriptions(services, user, { subscriptions: remove }) : { removed: [], not_removed: [] };
      return Object.assign({}, added, removed);
    },
  },
  {
    method: "POST",
    path: "/channels/create",
    params: {
      type: "object",
      properties: {
        name: { type: "string", maxLength: LIMITS.max_stream_name_length },
        description: { type: "string", maxLength: LIMITS.max_stream_description_length, default: "" },
        subscribers: IdList,
        ...NEW_CHANNEL_PARAMS,
      },
      required: ["name", "subscribers"],
    },
    // One new channel with its settings and first subscribers; a taken name is CHANNEL_ALREADY_EXISTS (409).
    async handle({ params, user, services }) {
      if (user.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
      const db = services.store.db;
      const name = channelName(params.name);
      if ((await channelsByName(db, user.realm_id, [name])).size) throw chatErrors.channelExists(name);
      const subscribers = params.subscribers.length ? (await resolvePrincipals(db, user, params.subscribers)).map((u) => u.id) : [];
      const [channel] = await services.system.ref(Realm, user.realm_id).ask({
        op: "ensureChannels",
        creatorId: user.id,
        channels: [{ name, description: (params.description as string).replace(/\n/g, " ") }],
        ...(await newChannelSettings(db, user, params)),
      });
      // Another request created it meanwhile.
      if (!channel!.created) throw chatErrors.channelExists(channel!.name);
      if (subscribers.length) await services.system.ref(Channel, channel!.id).ask({ op: "subscribe", userIds: subscribers });
      if (params.announce) await announceNewChannels(services, user, [channel!]);
      return { id: channel!.id };
    },
  },
  {
    method: "GET",
    path: "/get_stream_id",
    params: { type: "object", properties: { stream: Str }, required: ["stream"] },
    async handle({ params, user, services }) {
      const { stream } = await accessChannel(services.store.db, user, { name: params.stream });
      return { stream_id: stream.id };
    },
  },
  {
    method: "GET",
    path: "/streams/{stream_id}",
    params: { type: "object", properties: { stream_id: Id }, required: ["stream_id"] },
    // Zulip's get_stream_backend: the channel as GET /streams lists it, for whoever may see its metadata.
    async handle({ params, user, services }) {
      const db = services.store.db;
      const { stream } = await accessChannel(db, user, { id: params.stream_id }, "metadata");
      const [object] = streamObjects([stream]);
      return { stream: object };
    },
  },
  {
    method: "GET",
    path: "/streams/{stream_id}/members",
    params: { type: "object", properties: { stream_id: Id }, required: ["stream_id"] },
    // Zulip's get_subscribers_backend: the subscribers' ids, for whoever may see who is subscribed (its metadata).
    async handle({ params, user, services }) {
      const db = services.store.db;
      const { stream } = await accessChannel(db, user, { id: params.stream_id }, "metadata");
      return { subscribers: (await subscribersOf(db, [stream.id])).get(stream.id) ?? [] };
    },
  },
  {
    method: "GET",
    path: "/users/{user_id}/subscriptions/{stream_id}",
    params: { type: "object", properties: { user_id: Id, stream_id: Id }, required: ["user_id", "stream_id"] },
    // Zulip's get_subscription_backend: an active person the caller may see, a channel the caller may see.
    async handle({ params, user, services }) {
      const db = services.store.db;
      const target = await userInRealm(db, user.realm_id, params.user_id);
      if (!target || target.is_bot) throw errors.badRequest("No such user");
      if (!target.is_active) throw errors.badRequest("User is deactivated");
      const access = await accessibleUsers(db, user);
      if (access && !access.has(target.id)) throw errors.badRequest("Insufficient permission");
      const { stream } = await accessChannel(db, user, { id: params.stream_id }, "metadata");
      return { is_subscribed: await isSubscribed(db, target.id, stream.id) };
    },
  },
  {
    method: "DELETE",
    path: "/streams/{stream_id}",
    params: { type: "object", properties: { stream_id: Id }, required: ["stream_id"] },
    async handle({ params, user, services }) {
      const { stream } = await administeredChannel(services.store.db, user, params.stream_id);
      await services.system.ref(Channel, stream.id).ask({ op: "archive" });
      return {};
    },
  },
  {
    method: "POST",
    path: "/streams/{stream_id}/delete_topic",
    params: { type: "object", properties: { stream_id: Id, topic_name: Str }, required: ["stream_id", "topic_name"] },
    /**
     * Zulip's delete_in_topic: administrators delete the topic's messages they can read, in batches, newest first,
     * each batch committed on its own; past the time budget the answer is `complete: false` and the client asks again.
     */
    async handle({ params, user, services }) {
      requireAdministrator(user);
      const { stream } = await accessChannel(services.store.db, user, { id: params.stream_id });
      const topic = normaliseTopic(params.topic_name);
      const until = Date.now() + DELETE_TOPIC_BUDGET_MS;
      const channel = services.system.ref(Channel, stream.id);
      while (Date.now() < until) {
        const batch = await channel.ask({ op: "deleteTopic", actingId: user.id, topic, batchSize: DELETE_TOPIC_BATCH });
        if (batch.complete) return { complete: true };
      }
      return { complete: false };
    },
  },
  {
    method: "POST",
    path: "/default_streams",
    params: { type: "object", properties: { stream_id: Id }, required: ["stream_id"] },
    async handle({ params, user, services }) {
      requireAdministrator(user);
      const { stream } = await accessChannel(services.store.db, user, { id: params.stream_id });
      if (stream.invite_only) throw errors.badRequest("Private channels cannot be made default.");
      await services.system.ref(Realm, user.realm_id).ask({ op: "setDefaultChannel", streamId: stream.id, isDefault: true });
      return {};
    },
  },
  {
    method: "DELETE",
    path: "/default_streams",
    params: { type: "object", properties: { stream_id: Id }, required: ["stream_id"] },
    async handle({ params, user, services }) {
      requireAdministrator(user);
      const { stream } = await accessChannel(services.store.db, user, { id: params.stream_id }, "metadata");
      await services.system.ref(Realm, user.realm_id).ask({ op: "setDefaultChannel", streamId: stream.id, isDefault: false });
      return {};
    },
  },
  {
    method: "GET",
    path: "/channel_folders",
    params: { type: "object", properties: { include_archived: { ...Bool, default: false } } },
    async handle({ params, user, services }) {
      return { channel_folders: await channelFolderObjects(services.store.db, user.realm_id, params.include_archived) };
    },
  },
  {
    method: "POST",
    path: "/channel_folders/create",
    params: {
      type: "object",
      properties: { name: { type: "string", maxLength: MAX_CHANNEL_FOLDER_NAME_LENGTH }, description: { type: "string", maxLength: MAX_CHANNEL_FOLDER_DESCRIPTION_LENGTH, default: "" } },
      required: ["name"],
    },
    handle(call) {
      return askRealm(call, { op: "createChannelFolder", name: call.params.name, description: call.params.description });
    },
  },
  {
    method: "PATCH",
    path: "/channel_folders",
    params: { type: "object", properties: { order: { type: "array", items: Id } }, required: ["order"] },
    handle(call) {
      return askRealm(call, { op: "reorderChannelFolders", order: call.params.order });
    },
  },
  {
    method: "PATCH",
    path: "/channel_folders/{channel_folder_id}",
    params: {
      type: "object",
      properties: {
        channel_folder_id: Id,
        name: { type: "string", maxLength: MAX_CHANNEL_FOLDER_NAME_LENGTH },
        description: { type: "string", maxLength: MAX_CHANNEL_FOLDER_DESCRIPTION_LENGTH },
        is_archived: Bool,
      },
      required: ["channel_folder_id"],
    },
    handle(call) {
      const { params } = call;
      return askRealm(call, { op: "updateChannelFolder", id: params.channel_folder_id, name: params.name, description: params.description, isArchived: params.is_archived });
    },
  },
];
