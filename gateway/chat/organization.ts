/**
 * Running the organization: PATCH /realm, PATCH /users/{user_id} (role, name, custom profile values),
 * POST /user_groups/create, and invitations (POST/GET /invites, POST /invites/multiuse, DELETE /invites/{invite_id}
 * and /invites/multiuse/{invite_id}, POST /invites/{invite_id}/resend, signing up through a link and accepting).
 * Every change is a realm actor turn; permission checks happen there, against the caller's current role.
 */
import { randomUUID } from "node:crypto";
import { errors } from "../../runtime/errors.ts";
import { hashPassword } from "../../runtime/secrets.ts";
import { Realm, type InviteTerms, type ProfileDataEntry } from "../../actors/chat/organization/realm.protocol.ts";
import { ProfileValue } from "./profile-fields.ts";
import { REALM_SETTINGS } from "../../actors/chat/organization/realm-settings.ts";
import { DEFAULT_INVITE_EXPIRY_MINUTES, listInvites, MAX_WELCOME_MESSAGE_LENGTH } from "../../actors/chat/organization/invites.ts";
import { serverRealmId } from "../../actors/chat/reads/realms.ts";
import { ROLE } from "../../actors/chat/organization/groups.ts";
import { userByEmailFor } from "../../actors/chat/reads/users.ts";
import { userSetting, USER_SETTINGS_DEFAULTS } from "../../actors/chat/users/settings.ts";
import { requireAdministrator } from "./channels.ts";
import { requestedSettings, settingParams } from "./me.ts";
import { SETTING_RULES } from "../../actors/chat/users/user-data.ts";
import { sql } from "kysely";
import { askRealm, type Call, type RouteSpec } from "./app.ts";
import { Bool, Id, Str, type JsonSchema, type ParamsSchema } from "../params.ts";

const IdList = { type: "array", items: Id } as const;
const Roles = Object.values(ROLE);

/** Each realm setting's wire form; the realm actor checks the values themselves. */
const realmSettingParams: Record<string, JsonSchema> = Object.fromEntries(
  Object.entries(REALM_SETTINGS).map(([name, rule]) => {
    switch (rule.kind) {
      case "bool":
        return [name, Bool];
      case "channel":
        return [name, { type: "integer" }];
      case "time-limit":
        // A number of seconds, or "unlimited".
        return [name, { anyOf: [{ type: "integer" }, { type: "string" }] }];
      case "topics-policy":
      case "language":
        return [name, Str];
      case "group":
        return [name, { anyOf: [{ type: "integer" }, { type: "object" }] }];
    }
  }),
);

/** A group-setting value: a group id, or `{direct_members, direct_subgroups}` (checked by the realm actor). */
const GroupSetting = { anyOf: [Id, { type: "object" }] };
const GROUP_SETTINGS = ["can_add_members_group", "can_join_group", "can_leave_group", "can_manage_group", "can_mention_group", "can_remove_members_group"];

/** Zulip's get_invitee_emails_set: commas or newlines, blanks dropped, each address once. */
export function inviteeEmails(raw: string): string[] {
  const seen = new Map<string, string>();
  for (const part of raw.split(/[,\n]/)) {
    const email = part.trim();
    if (email && !seen.has(email.toLowerCase())) seen.set(email.toLowerCase(), email);
  }
  return [...seen.values()];
}

/** The parameters POST /invites and POST /invites/multiuse share. */
const inviteTermParams: Record<string, JsonSchema> = {
  invite_expires_in_minutes: { anyOf: [{ type: "integer", minimum: 1, maximum: 2 ** 31 }, { type: "null" }] },
  invite_as: { type: "integer", enum: Roles },
  stream_ids: IdList,
  group_ids: IdList,
  include_realm_default_subscriptions: Bool,
  welcome_message_custom_text: Str,
};

/** An e-mailed or link key. */
const InviteKey = { type: "string", minLength: 1, maxLength: 200 };

/** The terms of an invitation or link from those parameters, with Zulip's defaults. */
function inviteTerms({ params, user, req, services }: Call): InviteTerms {
  return {
    actingId: user.id,
    inviteAs: params.invite_as ?? ROLE.member,
    streamIds: [...new Set<number>(params.stream_ids ?? [])],
    groupIds: [...new Set<number>(params.group_ids ?? [])],
    expiresInMinutes: params.invite_expires_in_minutes === undefined ? DEFAULT_INVITE_EXPIRY_MINUTES : params.invite_expires_in_minutes,
    includeRealmDefaultSubscriptions: params.include_realm_default_subscriptions ?? false,
    welcomeMessageCustomText: params.welcome_message_custom_text ?? null,
    siteUrl: services.siteUrl(req.headers.host),
    requestKey: randomUUID(),
  };
}

