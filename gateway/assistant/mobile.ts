/**
 * The mobile backend (operator API key as `Authorization: Bearer`, or a console session): agents, sessions,
 * messages and history. A message's answer is returned once complete, while the same answer goes to the
 * session's socket.io room as it is produced.
 */
import crypto from "node:crypto";
import { actorId } from "../../runtime/actor.ts";
import { agentSessions, realmAgents, sessionById, sessionMessages } from "../../actors/assistant-reads.ts";
import { AGENT_SESSION, type Answered, type Prepared, type SessionStarted } from "../../actors/protocol.ts";
import type { HttpRequest } from "../http.ts";
import { generateAnswer } from "./generate.ts";
import { fail, isUuid, json, UUID, type AssistantRoute, type AssistantServices } from "./app.ts";
import type { Operator } from "./auth.ts";
import { operatorAgent } from "./internal.ts";

async function operatorSession(services: AssistantServices, operator: Operator, id: unknown) {
  if (!isUuid(id)) throw fail.notFound("Session");
  const session = await sessionById(services.store.db, id.toLowerCase());
  if (!session || session.realm_id !== operator.realmId) throw fail.notFound("Session");
  return session;
}

type SessionRow = Awaited<ReturnType<typeof operatorSession>>;

/** The extractive answer, made in the session's actor; the room hears it in pieces once it is committed. */
async function extractiveReply(services: AssistantServices, session: SessionRow, content: string): Promise<Answered> {
  services.sockets?.typing(session.id);
  const answered = await services.system.ask<Answered>(actorId(AGENT_SESSION, session.id), {
    op: "ask",
    agentId: session.agent_id,
    question: content,
    questionId: crypto.randomUUID(),
    answerId: crypto.randomUUID(),
  });
  services.sockets?.publishAnswer(answered);
  return answered;
}

/** The generated answer: its pieces reach the room as they come; the HTTP reply waits for the commit. */
async function generatedReply(services: AssistantServices, session: SessionRow, content: string, req: HttpRequest): Promise<Answered> {
  const actor = actorId(AGENT_SESSION, session.id);
  const prepared = await services.system.ask<Prepared>(actor, { op: "prepare", agentId: session.agent_id });
  const abort = new AbortController();
  req.onAbort(() => abort.abort());
  const answerId = crypto.randomUUID();
  services.sockets?.typing(session.id);
  let seq = 0;
  const answer = await generateAnswer(services, prepared, content, abort.signal, (delta) => services.sockets?.publishDelta(session.id, answerId, delta, ++seq));
  const answered = await services.system.ask<Answered>(actor, { op: "record", question: content, questionId: crypto.randomUUID(), answerId, answer: answer.text, sources: answer.sources });
  services.sockets?.publishComplete(answered);
  return answered;
}

export const mobileRoutes: AssistantRoute[] = [
  {
    method: "GET",
    path: "/chat/agents",
    auth: "operator",
    async handle({ operator, services }) {
      return json(200, { agents: await realmAgents(services.store.db, operator.realmId) });
    },
  },
  {
    method: "POST",
    path: "/chat/sessions",
    auth: "operator",
    maxBodyBytes: 16 * 1024,
    body: {
      type: "object",
      properties: { agent_id: { type: "string", pattern: UUID }, user_id: { type: "string", minLength: 1, maxLength: 256 } },
      required: ["agent_id"],
    },
    async handle({ body, operator, services }) {
      const agent = await operatorAgent(services, operator, body.agent_id);
      const sessionId = crypto.randomUUID();
      const started = await services.system.ask<SessionStarted>(actorId(AGENT_SESSION, sessionId), { op: "start", agentId: agent.id, userId: body.user_id ?? null });
      return json(201, { session_id: started.session_id });
    },
  },
  {
    method: "POST",
    path: "/chat/message",
    auth: "operator",
    maxBodyBytes: 32 * 1024,
    body: {
      type: "object",
      properties: { session_id: { type: "string", pattern: UUID }, content: { type: "string", minLength: 1, maxLength: 4000 } },
      required: ["session_id", "content"],
    },
    async handle({ body, operator, services, req }) {
      const session = await operatorSession(services, operator, body.session_id);
      const answered = services.assistant.llm ? await generatedReply(services, session, body.content, req) : await extractiveReply(services, session, body.content);
      return json(200, { session_id: answered.session_id, message: answered.message, reply: answered.reply });
    },
  },
  {
    method: "GET",
    path: "/chat/sessions/{id}/messages",
    auth: "operator",
    async handle({ operator, services, pathParams }) {
      const session = await operatorSession(services, operator, pathParams.id);
      return json(200, { session_id: session.id, messages: await sessionMessages(services.store.db, session.id) });
    },
  },
  {
    method: "GET",
    path: "/chat/agents/{id}/sessions",
    auth: "operator",
    async handle({ operator, services, pathParams, query }) {
      const agent = await operatorAgent(services, operator, pathParams.id);
      const raw = query.get("limit");
      const limit = raw && /^\d{1,4}$/.test(raw) ? Math.min(1000, Math.max(1, Number(raw))) : 100;
      return json(200, { sessions: await agentSessions(services.store.db, agent.id, limit) });
    },
  },
];
