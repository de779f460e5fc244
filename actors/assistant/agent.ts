/**
 * agent:<uuid>: one assistant. It creates the agent, its versions and webhook endpoints, publishes and rolls back
 * (the rows: agent-records.ts), and serves the published version's settings and runtime manifest from memory.
 *
 * The management CLI may change the same rows directly (publish, rollback, versions), so the cached row is
 * re-read once it is ROW_TTL_MS old: a change made outside the actor is served within that time.
 */
import crypto from "node:crypto";
import type { Transaction } from "kysely";
import type { Actor, ActorContext } from "../../runtime/actor.ts";
import { ChorusError } from "../../runtime/errors.ts";
import { createdAgent, insertAgent, insertVersion, insertWebhook, notFound, publishVersion, readAgent, rollbackAgent, updateAgent, type AgentRow } from "./agent-records.ts";
import type { AssistantDeps } from "./deps.ts";
import type { ActorDeps } from "../deps.ts";
import { dispatch, type Handlers, type MessageOf } from "../../runtime/protocol.ts";
import type { AgentProtocol, AgentRuntime, CreateAgent, CreatedAgent, Manifest, Published, SyncQueued } from "./agent.protocol.ts";
import { enqueueDirect, MANIFEST_EVENT, requeueDelivery } from "./webhooks.ts";
import { knowledgeIndex } from "./knowledge-index.ts";
import type { Database } from "../schema.ts";

const ROW_TTL_MS = 1000;

