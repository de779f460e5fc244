import type { Kysely } from "kysely";

/** Presence, written behind in batches by the realm's presence actor (soft state). */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("presence")
    .addColumn("user_id", "integer", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull())
    .addColumn("last_active_time", "bigint")
    .addColumn("last_connected_time", "bigint", (c) => c.notNull())
    .addColumn("client", "text", (c) => c.notNull())
    .addColumn("last_update_id", "bigint", (c) => c.notNull())
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
