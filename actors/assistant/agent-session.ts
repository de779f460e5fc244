/**
 * agent-session:<uuid>: one conversation with an assistant. It answers one question at a time from the agent's
 * published version (asked of the agent's actor, which keeps it in memory) and commits the question, the answer
 * and their webhook events in one transaction (with the session itself and conversation.created when the
 * question starts the conversation) before it replies: a client that got an answer has it in the history, and
 * the webhooks will go out.
 *
 * The ids of the question and the answer come from the caller (one pair per HTTP request): a redelivered ask
 * finds its question stored (the insert conflicts) and replies with the first answer instead of answering twice.
 *
 * `ask` answers extractively inside the turn (JSON answers). Streamed answers (SSE, sockets, the LLM generator)
 * use `prepare` (the published version and recent history; no write) and `record` (commit the exchange, and the
 * session with conversation.created when it is new), and are produced in between by the gateway, so that the
 * first piece goes out as soon as it exists and production stops when the client goes away.
 */
import type { Transaction } from "kysely";
import { type Actor, type ActorContext } from "../../runtime/actor.ts";
import type { ChorusError } from "../../runtime/errors.ts";
import { answerExtractive, DEFAULT_ANSWER_SETTINGS, retrieve, type AnswerSettings, type PreviousTurn } from "./answer.ts";
import type { AssistantDeps } from "./deps.ts";
import { notFound } from "./agent-records.ts";
import type { ActorDeps } from "../deps.ts";
import { dispatch, type Handlers, type MessageOf } from "../../runtime/protocol.ts";
import type { AgentSessionProtocol, Answered, AskQuestion, PrepareAnswer, Prepared, RecordAnswer, SessionStarted, Source, StartSession } from "./agent-session.protocol.ts";
import { Agent, type AgentRuntime } from "./agent.protocol.ts";
import { enqueueEvents } from "./webhooks.ts";
import type { Database } from "../schema.ts";
import { metrics } from "../../runtime/metrics.ts";

interface SessionState {
  agentId: string;
  userId: string | null;
  createdAt: number;
  nextSeq: number;
  /** The latest exchange, the context of a follow-up question. */
  previous?: PreviousTurn;
}

