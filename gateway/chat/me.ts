/**
 * The caller's own data: PATCH /settings, drafts, saved snippets, navigation views, alert words, status and muted
 * users. Every change goes through the user actor.
 */
import type { ActorRef } from "../../runtime/protocol.ts";
import { ChorusError, errors } from "../../runtime/errors.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import { hashPassword, verifyPassword } from "../../runtime/secrets.ts";
import { serverRealmId } from "../../actors/chat/reads/realms.ts";
import { Realm } from "../../actors/chat/organization/realm.protocol.ts";
import { User, type DraftFields, type UpdateStatus, type UserProtocol } from "../../actors/chat/users/user.protocol.ts";
import { ROLE } from "../../actors/chat/organization/groups.ts";
import { checkSetting, draftsOf, SETTING_RULES, viewsOf } from "../../actors/chat/users/user-data.ts";
import { alertWordsOf, MAX_ALERT_WORD_LENGTH } from "../../actors/chat/users/alert-words.ts";
import { USER_SETTINGS_DEFAULTS } from "../../actors/chat/users/settings.ts";
import type { Call, RouteSpec } from "./app.ts";
import { Presence } from "../../actors/chat/users/presence.protocol.ts";
import { presencesSeenBy } from "../../actors/chat/organization/accounts.ts";
import { Bool, Id, Str, type JsonSchema } from "../params.ts";
import { MAX_SNIPPET_TITLE_LENGTH, snippetsOf } from "../../actors/chat/users/saved-snippets.ts";
import { LIMITS } from "./zulip.ts";

const SnippetTitle = { type: "string", maxLength: MAX_SNIPPET_TITLE_LENGTH } as const;
const SnippetContent = { type: "string", maxLength: LIMITS.max_message_length } as const;
import { checkEmojiRequest, emojiNamed } from "./reactions.ts";
import { accessUser } from "./users.ts";
import { unreadMessageIdsFrom } from "../../actors/chat/reads/unreads.ts";
import { Flags } from "../../actors/chat/conversations/flags.protocol.ts";

/** Each setting's wire type, from its default value. */
export const settingParams: Record<string, JsonSchema> = Object.fromEntries(
  Object.keys(SETTING_RULES).map((name) => {
    const example = (USER_SETTINGS_DEFAULTS as Record<string, unknown>)[name];
    return [name, { type: typeof example === "boolean" ? "boolean" : typeof example === "number" ? "integer" : "string" }];
  }),
);

/** The settings among `names` that the request sets, each checked against Zulip's allowed values. */
export function requestedSettings(params: Record<string, unknown>, names: string[]): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  for (const name of names) {
    if (params[name] === undefined) continue;
    checkSetting(name, params[name]);
    settings[name] = params[name];
  }
  return settings;
}

const Draft = {
  type: "object",
  properties: {
    type: { type: "string", enum: ["", "stream", "private"] },
    to: { type: "array", items: Id },
    topic: Str,
    content: Str,
    timestamp: { type: "integer" },
    id: {},
  },
  required: ["type", "to", "topic", "content"],
};

/** The caller's user actor. */
function userActor(call: Call): ActorRef<UserProtocol> {
  return call.services.system.ref(User, call.user.id);
}

function draftFields(raw: Record<string, unknown>): DraftFields {
  if ("id" in raw) throw errors.badRequest("Draft ID must not be specified when creating or editing a draft");
  return raw as unknown as DraftFields;
}

/** The client's name, for the legacy per-client presence format (Zulip reads it from the User-Agent). */
function clientName(userAgent: string | undefined): string {
  return userAgent?.match(/^([A-Za-z][\w.-]{0,40})/)?.[1] ?? "website";
}

/** Zulip's token rules: APNs tokens are hex; every token is non-empty and at most 4096 characters. */
function checkPushToken(kind: "apns" | "fcm", token: string): void {
  if (!token || token.length > 4096) throw errors.badRequest("Empty or invalid length token");
  if (kind === "apns" && !/^[0-9a-fA-F]+$/.test(token)) throw errors.badRequest("Invalid APNS token");
}

