/**
 * Reads for the operator console (and any script using the internal API): an organization's agents, an agent's
 * versions and what each ingested, its webhook endpoints and delivery log, and its conversations. Every read is
 * scoped by the caller's organization or by an agent the caller has already been checked against. Nothing here
 * writes; times are ISO 8601.
 */
import type { Kysely } from "kysely";
import type { Database } from "../schema.ts";

type DB = Kysely<Database>;

const iso = (seconds: number | null) => (seconds === null ? null : new Date(seconds * 1000).toISOString());
const isoMs = (ms: number) => new Date(ms).toISOString();

export async function realmAgentList(db: DB, realmId: number) {
  const rows = await db
    .selectFrom("assistant_agents")
    .select((eb) => [
      "id",
      "name",
      "agent_key",
      "allowed_origins",
      "rate_limit_per_minute",
      "published_version_id",
      "published_at",
      "created_at",
      eb.selectFrom("assistant_versions").select((v) => v.fn.countAll<number>().as("n")).whereRef("agent_id", "=", "assistant_agents.id").as("versions"),
    ])
    .where("realm_id", "=", realmId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  return rows.map(agentView);
}

export async function agentDetail(db: DB, agentId: string) {
  const row = await db.selectFrom("assistant_agents").selectAll().where("id", "=", agentId).executeTakeFirstOrThrow();
  return {
    ...agentView({ ...row, versions: undefined }),
    mobile_webhook_url: row.mobile_webhook_url,
    publish_history: row.publish_history as string[],
  };
}

function agentView(row: {
  id: string;
  name: string;
  agent_key: string;
  allowed_origins: unknown;
  rate_limit_per_minute: number;
  published_version_id: string | null;
  published_at: number | null;
  created_at: number;
  versions?: number | string | null;
}) {
  return {
    agent_id: row.id,
    name: row.name,
    agent_key: row.agent_key,
    allowed_origins: row.allowed_origins as string[],
    rate_limit_per_minute: row.rate_limit_per_minute,
    published_version_id: row.published_version_id,
    published_at: iso(row.published_at),
    created_at: iso(row.created_at),
    ...(row.versions !== undefined ? { versions: Number(row.versions ?? 0) } : {}),
  };
}

/** The agent's versions, newest first, with how many documents and chunks each holds. */
export async function agentVersions(db: DB, agentId: string) {
  const rows = await db
    .selectFrom("assistant_versions")
    .select((eb) => [
      "id",
      "instructions",
      "created_at",
      eb.selectFrom("assistant_documents").select((d) => d.fn.countAll<number>().as("n")).whereRef("version_id", "=", "assistant_versions.id").as("documents"),
      eb.selectFrom("assistant_chunks").select((c) => c.fn.countAll<number>().as("n")).whereRef("version_id", "=", "assistant_versions.id").as("chunks"),
    ])
    .where("agent_id", "=", agentId)
    .orderBy("created_at", "desc")
    .orderBy("id")
    .execute();
  return rows.map((r) => ({
    version_id: r.id,
    created_at: iso(r.created_at),
    instructions: r.instructions,
    documents: Number(r.documents ?? 0),
    chunks: Number(r.chunks ?? 0),
  }));
}

/** A version of the agent (undefined for another agent's), and what it ingested: each document's text and chunk count. */
export async function versionDocuments(db: DB, agentId: string, versionId: string) {
  const version = await db.selectFrom("assistant_versions").select(["id", "instructions", "created_at"]).where("id", "=", versionId).where("agent_id", "=", agentId).executeTakeFirst();
  if (!version) return undefined;
  const documents = await db
    .selectFrom("assistant_documents")
    .select((eb) => [
      "id",
      "title",
      "text",
      eb.selectFrom("assistant_chunks").select((c) => c.fn.countAll<number>().as("n")).whereRef("document_id", "=", "assistant_documents.id").as("chunks"),
    ])
    .where("version_id", "=", versionId)
    .orderBy("ordinal")
    .execute();
  return {
    version_id: version.id,
    created_at: iso(version.created_at),
    instructions: version.instructions,
    documents: documents.map((d) => ({ document_id: d.id, title: d.title, text: d.text, characters: d.text.length, chunks: Number(d.chunks ?? 0) })),
  };
}

export async function agentWebhooks(db: DB, agentId: string) {
  const rows = await db
    .selectFrom("webhook_endpoints")
    .select(["id", "url", "events", "disabled", "disabled_reason", "created_at"])
    .where("agent_id", "=", agentId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  return rows.map((r) => ({ webhook_id: r.id, url: r.url, events: r.events as string[], disabled: r.disabled, disabled_reason: r.disabled_reason, created_at: iso(r.created_at) }));
}

/** The agent's latest webhook deliveries (the mobile manifest syncs too), newest first; `before` pages back by id. */
export async function agentDeliveries(db: DB, agentId: string, limit: number, before?: number) {
  let query = db
    .selectFrom("webhook_outbox")
    .select(["id", "msg_id", "endpoint_id", "url", "event_type", "status", "attempts", "next_attempt_at", "last_status", "last_error", "created_at"])
    .where("agent_id", "=", agentId);
  if (before !== undefined) query = query.where("id", "<", before);
  const rows = await query.orderBy("id", "desc").limit(limit).execute();
  return rows.map((r) => ({
    delivery_id: r.id,
    message_id: r.msg_id,
    webhook_id: r.endpoint_id,
    url: r.url,
    event_type: r.event_type,
    status: r.status,
    attempts: r.attempts,
    next_attempt_at: r.status === "pending" ? isoMs(r.next_attempt_at) : null,
    last_status: r.last_status,
    last_error: r.last_error,
    created_at: isoMs(r.created_at),
  }));
}

export interface ConversationFilter {
  realmId: number;
  agentId?: string;
  /** Seconds since the epoch: sessions started at or after. */
  since?: number;
  /** Seconds since the epoch: sessions started before. */
  until?: number;
  limit: number;
}

/** The organization's conversations, newest first, with their first question and how many messages they hold. */
export async function conversations(db: DB, filter: ConversationFilter) {
  let query = db
    .selectFrom("assistant_sessions")
    .innerJoin("assistant_agents", "assistant_agents.id", "assistant_sessions.agent_id")
    .select((eb) => [
      "assistant_sessions.id",
      "assistant_sessions.agent_id",
      "assistant_agents.name as agent_name",
      "assistant_sessions.user_id",
      "assistant_sessions.created_at",
      eb.selectFrom("assistant_messages").select((m) => m.fn.countAll<number>().as("n")).whereRef("session_id", "=", "assistant_sessions.id").as("messages"),
      eb
        .selectFrom("assistant_messages")
        .select("content")
        .whereRef("session_id", "=", "assistant_sessions.id")
        .where("role", "=", "user")
        .orderBy("seq")
        .limit(1)
        .as("first_question"),
    ])
    .where("assistant_agents.realm_id", "=", filter.realmId);
  if (filter.agentId) query = query.where("assistant_sessions.agent_id", "=", filter.agentId);
  if (filter.since !== undefined) query = query.where("assistant_sessions.created_at", ">=", filter.since);
  if (filter.until !== undefined) query = query.where("assistant_sessions.created_at", "<", filter.until);
  const rows = await query.orderBy("assistant_sessions.created_at", "desc").orderBy("assistant_sessions.id").limit(filter.limit).execute();
  return rows.map((r) => ({
    session_id: r.id,
    agent_id: r.agent_id,
    agent_name: r.agent_name,
    user_id: r.user_id,
    created_at: iso(r.created_at),
    messages: Number(r.messages ?? 0),
    first_question: r.first_question ?? null,
  }));
}
