/**
 * The internal endpoints the operator console is built on, beside internal.ts's: the console session (who is
 * signed in, with the CSRF token; signing out), listing and changing agents, versions (list, what one ingested, a comparison with the published one), webhook endpoints and
 * their delivery log (with resend), and conversations. The console uses nothing else, so a script with an API
 * key can do everything it does. Reads are scoped to the operator's organization (404 for anything outside it).
 */
import { createTwoFilesPatch, diffLines } from "diff";
import { ChorusError } from "../../runtime/errors.ts";
import { sessionById, sessionMessages } from "../../actors/assistant/reads.ts";
import { agentDeliveries, agentDetail, agentVersions, agentWebhooks, conversations, realmAgentList, versionDocuments } from "../../actors/assistant/console-reads.ts";
import { Agent } from "../../actors/assistant/agent.protocol.ts";
import { Operator as OperatorKind } from "../../actors/assistant/operator.protocol.ts";
import { fail, isUuid, json, type AssistantCall, type AssistantRoute, type AssistantServices } from "./app.ts";
import { SESSION_COOKIE } from "./auth.ts";
import { AGENT_BODY, normaliseOriginRule, operatorAgent } from "./internal.ts";

const NO_STORE = { "cache-control": "no-store" };

/** Agent settings that may change after creation: the create body's, each optional, at least one. */
const AGENT_CHANGE_BODY = {
  type: "object",
  properties: {
    name: AGENT_BODY.properties.name,
    allowed_origins: AGENT_BODY.properties.allowed_origins,
    rate_limit_per_minute: AGENT_BODY.properties.rate_limit_per_minute,
  },
  additionalProperties: false,
  minProperties: 1,
};

/** An integer query parameter within bounds, or the default when absent. */
function intParam(query: URLSearchParams, name: string, min: number, max: number, fallback?: number): number | undefined {
  const raw = query.get(name);
  if (raw === null || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) throw fail.badRequest(`${name}: must be an integer from ${min} to ${max}`);
  return value;
}

/** A date (`2026-11-27`) or date-time (ISO 8601) query parameter as seconds since the epoch. */
function timeParam(query: URLSearchParams, name: string): number | undefined {
  const raw = query.get(name);
  if (raw === null || raw === "") return undefined;
  const ms = /^\d{4}-\d{2}-\d{2}([T ][0-9:.]+(Z|[+-]\d{2}:?\d{2})?)?$/.test(raw) ? Date.parse(raw) : NaN;
  if (Number.isNaN(ms)) throw fail.badRequest(`${name}: must be a date (2026-11-27) or an ISO 8601 time`);
  return Math.floor(ms / 1000);
}

function uuidParam(query: URLSearchParams, name: string): string | undefined {
  const raw = query.get(name);
  if (raw === null || raw === "") return undefined;
  if (!isUuid(raw)) throw fail.badRequest(`${name}: must be a UUID`);
  return raw.toLowerCase();
}

async function agentVersion(services: AssistantServices, agentId: string, versionId: unknown) {
  const version = isUuid(versionId) ? await versionDocuments(services.store.db, agentId, versionId.toLowerCase()) : undefined;
  if (!version) throw fail.notFound("Version");
  return version;
}

type IngestedVersion = NonNullable<Awaited<ReturnType<typeof versionDocuments>>>;

/** A version compared with another (by document title): added, removed, changed (with a unified diff) and unchanged. */
function compareVersions(base: IngestedVersion, other: IngestedVersion) {
  const before = new Map(base.documents.map((d) => [d.title, d.text]));
  const after = new Map(other.documents.map((d) => [d.title, d.text]));
  const documents = [];
  for (const [title, text] of after) {
    const old = before.get(title);
    if (old === undefined) documents.push({ title, change: "added", lines_added: lineCount(text), lines_removed: 0 });
    else if (old === text) documents.push({ title, change: "unchanged", lines_added: 0, lines_removed: 0 });
    else {
      let added = 0;
      let removed = 0;
      for (const part of diffLines(old, text)) {
        if (part.added) added += part.count ?? 0;
        if (part.removed) removed += part.count ?? 0;
      }
      const patch = createTwoFilesPatch(title, title, old, text, base.version_id, other.version_id, { context: 2 });
      documents.push({ title, change: "changed", lines_added: added, lines_removed: removed, patch });
    }
  }
  for (const [title, text] of before) if (!after.has(title)) documents.push({ title, change: "removed", lines_added: 0, lines_removed: lineCount(text) });
  return { base_version_id: base.version_id, version_id: other.version_id, instructions_changed: base.instructions !== other.instructions, documents };
}

function lineCount(text: string): number {
  return text ? text.split("\n").length - (text.endsWith("\n") ? 1 : 0) : 0;
}

/** A GET of something of one agent: the agent checked against the operator's organization, then `read`'s answer. */
function agentRead(path: string, read: (services: AssistantServices, agentId: string, call: AssistantCall) => Promise<unknown>): AssistantRoute {
  return {
    method: "GET",
    path: `/api/internal/rag/agents/{agent_id}${path}`,
    auth: "operator",
    async handle(call) {
      const agent = await operatorAgent(call.services, call.operator, call.pathParams.agent_id);
      return json(200, await read(call.services, agent.id, call), NO_STORE);
    },
  };
}

