/** Accounts: the one place a users row is created, and the rules of an account's fields. */
import { sql, type Transaction } from "kysely";
import { errors } from "../runtime/errors.ts";
import { Keyring } from "../runtime/secrets.ts";
import type { Database } from "../runtime/store/schema.ts";
import { addToRoleGroups } from "./groups.ts";
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

/**
 * Create an account with a fresh API key, inside the caller's transaction: the realm actor's, the first-start
 * bootstrap's, or the management CLI's. E-mail addresses are unique per realm, compared case-insensitively.
 */
export async function insertAccount(trx: Transaction<Database>, realmId: number, account: NewAccount, keyring: Keyring): Promise<CreatedUser> {
  const taken = await trx
    .selectFrom("users")
    .select("id")
    .where("realm_id", "=", realmId)
    .where(sql`lower(delivery_email)`, "=", account.email.toLowerCase())
    .executeTakeFirst();
  if (taken) throw errors.badRequest(`Email '${account.email}' already in use`);
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
