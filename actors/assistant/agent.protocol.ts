/**
 * agent:<uuid>: one assistant agent, its versions, webhooks and published version. Handlers: AgentActor.handlers
 * in agent.ts.
 */
import { actorKind, type Op } from "../../runtime/protocol.ts";
import type { DocumentFormat } from "./ingest.ts";

export interface CreateAgent {
  op: "create";
  realmId: number;
  name: string;
  allowedOrigins: string[];
  rateLimitPerMinute: number;
  mobileWebhookUrl: string | null;
}

/** The secrets are returned once, to the creating operator; a redelivered create returns the same ones. */
export interface CreatedAgent {
  agent_id: string;
  agent_key: string;
  secret: string;
  mobile_webhook_secret?: string;
}

export interface KnowledgeDocument {
  title: string;
  text: string;
  /** How to read `text`; by default HTML when it looks like HTML, Markdown otherwise (plain text reads as Markdown). */
  format?: DocumentFormat;
  /** Where the document is published: sources link to it. */
  url?: string;
}

export interface AddVersion {
  op: "addVersion";
  versionId: string;
  instructions: string;
  settings: Record<string, unknown>;
  documents: KnowledgeDocument[];
}

export interface VersionAdded {
  version_id: string;
  documents: number;
  chunks: number;
}

export interface AddWebhook {
  op: "addWebhook";
  webhookId: string;
  url: string;
  events: string[];
}

export interface WebhookAdded {
  webhook_id: string;
  secret: string;
}

/** New settings for the agent: only the fields given change. */
export interface UpdateAgent {
  op: "update";
  name?: string;
  allowedOrigins?: string[];
  rateLimitPerMinute?: number;
}

/** Send one of the agent's webhook deliveries again (same message, same `webhook-id`), with a fresh count of attempts. */
export interface ResendDelivery {
  op: "resendDelivery";
  deliveryId: number;
}

export interface Publish {
  op: "publish";
  versionId: string;
}

export interface Rollback {
  op: "rollback";
}

export interface Published {
  agent_id: string;
  version_id: string;
  published_at: number;
}

export interface GetManifest {
  op: "manifest";
}

/** The runtime manifest as canonical JSON text (sorted keys), and its ETag. */
export interface Manifest {
  json: string;
  etag: string;
}

export interface SyncMobile {
  op: "syncMobile";
}

/** What a session needs to answer: the published version (from the agent's memory, no query). */
export interface GetRuntime {
  op: "runtime";
}

export interface AgentRuntime {
  version_id: string;
  instructions: string;
  settings: Record<string, unknown>;
}

export interface SyncQueued {
  delivery_id: string;
  url: string;
}

export type AgentProtocol = {
  create: Op<CreateAgent, CreatedAgent>;
  addVersion: Op<AddVersion, VersionAdded>;
  addWebhook: Op<AddWebhook, WebhookAdded>;
  update: Op<UpdateAgent, { ok: true }>;
  resendDelivery: Op<ResendDelivery, { delivery_id: number }>;
  publish: Op<Publish, Published>;
  rollback: Op<Rollback, Published>;
  manifest: Op<GetManifest, Manifest>;
  syncMobile: Op<SyncMobile, SyncQueued>;
  runtime: Op<GetRuntime, AgentRuntime>;
};

export const Agent = actorKind<AgentProtocol>("agent");
