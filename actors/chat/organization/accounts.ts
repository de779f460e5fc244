/** Accounts: the one place a users row is created, and the rules of an account's fields. */
import { sql, type Kysely, type Transaction } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import { Keyring } from "../../../runtime/secrets.ts";
import { addToRoleGroups, inGroupSetting, ROLE } from "./groups.ts";
import { realmGroupSetting } from "../conversations/message-rules.ts";
import type { CreatedUser } from "./realm.protocol.ts";
import { gravatarUrl } from "../rendering/message-format.ts";
import type { Database } from "../../schema.ts";
import { seedUserSettings } from "../users/settings.ts";

/** Deliberately simple: one @, something on each side, a dot in the domain, no spaces. */
export const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

/** Zulip's UserProfile.MAX_NAME_LENGTH. */
export const MAX_FULL_NAME_LENGTH = 100;

export interface NewAccount {
  email: string;
  fullName: string;
  passwordHash: string | null;
  role: number;
}

/** The realm's account (active or not) with this address, compared case-insensitively. */
export function accountWithEmail(db: Kysely<Database> | Transaction<Database>, realmId: number, email: string) {
  return db.selectFrom("users").select(["id", "is_active"]).where("realm_id", "=", realmId).where(sql`lower(delivery_email)`, "=", email.toLowerCase()).executeTakeFirst();
}

/**
 * Create an account with a fresh API key, inside the caller's transaction: the realm actor's, the first-start
 * bootstrap's, or the management CLI's. E-mail addresses are unique per realm, compared case-insensitively.
 */
export async function insertAccount(trx: Transaction<Database>, realmId: number, account: NewAccount, keyring: Keyring): Promise<CreatedUser> {
  if (await accountWithEmail(trx, realmId, account.email)) throw errors.badRequest(`Email '${account.email}' already in use`);
  const apiKey = Keyring.newApiKey();
  const row = await trx
    .insertInto("users")
    .values({
      realm_id: realmId,
      email: account.email,
      delivery_email: account.email,
      full_name: account.fullName,
      role: account.role,
      is_active: true,
      is_bot: false,
      bot_type: null,
      bot_owner_id: null,
      api_key_hash: keyring.hashApiKey(apiKey),
      api_key_enc: keyring.encrypt(apiKey),
      password_hash: account.passwordHash,
      date_joined: Math.floor(Date.now() / 1000),
      timezone: "",
      avatar_version: 1,
    })
    .returning("id")
    .executeTakeFirstOrThrow();
  await addToRoleGroups(trx, realmId, row.id, account.role);
  await seedUserSettings(trx, realmId, row.id);
  return { user_id: row.id, api_key: apiKey };
}

/** Zulip's email_address_visibility values (a per-user setting; bots always "everyone"). */
/**
 * An account's new password (already hashed). For the operators' command line, which works on the store directly as
 * Zulip's manage.py does; the account's sessions and API key are unchanged, as with Zulip's `changepassword`.
 */
export async function setPasswordHash(db: Kysely<Database>, userId: number, passwordHash: string): Promise<void> {
  await db.updateTable("users").set({ password_hash: passwordHash }).where("id", "=", userId).execute();
}

export const EMAIL_VISIBILITY = { everyone: 1, members: 2, administrators: 3, nobody: 4, moderators: 5 } as const;

/**
 * Whether a viewer of this role may see the real e-mail of a user with this email_address_visibility setting
 * (1 everyone, 2 members, 3 administrators, 4 nobody, 5 moderators), as Zulip decides it.
 */
export function canSeeDeliveryEmail(viewerRole: number, visibility: number): boolean {
  switch (visibility) {
    case EMAIL_VISIBILITY.everyone:
      return true;
    case EMAIL_VISIBILITY.members:
      return viewerRole <= ROLE.member;
    case EMAIL_VISIBILITY.administrators:
      return viewerRole <= ROLE.administrator;
    case EMAIL_VISIBILITY.moderators:
      return viewerRole <= ROLE.moderator;
    default:
      return false;
  }
}

/** Zulip's can_access_delivery_email: one's own address always; a bot's to everyone; otherwise the owner's setting. */
export function deliveryEmailVisibleTo(viewer: { id: number; role: number }, user: { id: number; is_bot: boolean }, visibility: number): boolean {
  return viewer.id === user.id || user.is_bot || canSeeDeliveryEmail(viewer.role, visibility);
}

