import type { Kysely } from "kysely";

/**
 * Archived channels (Zulip's Stream.deactivated): the channel keeps its name, subscribers and messages, and is
 * listed with `is_archived` to clients that handle archived channels.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("streams").addColumn("deactivated", "boolean", (c) => c.notNull().defaultTo(false)).execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
