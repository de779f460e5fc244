/**
 * The process's Prometheus metrics (prom-client), served at `GET /metrics` (gateway/metrics.ts). Every layer counts
 * through this module, so it lives in the runtime and knows nothing of HTTP routes or chat.
 *
 * Two kinds of instrument:
 * - counted on the spot (counters, histograms): only where counting is a few arithmetic operations, and only with
 *   labels drawn from small fixed sets (an actor kind, a route template, a status), never a user, a path or an id;
 * - sampled at scrape (`sampled`): gauges read from whoever holds the figure (an actor system's mailboxes, a
 *   transport's streams, the webhook outbox) only when Prometheus asks, so that the hot path never pays for them.
 *
 * Every series carries `worker` (WORKER_INDEX), so that a cluster's workers gathered by the primary stay apart.
 * `setMetricsEnabled(false)` (METRICS=off) swaps the counted instruments for no-ops: nothing is counted, and the
 * gateway then serves no /metrics.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry, type Metric, type MetricValueWithName } from "prom-client";

export const registry = new Registry();
registry.setDefaultLabels({ worker: String(Number(process.env.WORKER_INDEX ?? 0)) });

/**
 * The process's own series (CPU, heap, event-loop lag), from the first node started with metrics on: not at import,
 * which every process and thread loading the runtime does (a cluster's primary, each worker's lease-renewer thread),
 * and prom-client's lag monitor is a 10 ms timer that wakes its event loop 100 times a second for series nobody reads
 * there.
 */
let processMetrics = false;
function collectProcessMetrics(): void {
  if (processMetrics) return;
  processMetrics = true;
  collectDefaultMetrics({ register: registry });
}

/** Buckets in seconds, from a tenth of a millisecond (an actor's turn) to ten seconds (a slow request). */
const SECONDS = [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const BATCH_SIZES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 20000];

/** What the hot path calls: the part of prom-client's instruments Chorus uses, so a no-op can stand in. */
export interface CounterLike {
  inc(n?: number): void;
}
export interface ObserverLike {
  observe(value: number): void;
}
export interface GaugeLike {
  inc(n?: number): void;
  dec(n?: number): void;
}

/** A labelled instrument's child per key (its label values), made once per distinct key and kept. */
function children<T>(make: (key: string) => T): (key: string) => T {
  const byKey = new Map<string, T>();
  return (key) => {
    let child = byKey.get(key);
    if (!child) byKey.set(key, (child = make(key)));
    return child;
  };
}

/**
 * A labelled histogram for the hot path: a child's `observe` is a bucket search and three additions. prom-client's
 * child builds a label object, validates and hashes it at every observation, and its histograms were 1.7-2.7% of the
 * server's CPU in the fan-out bench (one observation per actor turn and per HTTP answer; docs/performance.md,
 * 2026-12-02). Exposed through prom-client's registry like its own histograms (the same series, `_bucket` with
 * `le`, `_sum`, `_count`; summed across a cluster's workers).
 */
