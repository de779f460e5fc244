import { sql, type Kysely } from "kysely";

/**
 * E-mail invitations, and the outbox their e-mails wait in: the invitation and its e-mail are written in one
 * transaction, and a sender drains the outbox (actors/chat/organization/mail.ts) when SMTP is configured.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("invitations")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("email", "text", (c) => c.notNull())
    .addColumn("referrer_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("invited_as", "integer", (c) => c.notNull())
    .addColumn("stream_ids", "jsonb", (c) => c.notNull())
    .addColumn("group_ids", "jsonb", (c) => c.notNull())
    .addColumn("include_realm_default_subscriptions", "boolean", (c) => c.notNull())
    .addColumn("notify_referrer_on_join", "boolean", (c) => c.notNull())
    .addColumn("welcome_message_custom_text", "text")
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("expires_at", "bigint")
    .addColumn("status", "text", (c) => c.notNull().defaultTo("pending"))
    .addColumn("user_id", "integer")
    .addColumn("request_key", "text", (c) => c.notNull())
    .execute();
  await sql`create index invitations_request on invitations (request_key)`.execute(db);
  await sql`create index invitations_realm_created on invitations (realm_id, created_at)`.execute(db);
  await db.schema
    .createTable("email_outbox")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("to_address", "text", (c) => c.notNull())
    .addColumn("subject", "text", (c) => c.notNull())
    .addColumn("body", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("sent_at", "bigint")
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
    .addColumn("last_error", "text")
    .execute();
  await sql`create index email_outbox_due on email_outbox (next_attempt_at) where sent_at is null`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
