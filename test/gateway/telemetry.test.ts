/**
 * OpenTelemetry: one trace per request, from the HTTP server span (named by route template, with the semantic
 * conventions' HTTP attributes, continuing an incoming traceparent) through the ask, the actor's turn (on whichever
 * worker hosts it: the context rides inside the transport entry) and the store commit.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { NodeSDK, tracing } from "@opentelemetry/sdk-node";
import { api, ENGINES, startTestServer, type TestServer } from "../support/server.ts";

const exporter = new tracing.InMemorySpanExporter();
const sdk = new NodeSDK({ spanProcessors: [new tracing.SimpleSpanProcessor(exporter)] });

beforeAll(() => sdk.start());
afterAll(() => sdk.shutdown());

function parentOf(span: tracing.ReadableSpan): string | undefined {
  const s = span as unknown as { parentSpanContext?: { spanId: string }; parentSpanId?: string };
  return s.parentSpanContext?.spanId ?? s.parentSpanId;
}

describe.each(ENGINES)("tracing on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine);
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "traced" }] } });
  });
  afterAll(async () => server?.close());

  it("links the request, the ask, the turn and the commit in one trace", async () => {
    exporter.reset();
    const res = await api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: "traced", topic: "t", content: "x" } });
    expect(res.status).toBe(200);
    await new Promise((r) => setTimeout(r, 50));
    const spans = exporter.getFinishedSpans();
    const http = spans.find((s) => s.name === "POST /api/v1/messages");
    expect(http).toBeDefined();
    const trace = spans.filter((s) => s.spanContext().traceId === http!.spanContext().traceId);
    const ask = trace.find((s) => s.name === "ask channel");
    const turn = trace.find((s) => s.name === "turn channel");
    const commit = trace.find((s) => s.name === "store.commit messages");
    expect(ask && parentOf(ask)).toBe(http!.spanContext().spanId);
    expect(turn && parentOf(turn)).toBe(ask!.spanContext().spanId);
    expect(commit && parentOf(commit)).toBe(turn!.spanContext().spanId);
    expect(trace.some((s) => s.name === "turn user")).toBe(true); // the fan-out to the subscriber's user actor
    expect(http!.kind).toBe(SpanKind.SERVER);
    expect(http!.attributes).toMatchObject({
      "http.request.method": "POST",
      "url.path": "/api/v1/messages",
      "http.route": "/api/v1/messages",
      "http.response.status_code": 200,
    });
    expect(ask!.kind).toBe(SpanKind.CLIENT);
    expect(turn!.kind).toBe(SpanKind.SERVER);
  });

  it("continues the caller's trace from traceparent and names the span by its route template", async () => {
    exporter.reset();
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const callerSpan = "00f067aa0ba902b7";
    const sent = await api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: "traced", topic: "t", content: "y" } });
    const res = await api(server, "GET", `/messages/${sent.body.id}`, { as: server.owner, headers: { traceparent: `00-${traceId}-${callerSpan}-01` } });
    expect(res.status).toBe(200);
    const http = exporter.getFinishedSpans().find((s) => s.spanContext().traceId === traceId && s.kind === SpanKind.SERVER && !s.name.startsWith("turn"));
    expect(http?.name).toBe("GET /api/v1/messages/{message_id}");
    expect(parentOf(http!)).toBe(callerSpan);
    expect(http!.attributes).toMatchObject({ "http.route": "/api/v1/messages/{message_id}", "url.path": `/api/v1/messages/${sent.body.id}`, "http.response.status_code": 200 });
  });

  it("names an unrouted request by its method alone and marks a 404 without an error status", async () => {
    exporter.reset();
    const res = await api(server, "GET", "/no/such/endpoint", { as: server.owner });
    expect(res.status).toBe(404);
    const http = exporter.getFinishedSpans().find((s) => s.kind === SpanKind.SERVER && s.attributes["url.path"] === "/api/v1/no/such/endpoint");
    expect(http?.name).toBe("GET");
    expect(http!.attributes["http.route"]).toBeUndefined();
    expect(http!.attributes["http.response.status_code"]).toBe(404);
    expect(http!.status.code).toBe(SpanStatusCode.UNSET);
  });
});
