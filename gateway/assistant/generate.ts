/**
 * Streamed answers, produced beside the request (not in the session's actor) so that each piece reaches the
 * client as it comes and production stops when the client goes away; the session's actor prepares the exchange
 * first and records it after (see AgentSessionActor). The extractive answer streams sentence by sentence once its
 * passage is chosen. Both use the same retrieval (a follow-up with the session's previous turn). The optional generator is any OpenAI-compatible `/chat/completions` with `stream: true`
 * (LLM_BASE_URL, LLM_API_KEY, LLM_MODEL), grounded on the retrieved chunks:
 *
 * - Nothing retrieved: no call; the answer is the extractive "I don't know".
 * - The call fails before its first token: the extractive answer instead (the client never sees the failure).
 * - It fails or is aborted after some tokens: what came is the answer (recorded as such).
 */
import crypto from "node:crypto";
import { answerExtractive, DONT_KNOW, retrieve, sectionSources, type RetrievedChunk } from "../../actors/assistant/answer.ts";
import { answerSettings } from "../../actors/assistant/agent-session.ts";
import { AgentSession, type Answered, type Prepared, type RecordAnswer, type Source } from "../../actors/assistant/agent-session.protocol.ts";
import type { AssistantConfig } from "../../actors/assistant/config.ts";
import type { AssistantServices } from "./app.ts";
import { answerPieces } from "./sse.ts";
import { SseDataReader } from "../sse-events.ts";
import { log } from "../../runtime/log.ts";

type Llm = NonNullable<AssistantConfig["llm"]>;

export interface ChatMessage {
  role: "system" | "user" | "assistant";
  content: string;
}

/** The content deltas of a streamed chat completion. Throws on a non-2xx answer or a broken stream. */
export async function* chatCompletionDeltas(llm: Llm, messages: ChatMessage[], signal: AbortSignal): AsyncGenerator<string> {
  const res = await fetch(`${llm.baseUrl.replace(/\/+$/, "")}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream", ...(llm.apiKey ? { authorization: `Bearer ${llm.apiKey}` } : {}) },
    body: JSON.stringify({ model: llm.model, messages, stream: true, temperature: 0.2 }),
    signal,
  });
  if (!res.ok || !res.body) throw new Error(`generator answered ${res.status}`);
  const decoder = new TextDecoder();
  const events = new SseDataReader();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    for (const data of events.push(decoder.decode(chunk, { stream: true }))) {
      if (data === "[DONE]") return;
      const parsed = JSON.parse(data) as { choices?: Array<{ delta?: { content?: string } }> };
      const delta = parsed.choices?.[0]?.delta?.content;
      if (delta) yield delta;
    }
  }
}

export function groundedMessages(prepared: Prepared, question: string, chunks: RetrievedChunk[]): ChatMessage[] {
  const context = chunks.map((c, i) => `[${i + 1}] ${c.heading ? `${c.title} — ${c.heading}` : c.title}\n${c.text}`).join("\n\n");
  const system = [
    prepared.runtime.instructions,
    "Answer the user's question using only the numbered context below. If the context does not contain the answer, say that you do not know.",
    `Context:\n${context}`,
  ]
    .filter(Boolean)
    .join("\n\n");
  return [{ role: "system", content: system }, ...prepared.history, { role: "user", content: question }];
}

/** The generator's sources: the sections of the best three chunks it was given. */
function chunkSources(chunks: RetrievedChunk[]): Source[] {
  return sectionSources(chunks.slice(0, 3).map((chunk) => ({ chunk, snippet: chunk.text, score: chunk.rank })));
}

/**
 * Produce the answer for a prepared exchange, handing each piece to `onDelta` as it comes (awaited: a slow
 * client slows the generator down). Returns the whole text and its sources.
 */
export async function generateAnswer(
  services: AssistantServices,
  prepared: Prepared,
  question: string,
  signal: AbortSignal,
  onDelta: (delta: string) => Promise<void> | void,
): Promise<{ text: string; sources: Source[] }> {
  const db = services.store.db;
  const settings = answerSettings(prepared.runtime.settings);
  const retrieved = await retrieve(db, prepared.runtime.version_id, question, settings.chunks, prepared.previous);
  const chunks = retrieved.chunks;
  const llm = services.assistant.llm;
  if (llm && chunks.length) {
    let text = "";
    try {
      for await (const delta of chatCompletionDeltas(llm, groundedMessages(prepared, question, chunks), signal)) {
        text += delta;
        await onDelta(delta);
        if (signal.aborted) break;
      }
      return { text, sources: chunkSources(chunks) };
    } catch (err) {
      if (text || signal.aborted) return { text, sources: chunkSources(chunks) };
      log.warn(`generator failed before its first token; answering extractively: ${(err as Error).message}`);
    }
  }
  // The sentences go out (in pieces of a few words) as soon as the passage is chosen, before the exchange is committed.
  const send = async (text: string) => {
    for (const piece of answerPieces(text)) {
      if (signal.aborted) return;
      await onDelta(piece);
    }
  };
  let sent = false;
  const answer = chunks.length
    ? await answerExtractive(db, retrieved, settings, (sentence) => {
        sent = true;
        return send(sentence);
      })
    : { text: DONT_KNOW, sources: [] };
  if (!sent) await send(answer.text);
  return { text: answer.text, sources: answer.sources };
}

/**
 * One streamed exchange, after `prepare`: the session's room hears bot-typing, each piece and the completion,
 * `onDelta` (an SSE stream) each piece too, and the session's actor records the answer (creating the session
 * with it when `create` says it is new). The ids are chosen once here, so a redelivered record is answered once.
 */
export async function answerAndRecord(
  services: AssistantServices,
  prepared: Prepared,
  exchange: { question: string; agentId?: string; create?: { userId: string | null } },
  signal: AbortSignal,
  onDelta: (delta: string) => Promise<void> | void = () => {},
): Promise<Answered> {
  const sessionId = prepared.session_id;
  const answerId = crypto.randomUUID();
  services.sockets?.typing(sessionId);
  let seq = 0;
  const answer = await generateAnswer(services, prepared, exchange.question, signal, (delta) => {
    services.sockets?.publishDelta(sessionId, answerId, delta, ++seq);
    return onDelta(delta);
  });
  const answered = await services.system.ref(AgentSession, sessionId).ask({
    op: "record",
    ...exchange,
    questionId: crypto.randomUUID(),
    answerId,
    answer: answer.text,
    sources: answer.sources,
  } satisfies RecordAnswer);
  services.sockets?.publishComplete(answered);
  return answered;
}
