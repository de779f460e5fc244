import { sql, type Kysely } from "kysely";

/**
 * Custom (realm) emoji. The image lives in the row (bytea) so that every worker can serve it without shared disk.
 * A deactivated emoji keeps its row: old messages and reactions still show it. Only one active emoji per name.
 * `last_request_key` names the request that last changed the row, so that a redelivered request is recognised as
 * done rather than refused ("already exists", "does not exist").
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("realm_emoji")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("author_id", "integer", (c) => c.references("users.id"))
    .addColumn("deactivated", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("content_type", "text", (c) => c.notNull())
    .addColumn("file_ext", "text", (c) => c.notNull())
    .addColumn("is_animated", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("image", "bytea", (c) => c.notNull())
    .addColumn("date_created", "bigint", (c) => c.notNull())
    .addColumn("last_request_key", "text")
    .execute();
  await sql`create unique index realm_emoji_active_name on realm_emoji (realm_id, name) where not deactivated`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
