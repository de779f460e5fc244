/**
 * The mobile backend: agents, sessions, messages and history. Callers are operators (API key as
 * `Authorization: Bearer`, or a console session), who see their organization's agents and sessions, or an
 * agent's end users with a user token from `POST /chat/auth/token` (user-tokens.ts), who see that agent and
 * their own sessions only; anything else is 404, as if it did not exist. A message's answer is returned once
 * complete, while the same answer goes to the session's socket.io room as it is produced.
 */
import crypto from "node:crypto";
import { ChorusError } from "../../runtime/errors.ts";
import { agentById, agentSessions, realmAgents, sessionById, sessionMessages } from "../../actors/assistant/reads.ts";
import { AgentSession, type Answered } from "../../actors/assistant/agent-session.protocol.ts";
import type { HttpRequest } from "../http.ts";
import { answerAndRecord } from "./generate.ts";
import { fail, isUuid, json, UUID, type AssistantRoute, type AssistantServices } from "./app.ts";
import { callerMayUse, type MobileCaller } from "./auth.ts";
import { userHashMatches } from "./embed.ts";
import { operatorAgent } from "./internal.ts";
import { issueUserToken, USER_TOKEN_SECONDS } from "./user-tokens.ts";
import { clientAddress } from "../rate-limiter.ts";

async function mobileSession(services: AssistantServices, caller: MobileCaller, id: unknown) {
  if (!isUuid(id)) throw fail.notFound("Session");
  const session = await sessionById(services.store.db, id.toLowerCase());
  if (!session || !callerMayUse(caller, session)) throw fail.notFound("Session");
  return session;
}

async function mobileAgent(services: AssistantServices, caller: MobileCaller, agentId: unknown) {
  if (caller.kind === "operator") return operatorAgent(services, caller.operator, agentId);
  const agent = isUuid(agentId) && agentId.toLowerCase() === caller.agentId ? await agentById(services.store.db, caller.agentId) : undefined;
  if (!agent) throw fail.notFound("Agent");
  return agent;
}

type SessionRow = Awaited<ReturnType<typeof mobileSession>>;

/** The answer's pieces reach the room as they are produced (sentences, or tokens); the HTTP reply waits for the commit. */
async function streamedReply(services: AssistantServices, session: SessionRow, content: string, req: HttpRequest): Promise<Answered> {
  const prepared = await services.system.ref(AgentSession, session.id).ask({ op: "prepare", agentId: session.agent_id, withHistory: !!services.assistant.llm });
  const abort = new AbortController();
  req.onAbort(() => abort.abort());
  return answerAndRecord(services, prepared, { question: content }, abort.signal);
}

export const mobileRoutes: AssistantRoute[] = [
  {
    method: "POST",
    path: "/chat/auth/token",
    auth: "none",
    maxBodyBytes: 16 * 1024,
    body: {
      type: "object",
      properties: {
        agent_id: { type: "string", pattern: UUID },
        user_id: { type: "string", minLength: 1, maxLength: 256 },
        user_hash: { type: "string", minLength: 1, maxLength: 256 },
      },
      required: ["agent_id", "user_id", "user_hash"],
    },
    async handle({ body, services, req }) {
      const agent = await agentById(services.store.db, body.agent_id.toLowerCase());
      if (!agent) throw fail.notFound("Agent");
      // Guessing hashes is throttled like questions: per agent and client address.
      await services.limits.consume([`token:${agent.id}:${clientAddress(req, services.config)}`], agent.rate_limit_per_minute);
      if (!userHashMatches(services.keyring.decrypt(agent.secret_enc), body.user_id, body.user_hash)) {
        throw new ChorusError("INVALID_USER_HASH", "user_hash does not match user_id", 401);
      }
      const { token, expiresAt } = issueUserToken(services.keyring, agent.id, body.user_id);
      return json(
        201,
        { token, token_type: "Bearer", expires_at: new Date(expiresAt * 1000).toISOString(), expires_in: USER_TOKEN_SECONDS, agent_id: agent.id, user_id: body.user_id },
        { "cache-control": "no-store" },
      );
    },
  },
  {
    method: "GET",
    path: "/chat/agents",
    auth: "mobile",
    async handle({ caller, services }) {
      if (caller.kind === "user") {
        const agent = await agentById(services.store.db, caller.agentId);
        return json(200, { agents: agent ? [{ agent_id: agent.id, name: agent.name }] : [] });
      }
      return json(200, { agents: await realmAgents(services.store.db, caller.operator.realmId) });
    },
  },
  {
    method: "POST",
    path: "/chat/sessions",
    auth: "mobile",
    maxBodyBytes: 16 * 1024,
    body: {
      type: "object",
      properties: { agent_id: { type: "string", pattern: UUID }, user_id: { type: "string", minLength: 1, maxLength: 256 } },
      required: ["agent_id"],
    },
    async handle({ body, caller, services }) {
      const agent = await mobileAgent(services, caller, body.agent_id);
      if (caller.kind === "user" && body.user_id !== undefined && body.user_id !== caller.userId) {
        throw fail.forbidden("FORBIDDEN", "A user token starts sessions for its own user only");
      }
      const userId = caller.kind === "user" ? caller.userId : (body.user_id ?? null);
      const started = await services.system.ref(AgentSession, crypto.randomUUID()).ask({ op: "start", agentId: agent.id, userId });
      return json(201, { session_id: started.session_id });
    },
  },
  {
    method: "POST",
    path: "/chat/message",
    auth: "mobile",
    maxBodyBytes: 32 * 1024,
    body: {
      type: "object",
      properties: { session_id: { type: "string", pattern: UUID }, content: { type: "string", minLength: 1, maxLength: 4000 } },
      required: ["session_id", "content"],
    },
    async handle({ body, caller, services, req }) {
      const session = await mobileSession(services, caller, body.session_id);
      const answered = await streamedReply(services, session, body.content, req);
      return json(200, { session_id: answered.session_id, message: answered.message, reply: answered.reply });
    },
  },
  {
    method: "GET",
    path: "/chat/sessions/{id}/messages",
    auth: "mobile",
    async handle({ caller, services, pathParams }) {
      const session = await mobileSession(services, caller, pathParams.id);
      return json(200, { session_id: session.id, messages: await sessionMessages(services.store.db, session.id) });
    },
  },
  {
    method: "GET",
    path: "/chat/agents/{id}/sessions",
    auth: "mobile",
    async handle({ caller, services, pathParams, query }) {
      const agent = await mobileAgent(services, caller, pathParams.id);
      const raw = query.get("limit");
      const limit = raw && /^\d{1,4}$/.test(raw) ? Math.min(1000, Math.max(1, Number(raw))) : 100;
      return json(200, { sessions: await agentSessions(services.store.db, agent.id, limit, caller.kind === "user" ? caller.userId : undefined) });
    },
  },
];
