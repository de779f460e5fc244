/**
 * OpenTelemetry: one trace per request, from the HTTP span through the ask, the actor's turn (on whichever
 * worker hosts it: the context rides inside the transport entry) and the store commit.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
  });
});
