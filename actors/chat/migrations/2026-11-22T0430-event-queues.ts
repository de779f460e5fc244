import type { Kysely } from "kysely";

/** Each user's durable event stream: what event queues are restored from when their actor moves or restarts. */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("user_events")
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("seq", "bigint", (c) => c.notNull())
    .addColumn("payload", "jsonb", (c) => c.notNull())
    .addPrimaryKeyConstraint("user_events_pk", ["user_id", "seq"])
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