export class HotHistogram {
  readonly type = "histogram";
  readonly aggregator = "sum";
  private readonly series = new Map<string, HistogramSeries>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    private readonly bounds: readonly number[],
    register: Registry = registry,
  ) {
    register.registerMetric(this as unknown as Metric);
  }

  labels(...values: string[]): ObserverLike {
    const key = values.join("\u0000");
    let series = this.series.get(key);
    if (!series) this.series.set(key, (series = new HistogramSeries(Object.fromEntries(this.labelNames.map((n, i) => [n, values[i]!])), this.bounds)));
    return series;
  }

  /** What prom-client's registry reads of a metric (its text and JSON exposition, and the cluster's aggregation). */
  async get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: MetricValueWithName<string>[] }> {
    const values: MetricValueWithName<string>[] = [];
    for (const { labels, counts, sum, count } of this.series.values()) {
      let below = 0;
      this.bounds.forEach((le, i) => values.push({ metricName: `${this.name}_bucket`, labels: { le, ...labels }, value: (below += counts[i]!) }));
      values.push({ metricName: `${this.name}_bucket`, labels: { le: "+Inf", ...labels }, value: count });
      values.push({ metricName: `${this.name}_sum`, labels, value: sum });
      values.push({ metricName: `${this.name}_count`, labels, value: count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

/** One label set's observations: per bucket (not cumulative; the last slot is above every bound), their sum and count. */
class HistogramSeries implements ObserverLike {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(
    readonly labels: Record<string, string>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }
  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > this.bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

const httpDuration = new HotHistogram(
  "http_server_request_duration_seconds",
  "HTTP requests answered, by method, route template and status (OpenTelemetry's http.server.request.duration)",
  ["http_request_method", "http_route", "http_response_status_code"],
  SECONDS,
);
const messagesSent = new Counter({ name: "chorus_messages_sent_total", help: "Chat messages committed", registers: [registry] });
const deliveries = new Counter({ name: "chorus_message_deliveries_total", help: "Chat messages delivered to a user's event queues", registers: [registry] });
const userEventRowsSkipped = new Counter({
  name: "chorus_user_event_rows_skipped_total",
  help: "Event rows written behind their deliveries that were not written: every queue had acknowledged the event first",
  registers: [registry],
});
const unhandledRejections = new Counter({
  name: "chorus_unhandled_rejections_total",
  help: "Promise rejections nothing handled (each a bug, logged as an error; the process goes on)",
  registers: [registry],
});
const sseStreams = new Gauge({ name: "chorus_sse_streams", help: "Server-sent event streams open", registers: [registry] });
const activations = new Counter({ name: "chorus_actor_activations_total", help: "Actor activations created", labelNames: ["kind"], registers: [registry] });
const turnSeconds = new HotHistogram("chorus_actor_turn_seconds", "Time an actor's turn ran until its answer", ["kind"], SECONDS);
const commitBatch = new HotHistogram("chorus_group_commit_batch_size", "Appends per group commit", ["stream"], BATCH_SIZES);
const commitSeconds = new HotHistogram("chorus_group_commit_seconds", "Time a group commit took", ["stream"], SECONDS);
const answers = new Counter({ name: "chorus_assistant_answers_total", help: "Assistant answers recorded, JSON (ask) or streamed", labelNames: ["mode"], registers: [registry] });
const peerLinkAsks = new Counter({
  name: "chorus_peer_link_asks_total",
  help: "Asks sent to another worker of this host on its direct link (sent), and of those, refused by it or unanswered when the link closed (both then went through the transport)",
  labelNames: ["outcome"],
  registers: [registry],
});
const retrievalSeconds = new Histogram({ name: "chorus_assistant_retrieval_seconds", help: "Time the assistant's retrieval took", buckets: SECONDS, registers: [registry] });

const NO_COUNT: CounterLike & ObserverLike & GaugeLike = { inc() {}, dec() {}, observe() {} };

interface Instruments {
  /** An HTTP answer; `route` is a template or a fixed name, never a raw path. */
  http(method: string, route: string, status: number): ObserverLike;
  messagesSent: CounterLike;
  deliveries: CounterLike;
  userEventRowsSkipped: CounterLike;
  unhandledRejections: CounterLike;
  sseStreams: GaugeLike;
  activations(kind: string): CounterLike;
  turnSeconds(kind: string): ObserverLike;
  commitBatch(stream: string): ObserverLike;
  commitSeconds(stream: string): ObserverLike;
  answers(mode: "json" | "stream"): CounterLike;
  retrievalSeconds: ObserverLike;
  peerLinkAsks(outcome: "sent" | "refused" | "lost"): CounterLike;
}

function counting(): Instruments {
  // A route template has no space in it: the key is the three label values joined by spaces.
  const http = children((key) => {
    const [method, route, status] = key.split(" ");
    return httpDuration.labels(method!, route!, status!);
  });
  const byKind = children((kind) => activations.labels(kind));
  const turns = children((kind) => turnSeconds.labels(kind));
  const batches = children((stream) => commitBatch.labels(stream));
  const commits = children((stream) => commitSeconds.labels(stream));
  const modes = children((mode) => answers.labels(mode));
  const linkOutcomes = children((outcome) => peerLinkAsks.labels(outcome));
  return {
    http: (method, route, status) => http(`${method} ${route} ${status}`),
    messagesSent,
    deliveries,
    userEventRowsSkipped,
    unhandledRejections,
    sseStreams,
    activations: byKind,
    turnSeconds: turns,
    commitBatch: batches,
    commitSeconds: commits,
    answers: modes,
    retrievalSeconds,
    peerLinkAsks: linkOutcomes,
  };
}

const silent: Instruments = {
  http: () => NO_COUNT,
  messagesSent: NO_COUNT,
  deliveries: NO_COUNT,
  userEventRowsSkipped: NO_COUNT,
  unhandledRejections: NO_COUNT,
  sseStreams: NO_COUNT,
  activations: () => NO_COUNT,
  turnSeconds: () => NO_COUNT,
  commitBatch: () => NO_COUNT,
  commitSeconds: () => NO_COUNT,
  answers: () => NO_COUNT,
  retrievalSeconds: NO_COUNT,
  peerLinkAsks: () => NO_COUNT,
};

const live = counting();
let current: Instruments = live;

/** The instruments to count with: read at each use (`metrics().deliveries.inc()`), so that switching them off holds. */
export const metrics = (): Instruments => current;

export function setMetricsEnabled(on: boolean): void {
  current = on ? live : silent;
  if (on) collectProcessMetrics();
}

export const metricsEnabled = (): boolean => current === live;

/** Seconds since `startedMs` (a `performance.now()`), for the histograms. */
export const secondsSince = (startedMs: number): number => (performance.now() - startedMs) / 1000;

/**
 * A gauge read at scrape: the sum of what its sources say (several nodes may run in one process: the tests, the
 * benchmark's two workers). `add` returns the source's removal, for the close of whatever registered it.
 */
export interface SampledGauge {
  add(source: () => number | Promise<number>): () => void;
}

export function sampled(name: string, help: string): SampledGauge {
  const sources = new Set<() => number | Promise<number>>();
  new Gauge({
    name,
    help,
    registers: [registry],
    async collect() {
      const values = await Promise.all([...sources].map((source) => Promise.resolve().then(source).catch(() => 0)));
      this.set(values.reduce((sum, v) => sum + v, 0));
    },
  });
  return {
    add(source) {
      sources.add(source);
      return () => sources.delete(source);
    },
  };
}

/** The gauges the runtime and the domains feed at scrape. */
export const gauges = {
  actorsActive: sampled("chorus_actors_active", "Actor activations in memory"),
  mailboxDepth: sampled("chorus_actor_mailbox_depth", "Messages waiting in actors' mailboxes, all actors together"),
  streamPending: sampled("chorus_redis_stream_pending", "Entries of the held shards' Redis streams read but not yet acknowledged"),
  streamLag: sampled("chorus_redis_stream_lag", "Entries of the held shards' Redis streams not yet read by the workers' group"),
  eventQueues: sampled("chorus_event_queues", "Zulip event queues held by this worker's user actors"),
  parkedPolls: sampled("chorus_event_polls_parked", "Long-polls (GET /events) parked, waiting for an event"),
  sockets: sampled("chorus_socketio_connections", "socket.io connections (the assistant's mobile chat)"),
  webhookOutbox: sampled("chorus_webhook_outbox_pending", "Webhook deliveries waiting in the outbox (whole deployment)"),
};
