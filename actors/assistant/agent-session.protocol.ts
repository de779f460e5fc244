/**
 * agent-session:<uuid>: one conversation with an agent, its history and answers. Handlers:
 * AgentSessionActor.handlers in agent-session.ts.
 */
import { actorKind, type Op } from "../../runtime/protocol.ts";
import type { AgentRuntime } from "./agent.protocol.ts";
import type { PreviousTurn } from "./answer.ts";

/** One section of a document the answer comes from (answers stored before sections were kept lack the extras). */
export interface Source {
  document_id: number;
  /** The section's first chunk the answer quotes. */
  chunk_id: number;
  /** The document's title. */
  title: string;
  /** The section's heading ("" when the document has none). */
  heading?: string;
  /** The text quoted from the section (at most about 200 characters). */
  snippet?: string;
  /** The document's URL, when its version gave one. */
  url?: string;
  /** Relative to the answer's best section (1). */
  score: number;
}

export interface StartSession {
  op: "start";
  agentId: string;
  userId: string | null;
}

export interface SessionStarted {
  session_id: string;
  created: boolean;
}

/**
 * One question: answered from the agent's published version, the question and the answer committed together
 * (with their webhook events) before the reply. `create` starts the session when it does not exist yet; ids are
 * chosen by the gateway so a redelivered ask finds its first answer instead of answering twice.
 */
export interface AskQuestion {
  op: "ask";
  agentId?: string;
  create?: { userId: string | null };
  question: string;
  questionId: string;
  answerId: string;
}

export interface Answered {
  session_id: string;
  created: boolean;
  message: { id: string; role: "user"; content: string };
  reply: { id: string; role: "assistant"; content: string; sources: Source[] };
}

/**
 * The two halves of an ask, for answers streamed from the gateway (so that pieces go out as they are produced and
 * production stops when the client goes away): `prepare` says what to answer from; `record` commits the
 * exchange, and a new session with it (idempotent by its ids, like `ask`).
 */
export interface PrepareAnswer {
  op: "prepare";
  agentId?: string;
  /** The session is new (it is created by `record`, with the same `create`). */
  create?: { userId: string | null };
  /** Return the latest exchanges too (for the generator's context). */
  withHistory?: boolean;
}

export interface Prepared {
  session_id: string;
  created: boolean;
  runtime: AgentRuntime;
  /** The session's latest exchange (a follow-up question is retrieved with it). */
  previous?: PreviousTurn;
  /** The latest exchanges, oldest first (for the generator's context). */
  history: Array<{ role: "user" | "assistant"; content: string }>;
}

export interface RecordAnswer {
  op: "record";
  agentId?: string;
  create?: { userId: string | null };
  question: string;
  questionId: string;
  answerId: string;
  answer: string;
  sources: Source[];
}

export type AgentSessionProtocol = {
  start: Op<StartSession, SessionStarted>;
  ask: Op<AskQuestion, Answered>;
  prepare: Op<PrepareAnswer, Prepared>;
  record: Op<RecordAnswer, Answered>;
};

export const AgentSession = actorKind<AgentSessionProtocol>("agent-session");
