/**
 * An agent's rows (the agent, its versions with their documents and chunks, its webhook endpoints, which version
 * is published), written inside a transaction the caller gives: the agent's actor under its fence, or the
 * management CLI, which works on the store directly (as `create-user` does). Each write reads what it depends on
 * inside the same transaction, so neither writer can act on a stale copy of the other's changes.
 *
 * Publish: 404 for an unknown agent or a version of another agent; 409 when the version is already the published
 * one. The version it replaces goes on the publish history; rollback re-publishes the top of that history (one
 * step per call) and answers 409 when it is empty.
 */
import crypto from "node:crypto";
import type { Kysely, Selectable, Transaction } from "kysely";
import { ChorusError } from "../../runtime/errors.ts";
import type { Keyring } from "../../runtime/secrets.ts";
import type { AssistantAgentTable } from "./schema.ts";
import { chunkDocument } from "./answer.ts";
import type { AddVersion, AddWebhook, CreateAgent, CreatedAgent, Published, UpdateAgent, VersionAdded } from "./agent.protocol.ts";
import { newWebhookSecret } from "./webhooks.ts";
import type { Database } from "../schema.ts";

export type AgentRow = Selectable<AssistantAgentTable>;
type Trx = Transaction<Database>;

export const notFound = (what: string) => new ChorusError("NOT_FOUND", `${what} not found`, 404);

export function readAgent(db: Kysely<Database>, agentId: string): Promise<AgentRow | undefined> {
  return db.selectFrom("assistant_agents").selectAll().where("id", "=", agentId).executeTakeFirst();
}

export async function insertAgent(trx: Trx, keyring: Keyring, agentId: string, spec: Omit<CreateAgent, "op">): Promise<AgentRow> {
  const row: AgentRow = {
    id: agentId,
    realm_id: spec.realmId,
    agent_key: `ak_${crypto.randomBytes(16).toString("base64url")}`,
    name: spec.name,
    secret_enc: keyring.encrypt(crypto.randomBytes(32).toString("hex")),
    allowed_origins: spec.allowedOrigins,
    rate_limit_per_minute: spec.rateLimitPerMinute,
    mobile_webhook_url: spec.mobileWebhookUrl,
    mobile_webhook_secret_enc: spec.mobileWebhookUrl ? keyring.encrypt(newWebhookSecret()) : null,
    published_version_id: null,
    published_at: null,
    publish_history: [],
    created_at: Math.floor(Date.now() / 1000),
  };
  await trx
    .insertInto("assistant_agents")
    .values({ ...row, allowed_origins: JSON.stringify(row.allowed_origins), publish_history: "[]" })
    .execute();
  return row;
}

/** What its creator is shown, once: the public key and the secrets, decrypted. */
export function createdAgent(row: AgentRow, keyring: Keyring): CreatedAgent {
  return {
    agent_id: row.id,
    agent_key: row.agent_key,
    secret: keyring.decrypt(row.secret_enc),
    ...(row.mobile_webhook_secret_enc ? { mobile_webhook_secret: keyring.decrypt(row.mobile_webhook_secret_enc) } : {}),
  };
}

/** A version with its documents, chunked. Idempotent by version id (a redelivered add finds it). */
export async function insertVersion(trx: Trx, agentId: string, version: Omit<AddVersion, "op">): Promise<VersionAdded> {
  const existing = await trx.selectFrom("assistant_versions").select("agent_id").where("id", "=", version.versionId).executeTakeFirst();
  if (existing) {
    if (existing.agent_id !== agentId) throw notFound("Version");
    const counts = await trx.selectFrom("assistant_chunks").select((eb) => eb.fn.countAll<number>().as("n")).where("version_id", "=", version.versionId).executeTakeFirst();
    return { version_id: version.versionId, documents: version.documents.length, chunks: Number(counts?.n ?? 0) };
  }
  await trx
    .insertInto("assistant_versions")
    .values({ id: version.versionId, agent_id: agentId, instructions: version.instructions, settings: JSON.stringify(version.settings), created_at: Math.floor(Date.now() / 1000) })
    .execute();
  let chunkCount = 0;
  for (const [ordinal, doc] of version.documents.entries()) {
    const { id } = await trx
      .insertInto("assistant_documents")
      .values({ version_id: version.versionId, ordinal, title: doc.title, text: doc.text, url: doc.url ?? null })
      .returning("id")
      .executeTakeFirstOrThrow();
    const chunks = chunkDocument(doc.title, doc.text, doc.format);
    chunkCount += chunks.length;
    await trx
      .insertInto("assistant_chunks")
      .values(chunks.map((c, i) => ({ version_id: version.versionId, document_id: id, ordinal: i, title: c.title, heading: c.heading, text: c.text })))
      .execute();
  }
  return { version_id: version.versionId, documents: version.documents.length, chunks: chunkCount };
}

