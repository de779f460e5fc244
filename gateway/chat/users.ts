/**
 * Accounts: POST /users, GET /users/me, GET /users, a user by id or e-mail, deactivation and reactivation, and what
 * others see of a user: status and presence.
 */
import { errors } from "../../runtime/errors.ts";
import { hashPassword } from "../../runtime/secrets.ts";
import type { Selectable } from "kysely";
import { activeUserByIdOrApiEmail, ownUserObject, realmUsersFor, userByEmailFor, userInRealm, userObjectsFor, type UserRow } from "../../actors/chat/reads/users.ts";
import { accessibleUsers, presencesSeenBy } from "../../actors/chat/organization/accounts.ts";
import { userStatuses } from "../../actors/chat/users/user-data.ts";
import type { UserTable } from "../../actors/chat/schema.ts";
import { Presence } from "../../actors/chat/users/presence.protocol.ts";
import { OFFLINE_THRESHOLD_SECONDS } from "../../actors/chat/users/presence.ts";
import { Realm } from "../../actors/chat/organization/realm.protocol.ts";
import { EMAIL, ROLE } from "../../actors/chat/organization/realm.ts";
import type { Call, RouteSpec, Services } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";
import { userGroupObjects } from "../../actors/chat/organization/groups.ts";

/** GET /users and GET /users/{user_id}: Gravatar URLs left to the client by default; profile values when asked for. */
const UserListingParams = { client_gravatar: { ...Bool, default: true }, include_custom_profile_fields: { ...Bool, default: false } };

function userListing(params: Record<string, any>) {
  return { clientGravatar: params.client_gravatar as boolean, includeProfileData: params.include_custom_profile_fields as boolean };
}

type Viewer = Pick<UserRow, "id" | "realm_id" | "role">;

/**
 * Zulip's access_user_by_id (for_admin false): a user of the caller's realm whom the caller may see. Bots and
 * deactivated users are refused unless allowed, as there.
 */
export async function accessUser(services: Services, viewer: Viewer, userId: number, allow: { allowBots: boolean; allowDeactivated: boolean }) {
  return checkAccess(services, viewer, await userInRealm(services.store.db, viewer.realm_id, userId), allow);
}

async function checkAccess(services: Services, viewer: Viewer, target: Selectable<UserTable> | undefined, allow: { allowBots: boolean; allowDeactivated: boolean }) {
  if (!target || (target.is_bot && !allow.allowBots)) throw errors.badRequest("No such user");
  if (!target.is_active && !allow.allowDeactivated) throw errors.badRequest("User is deactivated");
  const access = await accessibleUsers(services.store.db, viewer);
  if (access && !access.has(target.id)) throw errors.badRequest("Insufficient permission");
  return target;
}

/** Deactivate or reactivate through the realm actor; then no worker may keep serving the old credentials. */
async function setActive(call: Call, userId: number, active: boolean, own: boolean) {
  await call.services.system.ref(Realm, call.user.realm_id).ask({ op: "setUserActive", actingId: call.user.id, userId, active, own });
  await call.services.auth.forget();
  return {};
}

