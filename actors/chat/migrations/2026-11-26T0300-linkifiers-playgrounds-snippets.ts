import { sql, type Kysely } from "kysely";

/**
 * Zulip's RealmFilter (linkifiers, applied in `order`), RealmPlayground (code playgrounds) and SavedSnippet (a
 * user's reusable texts). A pattern is unique in its realm, as a playground's name is for its language.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("realm_linkifiers")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("pattern", "text", (c) => c.notNull())
    .addColumn("url_template", "text", (c) => c.notNull())
    .addColumn("order", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
  await sql`create unique index realm_linkifiers_pattern on realm_linkifiers (realm_id, pattern)`.execute(db);
  await db.schema
    .createTable("realm_playgrounds")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("pygments_language", "text", (c) => c.notNull())
    .addColumn("url_template", "text", (c) => c.notNull())
    .execute();
  await sql`create unique index realm_playgrounds_name on realm_playgrounds (realm_id, pygments_language, name)`.execute(db);
  await db.schema
    .createTable("saved_snippets")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("title", "text", (c) => c.notNull())
    .addColumn("content", "text", (c) => c.notNull())
    .addColumn("date_created", "bigint", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("saved_snippets_user").on("saved_snippets").column("user_id").execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
