/**
 * Prometheus at GET /metrics, read as Prometheus reads it, after real requests: HTTP answers by route template and
 * status, messages and deliveries, parked polls and queues, actors, group commits, the Redis streams' backlog, the
 * webhook outbox, the assistant, and the process defaults; METRICS=off serves nothing; a cluster's primary gathers
 * every worker's series on METRICS_PORT.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import path from "node:path";
import { api, ENGINES, readZuliprc, startTestServer, type TestServer } from "../support/server.ts";
import { freePort, startDistributed } from "../support/process.ts";
import { shardOf } from "../../runtime/actor.ts";
import { placeShards } from "../../runtime/placement.ts";
import { Channel } from "../../actors/chat/conversations/channel.protocol.ts";
import { call, operatorKey, publishedAgent } from "./assistant/support.ts";

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Prometheus's text format, samples only (comments skipped); throws on a line it cannot read. */
function parse(text: string): Sample[] {
  return text
    .split("\n")
    .filter((line) => line && !line.startsWith("#"))
    .map((line) => {
      const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!m) throw new Error(`not a sample: ${line}`);
      const labels = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
      return { name: m[1]!, labels, value: Number(m[3]) };
    });
}

/** The sum of the samples of `name` whose labels include `labels`. */
function total(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0);
}

async function scrape(url: string): Promise<Sample[]> {
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return parse(await res.text());
}

describe.each(ENGINES)("GET /metrics on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine);
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "metered" }] } });
  });
  afterAll(async () => server?.close());

  it("counts requests by route template, messages, deliveries and parked polls", async () => {
    const before = await scrape(server.url);
    const registered = await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } });
    const parked = api(server, "GET", "/events", { as: server.owner, params: { queue_id: registered.body.queue_id, last_event_id: -1 } });
    let during = await scrape(server.url);
    for (let i = 0; i < 50 && total(during, "chorus_event_polls_parked") < 1; i++) {
      await new Promise((r) => setTimeout(r, 20));
      during = await scrape(server.url);
    }
    expect(total(during, "chorus_event_polls_parked")).toBe(1);
    expect(total(during, "chorus_event_queues")).toBeGreaterThanOrEqual(1);

    const sent = await api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: "metered", topic: "t", content: "counted" } });
    expect(sent.status).toBe(200);
    expect((await parked).body.events.map((e: { type: string }) => e.type)).toContain("message");
    expect((await api(server, "GET", `/messages/${sent.body.id}`, { as: server.owner })).status).toBe(200);
    expect((await api(server, "GET", "/no/such/endpoint", { as: server.owner })).status).toBe(404);

    const after = await scrape(server.url);
    const grew = (name: string, labels: Record<string, string> = {}) => total(after, name, labels) - total(before, name, labels);
    const requests = (route: string, status: string, method = "GET") =>
      grew("http_server_request_duration_seconds_count", { http_request_method: method, http_route: route, http_response_status_code: status });
    expect(requests("/api/v1/messages", "200", "POST")).toBe(1);
    expect(requests("/api/v1/messages/{message_id}", "200")).toBe(1);
    expect(requests("unmatched", "404")).toBe(1);
    // No raw path becomes a label value.
    expect(after.some((s) => s.labels.http_route === `/api/v1/messages/${sent.body.id}`)).toBe(false);
    expect(grew("http_server_request_duration_seconds_bucket", { http_route: "/api/v1/messages", le: "+Inf" })).toBe(1);

    expect(grew("chorus_messages_sent_total")).toBe(1);
    expect(grew("chorus_message_deliveries_total")).toBeGreaterThanOrEqual(1);
    expect(total(after, "chorus_event_polls_parked")).toBe(0);
    expect(grew("chorus_actor_turn_seconds_count", { kind: "channel" })).toBeGreaterThanOrEqual(1);
    expect(total(after, "chorus_actor_activations_total", { kind: "user" })).toBeGreaterThanOrEqual(1);
    expect(total(after, "chorus_actors_active")).toBeGreaterThanOrEqual(2);
    expect(after.some((s) => s.name === "chorus_actor_mailbox_depth")).toBe(true);
    expect(grew("chorus_group_commit_batch_size_count", { stream: "messages" })).toBeGreaterThanOrEqual(1);
    expect(grew("chorus_group_commit_seconds_count", { stream: "messages" })).toBeGreaterThanOrEqual(1);
    expect(total(after, "chorus_webhook_outbox_pending")).toBe(0);
    expect(after.some((s) => s.name === "chorus_sse_streams")).toBe(true);
    expect(after.some((s) => s.name === "chorus_socketio_connections")).toBe(true);
    expect(after.some((s) => s.name === "chorus_redis_stream_pending")).toBe(true);
    expect(after.some((s) => s.name === "chorus_redis_stream_lag")).toBe(true);
    expect(total(after, "process_cpu_seconds_total")).toBeGreaterThan(0);
    expect(after.some((s) => s.name === "nodejs_heap_size_used_bytes")).toBe(true);
    expect(after.every((s) => s.labels.worker === "0")).toBe(true);
  });

  it("counts the assistant's answers and retrievals, and server-sent event streams while they are open", async () => {
    const before = await scrape(server.url);
    const agent = await publishedAgent(server, await operatorKey(server));
    const asked = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "How long do refunds take?" } });
    expect(asked.status).toBe(200);

    const registered = await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } });
    const aborted = new AbortController();
    const stream = await fetch(`${server.url}/api/v1/events/stream?queue_id=${registered.body.queue_id}`, {
      headers: { authorization: `Basic ${Buffer.from(`${server.owner.email}:${server.owner.key}`).toString("base64")}` },
      signal: aborted.signal,
    });
    expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const open = await scrape(server.url);
    aborted.abort();
    let closed = await scrape(server.url);
    for (let i = 0; i < 50 && total(closed, "chorus_sse_streams") > total(before, "chorus_sse_streams"); i++) {
      await new Promise((r) => setTimeout(r, 20));
      closed = await scrape(server.url);
    }

    const grew = (samples: Sample[], name: string, labels: Record<string, string> = {}) => total(samples, name, labels) - total(before, name, labels);
    expect(grew(open, "chorus_assistant_answers_total", { mode: "json" })).toBe(1);
    expect(grew(open, "chorus_assistant_retrieval_seconds_count")).toBe(1);
    expect(grew(open, "chorus_sse_streams")).toBe(1);
    expect(grew(closed, "chorus_sse_streams")).toBe(0);
    expect(grew(open, "http_server_request_duration_seconds_count", { http_route: "/api/embed/{agentKey}", http_response_status_code: "200" })).toBe(1);
  });
});

