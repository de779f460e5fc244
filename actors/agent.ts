/**
 * agent:<uuid>: one assistant. It owns the agent's row (settings, secrets, which version is published and which
 * were published before), creates its versions and webhook endpoints, and serves the runtime manifest of the
 * published version, cached until the next publish or rollback.
 *
 * Publish: 404 for an unknown agent or a version of another agent; 409 when the version is already the published
 * one. The version it replaces goes on the publish history; rollback re-publishes the top of that history (one
 * step per call) and answers 409 when it is empty.
 */
import crypto from "node:crypto";
import type { Selectable } from "kysely";
import type { Actor, ActorContext } from "../runtime/actor.ts";
import { ChorusError } from "../runtime/errors.ts";
import type { AssistantAgentTable } from "../runtime/store/schema.ts";
import { chunkDocument } from "./answer.ts";
import type { AssistantDeps } from "./assistant-deps.ts";
import type { ActorDeps } from "./deps.ts";
import type {
  AddVersion,
  AddWebhook,
  AgentMessage,
  AgentRuntime,
  CreateAgent,
  CreatedAgent,
  Manifest,
  Published,
  SyncQueued,
} from "./protocol.ts";
import { enqueueDirect, MANIFEST_EVENT, newWebhookSecret } from "./webhooks.ts";

type AgentRow = Selectable<AssistantAgentTable>;

export const notFound = (what: string) => new ChorusError("NOT_FOUND", `${what} not found`, 404);

