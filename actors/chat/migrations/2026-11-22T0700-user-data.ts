import { sql, type Kysely } from "kysely";

/** What a user keeps on the server besides settings: drafts and navigation views. */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("drafts")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("type", "text", (c) => c.notNull())
    .addColumn("to", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("topic", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("content", "text", (c) => c.notNull())
    .addColumn("timestamp", "bigint", (c) => c.notNull())
    .execute();
  await sql`create index drafts_user on drafts (user_id, id)`.execute(db);

  await db.schema
    .createTable("navigation_views")
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("fragment", "text", (c) => c.notNull())
    .addColumn("is_pinned", "boolean", (c) => c.notNull())
    .addColumn("name", "text")
    .addPrimaryKeyConstraint("navigation_views_pk", ["user_id", "fragment"])
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