function pushTokenRoutes(path: string, kind: "apns" | "fcm"): RouteSpec[] {
  return [
    {
      method: "POST",
      path,
      params: { type: "object", properties: { token: Str, appid: Str }, required: kind === "apns" ? ["token", "appid"] : ["token"] },
      async handle(call) {
        refuseBots(call);
        checkPushToken(kind, call.params.token);
        return userActor(call).ask({ op: "addPushToken", kind, token: call.params.token, appid: call.params.appid ?? null });
      },
    },
    {
      method: "DELETE",
      path,
      params: { type: "object", properties: { token: Str }, required: ["token"] },
      async handle(call) {
        refuseBots(call);
        checkPushToken(kind, call.params.token);
        return userActor(call).ask({ op: "removePushToken", kind, token: call.params.token });
      },
    },
  ];
}

const refuseBots = (call: Call) => {
  if (call.user.is_bot) throw errors.badRequest("This endpoint does not accept bot requests.");
};

/**
 * The mobile push endpoints answered as a Zulip server with neither a push bouncer nor FCM/APNs credentials answers
 * (zerver/views/push_notifications.py): E2EE registration is refused as not configured, so no E2EE device ever
 * exists; a legacy test notification to known tokens succeeds with nothing sent, an unknown token is refused.
 */
const noPushServiceRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/mobile_push/register",
    params: { type: "object", properties: {} },
    handle(call) {
      refuseBots(call);
      throw new ChorusError("PUSH_SERVICE_NOT_CONFIGURED", "Server is not configured to use push notification service.", 400);
    },
  },
  {
    method: "POST",
    path: "/mobile_push/test_notification",
    params: { type: "object", properties: { token: Str } },
    async handle(call) {
      refuseBots(call);
      if (call.params.token !== undefined) {
        const known = await call.services.store.db
          .selectFrom("push_devices")
          .select("token")
          .where("user_id", "=", call.user.id)
          .where("token", "=", call.params.token)
          .executeTakeFirst();
        if (!known) throw new ChorusError("INVALID_PUSH_DEVICE_TOKEN", "Device not recognized", 400);
      }
      return {};
    },
  },
  {
    method: "POST",
    path: "/mobile_push/e2ee/test_notification",
    params: { type: "object", properties: { push_account_id: { type: "integer" }, device_id: { type: "integer" } } },
    handle(call) {
      refuseBots(call);
      throw new ChorusError("NO_ACTIVE_PUSH_DEVICE", "No active registered push device", 400);
    },
  },
];

/** Zulip's alert_words parameter: a JSON list of words, each at most MAX_ALERT_WORD_LENGTH characters. */
const AlertWordsParams = {
  type: "object" as const,
  properties: { alert_words: { type: "array", items: { type: "string", maxLength: MAX_ALERT_WORD_LENGTH } } },
  required: ["alert_words"],
};

/** Zulip's limit on a status text, after trimming. */
const MAX_STATUS_TEXT_LENGTH = 60;

function alertWordsRoute(method: "POST" | "DELETE"): RouteSpec {
  return {
    method,
    path: "/users/me/alert_words",
    params: AlertWordsParams,
    async handle(call) {
      // Zulip's clean_alert_words: surrounding spaces go, and so do words left empty.
      const words = (call.params.alert_words as string[]).map((w) => w.trim()).filter((w) => w !== "");
      return userActor(call).ask({ op: "changeAlertWords", add: method === "POST", words });
    },
  };
}

/**
 * POST and DELETE /users/me/muted_users/{id}: any user of the realm, bots and deactivated users included. Muting
 * marks the muted user's messages read (Zulip's do_mark_muted_user_messages_as_read), with the usual
 * update_message_flags event.
 */
