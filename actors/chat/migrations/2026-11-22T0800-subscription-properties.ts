import type { Kysely } from "kysely";

/**
 * A subscription's per-channel notification settings (null: follow the user's global setting, as Zulip reports
 * them), and whether a channel is one of the realm's default channels for new users.
 */
export async function up(db: Kysely<any>): Promise<void> {
  let alter = db.schema.alterTable("subscriptions");
  for (const column of ["desktop_notifications", "audible_notifications", "push_notifications", "email_notifications", "wildcard_mentions_notify"]) {
    await alter.addColumn(column, "boolean").execute();
  }
  alter = db.schema.alterTable("streams");
  await alter.addColumn("is_default", "boolean", (c) => c.notNull().defaultTo(false)).execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
