/** Unauthenticated endpoints clients call first: GET /server_settings and POST /fetch_api_key. */
import { ChorusError } from "../../runtime/errors.ts";
import { verifyPassword } from "../../runtime/secrets.ts";
import { findUserByEmail } from "../../actors/chat/reads/users.ts";
import { serverRealm } from "../../actors/chat/reads/realms.ts";
import { realmIconUrl } from "../../actors/chat/rendering/message-format.ts";
import type { RouteSpec } from "./app.ts";
import { Str } from "../params.ts";
import { clientAddress } from "../rate-limiter.ts";
import { ZULIP_FEATURE_LEVEL, ZULIP_MERGE_BASE, ZULIP_VERSION } from "./zulip.ts";

const AUTH_METHODS = ["password", "dev", "email", "ldap", "remoteuser", "github", "azuread", "gitlab", "apple", "google", "saml", "openid connect"];

export const serverRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/server_settings",
    auth: false,
    params: { type: "object", properties: {} },
    async handle({ services, req }) {
      const realm = await serverRealm(services.store.db);
      const url = services.siteUrl(req.headers.host);
      return {
        authentication_methods: Object.fromEntries(AUTH_METHODS.map((m) => [m, m === "password" || m === "email"])),
        external_authentication_methods: [],
        zulip_feature_level: ZULIP_FEATURE_LEVEL,
        zulip_version: ZULIP_VERSION,
        zulip_merge_base: ZULIP_MERGE_BASE,
        push_notifications_enabled: false,
        is_incompatible: false,
        email_auth_enabled: true,
        require_email_format_usernames: true,
        realm_url: url,
        realm_uri: url,
        realm_name: realm?.name ?? "Chorus",
        realm_icon: realm ? realmIconUrl(realm.id) : "",
        realm_description: "",
        realm_web_public_access_enabled: false,
      };
    },
  },
  {
    method: "POST",
    path: "/fetch_api_key",
    auth: false,
    params: { type: "object", properties: { username: Str, password: Str }, required: ["username", "password"] },
    async handle({ params, services, req }) {
      const address = clientAddress(req, services.config);
      await services.rateLimits.beforePasswordCheck(params.username, address);
      const user = await findUserByEmail(services.store.db, params.username);
      // Unknown users are checked against a dummy hash, so both failures take one scrypt run: no timing oracle.
      const ok = await verifyPassword(params.password, user?.password_hash ?? DUMMY_HASH);
      if (!user || !ok) {
        await services.rateLimits.failed("password", address, params.username);
        throw new ChorusError("AUTHENTICATION_FAILED", "Your username or password is incorrect", 401);
      }
      if (!user.is_active) throw new ChorusError("USER_DEACTIVATED", "Account is deactivated", 401);
      if (user.realm_deactivated) throw new ChorusError("REALM_DEACTIVATED", "This organization has been deactivated", 401);
      return { api_key: services.keyring.decrypt(user.api_key_enc), email: user.email, user_id: user.id };
    },
  },
];

/** scrypt of a random password: verifying against it costs what a real check costs. */
const DUMMY_HASH =
  "scrypt$32768$8$1$AAAAAAAAAAAAAAAAAAAAAA==$3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w8=";
