/**
 * Server-sent events of the embed endpoint: `id: <n>` and `data: {"answer": <new text>, "done": false}` per
 * piece, then `data: {"answer": "", "done": true, "session_id", "sources"}`; a `: ping` comment every `pingMs`
 * while the stream is open; writes wait for the socket to drain (backpressure); everything stops when the
 * client goes away.
 */
import type { Answered } from "../../actors/protocol.ts";
import type { StreamSink } from "../http.ts";

/** The answer in pieces of a few words, each piece's leading space kept so that joining them gives the answer. */
export function answerPieces(text: string, wordsPerPiece = 4): string[] {
  const words = text.match(/\s*\S+/g) ?? [];
  const pieces: string[] = [];
  for (let i = 0; i < words.length; i += wordsPerPiece) pieces.push(words.slice(i, i + wordsPerPiece).join(""));
  const trailing = text.match(/\s+$/)?.[0];
  if (trailing && pieces.length) pieces[pieces.length - 1] += trailing;
  return pieces;
}

export function sseEvent(id: number, data: unknown): string {
  return `id: ${id}\ndata: ${JSON.stringify(data)}\n\n`;
}

export const SSE_HEADERS = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache, no-transform",
  "x-accel-buffering": "no",
  connection: "keep-alive",
};

/**
 * Write the events of one answer to a sink: each piece as `{answer, done: false}`, then `{answer: "", done: true,
 * session_id, sources}`. Honours backpressure (waits for drain), pings with a comment every `pingMs` while open,
 * and stops as soon as the client goes away.
 */
export function writeAnswerEvents(sink: StreamSink, answered: Answered, pingMs: number): void {
  const pieces = answerPieces(answered.reply.content);
  let next = 0;
  let id = 0;
  const ping = setInterval(() => {
    if (!sink.closed) sink.write(": ping\n\n");
  }, pingMs);
  ping.unref();
  const finish = () => clearInterval(ping);
  sink.onClose(finish);
  const pump = () => {
    while (!sink.closed) {
      let writable: boolean;
      if (next < pieces.length) writable = sink.write(sseEvent(++id, { answer: pieces[next++], done: false }));
      else {
        sink.write(sseEvent(++id, { answer: "", done: true, session_id: answered.session_id, sources: answered.reply.sources }));
        finish();
        sink.end();
        return;
      }
      if (!writable) return sink.onDrain(pump);
    }
    finish();
  };
  pump();
}


/** For answers produced piece by piece (the generator): each `send` resolves once written, or once the client is gone. */
export class SseWriter {
  private id = 0;
  private readonly ping: NodeJS.Timeout;
  private waiting?: () => void;

  constructor(
    private readonly sink: StreamSink,
    pingMs: number,
  ) {
    this.ping = setInterval(() => {
      if (!sink.closed) sink.write(": ping\n\n");
    }, pingMs);
    this.ping.unref();
    sink.onClose(() => {
      clearInterval(this.ping);
      this.release();
    });
  }

  get closed(): boolean {
    return this.sink.closed;
  }

  onClose(cb: () => void): void {
    this.sink.onClose(cb);
  }

  send(data: unknown): Promise<void> {
    if (this.sink.closed) return Promise.resolve();
    if (this.sink.write(sseEvent(++this.id, data))) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiting = resolve;
      this.sink.onDrain(() => this.release());
    });
  }

  end(): void {
    clearInterval(this.ping);
    this.sink.end();
  }

  private release(): void {
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.();
  }
}