function muteRoute(method: "POST" | "DELETE"): RouteSpec {
  return {
    method,
    path: "/users/me/muted_users/{muted_user_id}",
    params: { type: "object", properties: { muted_user_id: Id }, required: ["muted_user_id"] },
    async handle(call) {
      const mutedUserId = call.params.muted_user_id as number;
      if (method === "POST" && mutedUserId === call.user.id) throw errors.badRequest("Cannot mute self");
      await accessUser(call.services, call.user, mutedUserId, { allowBots: true, allowDeactivated: true });
      await userActor(call).ask({ op: "muteUser", mute: method === "POST", mutedUserId });
      const unread = method === "POST" ? await unreadMessageIdsFrom(call.services.store.db, call.user.id, mutedUserId) : [];
      if (unread.length) await call.services.system.ref(Flags, call.user.id).ask({ op: "updateFlags", add: true, flag: "read", messageIds: unread });
      return {};
    },
  };
}

const StatusParams = { status_text: Str, emoji_name: Str, emoji_code: Str, reaction_type: Str };

/** Zulip's update_user_status_backend checks: what to change, with the emoji's code and type completed from its name. */
async function statusChange({ params, user, services }: Call): Promise<UpdateStatus> {
  if (user.is_bot) throw errors.badRequest("This endpoint does not accept bot requests.");
  const statusText = params.status_text === undefined ? undefined : String(params.status_text).trim();
  if (statusText !== undefined && statusText.length > MAX_STATUS_TEXT_LENGTH) {
    throw errors.badRequest(`status_text is too long (limit: ${MAX_STATUS_TEXT_LENGTH} characters)`);
  }
  if (params.away === undefined && statusText === undefined && params.emoji_name === undefined) throw errors.badRequest("Client did not pass any new values.");
  let emoji: { emoji_name: string; emoji_code: string; reaction_type: string } | undefined;
  if (params.emoji_name === "") {
    // An empty name clears the emoji.
    emoji = { emoji_name: "", emoji_code: "", reaction_type: "unicode_emoji" };
  } else if (params.emoji_name !== undefined) {
    let code: string | undefined = params.emoji_code;
    let type: string | undefined = params.reaction_type;
    if (code === undefined || type === undefined) {
      const named = await emojiNamed(services.store.db, user.realm_id, params.emoji_name);
      code ??= named.code;
      type ??= named.type;
    }
    emoji = { emoji_name: params.emoji_name, emoji_code: code, reaction_type: type };
    await checkEmojiRequest(services.store.db, user.realm_id, emoji);
  } else if (params.emoji_code || params.reaction_type) {
    throw errors.badRequest("Client must pass emoji_name if they pass either emoji_code or reaction_type.");
  }
  return { op: "updateStatus", away: params.away, statusText, emoji };
}

