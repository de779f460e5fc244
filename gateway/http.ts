/**
 * The uWebSockets.js adapter: the only module that imports uWS, and the one place its rules are kept.
 * - Every request gets `onAborted` before anything asynchronous happens; after an abort nothing touches `res`.
 * - Request data (method, url, headers) is copied synchronously: uWS reuses the request object after return.
 * - Bodies are read with a cap: past `maxBodyBytes` (by Content-Length up front, or while reading) the answer is 413.
 * - A URL (path and query) longer than `maxUrlBytes` is answered 414 before any handler runs. uWS itself drops the
 *   connection of a request whose head it cannot take in (past 4 KB when the head arrives in several reads); what
 *   reaches this module is refused with an answer.
 * - Responses are written inside `res.cork()`, status before headers. Answers that complete asynchronously
 *   (parked long-polls woken by someone else's request) are written from `setImmediate`, never from inside another
 *   request's handler: uWS loses such writes otherwise.
 * - Streams (SSE, file downloads) honour backpressure through onWritable.
 * - A WebSocket upgrade request goes through the same handler as any request (`webSocket` is set on it); a handler
 *   that answers with a WebSocket stream has it upgraded, any other answer is written as HTTP before the upgrade.
 *   A WebSocket stream's chunks are text frames, queued and sent from writeLater inside the socket's cork like a
 *   stream's chunks; its backpressure is uWS's getBufferedAmount and its drain handler.
 * - A body the `streamedBody` option names is not read by the adapter and has no cap here: the handler gets it as a
 *   Readable (`bodyStream`), and uWS is paused while that stream's buffer is full, so an upload never sits whole in
 *   memory. It errors once the client goes away.
 */
import { STATUS_CODES } from "node:http";
import { createRequire } from "node:module";
import { Readable } from "node:stream";
import type * as Uws from "uWebSockets.js";
import { log } from "../runtime/log.ts";

// Required where this module is evaluated rather than imported: the ahead-of-time build (gateway/build.ts) hoists a
// package's static import above all of the bundle's code, which would load uWS before supported-node.ts refuses a
// Node it has no native build for.
const uws = createRequire(import.meta.url)("uWebSockets.js") as typeof Uws;

export interface HttpRequest {
  method: string;
  path: string;
  /** Raw query string, without the `?`. */
  query: string;
  /** Lower-cased header names. */
  headers: Record<string, string>;
  /** The client's address; read from the socket on first use (most routes never ask). Empty once aborted. */
  readonly remoteAddress: string;
  body: Buffer;
  /** The body as it arrives, for the requests the `streamedBody` option names (`body` is empty then). */
  readonly bodyStream?: Readable;
  /** True once the client went away; register with onAbort to hear of it. */
  readonly aborted: boolean;
  onAbort(cb: () => void): void;
  /** A WebSocket upgrade request (GET with `Upgrade: websocket`): the one kind a WebSocket stream answers. */
  readonly webSocket?: boolean;
  /**
   * The route template that took the request (`/api/v1/messages/{message_id}`), set by whoever routed it: what
   * metrics and traces name the request by, since a raw path's values are unbounded.
   */
  route?: string;
}

export interface HttpResult {
  status: number;
  headers?: Record<string, string>;
  /**
   * Pieces (UTF-8 buffers, cached JSON among them) go out as they are, one after the other under one Content-Length:
   * not copied into one buffer, nor encoded from a string.
   */
  body: string | Buffer | Buffer[];
  /** An answer to HEAD: no body, and this Content-Length (what GET would send) instead of the body's. */
  headLength?: number;
}

/**
 * A streamed response (server-sent events): the status and headers go out first, then `start` gets a sink to
 * write chunks to until it ends the stream or the client goes away.
 */
export interface HttpStream {
  status: number;
  headers?: Record<string, string>;
  /**
   * The body's exact size in bytes, when known (a file): it goes out with a Content-Length instead of chunked, and a
   * stream ended short of it closes the connection, so the client sees the truncation.
   */
  length?: number;
  /**
   * A WebSocket stream: the upgrade request is upgraded (status and headers are not sent) and each chunk is a text
   * frame. Answered only to a request whose `webSocket` is set (426 otherwise).
   */
  webSocket?: true;
  start(sink: StreamSink): void;
}