/** A webhook endpoint with a new `whsec_` secret. Idempotent by webhook id. */
export async function insertWebhook(trx: Trx, keyring: Keyring, agentId: string, hook: Omit<AddWebhook, "op">): Promise<{ webhook_id: string; secret: string }> {
  const existing = await trx.selectFrom("webhook_endpoints").select(["agent_id", "secret_enc"]).where("id", "=", hook.webhookId).executeTakeFirst();
  if (existing) {
    if (existing.agent_id !== agentId) throw notFound("Webhook");
    return { webhook_id: hook.webhookId, secret: keyring.decrypt(existing.secret_enc) };
  }
  const secret = newWebhookSecret();
  await trx
    .insertInto("webhook_endpoints")
    .values({
      id: hook.webhookId,
      agent_id: agentId,
      url: hook.url,
      events: JSON.stringify(hook.events),
      secret_enc: keyring.encrypt(secret),
      disabled_reason: null,
      created_at: Math.floor(Date.now() / 1000),
    })
    .execute();
  return { webhook_id: hook.webhookId, secret };
}

/** The settings given (name, allowed origins, rate limit); the others stay. */
export async function updateAgent(trx: Trx, agentId: string, change: Omit<UpdateAgent, "op">): Promise<void> {
  const set: { name?: string; allowed_origins?: string; rate_limit_per_minute?: number } = {};
  if (change.name !== undefined) set.name = change.name;
  if (change.allowedOrigins !== undefined) set.allowed_origins = JSON.stringify(change.allowedOrigins);
  if (change.rateLimitPerMinute !== undefined) set.rate_limit_per_minute = change.rateLimitPerMinute;
  if (Object.keys(set).length) await trx.updateTable("assistant_agents").set(set).where("id", "=", agentId).execute();
}

/** The agent's row, locked until the transaction ends (publish and rollback read-modify-write its history). */
async function lockedAgent(trx: Trx, agentId: string): Promise<AgentRow> {
  const row = await trx.selectFrom("assistant_agents").selectAll().where("id", "=", agentId).forUpdate().executeTakeFirst();
  if (!row) throw notFound("Agent");
  return row;
}

export async function publishVersion(trx: Trx, agentId: string, versionId: string): Promise<Published> {
  const row = await lockedAgent(trx, agentId);
  const version = await trx.selectFrom("assistant_versions").select("agent_id").where("id", "=", versionId).executeTakeFirst();
  if (!version || version.agent_id !== row.id) throw notFound("Version");
  if (row.published_version_id === versionId) throw new ChorusError("CONFLICT", "This version is already published", 409);
  const history = [...(row.publish_history as string[])];
  if (row.published_version_id) history.push(row.published_version_id);
  return setPublished(trx, row.id, versionId, history);
}

export async function rollbackAgent(trx: Trx, agentId: string): Promise<Published> {
  const row = await lockedAgent(trx, agentId);
  const history = [...(row.publish_history as string[])];
  const previous = history.pop();
  if (!previous) throw new ChorusError("CONFLICT", "There is no previously published version to roll back to", 409);
  return setPublished(trx, row.id, previous, history);
}

async function setPublished(trx: Trx, agentId: string, versionId: string, history: string[]): Promise<Published> {
  const now = Math.floor(Date.now() / 1000);
  await trx
    .updateTable("assistant_agents")
    .set({ published_version_id: versionId, published_at: now, publish_history: JSON.stringify(history) })
    .where("id", "=", agentId)
    .execute();
  return { agent_id: agentId, version_id: versionId, published_at: now };
}