export class AgentActor implements Actor {
  private row?: AgentRow;
  private rowReadAt = 0;
  /** The manifest of one published state (version and time of publishing): rebuilt when either changes. */
  private manifest?: { of: string; manifest: Manifest };
  /** The published version's settings, cached like the manifest. */
  private published?: AgentRuntime;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly assistant: AssistantDeps,
  ) {}

  private async currentRow(): Promise<AgentRow | undefined> {
    if (!this.row || Date.now() - this.rowReadAt > ROW_TTL_MS) {
      this.row = await readAgent(this.deps.store.db, this.ctx.key);
      this.rowReadAt = Date.now();
    }
    return this.row;
  }

  /** The implementation of agent.protocol.ts: every operation but `create` needs the agent to exist. */
  private static readonly handlers: Handlers<AgentProtocol, AgentActor> = {
    create: (agent, msg) => agent.create(msg),
    addVersion: (agent, { op: _, ...version }) => agent.withRow((row) => agent.write((trx) => insertVersion(trx, row.id, version))),
    addWebhook: (agent, { op: _, ...hook }) => agent.withRow((row) => agent.write((trx) => insertWebhook(trx, agent.deps.keyring, row.id, hook))),
    publish: (agent, msg) =>
      agent.withRow(async (row) => {
        const published = await agent.changePublished((trx) => publishVersion(trx, row.id, msg.versionId));
        // The ranking index is built now rather than by the first question (a failed build is retried then).
        knowledgeIndex(agent.deps.store.db, published.version_id).catch(() => {});
        return published;
      }),
    rollback: (agent) => agent.withRow((row) => agent.changePublished((trx) => rollbackAgent(trx, row.id))),
    manifest: (agent) => agent.withRow((row) => agent.getManifest(row)),
    syncMobile: (agent) => agent.withRow((row) => agent.syncMobile(row)),
    runtime: (agent) => agent.withRow((row) => agent.runtime(row)),
    update: (agent, { op: _, ...change }) => agent.withRow((row) => agent.changeRow((trx) => updateAgent(trx, row.id, change))),
    resendDelivery: (agent, msg) => agent.withRow((row) => agent.resend(row, msg.deliveryId)),
  };

  receive(msg: MessageOf<AgentProtocol>): unknown {
    return dispatch(AgentActor.handlers, this, msg);
  }

  /** `then` with the agent's row; 404 when there is no such agent. */
  private async withRow<T>(then: (row: AgentRow) => Promise<T>): Promise<T> {
    const row = await this.currentRow();
    if (!row) throw notFound("Agent");
    return then(row);
  }

  private write<T>(fn: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    return this.deps.store.write(this.ctx.fence(), fn);
  }

  private async create(msg: CreateAgent): Promise<CreatedAgent> {
    // A redelivered create (at-least-once transport) finds the row and answers with the same secrets.
    const { op: _, ...spec } = msg;
    const row = (await this.currentRow()) ?? (await this.write((trx) => insertAgent(trx, this.deps.keyring, this.ctx.key, spec)));
    this.row = row;
    return createdAgent(row, this.deps.keyring);
  }

  private async changePublished(change: (trx: Transaction<Database>) => Promise<Published>): Promise<Published> {
    const published = await this.write(change);
    this.rowReadAt = 0; // read the new state on the next message
    return published;
  }

  private async changeRow(change: (trx: Transaction<Database>) => Promise<void>): Promise<{ ok: true }> {
    await this.write(change);
    this.rowReadAt = 0;
    return { ok: true };
  }

  private async resend(row: AgentRow, deliveryId: number): Promise<{ delivery_id: number }> {
    const id = await this.write((trx) => requeueDelivery(trx, row.id, deliveryId));
    this.assistant.wakeWebhooks();
    return { delivery_id: id };
  }

  private async runtime(row: AgentRow): Promise<AgentRuntime> {
    if (!row.published_version_id) throw new ChorusError("NOT_PUBLISHED", "The agent has no published version yet", 409);
    if (this.published?.version_id === row.published_version_id) return this.published;
    const version = await this.deps.store.db
      .selectFrom("assistant_versions")
      .select(["settings", "instructions"])
      .where("id", "=", row.published_version_id)
      .executeTakeFirstOrThrow();
    this.published = { version_id: row.published_version_id, instructions: version.instructions, settings: (version.settings ?? {}) as Record<string, unknown> };
    // A version published by the CLI: its ranking index is built now rather than by its first question.
    knowledgeIndex(this.deps.store.db, row.published_version_id).catch(() => {});
    return this.published;
  }

  private async getManifest(row: AgentRow): Promise<Manifest> {
    if (!row.published_version_id) throw new ChorusError("NOT_PUBLISHED", "The agent has no published version", 404);
    const of = `${row.published_version_id}@${row.published_at}`;
    if (this.manifest?.of === of) return this.manifest.manifest;
    const db = this.deps.store.db;
    const version = await db.selectFrom("assistant_versions").selectAll().where("id", "=", row.published_version_id).executeTakeFirstOrThrow();
    const documents = await db
      .selectFrom("assistant_documents")
      .select(["id", "title"])
      .where("version_id", "=", version.id)
      .orderBy("ordinal")
      .execute();
    const manifest = {
      agent_id: row.id,
      agent_key: row.agent_key,
      name: row.name,
      version_id: version.id,
      published_at: row.published_at,
      instructions: version.instructions,
      settings: version.settings,
      allowed_origins: row.allowed_origins,
      rate_limit_per_minute: row.rate_limit_per_minute,
      knowledge: { documents: documents.map((d) => ({ document_id: d.id, title: d.title })) },
    };
    const json = canonicalJson(manifest);
    const built = { json, etag: `"${crypto.createHash("sha256").update(json).digest("base64url")}"` };
    this.manifest = { of, manifest: built };
    return built;
  }

  private async syncMobile(row: AgentRow): Promise<SyncQueued> {
    if (!row.mobile_webhook_url || !row.mobile_webhook_secret_enc) {
      throw new ChorusError("NO_MOBILE_BACKEND", "The agent has no mobile backend URL configured", 409);
    }
    const manifest = await this.getManifest(row);
    const url = row.mobile_webhook_url;
    const secretEnc = row.mobile_webhook_secret_enc;
    const id = await this.write((trx) =>
      enqueueDirect(trx, { agentId: row.id, url, secretEnc }, MANIFEST_EVENT, { etag: manifest.etag, manifest: JSON.parse(manifest.json) }),
    );
    this.assistant.wakeWebhooks();
    return { delivery_id: id, url };
  }
}

/** JSON with object keys sorted at every level: the same manifest is the same text, byte for byte. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}
