import { sql, type Kysely } from "kysely";

/**
 * What a user sets about themselves and others besides settings: alert words (case-insensitively distinct, Zulip's
 * AlertWord), the status shown beside their name (Zulip's UserStatus: one row per user) and the users they muted
 * (Zulip's MutedUser). Alert words carry the realm so a send reads its recipients' words without a join.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("alert_words")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("realm_id", "integer", (c) => c.notNull())
    .addColumn("word", "text", (c) => c.notNull())
    .execute();
  await sql`create unique index alert_words_user_word on alert_words (user_id, lower(word))`.execute(db);

  await db.schema
    .createTable("user_status")
    .addColumn("user_id", "integer", (c) => c.primaryKey())
    .addColumn("status_text", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("emoji_name", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("emoji_code", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("reaction_type", "text", (c) => c.notNull().defaultTo("unicode_emoji"))
    .addColumn("timestamp", "bigint", (c) => c.notNull())
    .execute();

  await db.schema
    .createTable("muted_users")
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("muted_user_id", "integer", (c) => c.notNull())
    .addColumn("date_muted", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("muted_users_pk", ["user_id", "muted_user_id"])
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
