import type { Kysely } from "kysely";

/**
 * Reminders (Zulip's ScheduledMessage with delivery_type REMIND): a scheduled message to oneself about another
 * message, delivered by Notification Bot. `reminder_target_message_id` marks the row as one and names that message.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("scheduled_messages").addColumn("reminder_target_message_id", "bigint").execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
