/**
 * Channels and subscriptions: POST, GET and DELETE /users/me/subscriptions, POST
 * /users/me/subscriptions/properties, GET /streams, PATCH /streams/{stream_id}. Permission rules are actors/chat/conversations/channel-access.ts's; the channel
 * actors write the subscriptions and send their events.
 */
import { ChorusError, errors } from "../../runtime/errors.ts";
import { Channel } from "../../actors/chat/conversations/channel.protocol.ts";
import { Realm, type EnsuredChannel } from "../../actors/chat/organization/realm.protocol.ts";
import { ROLE } from "../../actors/chat/organization/realm.ts";
import { canAddSubscribers, canRemoveSubscribers, channelGroupSetting, hasContentAccess, hasMetadataAccess } from "../../actors/chat/conversations/channel-access.ts";
import { CHANNEL_GROUP_SETTINGS, channelSettingRule, checkGroupSetting, inGroupSetting, type GroupSettingValue } from "../../actors/chat/organization/groups.ts";
import { realmSettings } from "../../actors/chat/users/settings.ts";
import { isSubscribed, subscriptionsOf } from "../../actors/chat/reads/subscriptions.ts";
import { channelsByName, findStream, streamObjects, visibleStreams, type StreamRow } from "../../actors/chat/reads/channels.ts";
import { usersByIdOrEmail, type UserRow } from "../../actors/chat/reads/users.ts";
import type { RouteSpec, Services } from "./app.ts";
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
 * Zulip's check_channel_creation_permissions and the request's settings for new channels, checked only when a
 * channel is about to be created. Returns the settings the realm actor stores.
 */
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
    if (user.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
    if (params.invite_only) throw errors.badRequest("A default channel cannot be private.");
  }
  const messageRetentionDays = retentionDays(params.message_retention_days);
  if (params.message_retention_days !== "realm_default" && user.role !== ROLE.owner) throw errors.badRequest("Must be an organization owner");
  const settings: Record<string, unknown> = {};
  if (params.topics_policy !== undefined) settings.topics_policy = params.topics_policy;
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
      properties: {
        subscriptions: {
          type: "array",
          minItems: 1,
          items: {
            type: "object",
            properties: {
              name: { type: "string", maxLength: LIMITS.max_stream_name_length },
              description: { type: "string", maxLength: LIMITS.max_stream_description_length },
              color: Str,
            },
            required: ["name"],
          },
        },
        principals: Principals,
        authorization_errors_fatal: { ...Bool, default: true },
        announce: { ...Bool, default: false },
        invite_only: { ...Bool, default: false },
        is_web_public: { ...Bool, default: false },
        is_default_stream: { ...Bool, default: false },
        history_public_to_subscribers: Bool,
        message_retention_days: { anyOf: [{ type: "integer" }, Str], default: "realm_default" },
        // JSON-encoded in Zulip's API; a bare word is accepted too.
        topics_policy: { anyOf: [{ type: "string", enum: TOPICS_POLICIES }] },
        ...Object.fromEntries(Object.keys(CHANNEL_GROUP_SETTINGS).map((name) => [name, GroupSetting])),
      },
      required: ["subscriptions"],
    },
    async handle({ params, user, services }) {
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
    },
  },
  {
    method: "DELETE",
    path: "/users/me/subscriptions",
    params: {
      type: "object",
      properties: { subscriptions: { type: "array", items: Str }, principals: Principals },
      required: ["subscriptions"],
    },
    async handle({ params, user, services }) {
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
      const missing = names.filter((n) => !found.has(n.toLowerCase()));
      if (missing.length) throw new ChorusError("STREAM_DOES_NOT_EXIST", `Channel(s) (${missing.join(", ")}) do not exist`, 400, { stream: missing[0] });
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
    },
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
        topics_policy: { anyOf: [{ type: "string", enum: TOPICS_POLICIES }] },
        ...Object.fromEntries(
          Object.keys(CHANNEL_GROUP_SETTINGS).map((name) => [name, { type: "object", properties: { new: GroupSetting, old: GroupSetting }, required: ["new"], additionalProperties: false }]),
        ),
      },
      required: ["stream_id"],
    },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const stream = await findStream(db, user.realm_id, { id: params.stream_id });
      if (!stream) throw errors.badRequest("Invalid channel ID");
      const subscribed = await isSubscribed(db, user.id, stream.id);
      // Administrators administer every channel; others through its can_administer_channel_group. Whoever cannot
      // even see the channel is told it does not exist.
      const administers = user.role <= ROLE.administrator || (user.role !== ROLE.guest && (await inGroupSetting(db, channelGroupSetting(stream, "can_administer_channel_group"), user.id)));
      if (!administers) {
        if (!(await hasMetadataAccess(db, user, stream, subscribed))) throw errors.badRequest("Invalid channel ID");
        throw errors.badRequest("You do not have permission to administer this channel.");
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
      });
      return { streams: await streamObjects(db, rows) };
    },
  },
];