/** The user a path names by id (digits) or e-mail (API e-mail, or a delivery e-mail the caller may see). */
async function userIdNamed({ user, services }: Call, ref: string): Promise<number> {
  if (/^\d+$/.test(ref)) return Number(ref);
  const found = await userByEmailFor(services.store.db, user, ref);
  if (!found) throw errors.badRequest("No such user");
  return found.id;
}

const InviteIdParams: ParamsSchema = { type: "object", properties: { invite_id: Id }, required: ["invite_id"] };

/** Revoking an e-mail invitation or a link: Zulip keeps the two kinds apart, their ids too. */
function revokeRoute(path: string, multiuse: boolean): RouteSpec {
  return {
    method: "DELETE",
    path,
    params: InviteIdParams,
    async handle(call) {
      await askRealm(call, { op: "revokeInvite", inviteId: call.params.invite_id, multiuse });
      return {};
    },
  };
}

/**
 * Organization exports as a Zulip server answers that cannot make them through the web (Zulip's answer for an
 * organization too large to export that way): Chorus makes no exports, so the list is empty and a request is sent to
 * the server's administrator. Users' consents are real: each one's allow_private_data_export setting.
 */
const exportRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/export/realm",
    params: { type: "object", properties: {} },
    handle({ user }) {
      requireAdministrator(user);
      return { exports: [] };
    },
  },
  {
    method: "POST",
    path: "/export/realm",
    params: { type: "object", properties: { export_type: { type: "integer", enum: [1, 2] } } },
    handle({ user, services }) {
      requireAdministrator(user);
      throw errors.badRequest(`Please request a manual export from ${services.chat.administratorEmail}.`);
    },
  },
  {
    method: "GET",
    path: "/export/realm/consents",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      requireAdministrator(user);
      const rows = await services.store.db
        .selectFrom("users")
        .select(["id", userSetting(sql.ref("users.id"), "allow_private_data_export").as("consent")])
        .where("realm_id", "=", user.realm_id)
        .where("is_active", "=", true)
        .where("is_bot", "=", false)
        .orderBy("id")
        .execute();
      const byDefault = USER_SETTINGS_DEFAULTS.allow_private_data_export;
      return { export_consents: rows.map((r) => ({ user_id: r.id, consented: r.consent === null ? byDefault : r.consent === "true" })) };
    },
  },
];

/**
 * The settings PATCH /realm/user_settings_defaults takes: a user's preferences, not what is each person's own
 * (timezone, language, consent to exports).
 */
const DEFAULTABLE_SETTINGS = Object.keys(SETTING_RULES).filter((name) => !["timezone", "default_language", "allow_private_data_export"].includes(name));