export interface StreamSink {
  /** Queue a chunk. False once the socket's buffer is full: wait for onDrain before writing more. */
  write(chunk: string | Buffer): boolean;
  /** Called once the buffered data has been sent after write returned false. */
  onDrain(cb: () => void): void;
  end(): void;
  /** True once ended or once the client went away. */
  readonly closed: boolean;
  /** Called when the client goes away (not after end()). */
  onClose(cb: () => void): void;
}

export function isStream(result: object): result is HttpStream {
  return typeof (result as HttpStream).start === "function";
}

export type HttpHandler = (req: HttpRequest) => Promise<HttpResult | HttpStream> | HttpResult | HttpStream;

export interface HttpServer {
  readonly port: number;
  /** Stop accepting connections; requests in progress finish. */
  stopListening(): void;
  /** Close every connection too. */
  close(): void;
  /** For socket.io's attachApp. */
  readonly app: Uws.TemplatedApp;
}

export interface HttpOptions {
  host: string;
  port: number;
  maxBodyBytes: number;
  /** Longest URL, path and query (414 past it); {@link MAX_URL_BYTES} by default. */
  maxUrlBytes?: number;
  handler: HttpHandler;
  /**
   * The answer to a request refused here, 413 (body over maxBodyBytes) or 414 (URL over maxUrlBytes), in the
   * envelope of the face `path` belongs to; plain text by default.
   */
  refusal?(path: string, status: 413 | 414, message: string): HttpResult;
  /** Requests whose body the handler reads as a stream (uploads), uncapped by `maxBodyBytes`. */
  streamedBody?(method: string, path: string): boolean;
}

/** nginx's default for a request line (`large_client_header_buffers 4 8k`), which Zulip's servers sit behind. */
export const MAX_URL_BYTES = 8192;

const statusLines = new Map<number, string>();
function statusLine(status: number): string {
  let line = statusLines.get(status);
  if (!line) statusLines.set(status, (line = `${status} ${STATUS_CODES[status] ?? "Unknown"}`));
  return line;
}

/** A stream reports backpressure once this much is queued but not yet handed to the socket. */
const STREAM_HIGH_WATER = 64 * 1024;

/**
 * What uWS buffers at most for a WebSocket before it closes it. A stream stops writing at STREAM_HIGH_WATER and
 * waits for the drain, so only a stream that ignored its backpressure reaches this: it is closed (its client
 * reconnects from the last event it saw) rather than have a frame dropped, which would leave a silent gap.
 */
const WEBSOCKET_MAX_BACKPRESSURE = 1024 * 1024;

/** What a client may send on a WebSocket stream (nothing it sends is read yet): a longer frame closes it. */
const WEBSOCKET_MAX_RECEIVED_BYTES = 4096;

/** What an upgrade needs from its request, copied before the handler runs (uWS reuses the request after return). */
interface UpgradeRequest {
  key: string;
  protocol: string;
  extensions: string;
  context: Uws.us_socket_context_t;
}

/** The user data of an upgraded socket: its stream, and once open the sink that writes to it. */
interface WebSocketConnection {
  stream: HttpStream;
  sink?: WebSocketSink;
}

/**
 * One request and its response, from uWS's callback to the answer: what a handler sees of the request (as
 * HttpRequest), and the state the adapter keeps while it answers. A class, so that its getters and methods live on
 * the prototype, not in closures made per request: an object literal's own getters are an accessor pair per
 * request, which V8 allocates in the old generation. That pair then held the request's closures, and through them
 * everything the request allocated, through every young-generation GC until the next full one. At 1,000 requests a
 * second, 22% (GET /server_settings) to 44% (a trivial handler) of all allocations were promoted and scavenges paused
 * the loop 5-6 ms; as a class, 0-1% and 0.3-1.6 ms.
 */
class UwsExchange implements HttpRequest {
  private address: string | undefined;
  route: string | undefined = undefined;
  body: Buffer = NO_BODY;
  bodyStream: Readable | undefined = undefined;
  /** Set once the client went away or the response ended: uWS forbids touching `res` after either. */
  private finished = false;
  private abortListeners: Array<() => void> | undefined;
  /** The body's chunks read so far (a body read whole), and their size. */
  private chunks: Buffer[] | undefined;
  private size = 0;

