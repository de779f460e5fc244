/**
 * The assistant's pure parts: SSE event writing (pings, backpressure, stopping when the client goes away),
 * answer pieces, origin rules, chunking, and sentence splitting. Time is controlled, not slept.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { chunkDocument, chunkSentences } from "../../../actors/assistant/answer.ts";
import { canonicalJson } from "../../../actors/assistant/agent.ts";
import { originAllowed } from "../../../gateway/assistant/embed.ts";
import { answerPieces, SseWriter } from "../../../gateway/assistant/sse.ts";
import type { StreamSink } from "../../../gateway/http.ts";

class FakeSink implements StreamSink {
  written: string[] = [];
  ended = false;
  gone = false;
  /** write() returns false once this many chunks are buffered, until drain(). */
  capacity = Infinity;
  private buffered = 0;
  private drainCb?: () => void;
  private closeCbs: Array<() => void> = [];
  write(chunk: string): boolean {
    if (this.closed) return false;
    this.written.push(chunk);
    this.buffered++;
    return this.buffered < this.capacity;
  }
  onDrain(cb: () => void): void {
    this.drainCb = cb;
  }
  drain(): void {
    this.buffered = 0;
    const cb = this.drainCb;
    this.drainCb = undefined;
    cb?.();
  }
  end(): void {
    this.ended = true;
  }
  get closed(): boolean {
    return this.ended || this.gone;
  }
  onClose(cb: () => void): void {
    this.closeCbs.push(cb);
  }
  disconnect(): void {
    this.gone = true;
    for (const cb of this.closeCbs) cb();
  }
}

describe("SSE answer events", () => {
  // Only the ping's clock is faked: each send waits a real setImmediate (for the sink's flush).
  beforeEach(() => vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] }));
  afterEach(() => vi.useRealTimers());
  const done = { answer: "", done: true, session_id: "s-1", sources: [{ document_id: 1, chunk_id: 2, title: "T", score: 0.9 }] };

  it("writes id'd data events as they are sent, then the done event, and ends", async () => {
    const sink = new FakeSink();
    const writer = new SseWriter(sink, 15_000);
    await writer.send({ answer: "one two three four", done: false });
    expect(sink.written).toEqual(['id: 1\ndata: {"answer":"one two three four","done":false}\n\n']); // before the rest exists
    await writer.send({ answer: " five six", done: false });
    await writer.send(done);
    writer.end();
    expect(sink.written.slice(1)).toEqual([
      'id: 2\ndata: {"answer":" five six","done":false}\n\n',
      'id: 3\ndata: {"answer":"","done":true,"session_id":"s-1","sources":[{"document_id":1,"chunk_id":2,"title":"T","score":0.9}]}\n\n',
    ]);
    expect(sink.ended).toBe(true);
  });

  it("waits for drain when the socket is full, pings every interval meanwhile, and stops when the client goes away", async () => {
    const sink = new FakeSink();
    sink.capacity = 1;
    const writer = new SseWriter(sink, 15_000);
    let sent = false;
    const first = writer.send({ answer: "a", done: false }).then(() => (sent = true));
    await Promise.resolve();
    expect(sent).toBe(false); // the producer waits: backpressure
    vi.advanceTimersByTime(15_000);
    expect(sink.written.at(-1)).toBe(": ping\n\n");
    vi.advanceTimersByTime(15_000);
    expect(sink.written.filter((w) => w === ": ping\n\n")).toHaveLength(2);
    sink.drain();
    await first;
    expect(sent).toBe(true);
    const second = writer.send({ answer: " b", done: false });
    sink.disconnect();
    await second; // released by the disconnect
    expect(writer.closed).toBe(true);
    const written = sink.written.length;
    await writer.send({ answer: " c", done: false });
    vi.advanceTimersByTime(60_000);
    expect(sink.written).toHaveLength(written);
    expect(sink.ended).toBe(false);
  });
});

describe("answer pieces", () => {
  it("join back into the answer exactly", () => {
    for (const text of ["", "one", "  leading and trailing  ", "Refunds are processed within 14 days.\nSecond line."]) {
      expect(answerPieces(text).join("")).toBe(text.trim() === "" ? "" : text);
    }
  });
});

describe("origin rules", () => {
  const allowed = (origin: string, rules: string[]) => originAllowed(new URL(origin), rules);
  it("matches exact hosts, ports, and subdomains of wildcards", () => {
    expect(allowed("https://example.com", ["example.com"])).toBe(true);
    expect(allowed("https://example.com:8443", ["example.com"])).toBe(true);
    expect(allowed("https://example.com:8443", ["example.com:443"])).toBe(false);
    expect(allowed("https://www.example.com", ["example.com"])).toBe(false);
    expect(allowed("https://a.example.com", ["*.example.com"])).toBe(true);
    expect(allowed("https://example.com", ["*.example.com"])).toBe(false);
    expect(allowed("https://badexample.com", ["*.example.com"])).toBe(false);
    expect(allowed("https://anything.io", [])).toBe(true);
  });
});

describe("knowledge processing", () => {
  it("chunks long documents at paragraphs and keeps headings in chunk titles", () => {
    const text = ["# Intro", "a ".repeat(300), "# Details", "b ".repeat(300), "c ".repeat(300)].join("\n\n");
    const chunks = chunkDocument("Guide", text);
    expect(chunks.length).toBeGreaterThan(1);
    for (const c of chunks) expect(c.text.length).toBeLessThanOrEqual(1000);
    expect(chunks[0]!.title).toBe("Guide — Intro");
    expect(chunks.some((c) => c.title === "Guide — Details")).toBe(true);
    expect(chunks.map((c) => c.text).join(" ").replace(/\s+/g, " ")).toContain("b b b");
  });

  it("splits sentences at paragraphs and sentence ends, not after abbreviations", () => {
    expect(chunkSentences("One. Two! Three?\n\nFour, e.g. five. Six").map((s) => s.text)).toEqual(["One.", "Two!", "Three?", "Four, e.g. five.", "Six"]);
    expect(chunkSentences("A.\n\nB.").map((s) => s.paragraph)).toEqual([0, 1]);
  });

  it("writes canonical JSON with sorted keys at every level", () => {
    expect(canonicalJson({ b: 1, a: [{ d: 1, c: 2 }], c: { z: null, y: "x" } })).toBe('{"a":[{"c":2,"d":1}],"b":1,"c":{"y":"x","z":null}}');
  });
});
