/**
 * The server span of each request, per OpenTelemetry's HTTP semantic conventions: kind SERVER, named
 * `{method} {route template}` (`GET /api/v1/messages/{message_id}`; the method alone when no route matched), with
 * `http.request.method`, `url.path`, `url.scheme`, `http.route` and `http.response.status_code`, status ERROR on a
 * 5xx, and a child of the caller's span when the request carries a W3C `traceparent`. The span is active while the
 * handler runs, so the asks it makes carry it across the transport to the actors' turns (runtime/system.ts), and
 * their store commits are its descendants.
 *
 * Without an SDK (telemetry.ts) the API hands out non-recording spans and extracts nothing: a few allocations.
 */
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import type { HttpHandler, HttpRequest, HttpResult, HttpStream } from "./http.ts";
import { methodLabel } from "./metrics.ts";
import { handleWatched, statusOf } from "./observe.ts";

const tracer = trace.getTracer("chorus.gateway");

export function withServerSpan(handler: HttpHandler): HttpHandler {
  return (req) => {
    const parent = propagation.extract(ROOT_CONTEXT, req.headers);
    const method = methodLabel(req.method);
    const attributes = { "http.request.method": method, "url.path": req.path, "url.scheme": "http" };
    const span = tracer.startSpan(method, { kind: SpanKind.SERVER, attributes }, parent);
    return context.with(trace.setSpan(parent, span), () => handleWatched(handler, req, (answer) => endSpan(span, req, answer)));
  };
}

function endSpan(span: Span, req: HttpRequest, answer: HttpResult | HttpStream | undefined): void {
  const status = statusOf(answer);
  if (req.route) {
    span.updateName(`${methodLabel(req.method)} ${req.route}`);
    span.setAttribute("http.route", req.route);
  }
  span.setAttribute("http.response.status_code", status);
  if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
}
