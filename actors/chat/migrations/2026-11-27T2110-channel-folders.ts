import { sql, type Kysely } from "kysely";

/**
 * Zulip's ChannelFolder: named groups of channels for the left sidebar, in the organization's `order`; archived
 * ones are kept. A name is unique in its realm, whatever its case.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("channel_folders")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("description", "text", (c) => c.notNull())
    .addColumn("rendered_description", "text", (c) => c.notNull())
    .addColumn("order", "integer", (c) => c.notNull())
    .addColumn("creator_id", "integer", (c) => c.references("users.id"))
    .addColumn("date_created", "bigint", (c) => c.notNull())
    .addColumn("is_archived", "boolean", (c) => c.notNull().defaultTo(false))
    .execute();
  await sql`create unique index channel_folders_name on channel_folders (realm_id, lower(name))`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