  constructor(
    readonly method: string,
    readonly path: string,
    readonly query: string,
    readonly headers: Record<string, string>,
    private readonly res: Uws.HttpResponse,
    private readonly opts: HttpOptions,
    /** What the upgrade needs, when the request is a WebSocket upgrade. */
    private readonly upgrade: UpgradeRequest | undefined,
  ) {}

  get webSocket(): boolean {
    return this.upgrade !== undefined;
  }

  get remoteAddress(): string {
    this.address ??= this.finished ? "" : Buffer.from(this.res.getRemoteAddressAsText()).toString();
    return this.address;
  }
  get aborted(): boolean {
    return this.finished;
  }
  onAbort(cb: () => void): void {
    (this.abortListeners ??= []).push(cb);
  }

  /** uWS's onAborted: the client went away. */
  abort(): void {
    this.finished = true;
    if (this.abortListeners) for (const cb of this.abortListeners) cb();
  }

  /** A chunk of a body read whole (uWS's onData); the handler runs once it is complete. */
  take(chunk: ArrayBuffer, isLast: boolean): void {
    if (this.size > this.opts.maxBodyBytes) return; // refused already
    this.size += chunk.byteLength;
    if (this.size > this.opts.maxBodyBytes) return this.tooLarge();
    const copy = Buffer.from(chunk.slice(0)); // uWS frees the chunk after this callback: copy it
    if (!isLast) (this.chunks ??= []).push(copy);
    else {
      this.body = this.chunks ? Buffer.concat([...this.chunks, copy]) : copy;
      this.chunks = undefined;
      this.run(false);
    }
  }

  run(sync: boolean): void {
    let result: Promise<HttpResult | HttpStream> | HttpResult | HttpStream;
    try {
      result = this.opts.handler(this);
    } catch (err) {
      log.error({ err }, "handler threw");
      result = { status: 500, body: INTERNAL_ERROR };
    }
    if (result instanceof Promise) {
      result.then(
        (r) => this.respond(r, false),
        (err) => {
          log.error({ err }, "handler failed");
          this.respond({ status: 500, body: INTERNAL_ERROR }, false);
        },
      );
    } else this.respond(result, sync);
  }

  refuse(status: 413 | 414, message: string): void {
    this.respond(this.opts.refusal?.(this.path, status, message) ?? { status, headers: { "content-type": "text/plain", connection: "close" }, body: message }, false);
  }

  tooLarge(): void {
    this.refuse(413, `Request body too large (limit: ${this.opts.maxBodyBytes} bytes)`);
  }

  private respond(result: HttpResult | HttpStream, sync: boolean): void {
    if (sync) this.write(result);
    else writeLater(() => this.write(result));
  }

  private write(result: HttpResult | HttpStream): void {
    if (this.finished) return;
    if (isStream(result)) return result.webSocket ? this.openWebSocket(result) : this.openStream(result);
    // A streamed body the handler did not read to its end (a refused upload): the rest of it would be taken for
    // the next request, so the connection closes after this answer.
    const unread = this.bodyStream !== undefined && !this.bodyStream.readableEnded;
    if (unread) this.bodyStream!.destroy();
    const body = result.body;
    // Pieces: written as a stream of known length (tryEnd, what the socket cannot take waits for onWritable).
    if (Array.isArray(body) && !unread && result.headLength === undefined) return this.openStream(piecesStream(result.status, result.headers, body));
    const res = this.res;
    res.cork(() => {
      res.writeStatus(statusLine(result.status));
      if (result.headers) for (const k in result.headers) res.writeHeader(k, result.headers[k]!);
      if (result.headLength !== undefined) res.endWithoutBody(result.headLength, unread);
      else res.end(Array.isArray(body) ? Buffer.concat(body) : body, unread);
    });
    this.finished = true; // the response is finished: nothing may touch it again
  }

  private openWebSocket(stream: HttpStream): void {
    const upgrade = this.upgrade;
    if (!upgrade) {
      this.write({ status: 426, headers: { "content-type": "text/plain", upgrade: "websocket", connection: "Upgrade" }, body: "This answer is a WebSocket: upgrade" });
      return;
    }
    const connection: WebSocketConnection = { stream };
    this.res.cork(() => this.res.upgrade(connection, upgrade.key, upgrade.protocol, upgrade.extensions, upgrade.context));
    this.finished = true; // the socket is the WebSocket's now
  }

