/**
 * Password reset by e-mail: beyond Zulip's JSON API (Zulip resets through its web forms at
 * /accounts/password/reset/), so that the reset page (gateway/pages/people) and scripts use the same calls.
 * Both are unauthenticated: the request answers the same whether or not an account has the address, and the
 * e-mailed key is the credential of the confirmation.
 */
import { hashPassword } from "../../runtime/secrets.ts";
import { Realm } from "../../actors/chat/organization/realm.protocol.ts";
import { serverRealmId } from "../../actors/chat/reads/realms.ts";
import type { RouteSpec } from "./app.ts";

export const passwordResetRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/password_reset",
    auth: false,
    params: { type: "object", properties: { email: { type: "string", minLength: 1, maxLength: 254 } }, required: ["email"] },
    async handle({ params, services, req }) {
      await services.system
        .ref(Realm, await serverRealmId(services.store.db))
        .ask({ op: "startPasswordReset", email: String(params.email), siteUrl: services.siteUrl(req.headers.host) });
      return {};
    },
  },
  {
    method: "POST",
    path: "/password_reset/confirm",
    auth: false,
    params: {
      type: "object",
      properties: { key: { type: "string", minLength: 1, maxLength: 200 }, new_password: { type: "string", minLength: 1, maxLength: 1024 } },
      required: ["key", "new_password"],
    },
    async handle({ params, services }) {
      await services.system
        .ref(Realm, await serverRealmId(services.store.db))
        .ask({ op: "resetPassword", key: params.key, passwordHash: await hashPassword(params.new_password) });
      // The old password must stop authenticating now, on every worker.
      await services.auth.forget();
      return {};
    },
  },
];