export const userRoutes: RouteSpec[] = [
  {
    method: "DELETE",
    path: "/users/me",
    params: { type: "object", properties: {} },
    handle: (call) => setActive(call, call.user.id, false, true),
  },
  {
    method: "DELETE",
    path: "/users/{user_id}",
    params: { type: "object", properties: { user_id: Id, deactivation_notification_comment: { type: "string", maxLength: 2000 } }, required: ["user_id"] },
    handle: (call) => setActive(call, call.params.user_id, false, false),
  },
  {
    method: "POST",
    path: "/users/{user_id}/reactivate",
    params: { type: "object", properties: { user_id: Id }, required: ["user_id"] },
    handle: (call) => setActive(call, call.params.user_id, true, false),
  },
  {
    // Zulip's get_statuses_for_realm: the legacy format, keyed by e-mail, without presence_last_update_id.
    method: "GET",
    path: "/realm/presence",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      const state = await services.system.ref(Presence, user.realm_id).ask({ op: "state", modern: false, historyLimitDays: 14 });
      return { presences: await presencesSeenBy(services.store.db, user, state.presences ?? {}, true), server_timestamp: state.server_timestamp };
    },
  },
  {
    // Zulip's get_presence_backend: an active human named by id or API e-mail; both clients' keys carry the same data.
    method: "GET",
    path: "/users/{user_id_or_email}/presence",
    params: { type: "object", properties: { user_id_or_email: Str }, required: ["user_id_or_email"] },
    async handle({ params, user, services }) {
      const ref = String(params.user_id_or_email);
      const db = services.store.db;
      const target = await activeUserByIdOrApiEmail(db, user.realm_id, ref);
      if (!target) throw errors.badRequest("No such user");
      if (target.is_bot) throw errors.badRequest("Presence is not supported for bot users.");
      const access = await accessibleUsers(db, user);
      if (access && !access.has(target.id)) throw errors.badRequest("Insufficient permission");
      const latest = await services.system.ref(Presence, user.realm_id).ask({ op: "userPresence", userId: target.id });
      if (!latest) throw errors.badRequest(`No presence data for ${ref}`);
      const stale = Date.now() / 1000 - latest.timestamp > OFFLINE_THRESHOLD_SECONDS;
      return { presence: { website: latest, aggregated: { ...latest, status: stale ? "offline" : latest.status } } };
    },
  },
  {
    method: "POST",
    path: "/users",
    params: {
      type: "object",
      properties: { email: Str, password: Str, full_name: { type: "string", maxLength: 100 } },
      required: ["email", "password", "full_name"],
    },
    async handle({ params, user, services }) {
      if (user.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
      const email = String(params.email).trim();
      if (!EMAIL.test(email)) throw errors.badRequest(`Invalid email '${email}'`);
      const fullName = String(params.full_name).trim();
      if (!fullName) throw errors.badRequest("Name too short!");
      const created = await services.system.ref(Realm, user.realm_id).ask({
        op: "createUser",
        email,
        fullName,
        passwordHash: await hashPassword(params.password),
        role: ROLE.member,
      });
      return { user_id: created.user_id };
    },
  },
  {
    method: "GET",
    path: "/users/me",
    params: { type: "object", properties: {} },
    handle({ user, services }) {
      return ownUserObject(services.store.db, user);
    },
  },
  {
    // GET /users/{user_id} and Zulip's GET /users/{email}: one template, as a number names by id (Zulip's <int:>).
    method: "GET",
    path: "/users/{user_id}",
    params: {
      type: "object",
      properties: { user_id: Str, ...UserListingParams },
      required: ["user_id"],
    },
    async handle({ params, user, services }) {
      const ref = String(params.user_id);
      const target = /^\d+$/.test(ref) ? await userInRealm(services.store.db, user.realm_id, Number(ref)) : await userByEmailFor(services.store.db, user, ref);
      const found = await checkAccess(services, user, target, { allowBots: true, allowDeactivated: true });
      const [person] = await userObjectsFor(services.store.db, user, [found], userListing(params));
      return { user: person };
    },
  },
  {
    method: "GET",
    path: "/users/{user_id}/status",
    params: { type: "object", properties: { user_id: Id }, required: ["user_id"] },
    async handle({ params, user, services }) {
      const target = await accessUser(services, user, params.user_id, { allowBots: false, allowDeactivated: false });
      return { status: (await userStatuses(services.store.db, user.realm_id, [target.id]))[target.id] ?? {} };
    },
  },
  {
    method: "GET",
    path: "/user_groups",
    params: { type: "object", properties: { include_deactivated_groups: { ...Bool, default: false } } },
    async handle({ params, user, services }) {
      const groups = await userGroupObjects(services.store.db, user.realm_id);
      return { user_groups: groups.filter((g) => params.include_deactivated_groups || !g.deactivated) };
    },
  },
  {
    method: "GET",
    path: "/users",
    params: { type: "object", properties: UserListingParams },
    async handle({ params, user, services }) {
      return { members: await realmUsersFor(services.store.db, user, Object.assign(userListing(params), { siteUrl: services.siteUrl() })) };
    },
  },
];
