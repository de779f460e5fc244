/**
 * The operator console's endpoints under /api/internal: login and API keys, then agents, versions (JSON, or files
 * uploaded as multipart/form-data), webhooks, publish, rollback, the runtime manifest and the mobile sync (the
 * console's other endpoints: console.ts). Every change goes to the owning actor; the handlers only check the
 * caller may see the agent (same organization) and shape the answer.
 */
import crypto from "node:crypto";
import { ChorusError } from "../../runtime/errors.ts";
import type { HttpRequest } from "../http.ts";
import { ajv } from "../validate.ts";
import { verifyPassword } from "../../runtime/secrets.ts";
import { findUserByEmail } from "../../actors/chat/reads/users.ts";
import { agentById } from "../../actors/assistant/reads.ts";
import { Agent, type AddVersion, type AddWebhook, type CreateAgent, type KnowledgeDocument, type Published } from "../../actors/assistant/agent.protocol.ts";
import { Operator as OperatorKind } from "../../actors/assistant/operator.protocol.ts";
import type { AssistantConfig } from "../../actors/assistant/config.ts";
import { checkWebhookUrl, WEBHOOK_EVENTS } from "../../actors/assistant/webhooks.ts";
import { checkBody, fail, isUuid, json, parseBody, UUID, type AssistantCall, type AssistantRoute, type AssistantServices } from "./app.ts";
import { isOperatorRole, newOperatorApiKey, SESSION_COOKIE, SESSION_SECONDS, type Operator } from "./auth.ts";
import { clientAddress } from "../rate-limiter.ts";

/** scrypt of a random password: an unknown e-mail costs what a wrong password costs (no timing oracle). */
const DUMMY_HASH = "scrypt$32768$8$1$AAAAAAAAAAAAAAAAAAAAAA==$3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w3q2+7w8=";

/** The agent, if it exists and belongs to the operator's organization; 404 otherwise (no existence oracle). */
export async function operatorAgent(services: AssistantServices, operator: Operator, agentId: unknown) {
  if (!isUuid(agentId)) throw fail.notFound("Agent");
  const agent = await agentById(services.store.db, agentId.toLowerCase());
  if (!agent || agent.realm_id !== operator.realmId) throw fail.notFound("Agent");
  return agent;
}

const LOGIN_ATTEMPTS_PER_MINUTE = 10;

const agentIdBody = {
  type: "object",
  properties: { agent_id: { type: "string", pattern: UUID } },
  required: ["agent_id"],
};

const HOST_PATTERN = "^(\\*\\.)?[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$";

// The bodies of the create endpoints, and what they become, shared with the management CLI (gateway/manage.ts).

export const AGENT_BODY = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 200 },
    allowed_origins: { type: "array", maxItems: 100, items: { type: "string", maxLength: 260, pattern: HOST_PATTERN } },
    rate_limit_per_minute: { type: "integer", minimum: 1, maximum: 100_000 },
    mobile_webhook_url: { type: "string", maxLength: 2000 },
  },
  required: ["name"],
};
export interface AgentBody {
  name: string;
  allowed_origins?: string[];
  rate_limit_per_minute?: number;
  mobile_webhook_url?: string;
}

export function agentSpec(body: AgentBody, realmId: number, config: AssistantConfig): Omit<CreateAgent, "op"> {
  if (body.mobile_webhook_url) checkWebhookUrl(body.mobile_webhook_url, config.webhookAllowHosts);
  return {
    realmId,
    name: body.name.trim() || body.name,
    allowedOrigins: (body.allowed_origins ?? []).map(normaliseOriginRule),
    rateLimitPerMinute: body.rate_limit_per_minute ?? config.defaultRateLimitPerMinute,
    mobileWebhookUrl: body.mobile_webhook_url ?? null,
  };
}

export const VERSION_BODY = {
  type: "object",
  properties: {
    instructions: { type: "string", maxLength: 20_000 },
    settings: { type: "object" },
    documents: {
      type: "array",
      maxItems: 1000,
      items: {
        type: "object",
        properties: {
          title: { type: "string", minLength: 1, maxLength: 300 },
          text: { type: "string", maxLength: 2_000_000 },
          format: { enum: ["text", "markdown", "html"] },
          url: { type: "string", maxLength: 2000, pattern: "^https?://[^\\s]+$" },
        },
        required: ["title", "text"],
      },
    },
  },
  required: ["documents"],
};
export interface VersionBody {
  instructions?: string;
  settings?: Record<string, unknown>;
  documents: KnowledgeDocument[];
}

export function versionSpec(body: VersionBody): Omit<AddVersion, "op"> {
  return {
    versionId: crypto.randomUUID(),
    instructions: body.instructions ?? "",
    settings: body.settings ?? {},
    documents: body.documents.map((d) => ({ title: d.title, text: d.text, ...(d.format ? { format: d.format } : {}), ...(d.url ? { url: d.url } : {}) })),
  };
}

