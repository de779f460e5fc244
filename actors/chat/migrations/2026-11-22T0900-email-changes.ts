import { sql, type Kysely } from "kysely";

/**
 * Pending e-mail address changes (PATCH /settings with `email`): the new address takes effect when the key sent
 * to it is confirmed. Only the key's SHA-256 is stored; the key itself is only in the e-mail.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("email_changes")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("old_email", "text", (c) => c.notNull())
    .addColumn("new_email", "text", (c) => c.notNull())
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("expires_at", "bigint", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull().defaultTo("pending"))
    .execute();
  await sql`create index email_changes_user on email_changes (user_id) where status = 'pending'`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