  private openStream(stream: HttpStream): void {
    // Chunks are queued and written from writeLater, never from the caller's stack (which may be another
    // request's handler); uWS buffers what the socket cannot take and says so, and onWritable ends that.
    let ended = false;
    let flushScheduled = false;
    let blocked = false;
    let queued: Array<string | Buffer> = [];
    let queuedBytes = 0;
    let drain: (() => void) | undefined;
    const sized = stream.length;
    // Sized: uWS takes each chunk with tryEnd, which keeps nothing it could not send; the rest waits here for
    // onWritable, from the byte offset the socket reached (uWS's own pattern for streaming a file).
    let pending: { chunk: Buffer; start: number } | undefined;
    const writeChunk = (chunk: string | Buffer): boolean => {
      if (sized === undefined) return this.res.write(chunk);
      const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
      const start = this.res.getWriteOffset();
      const [ok, done] = this.res.tryEnd(bytes, sized);
      if (done) this.finished = true; // every byte is out: uWS has ended the response
      else if (!ok) pending = { chunk: bytes, start };
      return ok;
    };
    const closers: Array<() => void> = [];
    this.onAbort(() => {
      if (!ended) for (const cb of closers) cb();
    });
    const flush = () => {
      flushScheduled = false;
      if (this.finished) return;
      this.res.cork(() => {
        while (queued.length && !pending && !this.finished) {
          const chunk = queued.shift()!;
          queuedBytes -= chunk.length;
          blocked = !writeChunk(chunk);
        }
        if (ended && !queued.length && !pending && !this.finished) {
          // Short of its declared length a response cannot end well: close, so the client sees it cut off.
          if (sized === undefined) this.res.end();
          else this.res.close();
          this.finished = true;
        }
      });
      if (!blocked && drain) {
        const cb = drain;
        drain = undefined;
        cb();
      }
    };
    const schedule = () => {
      if (!flushScheduled) {
        flushScheduled = true;
        writeLater(flush);
      }
    };
    this.res.cork(() => {
      this.res.writeStatus(statusLine(stream.status));
      if (stream.headers) for (const k in stream.headers) this.res.writeHeader(k, stream.headers[k]!);
      // The head leaves with the first chunk: a stream that must look open at once writes one (an SSE comment).
    });
    this.res.onWritable((offset) => {
      if (pending) {
        const [ok, done] = this.res.tryEnd(pending.chunk.subarray(offset - pending.start), sized!);
        if (done) this.finished = true;
        else if (!ok) return false;
        pending = undefined;
        if (queued.length || ended) schedule();
      }
      blocked = false;
      if (drain && !queued.length) {
        const cb = drain;
        drain = undefined;
        cb();
      }
      return true;
    });
    const exchange = this; // the sink's methods have `this` of their own
    const sink: StreamSink = {
      write(chunk) {
        if (exchange.finished || ended) return false;
        queued.push(chunk);
        queuedBytes += chunk.length;
        schedule();
        return !blocked && queuedBytes < STREAM_HIGH_WATER;
      },
      onDrain(cb) {
        drain = cb;
      },
      end() {
        if (exchange.finished || ended) return;
        ended = true;
        schedule();
      },
      get closed() {
        return exchange.finished || ended;
      },
      onClose(cb) {
        closers.push(cb);
      },
    };
    stream.start(sink);
  }
}

const NO_BODY = Buffer.alloc(0);
const INTERNAL_ERROR = '{"result":"error","msg":"Internal server error","code":"INTERNAL_SERVER_ERROR"}';

/** A body of pieces as a sized stream: each piece queued as it is, then the end. */
function piecesStream(status: number, headers: Record<string, string> | undefined, pieces: Buffer[]): HttpStream {
  let length = 0;
  for (const piece of pieces) length += piece.length;
  return {
    status,
    headers,
    length,
    start(sink) {
      for (const piece of pieces) if (piece.length) sink.write(piece);
      sink.end();
    },
  };
}

/** Writes queued by asynchronous completions, flushed together from one setImmediate. */
let deferredWrites: Array<() => void> = [];
function writeLater(write: () => void): void {
  if (deferredWrites.length === 0) setImmediate(flushWrites);
  deferredWrites.push(write);
}
function flushWrites(): void {
  const writes = deferredWrites;
  deferredWrites = [];
  for (const write of writes) write();
}