const validateVersion = ajv.compile(VERSION_BODY);

/** How an uploaded file's text is read, by its name's extension. */
const FORMATS: Record<string, "markdown" | "html" | "text"> = {
  md: "markdown",
  markdown: "markdown",
  html: "html",
  htm: "html",
  txt: "text",
  text: "text",
};

/**
 * A new version's body: JSON (VERSION_BODY), or multipart/form-data with one `file` part per document (Markdown,
 * HTML or text, UTF-8), optional `title` and `url` fields, the n-th of each belonging to the n-th file (an empty or
 * missing title is the file's name without its extension), and an optional `instructions` field.
 */
export async function versionBodyOf(req: HttpRequest): Promise<VersionBody> {
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "multipart/form-data") return parseBody(req, validateVersion) as VersionBody;
  let form: FormData;
  try {
    form = await new Response(new Uint8Array(req.body), { headers: { "content-type": req.headers["content-type"]! } }).formData();
  } catch {
    throw new ChorusError("INVALID_MULTIPART", "The body is not valid multipart/form-data", 400);
  }
  const files = form.getAll("file");
  if (!files.length) throw fail.badRequest("file: upload at least one document");
  const titles = form.getAll("title");
  const urls = form.getAll("url");
  const documents = [];
  for (const [i, file] of files.entries()) {
    if (typeof file === "string") throw fail.badRequest("file: must be a file, not a text field");
    const extension = /\.([A-Za-z0-9]+)$/.exec(file.name)?.[1]?.toLowerCase() ?? "";
    const format = FORMATS[extension];
    if (!format) throw new ChorusError("UNSUPPORTED_MEDIA_TYPE", `${file.name}: upload Markdown (.md), HTML (.html) or text (.txt) files`, 415);
    let text: string;
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(await file.arrayBuffer());
    } catch {
      throw fail.badRequest(`${file.name}: is not UTF-8 text`);
    }
    const title = String(titles[i] ?? "").trim() || file.name.replace(/\.[^.]+$/, "") || file.name;
    const url = String(urls[i] ?? "").trim();
    documents.push({ title, text, format, ...(url ? { url } : {}) });
  }
  const instructions = form.get("instructions");
  const body = { documents, ...(typeof instructions === "string" && instructions ? { instructions } : {}) };
  return checkBody(validateVersion, body);
}

export const WEBHOOK_BODY = {
  type: "object",
  properties: {
    url: { type: "string", minLength: 1, maxLength: 2000 },
    events: { type: "array", minItems: 1, uniqueItems: true, items: { enum: [...WEBHOOK_EVENTS] } },
  },
  required: ["url", "events"],
};

export function webhookSpec(body: { url: string; events: string[] }, config: AssistantConfig): Omit<AddWebhook, "op"> {
  checkWebhookUrl(body.url, config.webhookAllowHosts);
  return { webhookId: crypto.randomUUID(), url: body.url, events: body.events };
}

