/** Accounts: POST /users, GET /users/me, GET /users. */
import { errors } from "../../runtime/errors.ts";
import { actorId } from "../../runtime/actor.ts";
import { hashPassword } from "../../runtime/secrets.ts";
import { ownUserObject, realmUsers, userObject } from "../../actors/reads.ts";
import { REALM, type CreatedUser } from "../../actors/protocol.ts";
import { ROLE } from "../../actors/realm.ts";
import type { RouteSpec } from "../app.ts";
import { Bool, Str } from "../params.ts";

/** Deliberately simple: one @, something on each side, a dot in the domain, no spaces. */
export const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

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
      const created = await services.system.ask<CreatedUser>(actorId(REALM, user.realm_id), {
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
    handle({ user }) {
      return ownUserObject(user);
    },
  },
  {
    method: "GET",
    path: "/users",
    params: { type: "object", properties: { client_gravatar: { ...Bool, default: true }, include_custom_profile_fields: Bool } },
    async handle({ params, user, services }) {
      const rows = await realmUsers(services.store.db, user.realm_id);
      return { members: rows.map((u) => userObject(u, { clientGravatar: params.client_gravatar })) };
    },
  },
];