export function startHttpServer(opts: HttpOptions): Promise<HttpServer> {
  const app = uws.App();
  let listenSocket: Uws.us_listen_socket | undefined;
  const maxUrlBytes = opts.maxUrlBytes ?? MAX_URL_BYTES;

  const serve = (res: Uws.HttpResponse, req: Uws.HttpRequest, upgrade?: UpgradeRequest) => {
    const headers: Record<string, string> = {};
    req.forEach((k, v) => (headers[k] = v));
    const exchange = new UwsExchange(req.getCaseSensitiveMethod().toUpperCase(), req.getUrl(), req.getQuery() ?? "", headers, res, opts, upgrade);
    res.onAborted(() => exchange.abort());
    const { method, path, query } = exchange;

    if (path.length + query.length + 1 > maxUrlBytes) {
      exchange.refuse(414, `The URL is too long (limit: ${maxUrlBytes} bytes)`);
      return;
    }

    const declared = headers["content-length"];
    if (method === "GET" || method === "HEAD" || (declared === "0" && !headers["transfer-encoding"])) {
      exchange.run(true);
      return;
    }
    if (opts.streamedBody?.(method, path)) {
      exchange.bodyStream = streamBody(res, exchange);
      exchange.run(false);
      return;
    }
    if (declared !== undefined && Number(declared) > opts.maxBodyBytes) {
      exchange.tooLarge();
      return;
    }
    res.onData((chunk, isLast) => exchange.take(chunk, isLast));
  };

  app.any("/*", (res, req) => serve(res, req));
  // Every upgrade request, whatever its path, goes to the handler (routes decide); socket.io's own path is more
  // specific and stays its own. A request without the upgrade headers falls through to app.any.
  app.ws<WebSocketConnection>("/*", {
    compression: uws.DISABLED,
    maxPayloadLength: WEBSOCKET_MAX_RECEIVED_BYTES,
    maxBackpressure: WEBSOCKET_MAX_BACKPRESSURE,
    closeOnBackpressureLimit: 1,
    upgrade: (res, req, context) =>
      serve(res, req, {
        key: req.getHeader("sec-websocket-key"),
        protocol: req.getHeader("sec-websocket-protocol"),
        extensions: req.getHeader("sec-websocket-extensions"),
        context,
      }),
    open(ws) {
      const connection = ws.getUserData();
      connection.sink = new WebSocketSink(ws);
      connection.stream.start(connection.sink);
    },
    drain: (ws) => ws.getUserData().sink?.drained(),
    close: (ws) => ws.getUserData().sink?.closedBySocket(),
  });

  return new Promise((resolve, reject) => {
    app.listen(opts.host, opts.port, (socket) => {
      if (!socket) return reject(new Error(`cannot listen on ${opts.host}:${opts.port}`));
      listenSocket = socket;
      const server: HttpServer = {
        port: uws.us_socket_local_port(socket as unknown as Uws.us_socket),
        app,
        stopListening() {
          if (listenSocket) uws.us_listen_socket_close(listenSocket);
          listenSocket = undefined;
        },
        close() {
          server.stopListening();
          // close() exists at run time (it closes every socket) but is missing from this build's typings.
          (app as unknown as { close(): void }).close();
        },
      };
      resolve(server);
    });
  });
}

/**
 * A WebSocket as a stream's sink: each chunk a text frame. Frames are queued and sent from writeLater, all of a
 * turn's in one cork of the socket (never from the caller's stack, which may be another request's handler); the
 * sink reports backpressure once uWS buffers STREAM_HIGH_WATER, and its drain handler ends it.
 */
class WebSocketSink implements StreamSink {
  private queued: Array<string | Buffer> = [];
  private queuedBytes = 0;
  private flushScheduled = false;
  private blocked = false;
  private ended = false;
  /** The socket is closed (by either side): uWS forbids touching it. */
  private socketClosed = false;
  private drain: (() => void) | undefined;
  private readonly closers: Array<() => void> = [];

  constructor(private readonly ws: Uws.WebSocket<WebSocketConnection>) {}

  get closed(): boolean {
    return this.socketClosed || this.ended;
  }

  write(chunk: string | Buffer): boolean {
    if (this.closed) return false;
    this.queued.push(chunk);
    this.queuedBytes += chunk.length;
    this.schedule();
    return !this.blocked && this.queuedBytes < STREAM_HIGH_WATER;
  }

