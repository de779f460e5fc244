/**
 * POST /api/embed/{agentKey}: the public widget endpoint, and its CORS preflight.
 *
 * Order of checks: the agent exists (404), the browser origin is allowed (403, before anything else is read),
 * the body is valid (400/413/415), `user_hash` verifies `user_id` (401), the rate limits have room (429), a
 * `session_id` names a session of this caller (404 otherwise, as on the mobile API: a verified user's sessions are
 * theirs alone, and an anonymous caller's are the anonymous ones; an unverified `user_id` is no identity and is not
 * recorded). Then the question goes to the session's actor, which answers once the question and answer are
 * committed; the answer is sent as JSON, or as server-sent events.
 *
 * Origins: `Origin`, else the origin of `Referer`; no header at all is a non-browser client and is not refused.
 * A rule is an exact host (`example.com`, `example.com:8080`) or `*.example.com` (any subdomain, not the apex).
 * An agent with no rules accepts every origin except the opaque `null` (sandboxed frames, files), which no
 * rule can name and which is always refused. This server's own origin (the console's test box) is always allowed.
 */
import crypto from "node:crypto";
import { ChorusError } from "../../runtime/errors.ts";
import { agentByKey, sessionById, type AgentSummary } from "../../actors/assistant/reads.ts";
import { AgentSession } from "../../actors/assistant/agent-session.protocol.ts";
import type { HttpResult, HttpStream } from "../http.ts";
import { answerAndRecord } from "./generate.ts";
import { SSE_HEADERS, SseWriter } from "./sse.ts";
import { ajv } from "../validate.ts";
import { errorResult, fail, json, parseBody, UUID, type AssistantCall, type AssistantRoute, type AssistantServices } from "./app.ts";
import { safeEqual } from "../../runtime/secrets.ts";
import { sessionBelongsTo } from "./auth.ts";
import { clientAddress } from "../rate-limiter.ts";
import { log } from "../../runtime/log.ts";

const AGENT_CACHE_MS = 2000;

interface CachedAgent {
  agent: AgentSummary;
  secret: string;
  until: number;
}
/** Per node (services): agents by key, with their decrypted secret, kept in memory only. */
const agentCaches = new WeakMap<AssistantServices, Map<string, CachedAgent>>();

async function loadAgent(services: AssistantServices, key: string): Promise<CachedAgent> {
  let agentCache = agentCaches.get(services);
  if (!agentCache) agentCaches.set(services, (agentCache = new Map()));
  const hit = agentCache.get(key);
  if (hit && hit.until > Date.now()) return hit;
  const agent = key.length <= 200 ? await agentByKey(services.store.db, key) : undefined;
  if (!agent) throw fail.notFound("Agent");
  const entry = { agent, secret: services.keyring.decrypt(agent.secret_enc), until: Date.now() + AGENT_CACHE_MS };
  if (agentCache.size > 10_000) agentCache.clear();
  agentCache.set(key, entry);
  return entry;
}

/** The request's browser origin as a URL, or undefined for a client that sent neither Origin nor Referer. */
export function requestOrigin(headers: Record<string, string>): URL | undefined | null {
  const raw = headers.origin ?? headers.referer;
  if (raw === undefined) return undefined;
  try {
    return new URL(raw);
  } catch {
    return null; // present but unparsable (including Origin: null): refused
  }
}

export function originAllowed(origin: URL, rules: string[]): boolean {
  if (!rules.length) return true;
  const host = origin.host.toLowerCase();
  const hostname = origin.hostname.toLowerCase();
  return rules.some((rule) => {
    if (rule.startsWith("*.")) {
      const base = rule.slice(2);
      return base.includes(":") ? host.endsWith(`.${base}`) : hostname.endsWith(`.${base}`);
    }
    return rule.includes(":") ? host === rule : hostname === rule;
  });
}

/** CORS headers for an allowed browser origin; throws 403 for one that is not allowed. */
function corsFor(req: AssistantCall["req"], agent: AgentSummary): Record<string, string> {
  const origin = requestOrigin(req.headers);
  if (origin === undefined) return {};
  const ownPage = origin !== null && origin.host.toLowerCase() === (req.headers.host ?? "").toLowerCase();
  if (origin === null || (!ownPage && !originAllowed(origin, agent.allowed_origins))) {
    throw new ChorusError("ORIGIN_NOT_ALLOWED", "This origin may not use this assistant", 403);
  }
  if (!req.headers.origin) return {};
  // The widget reads Retry-After to say when the visitor may ask again; a cross-origin script sees it only if exposed.
  return { "access-control-allow-origin": req.headers.origin, "access-control-expose-headers": "Retry-After", vary: "Origin" };
}

export function expectedUserHash(secret: string, userId: string): string {
  return crypto.createHmac("sha256", secret).update(userId).digest("hex");
}

export function userHashMatches(secret: string, userId: string, presented: string): boolean {
  return safeEqual(expectedUserHash(secret, userId), presented.toLowerCase());
}

const embedBody = {
  type: "object",
  properties: {
    question: { type: "string", minLength: 1, maxLength: 4000 },
    session_id: { type: "string", pattern: UUID },
    user_id: { type: "string", minLength: 1, maxLength: 256 },
    user_hash: { type: "string", maxLength: 256 },
    stream: { type: "boolean" },
  },
  required: ["question"],
};