/**
 * Zulip's API `email` (get_display_email_address): the real address while it is visible to everyone, otherwise a
 * placeholder `user{id}@{server host}`. Zulip falls back to a fixed domain when the host is no e-mail domain
 * (localhost, an IP address, a port); so does this.
 */
export function apiEmail(user: { id: number; delivery_email: string }, visibility: number, siteUrl: string): string {
  if (visibility === EMAIL_VISIBILITY.everyone) return user.delivery_email;
  let host = "";
  try {
    host = new URL(siteUrl).hostname;
  } catch {
    // not a URL: the fallback domain
  }
  const domain = /^(?=.*[a-z])[a-z0-9-]+(\.[a-z0-9-]+)+$/i.test(host) ? host : PLACEHOLDER_EMAIL_DOMAIN;
  return `user${user.id}@${domain}`;
}

/** Zulip's FAKE_EMAIL_DOMAIN, for servers whose host is no e-mail domain. */
export const PLACEHOLDER_EMAIL_DOMAIN = "chorus.invalid";

/** The `person` of Zulip's realm_user update for a new avatar (notify_avatar_url_change): the Gravatar of the address. */
export function avatarUpdate(user: { id: number; delivery_email: string; avatar_version: number }) {
  const avatar = gravatarUrl(user.delivery_email);
  return { user_id: user.id, avatar_source: "G", avatar_url: avatar, avatar_url_medium: `${avatar}&s=500`, avatar_version: user.avatar_version };
}

/**
 * The users a viewer may see, when the realm's can_access_all_users_group leaves them out (guests, when it is
 * role:members): themself, the subscribers of the channels they are subscribed to, and the people they share
 * a direct-message conversation with (Zulip's get_accessible_user_ids); bots are always visible. `null` means
 * everyone is visible.
 */
export async function accessibleUsers(db: Kysely<Database>, viewer: { id: number; realm_id: number; role: number }): Promise<Set<number> | null> {
  // The setting is role:everyone or role:members (realm-settings.ts): only guests can be left out, so nobody else
  // costs a query here (this runs on every presence fetch).
  if (viewer.role !== ROLE.guest) return null;
  if (await inGroupSetting(db, await realmGroupSetting(db, viewer.realm_id, "can_access_all_users_group"), viewer.id)) return null;
  const { rows } = await sql<{ id: number }>`
    select s2.user_id as id from subscriptions s1 join subscriptions s2 on s2.stream_id = s1.stream_id and s2.active
      where s1.user_id = ${viewer.id} and s1.active
    union select m2.user_id from recipient_members m1 join recipient_members m2 on m2.recipient_id = m1.recipient_id
      where m1.user_id = ${viewer.id}
    union select id from users where realm_id = ${viewer.realm_id} and is_bot`.execute(db);
  return new Set([viewer.id, ...rows.map((r) => r.id)]);
}

/**
 * Presences (keyed by user id, or by e-mail in the legacy format) without those of users the viewer may not see:
 * Zulip sends presence only of users one can access.
 */
export async function presencesSeenBy(db: Kysely<Database>, viewer: { id: number; realm_id: number; role: number }, presences: Record<string, unknown>, byEmail: boolean) {
  const access = await accessibleUsers(db, viewer);
  if (!access) return presences;
  let idOf = (key: string) => Number(key);
  if (byEmail) {
    const users = await db.selectFrom("users").select(["id", "email"]).where("realm_id", "=", viewer.realm_id).execute();
    const ids = new Map(users.map((u) => [u.email, u.id]));
    idOf = (key) => ids.get(key) ?? -1;
  }
  return Object.fromEntries(Object.entries(presences).filter(([key]) => access.has(idOf(key))));
}

/** What Zulip shows of a user the viewer may not see (get_data_for_inaccessible_user). */
export function inaccessibleUserObject(userId: number, siteUrl: string) {
  return {
    user_id: userId,
    email: apiEmail({ id: userId, delivery_email: "" }, EMAIL_VISIBILITY.nobody, siteUrl),
    delivery_email: null,
    full_name: "Unknown user",
    date_joined: new Date(0).toISOString(),
    is_active: true,
    is_owner: false,
    is_admin: false,
    is_guest: false,
    is_bot: false,
    role: ROLE.member,
    timezone: "",
    avatar_url: null,
    avatar_version: 1,
    profile_data: {},
  };
}