export const organizationRoutes: RouteSpec[] = [
  ...exportRoutes,
  {
    method: "PATCH",
    path: "/realm/user_settings_defaults",
    params: { type: "object", properties: Object.fromEntries(DEFAULTABLE_SETTINGS.map((name) => [name, settingParams[name]!])) },
    async handle(call) {
      return askRealm(call, { op: "updateUserSettingsDefaults", settings: requestedSettings(call.params, DEFAULTABLE_SETTINGS) });
    },
  },
  {
    method: "POST",
    path: "/realm/test_welcome_bot_custom_message",
    params: { type: "object", properties: { welcome_message_custom_text: { type: "string", maxLength: MAX_WELCOME_MESSAGE_LENGTH } }, required: ["welcome_message_custom_text"] },
    async handle(call) {
      return askRealm(call, { op: "testWelcomeMessage", text: call.params.welcome_message_custom_text, requestKey: randomUUID() });
    },
  },
  {
    method: "PATCH",
    path: "/realm",
    params: { type: "object", properties: realmSettingParams },
    async handle(call) {
      return askRealm(call, { op: "updateRealm", settings: call.params });
    },
  },
  {
    // PATCH /users/{user_id} and Zulip's PATCH /users/{email}: one template, as a number names by id (Zulip's <int:>).
    method: "PATCH",
    path: "/users/{user_id}",
    params: {
      type: "object",
      properties: {
        user_id: Str,
        role: { type: "integer" },
        full_name: Str,
        profile_data: {
          type: "array",
          items: { type: "object", properties: { id: Id, value: { anyOf: [ProfileValue, { type: "null" }] } }, required: ["id", "value"], additionalProperties: false },
        },
      },
      required: ["user_id"],
    },
    async handle(call) {
      const { params } = call;
      if (params.role !== undefined && !Roles.includes(params.role)) throw errors.badRequest("Invalid role");
      // As Zulip's update_user_backend: an empty value (null, "", []) removes the user's value.
      const profileData = (params.profile_data as ProfileDataEntry[] | undefined)?.map((e) => ({ id: e.id, value: e.value?.length ? e.value : null }));
      const userId = await userIdNamed(call, String(params.user_id));
      await askRealm(call, { op: "updateUser", userId, role: params.role, fullName: params.full_name, profileData });
      // The caller's (or the target's) cached authentication carries the old role.
      await call.services.auth.forget();
      return {};
    },
  },
  {
    method: "POST",
    path: "/user_groups/create",
    params: {
      type: "object",
      properties: {
        name: Str,
        description: Str,
        members: IdList,
        subgroups: IdList,
        ...Object.fromEntries(GROUP_SETTINGS.map((s) => [s, GroupSetting])),
      },
      required: ["name", "description", "members"],
    },
    async handle(call) {
      const { params } = call;
      const settings = Object.fromEntries(GROUP_SETTINGS.filter((s) => params[s] !== undefined).map((s) => [s, params[s]]));
      const created = await askRealm(call, {
        op: "createGroup",
        name: params.name,
        description: params.description,
        members: params.members,
        subgroups: params.subgroups ?? [],
        settings,
      });
      return { group_id: created.group_id };
    },
  },
  {
    method: "POST",
    path: "/invites",
    params: {
      type: "object",
      properties: { ...inviteTermParams, invitee_emails: Str, notify_referrer_on_join: Bool },
      required: ["invitee_emails", "stream_ids"],
    },
    async handle(call) {
      await askRealm(call, {
        op: "invite",
        ...inviteTerms(call),
        emails: inviteeEmails(call.params.invitee_emails),
        notifyReferrerOnJoin: call.params.notify_referrer_on_join ?? true,
      });
      return {};
    },
  },
  {
    method: "POST",
    path: "/invites/multiuse",
    params: { type: "object", properties: inviteTermParams },
    async handle(call) {
      const created = await askRealm(call, { op: "createInviteLink", ...inviteTerms(call) });
      return { invite_link: created.invite_link };
    },
  },
  {
    method: "GET",
    path: "/invites",
    params: { type: "object", properties: {} },
    async handle({ user, services, req }) {
      return { invites: await listInvites(services.store.db, services.keyring, services.siteUrl(req.headers.host), user.realm_id, user) };
    },
  },
  revokeRoute("/invites/{invite_id}", false),
  revokeRoute("/invites/multiuse/{invite_id}", true),
  {
    method: "POST",
    path: "/invites/{invite_id}/resend",
    params: InviteIdParams,
    async handle(call) {
      await askRealm(call, {
        op: "resendInvite",
        inviteId: call.params.invite_id,
        siteUrl: call.services.siteUrl(call.req.headers.host),
        requestKey: randomUUID(),
      });
      return {};
    },
  },
  {
    // Beyond Zulip's JSON API (Zulip signs people up through a link with its web form): someone with a reusable
    // link gives their address, and gets an e-mail whose key POST /invites/accept takes. Unauthenticated.
    method: "POST",
    path: "/invites/join",
    auth: false,
    params: {
      type: "object",
      properties: { key: InviteKey, email: { type: "string", minLength: 1, maxLength: 254 } },
      required: ["key", "email"],
    },
    async handle({ params, services, req }) {
      await services.system.ref(Realm, await serverRealmId(services.store.db)).ask({
        op: "joinInviteLink",
        key: params.key,
        email: String(params.email).trim(),
        siteUrl: services.siteUrl(req.headers.host),
        requestKey: randomUUID(),
      });
      return {};
    },
  },
  {
    // Beyond Zulip's JSON API (Zulip accepts invitations through its web sign-up form): the invited person
    // creates their account with the key from the e-mail. Unauthenticated; the key is the credential.
    method: "POST",
    path: "/invites/accept",
    auth: false,
    params: {
      type: "object",
      properties: { key: InviteKey, full_name: { type: "string", maxLength: 100 }, password: { type: "string", minLength: 1 } },
      required: ["key", "full_name", "password"],
    },
    async handle({ params, services }) {
      const fullName = String(params.full_name).trim();
      if (!fullName) throw errors.badRequest("Name too short!");
      const created = await services.system.ref(Realm, await serverRealmId(services.store.db)).ask({
        op: "acceptInvite",
        key: params.key,
        fullName,
        passwordHash: await hashPassword(params.password),
      });
      return { user_id: created.user_id, api_key: created.api_key };
    },
  },
];
