/**
 * Asking an agent as a browser does: POST /api/embed/{agentKey} with `stream: true`, the answer read piece by piece
 * from the server-sent events of the response body (fetch, since EventSource cannot POST). Every failure becomes a
 * kind (what the caller may do about it) and a sentence a visitor understands.
 */
import { SseDataReader } from "../../../sse-events.ts";

export interface EmbedSource {
  title: string;
  /** The document's address, when its version gave one. */
  url?: string;
}

export interface AskRequest {
  /** The server's origin: `https://chorus.example`. */
  base: string;
  agentKey: string;
  question: string;
  sessionId?: string;
  userId?: string;
  userHash?: string;
  signal?: AbortSignal;
  /** Each new piece of the answer's text, as it arrives. */
  onText(piece: string): void;
}

export type AskFailure =
  /** Wait `retryAfter` seconds, then the same question may be asked again. */
  | "rate-limited"
  /** The session is gone (or another agent's): ask again without it. */
  | "unknown-session"
  /** The connection failed or broke off: asking again may work. */
  | "network"
  /** Asking again will not help (origin not allowed, agent unknown or unpublished, identity refused, bad question). */
  | "refused"
  /** The server failed: asking again later may work. */
  | "server";

export type AskResult =
  | { ok: true; sessionId: string; text: string; sources: EmbedSource[] }
  | { ok: false; failure: AskFailure; message: string; retryAfter?: number };

const NETWORK_MESSAGE = "The connection was lost. Check your connection and try again.";

export async function ask(req: AskRequest): Promise<AskResult> {
  const body: Record<string, unknown> = { question: req.question, stream: true };
  if (req.sessionId) body.session_id = req.sessionId;
  if (req.userId) body.user_id = req.userId;
  if (req.userHash) body.user_hash = req.userHash;
  let res: Response;
  try {
    res = await fetch(`${req.base}/api/embed/${encodeURIComponent(req.agentKey)}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: req.signal,
      credentials: "omit",
    });
  } catch {
    return unreachable(req.base);
  }
  if (!res.ok || !res.body) return failed(res);

  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const events = new SseDataReader();
  let text = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const data of events.push(value)) {
        const piece = JSON.parse(data) as { answer?: string; done?: boolean; session_id?: string; sources?: EmbedSource[]; error?: { message?: string } };
        if (piece.answer) {
          text += piece.answer;
          req.onText(piece.answer);
        }
        if (piece.done) {
          if (piece.error) return { ok: false, failure: "server", message: "The assistant could not finish this answer. Try again." };
          return { ok: true, sessionId: piece.session_id ?? req.sessionId ?? "", text, sources: piece.sources ?? [] };
        }
      }
    }
  } catch {
    // The stream broke off (or the body was not what the server sends): the answer is incomplete.
  }
  return { ok: false, failure: "network", message: NETWORK_MESSAGE };
}

/**
 * The request failed before any answer. A browser reports an origin the agent refuses (its CORS preflight is
 * answered 403) exactly as it reports a lost connection, so the widget script itself, which every origin may
 * fetch, tells them apart: if the server answers that, it was the refusal.
 */
async function unreachable(base: string): Promise<AskResult> {
  if (navigator.onLine) {
    const reachable = await fetch(`${base}/widget.js`, { cache: "no-store", credentials: "omit" }).then(
      (res) => res.ok,
      () => false,
    );
    if (reachable) return { ok: false, failure: "refused", message: REFUSED_MESSAGE };
  }
  return { ok: false, failure: "network", message: NETWORK_MESSAGE };
}

const REFUSED_MESSAGE = "This assistant is not available on this website.";

async function failed(res: Response): Promise<AskResult> {
  const error = ((await res.json().catch(() => undefined)) as { error?: { code?: string; message?: string } } | undefined)?.error;
  switch (res.status) {
    case 429: {
      const retryAfter = Math.max(1, Number(res.headers.get("retry-after")) || 30);
      return { ok: false, failure: "rate-limited", retryAfter, message: `Too many questions at once. You can ask again in ${retryAfter} second${retryAfter === 1 ? "" : "s"}.` };
    }
    case 403:
      return { ok: false, failure: "refused", message: REFUSED_MESSAGE };
    case 404:
      if (error?.message === "Session not found") return { ok: false, failure: "unknown-session", message: "This conversation has ended." };
      return { ok: false, failure: "refused", message: "This assistant does not exist (any more)." };
    case 409:
      return { ok: false, failure: "refused", message: "This assistant is not ready to answer yet." };
    case 401:
      return { ok: false, failure: "refused", message: "Your sign-in could not be verified. Reload the page and try again." };
    case 400:
    case 413:
      return { ok: false, failure: "refused", message: error?.message ? `The question was refused: ${error.message}.` : "The question was refused." };
    default:
      return { ok: false, failure: "server", message: "The assistant is not answering right now. Try again in a moment." };
  }
}
