import { sql, type Kysely } from "kysely";

/**
 * Direct-message recipients, narrows and channel principals name users by their API e-mail, as in Zulip: the real
 * address while it is visible to everyone, otherwise the placeholder. This index serves those lookups.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index users_realm_api_email on users (realm_id, lower(email))`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