export class AgentSessionActor implements Actor {
  private state?: SessionState;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly assistant: AssistantDeps,
  ) {}

  async activate(): Promise<void> {
    const row = await this.deps.store.db
      .selectFrom("assistant_sessions")
      .select((eb) => [
        "agent_id",
        "user_id",
        "created_at",
        eb.selectFrom("assistant_messages").select((m) => m.fn.max<number>("seq").as("seq")).whereRef("session_id", "=", "assistant_sessions.id").as("last_seq"),
      ])
      .where("id", "=", this.ctx.key)
      .executeTakeFirst();
    if (!row) return;
    const latest = await this.deps.store.db
      .selectFrom("assistant_messages")
      .select(["role", "content"])
      .where("session_id", "=", this.ctx.key)
      .orderBy("seq", "desc")
      .limit(2)
      .execute();
    const [answer, question] = latest;
    const previous = question?.role === "user" && answer?.role === "assistant" ? { question: question.content, answer: answer.content } : undefined;
    this.state = { agentId: row.agent_id, userId: row.user_id, createdAt: row.created_at, nextSeq: Number(row.last_seq ?? 0) + 1, previous };
  }

  /** The implementation of agent-session.protocol.ts. */
  private static readonly handlers: Handlers<AgentSessionProtocol, AgentSessionActor> = {
    start: (session, msg) => session.start(msg),
    ask: (session, msg) => session.ask(msg),
    prepare: (session, msg) => session.prepare(msg),
    record: (session, msg) => session.record(msg),
  };

  receive(msg: MessageOf<AgentSessionProtocol>): unknown {
    return dispatch(AgentSessionActor.handlers, this, msg);
  }

  private async start(msg: StartSession): Promise<SessionStarted> {
    if (this.state) {
      if (this.state.agentId !== msg.agentId) throw notFound("Session");
      return { session_id: this.ctx.key, created: false };
    }
    // The agent must exist (its actor answers 404 otherwise); an unpublished one may already have sessions.
    await this.deps.system().ref(Agent, msg.agentId).ask({ op: "runtime" }).catch((err: ChorusError) => {
      if (err.code !== "NOT_PUBLISHED") throw err;
    });
    const state = { agentId: msg.agentId, userId: msg.userId, createdAt: Math.floor(Date.now() / 1000), nextSeq: 1 };
    const queued = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await this.insertSession(trx, state);
      return enqueueEvents(trx, state.agentId, [{ type: "conversation.created", data: this.createdEvent(state) }]);
    });
    this.state = state;
    if (queued) this.assistant.wakeWebhooks();
    return { session_id: this.ctx.key, created: true };
  }

  private insertSession(trx: Transaction<Database>, state: SessionState) {
    return trx.insertInto("assistant_sessions").values({ id: this.ctx.key, agent_id: state.agentId, user_id: state.userId, created_at: state.createdAt }).execute();
  }

  private createdEvent(state: SessionState) {
    return { session_id: this.ctx.key, agent_id: state.agentId, user_id: state.userId, created_at: state.createdAt };
  }

  /** The session's state, or a new one when the message may start it (not yet committed); 404 otherwise. */
  private stateFor(msg: { agentId?: string; create?: { userId: string | null } }): { state: SessionState; creating: boolean } {
    if (!this.state) {
      if (!msg.create || !msg.agentId) throw notFound("Session");
      return { state: { agentId: msg.agentId, userId: msg.create.userId, createdAt: Math.floor(Date.now() / 1000), nextSeq: 1 }, creating: true };
    }
    if (msg.agentId && msg.agentId !== this.state.agentId) throw notFound("Session"); // another agent's session is no session to this one
    return { state: this.state, creating: false };
  }

  /** Unknown agent: 404 from its actor; unpublished: 409. */
  private runtime(agentId: string): Promise<AgentRuntime> {
    return this.deps.system().ref(Agent, agentId).ask({ op: "runtime" });
  }

  private async ask(msg: AskQuestion): Promise<Answered> {
    const { state, creating } = this.stateFor(msg);
    const runtime = await this.runtime(state.agentId);
    const db = this.deps.store.db;
    const settings = answerSettings(runtime.settings);
    const retrieved = await retrieve(db, runtime.version_id, msg.question, settings.chunks, state.previous);
    const answer = await answerExtractive(db, retrieved, settings);
    const answered = await this.commitExchange(state, creating, Object.assign({}, msg, { answer: answer.text, sources: answer.sources }));
    metrics().answers("json").inc();
    return answered;
  }

  private async prepare(msg: PrepareAnswer): Promise<Prepared> {
    const { state, creating } = this.stateFor(msg);
    const runtime = await this.runtime(state.agentId);
    const history =
      creating || !msg.withHistory
        ? []
        : await this.deps.store.db
            .selectFrom("assistant_messages")
            .select(["role", "content"])
            .where("session_id", "=", this.ctx.key)
            .orderBy("seq", "desc")
            .limit(HISTORY_FOR_GENERATOR)
            .execute();
    return {
      session_id: this.ctx.key,
      created: creating,
      runtime,
      ...(state.previous ? { previous: state.previous } : {}),
      history: history.reverse().map((m) => ({ role: m.role as "user" | "assistant", content: m.content })),
    };
  }

  /** A new session is created here, with its first exchange (prepare wrote nothing). */
  private async record(msg: RecordAnswer): Promise<Answered> {
    const { state, creating } = this.stateFor(msg);
    const answered = await this.commitExchange(state, creating, msg);
    metrics().answers("stream").inc();
    return answered;
  }

  /**
   * Commit a question and its answer with their webhook events (and the session with conversation.created when
   * `creating`), in one transaction. A question id already stored means a redelivery: the first answer stands.
   */
  private async commitExchange(
    session: SessionState,
    creating: boolean,
    msg: { question: string; questionId: string; answerId: string; answer: string; sources: Source[] },
  ): Promise<Answered> {
    const now = Math.floor(Date.now() / 1000);
    const seq = session.nextSeq;
    let queued = 0;
    const stored = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      if (creating) await this.insertSession(trx, session);
      const inserted = await trx
        .insertInto("assistant_messages")
        .values({ id: msg.questionId, session_id: this.ctx.key, seq, role: "user", content: msg.question, sources: "[]", created_at: now })
        .onConflict((c) => c.column("id").doNothing())
        .returning("id")
        .executeTakeFirst();
      if (!inserted) return trx.selectFrom("assistant_messages").selectAll().where("id", "in", [msg.questionId, msg.answerId]).execute();
      await trx
        .insertInto("assistant_messages")
        .values({ id: msg.answerId, session_id: this.ctx.key, seq: seq + 1, role: "assistant", content: msg.answer, sources: JSON.stringify(msg.sources), created_at: now })
        .execute();
      const base = { session_id: this.ctx.key, agent_id: session.agentId, user_id: session.userId };
      queued = await enqueueEvents(trx, session.agentId, [
        ...(creating ? [{ type: "conversation.created", data: this.createdEvent(session) }] : []),
        { type: "message.received", data: { message: { id: msg.questionId, role: "user", content: msg.question, created_at: now }, ...base } },
        {
          type: "message.sent",
          data: { message: { id: msg.answerId, role: "assistant", content: msg.answer, sources: msg.sources, created_at: now }, in_reply_to: msg.questionId, ...base },
        },
      ]);
      return undefined;
    });
    if (stored) {
      const q = stored.find((m) => m.id === msg.questionId)!;
      const a = stored.find((m) => m.id === msg.answerId);
      return {
        session_id: this.ctx.key,
        created: false,
        message: { id: q.id, role: "user", content: q.content },
        reply: { id: msg.answerId, role: "assistant", content: a?.content ?? "", sources: (a?.sources ?? []) as Source[] },
      };
    }
    this.state = Object.assign({}, session, { nextSeq: seq + 2, previous: { question: msg.question, answer: msg.answer } });
    if (queued) this.assistant.wakeWebhooks(); // an agent without webhooks costs the worker nothing
    return {
      session_id: this.ctx.key,
      created: creating,
      message: { id: msg.questionId, role: "user", content: msg.question },
      reply: { id: msg.answerId, role: "assistant", content: msg.answer, sources: msg.sources },
    };
  }

  canPassivate(): boolean {
    return true;
  }
}

const HISTORY_FOR_GENERATOR = 10;

/** The answer settings of a version: the defaults, overridden by what its `settings` carry (checked). */
export function answerSettings(settings: unknown): AnswerSettings {
  return { ...DEFAULT_ANSWER_SETTINGS, ...pickAnswerSettings(settings) };
}

function pickAnswerSettings(settings: unknown): Partial<AnswerSettings> {
  const s = (settings ?? {}) as Record<string, unknown>;
  const out: Partial<AnswerSettings> = {};
  if (typeof s.min_score === "number" && s.min_score >= 0 && s.min_score <= 1) out.minScore = s.min_score;
  if (typeof s.max_sentences === "number" && Number.isInteger(s.max_sentences) && s.max_sentences >= 1 && s.max_sentences <= 10) out.maxSentences = s.max_sentences;
  if (typeof s.max_chars === "number" && Number.isInteger(s.max_chars) && s.max_chars >= 100 && s.max_chars <= 4000) out.maxChars = s.max_chars;
  return out;
}