export const embedRoutes: AssistantRoute[] = [
  {
    method: "OPTIONS",
    path: "/api/embed/{agentKey}",
    auth: "none",
    async handle({ req, pathParams, services }) {
      const { agent } = await loadAgent(services, pathParams.agentKey!);
      const cors = corsFor(req, agent);
      return {
        status: 204,
        headers: {
          ...cors,
          "access-control-allow-methods": "POST, OPTIONS",
          "access-control-allow-headers": "content-type",
          "access-control-max-age": "600",
        },
        body: "",
      };
    },
  },
  {
    method: "POST",
    path: "/api/embed/{agentKey}",
    auth: "none",
    // A 4000-character question is at most 16 KB of UTF-8; the rest is the few other fields.
    maxBodyBytes: 32 * 1024,
    async handle(call) {
      const { req, pathParams, services } = call;
      const { agent, secret } = await loadAgent(services, pathParams.agentKey!);
      const cors = corsFor(req, agent);
      try {
        return await answer(call, agent, secret, cors);
      } catch (err) {
        const error = ChorusError.wrap(err);
        if (error.code === "INTERNAL_SERVER_ERROR") log.error({ err: error.cause ?? error }, `${req.method} ${req.path} failed`);
        return errorResult(error, cors); // the widget may read the error only with the CORS headers
      }
    },
  },
];

async function answer(call: AssistantCall, agent: AgentSummary, secret: string, cors: Record<string, string>) {
  const { req, services } = call;
  const body = parseEmbedBody(req);
  let verifiedUser: string | undefined;
  if (body.user_hash !== undefined) {
    if (body.user_id === undefined) throw fail.badRequest("user_hash: needs user_id");
    if (!userHashMatches(secret, body.user_id, body.user_hash)) throw new ChorusError("INVALID_USER_HASH", "user_hash does not match user_id", 401);
    verifiedUser = body.user_id;
  }
  const keys = [`ip:${agent.id}:${clientAddress(req, services.config)}`];
  if (verifiedUser) keys.push(`user:${agent.id}:${verifiedUser}`);
  const allowance = await services.limits.consume(keys, agent.rate_limit_per_minute);

  const owner = verifiedUser ?? null;
  if (body.session_id !== undefined) {
    const session = await sessionById(services.store.db, body.session_id.toLowerCase());
    if (!session || !sessionBelongsTo(session, agent.id, owner)) throw fail.notFound("Session");
  }
  const sessionId = body.session_id?.toLowerCase() ?? crypto.randomUUID();
  const headers = { ...cors, ...allowance.headers };
  const create = body.session_id ? undefined : { userId: owner };
  if (services.assistant.llm || body.stream) return streamed(call, { agentId: agent.id, sessionId, create, question: body.question, stream: !!body.stream }, headers);

  // A JSON answer from the extractive answerer: made and committed in one turn of the session's actor.
  const answered = await services.system.ref(AgentSession, sessionId).ask({
    op: "ask",
    agentId: agent.id,
    create,
    question: body.question,
    questionId: crypto.randomUUID(),
    answerId: crypto.randomUUID(),
  });
  services.sockets?.publishAnswer(answered);
  return json(200, { answer: answered.reply.content, session_id: answered.session_id, sources: answered.reply.sources }, headers);
}

/** Parsed here rather than by the app, so that an allowed origin gets CORS headers on a 400 too. */
const validateEmbed = ajv.compile(embedBody);
function parseEmbedBody(req: AssistantCall["req"]): { question: string; session_id?: string; user_id?: string; user_hash?: string; stream?: boolean } {
  return parseBody(req, validateEmbed, { requireJsonType: true }) as never;
}

/**
 * Streamed answers (and every answer of the generator): the session's actor says what to answer from, the
 * answer is produced here piece by piece (to the SSE stream and the session's sockets as it comes; stopped when
 * the client goes away), then the actor records it (creating the session if new); the done event follows the
 * commit. The first event waits only for retrieval and the first sentence (or token).
 */
async function streamed(
  call: AssistantCall,
  q: { agentId: string; sessionId: string; create?: { userId: string | null }; question: string; stream: boolean },
  headers: Record<string, string>,
): Promise<HttpResult | HttpStream> {
  const { services, req } = call;
  const prepared = await services.system.ref(AgentSession, q.sessionId).ask({ op: "prepare", agentId: q.agentId, create: q.create, withHistory: !!services.assistant.llm });
  const abort = new AbortController();
  const produce = (onDelta: (delta: string) => Promise<void> | void) =>
    answerAndRecord(services, prepared, { agentId: q.agentId, create: q.create, question: q.question }, abort.signal, onDelta);
  if (!q.stream) {
    req.onAbort(() => abort.abort());
    const answered = await produce(() => {});
    return json(200, { answer: answered.reply.content, session_id: answered.session_id, sources: answered.reply.sources }, headers);
  }
  return {
    status: 200,
    headers: { ...SSE_HEADERS, ...headers },
    start(sink) {
      const writer = new SseWriter(sink, services.assistant.ssePingMs);
      writer.onClose(() => abort.abort());
      produce((delta) => writer.send({ answer: delta, done: false })).then(
        async (answered) => {
          await writer.send({ answer: "", done: true, session_id: answered.session_id, sources: answered.reply.sources });
          writer.end();
        },
        async (err) => {
          const error = ChorusError.wrap(err);
          if (error.code === "INTERNAL_SERVER_ERROR") log.error({ err: error.cause ?? error }, `${req.method} ${req.path} failed`);
          await writer.send({ answer: "", done: true, session_id: prepared.session_id, error: { code: error.code, message: error.message } });
          writer.end();
        },
      );
    },
  };
}