export const meRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/users/me/alert_words",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { alert_words: await alertWordsOf(services.store.db, user.id) };
    },
  },
  alertWordsRoute("POST"),
  alertWordsRoute("DELETE"),
  muteRoute("POST"),
  muteRoute("DELETE"),
  {
    method: "POST",
    path: "/users/me/status",
    params: { type: "object", properties: { away: Bool, ...StatusParams } },
    async handle(call) {
      return userActor(call).ask(await statusChange(call));
    },
  },
  {
    // Zulip's update_user_status_admin: an administrator sets another user's status (no `away` there).
    method: "POST",
    path: "/users/{user_id}/status",
    params: { type: "object", properties: { user_id: Id, ...StatusParams }, required: ["user_id"] },
    async handle(call) {
      const target = await accessUser(call.services, call.user, call.params.user_id, { allowBots: false, allowDeactivated: false });
      if (call.user.role > ROLE.administrator) throw errors.badRequest("Insufficient permission");
      return call.services.system.ref(User, target.id).ask(await statusChange(call));
    },
  },
  ...pushTokenRoutes("/users/me/apns_device_token", "apns"),
  ...pushTokenRoutes("/users/me/android_gcm_reg_id", "fcm"),
  ...noPushServiceRoutes,
  {
    method: "POST",
    path: "/users/me/presence",
    params: {
      type: "object",
      properties: {
        status: { type: "string", enum: ["active", "idle"] },
        last_update_id: { type: "integer", minimum: -1 },
        history_limit_days: { type: "integer", minimum: 0, maximum: 3650, default: 14 },
        ping_only: { ...Bool, default: false },
        new_user_input: { ...Bool, default: false },
        slim_presence: { ...Bool, default: false },
      },
      required: ["status"],
    },
    async handle({ params, user, services, req }) {
      if (user.is_bot) throw errors.badRequest("This endpoint does not accept bot requests.");
      const modern = params.last_update_id !== undefined || params.slim_presence;
      const reply = await services.system.ref(Presence, user.realm_id).ask({
        op: "ping",
        userId: user.id,
        email: user.email,
        status: params.status,
        client: clientName(req.headers["user-agent"]),
        fetch: !params.ping_only,
        lastUpdateId: params.last_update_id ?? null,
        historyLimitDays: params.history_limit_days,
        modern,
      });
      if (reply.presences) reply.presences = await presencesSeenBy(services.store.db, user, reply.presences, !modern);
      const empty = !reply.presences || !Object.keys(reply.presences).length;
      if (params.last_update_id === undefined && empty) reply.presence_last_update_id = -1;
      return { zephyr_mirror_active: false, ...reply };
    },
  },
  {
    method: "PATCH",
    path: "/settings",
    params: {
      type: "object",
      properties: { ...settingParams, full_name: Str, email: Str, old_password: Str, new_password: Str },
    },
    async handle(call) {
      const { params, user } = call;
      const settings = requestedSettings(params, Object.keys(SETTING_RULES));
      let fullName: string | undefined;
      if (params.full_name !== undefined) {
        fullName = String(params.full_name).trim();
        if (!fullName) throw errors.badRequest("Name too short!");
        if (fullName.length > 100) throw errors.badRequest("Name too long!");
        if (/[\u0000-\u001f\u007f*`\\>"@]/.test(fullName)) throw errors.badRequest("Invalid characters in name!");
      }
      let passwordHash: string | undefined;
      if (params.new_password !== undefined) {
        if (params.old_password === undefined) throw chatErrors.missing("old_password");
        if (!(await verifyPassword(params.old_password, user.password_hash))) throw errors.badRequest("Wrong password!");
        if (!params.new_password) throw errors.badRequest("New password cannot be empty.");
        passwordHash = await hashPassword(params.new_password);
      }
      // Zulip ignores an unchanged (or empty) address; a new one takes effect when the e-mail sent to it is confirmed.
      const newEmail = params.email?.trim();
      if (newEmail && newEmail !== user.delivery_email) {
        await call.services.system.ref(Realm, user.realm_id).ask({ op: "startEmailChange", userId: user.id, email: newEmail, siteUrl: call.services.siteUrl(call.req.headers.host) });
      }
      await userActor(call).ask({ op: "updateSettings", settings, fullName, passwordHash, siteUrl: call.services.siteUrl(call.req.headers.host) });
      // Cached credentials carry the user's row: its name, password, and API e-mail (which follows the visibility).
      if (fullName !== undefined || passwordHash !== undefined || settings.email_address_visibility !== undefined) await call.services.auth.forget();
      return {};
    },
  },
  {
    // Zulip confirms through a web page (/accounts/confirm_new_email/<key>); Chorus has this JSON endpoint instead.
    method: "POST",
    path: "/settings/email/confirm",
    auth: false,
    params: { type: "object", properties: { key: { type: "string", minLength: 1, maxLength: 200 } }, required: ["key"] },
    async handle({ params, services }) {
      const changed = await services.system.ref(Realm, await serverRealmId(services.store.db)).ask({ op: "confirmEmailChange", key: params.key });
      // The old address must stop authenticating now, on every worker.
      await services.auth.forget();
      return changed;
    },
  },
  {
    method: "GET",
    path: "/drafts",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      const drafts = await draftsOf(services.store.db, user.id);
      return { count: drafts.length, drafts };
    },
  },
  {
    method: "POST",
    path: "/drafts",
    params: { type: "object", properties: { drafts: { type: "array", items: Draft } } },
    async handle(call) {
      const drafts = ((call.params.drafts ?? []) as Array<Record<string, unknown>>).map(draftFields);
      return userActor(call).ask({ op: "createDrafts", drafts });
    },
  },
  {
    method: "PATCH",
    path: "/drafts/{draft_id}",
    params: { type: "object", properties: { draft_id: Id, draft: Draft }, required: ["draft_id", "draft"] },
    async handle(call) {
      return userActor(call).ask({ op: "editDraft", id: call.params.draft_id, draft: draftFields(call.params.draft) });
    },
  },
  {
    method: "DELETE",
    path: "/drafts/{draft_id}",
    params: { type: "object", properties: { draft_id: Id }, required: ["draft_id"] },
    async handle(call) {
      return userActor(call).ask({ op: "deleteDraft", id: call.params.draft_id });
    },
  },
  {
    method: "GET",
    path: "/saved_snippets",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { saved_snippets: await snippetsOf(services.store.db, user.id) };
    },
  },
  {
    method: "POST",
    path: "/saved_snippets",
    params: { type: "object", properties: { title: SnippetTitle, content: SnippetContent }, required: ["title", "content"] },
    async handle(call) {
      return userActor(call).ask({ op: "createSnippet", title: call.params.title, content: call.params.content });
    },
  },
  {
    method: "PATCH",
    path: "/saved_snippets/{saved_snippet_id}",
    params: { type: "object", properties: { saved_snippet_id: Id, title: SnippetTitle, content: SnippetContent }, required: ["saved_snippet_id"] },
    async handle(call) {
      const { params } = call;
      return userActor(call).ask({ op: "editSnippet", id: params.saved_snippet_id, title: params.title, content: params.content });
    },
  },
  {
    method: "DELETE",
    path: "/saved_snippets/{saved_snippet_id}",
    params: { type: "object", properties: { saved_snippet_id: Id }, required: ["saved_snippet_id"] },
    async handle(call) {
      return userActor(call).ask({ op: "deleteSnippet", id: call.params.saved_snippet_id });
    },
  },
  {
    method: "GET",
    path: "/navigation_views",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      return { navigation_views: await viewsOf(services.store.db, user.id) };
    },
  },
  {
    method: "POST",
    path: "/navigation_views",
    params: {
      type: "object",
      properties: { fragment: Str, is_pinned: Bool, name: { oneOf: [Str, { type: "null" }] } },
      required: ["fragment", "is_pinned"],
    },
    async handle(call) {
      const fragment = String(call.params.fragment).trim();
      if (!fragment) throw errors.badRequest("fragment cannot be blank");
      const name = typeof call.params.name === "string" ? call.params.name.trim() || null : null;
      return userActor(call).ask({ op: "addView", fragment, isPinned: call.params.is_pinned, name });
    },
  },
  {
    method: "PATCH",
    path: "/navigation_views/{fragment}",
    slashesIn: "fragment",
    params: { type: "object", properties: { fragment: Str, is_pinned: Bool, name: Str } },
    async handle(call) {
      const name = call.params.name === undefined ? undefined : String(call.params.name).trim();
      if (name === "") throw errors.badRequest("name cannot be blank");
      return userActor(call).ask({ op: "updateView", fragment: call.params.fragment, isPinned: call.params.is_pinned, name });
    },
  },
  {
    method: "DELETE",
    path: "/navigation_views/{fragment}",
    slashesIn: "fragment",
    params: { type: "object", properties: { fragment: Str } },
    async handle(call) {
      return userActor(call).ask({ op: "removeView", fragment: call.params.fragment });
    },
  },
];