export const internalRoutes: AssistantRoute[] = [
  {
    method: "POST",
    path: "/api/internal/auth/login",
    auth: "none",
    maxBodyBytes: 16 * 1024,
    body: {
      type: "object",
      properties: { email: { type: "string", minLength: 1, maxLength: 254 }, password: { type: "string", minLength: 1, maxLength: 1000 } },
      required: ["email", "password"],
    },
    async handle({ body, services, req }) {
      // Password guessing is throttled per client address, before any password is checked.
      await services.limits.consume([`login:${clientAddress(req, services.config)}`], LOGIN_ATTEMPTS_PER_MINUTE);
      const user = await findUserByEmail(services.store.db, body.email);
      const ok = await verifyPassword(body.password, user?.password_hash ?? DUMMY_HASH);
      if (!user || !ok || !user.is_active || user.realm_deactivated) throw new ChorusError("AUTHENTICATION_FAILED", "Wrong e-mail or password", 401);
      if (!isOperatorRole(user.role)) throw new ChorusError("NOT_AN_OPERATOR", "Only organization owners and administrators may use the console", 403);
      const token = crypto.randomBytes(32).toString("base64url");
      const csrfToken = crypto.randomBytes(32).toString("base64url");
      const expiresAt = Math.floor(Date.now() / 1000) + SESSION_SECONDS;
      await services.system.ref(OperatorKind, user.id).ask({ op: "openSession", tokenHash: services.keyring.hashApiKey(token), csrfToken, expiresAt });
      const secure = req.headers["x-forwarded-proto"] === "https" ? "; Secure" : "";
      return json(
        200,
        { user_id: user.id, email: user.delivery_email, csrf_token: csrfToken, expires_at: new Date(expiresAt * 1000).toISOString() },
        { "set-cookie": `${SESSION_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${SESSION_SECONDS}${secure}`, "cache-control": "no-store" },
      );
    },
  },
  {
    method: "POST",
    path: "/api/internal/api-keys",
    auth: "operator",
    body: { type: "object", properties: {} },
    async handle({ operator, services }) {
      const { key, keyId, keyHash } = newOperatorApiKey(services.keyring);
      await services.system.ref(OperatorKind, operator.userId).ask({ op: "createApiKey", keyId, keyHash });
      return json(201, { key, key_id: keyId }, { "cache-control": "no-store" });
    },
  },
  {
    method: "POST",
    path: "/api/internal/rag/agents",
    auth: "operator",
    maxBodyBytes: 64 * 1024,
    body: AGENT_BODY,
    async handle({ body, operator, services }) {
      const created = await services.system.ref(Agent, crypto.randomUUID()).ask({ op: "create", ...agentSpec(body, operator.realmId, services.assistant) });
      return json(201, created, { "cache-control": "no-store" });
    },
  },
  {
    method: "POST",
    path: "/api/internal/rag/agents/{agent_id}/versions",
    auth: "operator",
    async handle({ req, operator, services, pathParams }) {
      const agent = await operatorAgent(services, operator, pathParams.agent_id);
      const body = await versionBodyOf(req);
      const result = await services.system.ref(Agent, agent.id).ask({ op: "addVersion", ...versionSpec(body) }, 60_000);
      return json(201, result);
    },
  },
  {
    method: "POST",
    path: "/api/internal/rag/agents/{agent_id}/webhooks",
    auth: "operator",
    maxBodyBytes: 16 * 1024,
    body: WEBHOOK_BODY,
    async handle({ body, operator, services, pathParams }) {
      const agent = await operatorAgent(services, operator, pathParams.agent_id);
      const created = await services.system.ref(Agent, agent.id).ask({ op: "addWebhook", ...webhookSpec(body, services.assistant) });
      return json(201, created, { "cache-control": "no-store" });
    },
  },
  {
    method: "POST",
    path: "/api/internal/rag/publish",
    auth: "operator",
    maxBodyBytes: 16 * 1024,
    body: { type: "object", properties: { agent_id: { type: "string", pattern: UUID }, version_id: { type: "string", pattern: UUID } }, required: ["agent_id", "version_id"] },
    async handle({ body, operator, services }) {
      const agent = await operatorAgent(services, operator, body.agent_id);
      const published = await services.system.ref(Agent, agent.id).ask({ op: "publish", versionId: body.version_id.toLowerCase() });
      return json(200, publishedBody(published));
    },
  },
  {
    method: "POST",
    path: "/api/internal/rag/rollback",
    auth: "operator",
    maxBodyBytes: 16 * 1024,
    body: agentIdBody,
    async handle({ body, operator, services }) {
      const agent = await operatorAgent(services, operator, body.agent_id);
      const published = await services.system.ref(Agent, agent.id).ask({ op: "rollback" });
      return json(200, publishedBody(published));
    },
  },
  {
    method: "GET",
    path: "/api/internal/rag/runtime-manifest",
    auth: "operator",
    async handle({ query, operator, services, req }: AssistantCall) {
      const raw = query.get("agent_id");
      if (!raw) throw fail.badRequest("agent_id: is required");
      if (!isUuid(raw)) throw fail.badRequest("agent_id: must be a UUID");
      const agent = await operatorAgent(services, operator, raw);
      const manifest = await services.system.ref(Agent, agent.id).ask({ op: "manifest" });
      const headers = { etag: manifest.etag, "cache-control": "no-cache" };
      const ifNoneMatch = req.headers["if-none-match"];
      if (ifNoneMatch && ifNoneMatch.split(",").some((t) => t.trim() === manifest.etag || t.trim() === `W/${manifest.etag}` || t.trim() === "*")) {
        return { status: 304, headers, body: "" };
      }
      return { status: 200, headers: { "content-type": "application/json; charset=utf-8", ...headers }, body: manifest.json };
    },
  },
  {
    method: "POST",
    path: "/api/internal/rag/sync/mobile",
    auth: "operator",
    maxBodyBytes: 16 * 1024,
    body: agentIdBody,
    async handle({ body, operator, services }) {
      const agent = await operatorAgent(services, operator, body.agent_id);
      const queued = await services.system.ref(Agent, agent.id).ask({ op: "syncMobile" });
      return json(202, { queued: true, delivery_id: queued.delivery_id });
    },
  },
];

function publishedBody(p: Published) {
  return { agent_id: p.agent_id, version_id: p.version_id, published_at: new Date(p.published_at * 1000).toISOString() };
}

/** `https://Example.com/` and `example.com` are one rule: a lower-case host (with port if given), or `*.host`. */
export function normaliseOriginRule(rule: string): string {
  const trimmed = rule.trim().toLowerCase();
  if (trimmed.includes("://")) return new URL(trimmed).host;
  return trimmed.replace(/\/+$/, "");
}