describe("METRICS=off", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer("embedded", { metrics: false });
  });
  afterAll(async () => server?.close());

  it("serves no /metrics", async () => {
    const res = await fetch(`${server.url}/metrics`);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { code: "NOT_FOUND" } });
  });
});

describe("two workers", { timeout: 120_000 }, () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  it("gathers every worker's series on the primary's METRICS_PORT", async () => {
    const metricsPort = await freePort();
    const server = await startDistributed({ METRICS_PORT: String(metricsPort), ACCESS_LOG: "off" }, cleanups);
    const samples = await scrape(`http://127.0.0.1:${metricsPort}`);
    const workers = new Set(samples.filter((s) => s.name === "process_cpu_seconds_total").map((s) => s.labels.worker));
    expect([...workers].sort()).toEqual(["0", "1"]);
    expect(new Set(samples.filter((s) => s.name === "chorus_redis_stream_pending").map((s) => s.labels.worker)).size).toBe(2);
    // The shared port answers with the one worker the kernel picked.
    const one = await scrape(`http://127.0.0.1:${server.port}`);
    expect(new Set(one.map((s) => s.labels.worker)).size).toBe(1);
  });

  it("links the workers a primary forks to each other by default: a send to the other worker's channel crosses on the link", async () => {
    const metricsPort = await freePort();
    const server = await startDistributed({ METRICS_PORT: String(metricsPort), ACCESS_LOG: "off" }, cleanups);
    const target = { url: `http://127.0.0.1:${server.port}` };
    const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
    // A channel at home on each worker: whichever worker takes a request, one of the two sends is for the other's.
    const homes = placeShards(16, [...server.output().matchAll(/\(pid \d+, node ([^,]+),/g)].map((m) => m[1]!));
    const channels = new Map<string, string>();
    for (let i = 0; channels.size < 2; i++) {
      const name = `linked-${i}`;
      expect((await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name }] } })).status).toBe(200);
      const streamId = (await api(target, "GET", "/get_stream_id", { as: owner, params: { stream: name } })).body.stream_id;
      const home = homes[shardOf(Channel.id(streamId), 16)]!;
      if (!channels.has(home)) channels.set(home, name);
    }
    const sent = async () => total(await scrape(`http://127.0.0.1:${metricsPort}`), "chorus_peer_link_asks_total", { outcome: "sent" });
    // The first ask to the other worker opens the link and goes through Redis meanwhile; the next ones cross on it.
    for (let round = 0; round < 20 && (await sent()) === 0; round++) {
      for (const name of channels.values()) {
        expect((await api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: name, topic: "t", content: `linked ${round}` } })).status).toBe(200);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await sent()).toBeGreaterThan(0);
  });
});