export class AgentActor implements Actor {
  private row?: AgentRow;
  private manifest?: Manifest;
  /** The published version's settings, cached like the manifest (cleared on publish and rollback). */
  private published?: AgentRuntime;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly assistant: AssistantDeps,
  ) {}

  async activate(): Promise<void> {
    this.row = await this.deps.store.db.selectFrom("assistant_agents").selectAll().where("id", "=", this.ctx.key).executeTakeFirst();
  }

  receive(msg: AgentMessage): Promise<unknown> {
    if (msg.op === "create") return this.create(msg);
    if (!this.row) throw notFound("Agent");
    switch (msg.op) {
      case "addVersion":
        return this.addVersion(this.row, msg);
      case "addWebhook":
        return this.addWebhook(this.row, msg);
      case "publish":
        return this.publish(this.row, msg.versionId);
      case "rollback":
        return this.rollback(this.row);
      case "manifest":
        return this.getManifest(this.row);
      case "syncMobile":
        return this.syncMobile(this.row);
      case "runtime":
        return this.runtime(this.row);
    }
  }

  private async create(msg: CreateAgent): Promise<CreatedAgent> {
    const { keyring } = this.deps;
    if (!this.row) {
      const row: AgentRow = {
        id: this.ctx.key,
        realm_id: msg.realmId,
        agent_key: `ak_${crypto.randomBytes(16).toString("base64url")}`,
        name: msg.name,
        secret_enc: keyring.encrypt(crypto.randomBytes(32).toString("hex")),
        allowed_origins: msg.allowedOrigins,
        rate_limit_per_minute: msg.rateLimitPerMinute,
        mobile_webhook_url: msg.mobileWebhookUrl,
        mobile_webhook_secret_enc: msg.mobileWebhookUrl ? keyring.encrypt(newWebhookSecret()) : null,
        published_version_id: null,
        published_at: null,
        publish_history: [],
        created_at: Math.floor(Date.now() / 1000),
      };
      await this.deps.store.write(this.ctx.fence(), (trx) =>
        trx
          .insertInto("assistant_agents")
          .values({ ...row, allowed_origins: JSON.stringify(row.allowed_origins), publish_history: "[]" })
          .execute(),
      );
      this.row = row;
    }
    // A redelivered create (at-least-once transport) finds the row and answers with the same secrets.
    const row = this.row;
    return {
      agent_id: row.id,
      agent_key: row.agent_key,
      secret: keyring.decrypt(row.secret_enc),
      ...(row.mobile_webhook_secret_enc ? { mobile_webhook_secret: keyring.decrypt(row.mobile_webhook_secret_enc) } : {}),
    };
  }

  private async addVersion(row: AgentRow, msg: AddVersion): Promise<{ version_id: string; documents: number; chunks: number }> {
    const db = this.deps.store.db;
    const existing = await db.selectFrom("assistant_versions").select("agent_id").where("id", "=", msg.versionId).executeTakeFirst();
    if (existing) {
      if (existing.agent_id !== row.id) throw notFound("Version");
      const counts = await db.selectFrom("assistant_chunks").select((eb) => eb.fn.countAll<number>().as("n")).where("version_id", "=", msg.versionId).executeTakeFirst();
      return { version_id: msg.versionId, documents: msg.documents.length, chunks: Number(counts?.n ?? 0) };
    }
    const now = Math.floor(Date.now() / 1000);
    let chunkCount = 0;
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx
        .insertInto("assistant_versions")
        .values({ id: msg.versionId, agent_id: row.id, instructions: msg.instructions, settings: JSON.stringify(msg.settings), created_at: now })
        .execute();
      for (const [ordinal, doc] of msg.documents.entries()) {
        const { id } = await trx
          .insertInto("assistant_documents")
          .values({ version_id: msg.versionId, ordinal, title: doc.title, text: doc.text })
          .returning("id")
          .executeTakeFirstOrThrow();
        const chunks = chunkDocument(doc.title, doc.text);
        chunkCount += chunks.length;
        await trx
          .insertInto("assistant_chunks")
          .values(chunks.map((c, i) => ({ version_id: msg.versionId, document_id: id, ordinal: i, title: c.title, text: c.text })))
          .execute();
      }
    });
    return { version_id: msg.versionId, documents: msg.documents.length, chunks: chunkCount };
  }

  private async addWebhook(row: AgentRow, msg: AddWebhook): Promise<{ webhook_id: string; secret: string }> {
    const db = this.deps.store.db;
    const existing = await db.selectFrom("webhook_endpoints").select(["agent_id", "secret_enc"]).where("id", "=", msg.webhookId).executeTakeFirst();
    if (existing) {
      if (existing.agent_id !== row.id) throw notFound("Webhook");
      return { webhook_id: msg.webhookId, secret: this.deps.keyring.decrypt(existing.secret_enc) };
    }
    const secret = newWebhookSecret();
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("webhook_endpoints")
        .values({
          id: msg.webhookId,
          agent_id: row.id,
          url: msg.url,
          events: JSON.stringify(msg.events),
          secret_enc: this.deps.keyring.encrypt(secret),
          disabled_reason: null,
          created_at: Math.floor(Date.now() / 1000),
        })
        .execute(),
    );
    return { webhook_id: msg.webhookId, secret };
  }

  private async publish(row: AgentRow, versionId: string): Promise<Published> {
    const version = await this.deps.store.db.selectFrom("assistant_versions").select("agent_id").where("id", "=", versionId).executeTakeFirst();
    if (!version || version.agent_id !== row.id) throw notFound("Version");
    if (row.published_version_id === versionId) throw new ChorusError("CONFLICT", "This version is already published", 409);
    const history = [...(row.publish_history as string[])];
    if (row.published_version_id) history.push(row.published_version_id);
    return this.setPublished(row, versionId, history);
  }

  private async rollback(row: AgentRow): Promise<Published> {
    const history = [...(row.publish_history as string[])];
    const previous = history.pop();
    if (!previous) throw new ChorusError("CONFLICT", "There is no previously published version to roll back to", 409);
    return this.setPublished(row, previous, history);
  }

  private async setPublished(row: AgentRow, versionId: string, history: string[]): Promise<Published> {
    const now = Math.floor(Date.now() / 1000);
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .updateTable("assistant_agents")
        .set({ published_version_id: versionId, published_at: now, publish_history: JSON.stringify(history) })
        .where("id", "=", row.id)
        .execute(),
    );
    this.row = { ...row, published_version_id: versionId, published_at: now, publish_history: history };
    this.manifest = undefined;
    this.published = undefined;
    return { agent_id: row.id, version_id: versionId, published_at: now };
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
    return this.published;
  }

  private async getManifest(row: AgentRow): Promise<Manifest> {
    if (!row.published_version_id) throw new ChorusError("NOT_PUBLISHED", "The agent has no published version", 404);
    if (this.manifest) return this.manifest;
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
    this.manifest = { json, etag: `"${crypto.createHash("sha256").update(json).digest("base64url")}"` };
    return this.manifest;
  }

  private async syncMobile(row: AgentRow): Promise<SyncQueued> {
    if (!row.mobile_webhook_url || !row.mobile_webhook_secret_enc) {
      throw new ChorusError("NO_MOBILE_BACKEND", "The agent has no mobile backend URL configured", 409);
    }
    const manifest = await this.getManifest(row);
    const url = row.mobile_webhook_url;
    const secretEnc = row.mobile_webhook_secret_enc;
    const id = await this.deps.store.write(this.ctx.fence(), (trx) =>
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
