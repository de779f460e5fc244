/**
 * The access log: one `info` line per request once its answer (or a stream's headers) is ready, with the request
 * id, method, path (no query string: it may carry credentials), status and milliseconds, and the trace id of an
 * incoming W3C `traceparent`. ACCESS_LOG=off leaves the handler unwrapped, so that it then costs nothing.
 *
 * The request id is the client's `X-Request-Id` when it sends a short printable one (a proxy's), else this
 * worker's own counter.
 */
import { log } from "../runtime/log.ts";
import type { HttpHandler, HttpRequest } from "./http.ts";
import { statusOf, watched } from "./observe.ts";

const CLIENT_REQUEST_ID = /^[\x21-\x7e]{1,128}$/;
const TRACEPARENT = /^[\da-f]{2}-([\da-f]{32})-[\da-f]{16}-[\da-f]{2}$/;

export function withAccessLog(handler: HttpHandler, worker: number): HttpHandler {
  let counter = 0;
  return watched(handler, (req) => {
    const started = performance.now();
    const supplied = req.headers["x-request-id"];
    const id = supplied && CLIENT_REQUEST_ID.test(supplied) ? supplied : `${worker}-${(++counter).toString(36)}`;
    return (answer) => line(req, id, statusOf(answer), started);
  });
}

function line(req: HttpRequest, id: string, status: number, started: number): void {
  const traceId = TRACEPARENT.exec(req.headers.traceparent ?? "")?.[1];
  log.info(
    { req_id: id, method: req.method, path: req.path, status, ms: Math.round((performance.now() - started) * 10) / 10, ...(traceId && { trace_id: traceId }) },
    "request",
  );
}
