/**
 * The assistant: agents and their versions, the knowledge base (documents split into chunks, searched with a
 * weighted generated tsvector under a GIN index), conversations, operator credentials and the webhook outbox.
 */
import { sql, type Kysely } from "kysely";

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("assistant_agents")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("agent_key", "text", (c) => c.notNull().unique())
    .addColumn("name", "text", (c) => c.notNull())
    // AES-GCM under the keyring: the secret must be recoverable to check user_hash HMACs.
    .addColumn("secret_enc", "text", (c) => c.notNull())
    .addColumn("allowed_origins", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("rate_limit_per_minute", "integer", (c) => c.notNull())
    .addColumn("mobile_webhook_url", "text")
    .addColumn("mobile_webhook_secret_enc", "text")
    .addColumn("published_version_id", "uuid")
    .addColumn("published_at", "bigint")
    // Versions published before the current one, oldest first: rollback pops the last.
    .addColumn("publish_history", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();

  await db.schema
    .createTable("assistant_versions")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("agent_id", "uuid", (c) => c.notNull().references("assistant_agents.id"))
    .addColumn("instructions", "text", (c) => c.notNull().defaultTo(""))
    .addColumn("settings", "jsonb", (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await sql`create index assistant_versions_agent on assistant_versions (agent_id)`.execute(db);

  await db.schema
    .createTable("assistant_documents")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("version_id", "uuid", (c) => c.notNull().references("assistant_versions.id"))
    .addColumn("ordinal", "integer", (c) => c.notNull())
    .addColumn("title", "text", (c) => c.notNull())
    .addColumn("text", "text", (c) => c.notNull())
    .execute();
  await sql`create index assistant_documents_version on assistant_documents (version_id, ordinal)`.execute(db);

  await db.schema
    .createTable("assistant_chunks")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("version_id", "uuid", (c) => c.notNull().references("assistant_versions.id"))
    .addColumn("document_id", "integer", (c) => c.notNull().references("assistant_documents.id"))
    .addColumn("ordinal", "integer", (c) => c.notNull())
    .addColumn("title", "text", (c) => c.notNull())
    .addColumn("text", "text", (c) => c.notNull())
    .execute();
  // Title words weigh more than body words (A over B) in ts_rank_cd.
  await sql`alter table assistant_chunks add column tsv tsvector generated always as (
      setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', text), 'B')) stored`.execute(db);
  await sql`create index assistant_chunks_tsv on assistant_chunks using gin (tsv)`.execute(db);
  await sql`create index assistant_chunks_version on assistant_chunks (version_id)`.execute(db);

  await db.schema
    .createTable("assistant_sessions")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("agent_id", "uuid", (c) => c.notNull().references("assistant_agents.id"))
    .addColumn("user_id", "text")
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await sql`create index assistant_sessions_agent on assistant_sessions (agent_id, created_at)`.execute(db);

  await db.schema
    .createTable("assistant_messages")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("session_id", "uuid", (c) => c.notNull().references("assistant_sessions.id"))
    .addColumn("seq", "integer", (c) => c.notNull())
    .addColumn("role", "text", (c) => c.notNull())
    .addColumn("content", "text", (c) => c.notNull())
    .addColumn("sources", "jsonb", (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addUniqueConstraint("assistant_messages_session_seq", ["session_id", "seq"])
    .execute();

  await db.schema
    .createTable("operator_api_keys")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("key_hash", "text", (c) => c.notNull().unique())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("revoked", "boolean", (c) => c.notNull().defaultTo(false))
    .execute();

  await db.schema
    .createTable("operator_sessions")
    .addColumn("token_hash", "text", (c) => c.primaryKey())
    .addColumn("user_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("csrf_token", "text", (c) => c.notNull())
    .addColumn("expires_at", "bigint", (c) => c.notNull())
    .execute();

  await db.schema
    .createTable("webhook_endpoints")
    .addColumn("id", "uuid", (c) => c.primaryKey())
    .addColumn("agent_id", "uuid", (c) => c.notNull().references("assistant_agents.id"))
    .addColumn("url", "text", (c) => c.notNull())
    .addColumn("events", "jsonb", (c) => c.notNull())
    .addColumn("secret_enc", "text", (c) => c.notNull())
    .addColumn("disabled", "boolean", (c) => c.notNull().defaultTo(false))
    .addColumn("disabled_reason", "text")
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await sql`create index webhook_endpoints_agent on webhook_endpoints (agent_id)`.execute(db);

  // The outbox: written in the same transaction as what it reports, delivered later by the webhook worker.
  await db.schema
    .createTable("webhook_outbox")
    .addColumn("id", "bigserial", (c) => c.primaryKey())
    .addColumn("msg_id", "text", (c) => c.notNull().unique())
    .addColumn("endpoint_id", "uuid")
    .addColumn("agent_id", "uuid", (c) => c.notNull())
    .addColumn("url", "text", (c) => c.notNull())
    .addColumn("secret_enc", "text", (c) => c.notNull())
    .addColumn("event_type", "text", (c) => c.notNull())
    .addColumn("payload", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull().defaultTo("pending"))
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
    .addColumn("last_error", "text")
    .addColumn("last_status", "integer")
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await sql`create index webhook_outbox_due on webhook_outbox (next_attempt_at) where status = 'pending'`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
