import { sql, type Kysely } from "kysely";

/**
 * Password resets by e-mail (POST /password_reset): a key e-mailed to the account's address sets a new password
 * once. Only the key's SHA-256 is stored; the key itself is only in the e-mail.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("password_resets")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("expires_at", "bigint", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull().defaultTo("pending"))
    .execute();
  await sql`create index password_resets_user on password_resets (user_id, created_at)`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
