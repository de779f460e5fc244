import { sql, type Kysely } from "kysely";

/**
 * The organization's defaults for new users' settings (Zulip's RealmUserDefault): only those an administrator
 * changed, by setting name; the rest are Zulip's defaults. Copied into a user's settings when the account is made.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable("realms")
    .addColumn("user_settings_defaults", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
