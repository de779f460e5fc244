import { sql, type Kysely } from "kysely";

/**
 * Reusable invitation links (POST /invites/multiuse), and what invitation e-mails need beyond them:
 * - a link is used by signing up with an address: that makes an `invitations` row (`link_id` set) whose e-mail
 *   confirms the address, and accepting it creates the account through the e-mail invitation's flow;
 * - re-sent invitation e-mails count towards the realm's daily limit, as in Zulip, so each is recorded.
 * A link's key must be shown again (GET /invites lists the link), so it is kept encrypted beside its hash.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("invite_links")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("referrer_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("invited_as", "integer", (c) => c.notNull())
    .addColumn("stream_ids", "jsonb", (c) => c.notNull())
    .addColumn("group_ids", "jsonb", (c) => c.notNull())
    .addColumn("include_realm_default_subscriptions", "boolean", (c) => c.notNull())
    .addColumn("welcome_message_custom_text", "text")
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("key_enc", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("expires_at", "bigint")
    .addColumn("status", "text", (c) => c.notNull().defaultTo("active"))
    .addColumn("request_key", "text", (c) => c.notNull())
    .execute();
  await sql`create index invite_links_realm on invite_links (realm_id)`.execute(db);
  await sql`create index invite_links_request on invite_links (request_key)`.execute(db);
  await db.schema.alterTable("invitations").addColumn("link_id", "integer", (c) => c.references("invite_links.id")).execute();
  await db.schema
    .createTable("invitation_resends")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("invitation_id", "integer", (c) => c.notNull().references("invitations.id"))
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("request_key", "text", (c) => c.notNull().unique())
    .execute();
  await sql`create index invitation_resends_realm_created on invitation_resends (realm_id, created_at)`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
