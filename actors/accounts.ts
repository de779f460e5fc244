/** Accounts: the one place a users row is created, and the rules of an account's fields. */
import { sql, type Kysely, type Transaction } from "kysely";
import { errors } from "../runtime/errors.ts";
import { Keyring } from "../runtime/secrets.ts";
import type { Database } from "../runtime/store/schema.ts";
import { addToRoleGroups, ROLE } from "./groups.ts";
import type { CreatedUser } from "./protocol.ts";

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
  return { user_id: row.id, api_key: apiKey };
}

/**
 * Whether a viewer of this role may see the real e-mail of a user with this email_address_visibility setting
 * (1 everyone, 2 members, 3 administrators, 4 nobody, 5 moderators), as Zulip decides it.
 */
export function canSeeDeliveryEmail(viewerRole: number, visibility: number): boolean {
  switch (visibility) {
    case 1:
      return true;
    case 2:
      return viewerRole <= ROLE.member;
    case 3:
      return viewerRole <= ROLE.administrator;
    case 5:
      return viewerRole <= ROLE.moderator;
    default:
      return false;
  }
}
