import type { Kysely } from "kysely";

/** Devices registered for push notifications (APNs and Android/FCM tokens). */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("push_devices")
    .addColumn("user_id", "integer", (c) => c.notNull())
    .addColumn("kind", "text", (c) => c.notNull())
    .addColumn("token", "text", (c) => c.notNull())
    .addColumn("appid", "text")
    .addColumn("date_created", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("push_devices_pk", ["user_id", "kind", "token"])
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
