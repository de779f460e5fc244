/**
 * Server-sent events of the embed endpoint: `id: <n>` and `data: {"answer": <new text>, "done": false}` per
 * piece, then `data: {"answer": "", "done": true, "session_id", "sources"}`; a `: ping` comment every `pingMs`
 * while the stream is open; writes wait for the socket to drain (backpressure); everything stops when the
 * client goes away.
 */
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

/** An answer's events, sent as its pieces are produced: each `send` resolves once written, or once the client is gone. */
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

  async send(data: unknown): Promise<void> {
    if (this.sink.closed) return;
    const drained = this.sink.write(sseEvent(++this.id, data))
      ? undefined
      : new Promise<void>((resolve) => {
          this.waiting = resolve;
          this.sink.onDrain(() => this.release());
        });
    // The sink hands queued events to the socket from setImmediate. Go on only after that: a producer whose next
    // steps all complete in microtasks (PGlite answers so) would otherwise hold every event back until the end.
    await new Promise((resolve) => setImmediate(resolve));
    await drained;
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