export const consoleRoutes: AssistantRoute[] = [
  {
    method: "GET",
    path: "/api/internal/auth/session",
    auth: "operator",
    async handle({ operator, services, req }) {
      const session = operator.via === "cookie" ? await services.operators.consoleSession(req) : undefined;
      return json(200, { user_id: operator.userId, email: operator.email, ...(session ? { csrf_token: session.csrf } : {}) }, NO_STORE);
    },
  },
  {
    method: "POST",
    path: "/api/internal/auth/logout",
    auth: "operator",
    maxBodyBytes: 1024,
    async handle({ operator, services, req }) {
      const session = operator.via === "cookie" ? await services.operators.consoleSession(req) : undefined;
      if (session) {
        await services.system.ref(OperatorKind, operator.userId).ask({ op: "closeSession", tokenHash: services.keyring.hashApiKey(session.token) });
        services.operators.forgetSession(session.token);
      }
      return json(200, { signed_out: !!session }, { ...NO_STORE, "set-cookie": `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0` });
    },
  },
  {
    method: "GET",
    path: "/api/internal/rag/agents",
    auth: "operator",
    async handle({ operator, services }) {
      return json(200, { agents: await realmAgentList(services.store.db, operator.realmId) }, NO_STORE);
    },
  },
  agentRead("", (services, agentId) => agentDetail(services.store.db, agentId)),
  {
    method: "PATCH",
    path: "/api/internal/rag/agents/{agent_id}",
    auth: "operator",
    maxBodyBytes: 64 * 1024,
    body: AGENT_CHANGE_BODY,
    async handle({ operator, services, pathParams, body }) {
      const agent = await operatorAgent(services, operator, pathParams.agent_id);
      await services.system.ref(Agent, agent.id).ask({
        op: "update",
        ...(body.name !== undefined ? { name: body.name.trim() || body.name } : {}),
        ...(body.allowed_origins !== undefined ? { allowedOrigins: (body.allowed_origins as string[]).map(normaliseOriginRule) } : {}),
        ...(body.rate_limit_per_minute !== undefined ? { rateLimitPerMinute: body.rate_limit_per_minute } : {}),
      });
      return json(200, await agentDetail(services.store.db, agent.id), NO_STORE);
    },
  },
  agentRead("/versions", async (services, agentId) => ({ versions: await agentVersions(services.store.db, agentId) })),
  agentRead("/versions/{version_id}", (services, agentId, { pathParams }) => agentVersion(services, agentId, pathParams.version_id)),
  agentRead("/versions/{version_id}/diff", async (services, agentId, { pathParams, query }) => {
    const version = await agentVersion(services, agentId, pathParams.version_id);
    const againstId = uuidParam(query, "against") ?? (await agentDetail(services.store.db, agentId)).published_version_id;
    if (!againstId) throw new ChorusError("NOT_PUBLISHED", "The agent has no published version to compare with; give ?against=<version id>", 409);
    return compareVersions(await agentVersion(services, agentId, againstId), version);
  }),
  agentRead("/webhooks", async (services, agentId) => ({ webhooks: await agentWebhooks(services.store.db, agentId) })),
  agentRead("/webhooks/deliveries", async (services, agentId, { query }) => {
    const limit = intParam(query, "limit", 1, 500, 50)!;
    const before = intParam(query, "before", 1, Number.MAX_SAFE_INTEGER);
    return { deliveries: await agentDeliveries(services.store.db, agentId, limit, before) };
  }),
  {
    method: "POST",
    path: "/api/internal/rag/agents/{agent_id}/webhooks/deliveries/{delivery_id}/resend",
    auth: "operator",
    maxBodyBytes: 1024,
    async handle({ operator, services, pathParams }) {
      const agent = await operatorAgent(services, operator, pathParams.agent_id);
      const deliveryId = Number(pathParams.delivery_id);
      if (!Number.isSafeInteger(deliveryId) || deliveryId < 1) throw fail.notFound("Delivery");
      const resent = await services.system.ref(Agent, agent.id).ask({ op: "resendDelivery", deliveryId });
      return json(202, resent);
    },
  },
  {
    method: "GET",
    path: "/api/internal/rag/conversations",
    auth: "operator",
    async handle({ operator, services, query }) {
      const agentId = uuidParam(query, "agent_id");
      if (agentId) await operatorAgent(services, operator, agentId);
      const filter = {
        realmId: operator.realmId,
        agentId,
        since: timeParam(query, "since"),
        until: timeParam(query, "until"),
        limit: intParam(query, "limit", 1, 500, 50)!,
      };
      return json(200, { conversations: await conversations(services.store.db, filter) }, NO_STORE);
    },
  },
  {
    method: "GET",
    path: "/api/internal/rag/conversations/{session_id}",
    auth: "operator",
    async handle({ operator, services, pathParams }) {
      const sessionId = pathParams.session_id;
      const session = isUuid(sessionId) ? await sessionById(services.store.db, sessionId.toLowerCase()) : undefined;
      if (!session || session.realm_id !== operator.realmId) throw fail.notFound("Conversation");
      return json(
        200,
        {
          session_id: session.id,
          agent_id: session.agent_id,
          user_id: session.user_id,
          created_at: new Date(session.created_at * 1000).toISOString(),
          messages: await sessionMessages(services.store.db, session.id),
        },
        NO_STORE,
      );
    },
  },
];
