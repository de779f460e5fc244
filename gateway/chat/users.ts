/** Accounts: POST /users, GET /users/me, GET /users. */
import { errors } from "../../runtime/errors.ts";
import { hashPassword } from "../../runtime/secrets.ts";
import { ownUserObject, realmUsersFor, userInRealm, userObjectsFor } from "../../actors/chat/reads/users.ts";
import { accessibleUsers } from "../../actors/chat/organization/accounts.ts";
import { Realm } from "../../actors/chat/organization/realm.protocol.ts";
import { EMAIL, ROLE } from "../../actors/chat/organization/realm.ts";
import type { RouteSpec } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";
import { userGroupObjects } from "../../actors/chat/organization/groups.ts";

/** GET /users and GET /users/{user_id}: Gravatar URLs left to the client by default; profile values when asked for. */
const UserListingParams = { client_gravatar: { ...Bool, default: true }, include_custom_profile_fields: { ...Bool, default: false } };

function userListing(params: Record<string, any>) {
  return { clientGravatar: params.client_gravatar as boolean, includeProfileData: params.include_custom_profile_fields as boolean };
}

export const userRoutes: RouteSpec[] = [
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
    method: "GET",
    path: "/users/{user_id}",
    params: {
      type: "object",
      properties: { user_id: Id, ...UserListingParams },
      required: ["user_id"],
    },
    async handle({ params, user, services }) {
      const target = await userInRealm(services.store.db, user.realm_id, params.user_id);
      if (!target) throw errors.badRequest("No such user");
      const access = await accessibleUsers(services.store.db, user);
      if (access && !access.has(target.id)) throw errors.badRequest("Insufficient permission");
      const [person] = await userObjectsFor(services.store.db, user, [target], userListing(params));
      return { user: person };
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