  onDrain(cb: () => void): void {
    this.drain = cb;
  }

  onClose(cb: () => void): void {
    this.closers.push(cb);
  }

  end(): void {
    if (this.closed) return;
    this.ended = true;
    this.schedule();
  }

  /** uWS's drain handler: the socket took what it buffered. */
  drained(): void {
    if (this.socketClosed || this.ws.getBufferedAmount() >= STREAM_HIGH_WATER) return;
    this.blocked = false;
    if (!this.queued.length) this.callDrain();
  }

  /** uWS's close handler: the client went away (or the socket closed after end(), or over its backpressure limit). */
  closedBySocket(): void {
    if (this.socketClosed) return;
    this.socketClosed = true;
    if (!this.ended) for (const cb of this.closers) cb();
  }

  private schedule(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    writeLater(this.flush);
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.socketClosed) return;
    const frames = this.queued;
    this.queued = [];
    this.queuedBytes = 0;
    this.ws.cork(() => {
      for (const frame of frames) if (!this.socketClosed) this.ws.send(frame, false, false);
    });
    if (this.socketClosed) return; // closed over its backpressure limit (WEBSOCKET_MAX_BACKPRESSURE)
    // A frame the socket could not take whole stays buffered in uWS; the drain handler says when it is out.
    this.blocked = this.ws.getBufferedAmount() >= STREAM_HIGH_WATER;
    if (this.ended) {
      this.socketClosed = true;
      this.ws.end(1000);
      return;
    }
    if (!this.blocked) this.callDrain();
  };

  private callDrain(): void {
    const cb = this.drain;
    this.drain = undefined;
    cb?.();
  }
}

/**
 * The request body as a Readable: uWS's chunks are copied in (uWS frees each after its callback) and the socket is
 * paused while the stream holds more than its high-water mark, resumed when the reader drains it.
 */
function streamBody(res: Uws.HttpResponse, exchange: HttpRequest): Readable {
  let paused = false;
  let done = false;
  const stream = new Readable({
    highWaterMark: 256 * 1024,
    read() {
      // Once the response is written (or the client gone) uWS forbids touching res.
      if (paused && !done && !exchange.aborted) {
        paused = false;
        res.resume();
      }
    },
  });
  exchange.onAbort(() => {
    done = true;
    if (!stream.readableEnded) stream.destroy(new Error("the client went away before the body was complete"));
  });
  res.onData((chunk, isLast) => {
    if (done || stream.destroyed) return;
    const more = stream.push(Buffer.from(chunk.slice(0)));
    if (isLast) {
      done = true;
      stream.push(null);
    } else if (!more && !paused && !exchange.aborted) {
      paused = true;
      res.pause();
    }
  });
  return stream;
}

/** A file sent in a multipart body (a part with a file name): Zulip's request.FILES, not a parameter. */
export interface UploadedFile {
  field: string;
  filename: string;
  /** As the client declared it; empty when it declared none. */
  contentType: string;
  data: Buffer;
}

export interface RequestBody {
  fields: Map<string, string>;
  files: UploadedFile[];
}

/**
 * Form fields and files of a request body: `application/x-www-form-urlencoded` or `multipart/form-data` (what
 * zulip-js sends). Returns undefined for other content types, which the API does not accept.
 */
export function requestBody(body: Buffer, contentType: string | undefined): RequestBody | undefined {
  const parsed: RequestBody = { fields: new Map(), files: [] };
  if (!body.length) return parsed;
  const type = (contentType ?? "").split(";")[0]!.trim().toLowerCase();
  if (type === "application/x-www-form-urlencoded" || type === "") {
    for (const [k, v] of new URLSearchParams(body.toString("utf8"))) parsed.fields.set(k, v);
    return parsed;
  }
  if (type === "multipart/form-data") {
    const parts = uws.getParts(body, contentType!);
    if (!parts) return undefined;
    for (const part of parts) {
      const data = Buffer.from(part.data);
      if (part.filename !== undefined) parsed.files.push({ field: part.name, filename: part.filename, contentType: part.type ?? "", data });
      else parsed.fields.set(part.name, data.toString("utf8"));
    }
    return parsed;
  }
  return undefined;
}
