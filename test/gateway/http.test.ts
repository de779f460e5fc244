/**
 * The uWS adapter's own rules: streamed responses and WebSocket streams with backpressure, and closing when the
 * client goes away.
 */
import http from "node:http";
import WebSocket from "ws";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHttpServer, type HttpServer, type StreamSink } from "../../gateway/http.ts";

/** A body of pieces: views into one big buffer of two-byte characters (cut between two), and an empty piece. */
const BIG = Buffer.from("é".repeat(3 * 1024 * 1024));
const PIECES = [Buffer.from('{"a":"'), BIG.subarray(0, 2 * 1024 * 1024), Buffer.alloc(0), BIG.subarray(2 * 1024 * 1024), Buffer.from('"}')];

const WS_FRAMES = 256;

/** Write `count` chunks to `sink` honouring its backpressure (waiting for each drain), then end it. */
function pump(sink: StreamSink, count: number, chunk: (n: number) => string): void {
  let n = 0;
  const more = () => {
    while (n < count) if (!sink.write(chunk(n++))) return sink.onDrain(more);
    sink.end();
  };
  more();
}

describe("gateway/http streams", () => {
  let server: HttpServer;
  const closed: string[] = [];
  /** Frames the WebSocket stream has written so far. */
  let webSocketFramesWritten = 0;

  beforeAll(async () => {
    server = await startHttpServer({
      host: "127.0.0.1",
      port: 0,
      maxBodyBytes: 1024,
      handler: (req) => {
        if (req.path === "/ticks") {
          return {
            status: 200,
            headers: { "content-type": "text/event-stream" },
            start(sink: StreamSink) {
              let n = 0;
              const timer = setInterval(() => {
                sink.write(`data: ${n++}\n\n`);
                if (n === 3) {
                  clearInterval(timer);
                  sink.end();
                }
              }, 10);
            },
          };
        }
        if (req.path === "/big") {
          // 8 MiB in 16 KiB chunks, honouring backpressure.
          const chunk = "x".repeat(16 * 1024);
          return { status: 200, headers: { "content-type": "text/plain" }, start: (sink: StreamSink) => pump(sink, 512, () => chunk) };
        }
        if (req.path === "/ws-big") {
          // 64 MiB in numbered 256 KiB frames, honouring backpressure: more than the kernel's socket buffers take.
          return {
            status: 101,
            webSocket: true,
            start: (sink: StreamSink) =>
              pump(sink, WS_FRAMES, (n) => {
                webSocketFramesWritten = n + 1;
                return `${n} `.padEnd(256 * 1024, "x");
              }),
          };
        }
        if (req.path === "/ws-careless") {
          // Writes 64 MiB at once, ignoring backpressure: closed once uWS buffers more than its limit.
          return {
            status: 101,
            webSocket: true,
            start(sink: StreamSink) {
              sink.onClose(() => closed.push("ws-careless"));
              for (let n = 0; n < WS_FRAMES; n++) sink.write("x".repeat(256 * 1024));
            },
          };
        }
        if (req.path === "/forever") {
          return {
            status: 200,
            headers: { "content-type": "text/event-stream" },
            start(sink: StreamSink) {
              const timer = setInterval(() => sink.write(": ping\n\n"), 5);
              sink.onClose(() => {
                clearInterval(timer);
                closed.push("forever");
              });
            },
          };
        }
        if (req.path === "/pieces") return { status: 200, headers: { "content-type": "application/json" }, body: PIECES };
        return { status: 404, body: "no" };
      },
    });
  });
  afterAll(() => server.close());

  const url = (p: string) => `http://127.0.0.1:${server.port}${p}`;

  it("streams chunks as they are written, then ends", async () => {
    const res = await fetch(url("/ticks"));
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(await res.text()).toBe("data: 0\n\ndata: 1\n\ndata: 2\n\n");
  });

  it("delivers every byte of a large stream to a slow reader", async () => {
    const received = await new Promise<number>((resolve, reject) => {
      http.get(url("/big"), (res) => {
        let bytes = 0;
        res.on("data", (d: Buffer) => {
          bytes += d.length;
          res.pause();
          setTimeout(() => res.resume(), 0); // a slow consumer
        });
        res.on("end", () => resolve(bytes));
        res.on("error", reject);
      });
    });
    expect(received).toBe(512 * 16 * 1024);
  });

  it("writes a body of pieces whole, with its Content-Length, to a slow reader", async () => {
    const { length, body } = await new Promise<{ length: string | undefined; body: Buffer }>((resolve, reject) => {
      http.get(url("/pieces"), (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (d: Buffer) => {
          chunks.push(d);
          res.pause();
          setTimeout(() => res.resume(), 0); // a slow consumer: the socket fills, the rest waits for onWritable
        });
        res.on("end", () => resolve({ length: res.headers["content-length"], body: Buffer.concat(chunks) }));
        res.on("error", reject);
      });
    });
    expect(Number(length)).toBe(6 + BIG.length + 2);
    expect(JSON.parse(body.toString()).a).toBe("é".repeat(3 * 1024 * 1024));
  });

  it("tells the stream when the client goes away", async () => {
    const abort = new AbortController();
    const res = await fetch(url("/forever"), { signal: abort.signal });
    const reader = res.body!.getReader();
    await reader.read();
    abort.abort();
    for (let i = 0; i < 50 && !closed.includes("forever"); i++) await new Promise((r) => setTimeout(r, 10));
    expect(closed).toContain("forever");
    expect((await fetch(url("/ticks"))).status).toBe(200); // and keeps serving
  });

  const wsUrl = (p: string) => `ws://127.0.0.1:${server.port}${p}`;

  it("delivers every frame of a WebSocket stream, in order, to a client that stops reading for a while", async () => {
    const socket = new WebSocket(wsUrl("/ws-big"));
    const numbers: number[] = [];
    socket.on("message", (data) => numbers.push(Number(String(data).slice(0, 8).split(" ")[0])));
    await new Promise((resolve) => socket.on("open", resolve));
    socket.pause();
    await new Promise((r) => setTimeout(r, 500));
    // The server waits on the client (drain), not buffering the whole stream in memory.
    expect(webSocketFramesWritten).toBeGreaterThan(0);
    expect(webSocketFramesWritten).toBeLessThan(WS_FRAMES);
    socket.resume();
    const code = await new Promise<number>((resolve) => socket.on("close", resolve));
    expect(code).toBe(1000);
    expect(numbers).toEqual(Array.from({ length: WS_FRAMES }, (_, i) => i));
  });

  it("closes a WebSocket whose stream ignores backpressure once uWS buffers past its limit", async () => {
    const socket = new WebSocket(wsUrl("/ws-careless"));
    await new Promise((resolve) => socket.on("open", resolve));
    socket.pause();
    for (let i = 0; i < 200 && !closed.includes("ws-careless"); i++) await new Promise((r) => setTimeout(r, 10));
    expect(closed).toContain("ws-careless");
    socket.terminate();
  });

  it("answers a WebSocket stream to a request that is not an upgrade with 426, and a plain answer to an upgrade", async () => {
    const res = await fetch(url("/ws-big"));
    expect(res.status).toBe(426);
    const status = await new Promise<number>((resolve, reject) => {
      const socket = new WebSocket(wsUrl("/nothing"));
      socket.on("unexpected-response", (_req, r) => resolve(r.statusCode!));
      socket.on("open", () => reject(new Error("upgraded")));
      socket.on("error", () => {});
    });
    expect(status).toBe(404);
    expect((await fetch(url("/ticks"))).status).toBe(200); // and keeps serving
  });
});
