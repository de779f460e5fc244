/**
 * Prometheus at `GET /metrics` (the instruments are in runtime/metrics.ts): answered before routing, like the probes,
 * without credentials; METRICS=off leaves it out (404) and counts nothing.
 *
 * Several workers share one port (SO_REUSEPORT), so a scrape of it reaches whichever worker the kernel picks: its
 * /metrics is that worker's alone. With WORKERS > 1 the primary therefore listens on METRICS_PORT (default 9464) and
 * answers `GET /metrics` there with every worker's series, asked of each over the cluster's IPC (prom-client's
 * AggregatorRegistry) and kept apart by their `worker` label: one scrape target per host, nothing summed away.
 */
import http from "node:http";
import { AggregatorRegistry } from "prom-client";
import { metrics, metricsEnabled, registry, secondsSince } from "../runtime/metrics.ts";
import { isStream, type HttpHandler, type HttpRequest, type HttpResult, type HttpStream, type StreamSink } from "./http.ts";
import { statusOf, watched } from "./observe.ts";
import { log } from "../runtime/log.ts";

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** A method as a label: any other (a client's invention) is one value, `_OTHER`, as OpenTelemetry's conventions say. */
export const methodLabel = (method: string): string => (METHODS.has(method) ? method : "_OTHER");

/** The route template a router found (req.route), or `unmatched`: never the raw path, whose values are unbounded. */
export const routeLabel = (req: HttpRequest): string => req.route ?? "unmatched";

/** Count each answer in the HTTP histogram, and each server-sent event stream while it is open. */
export function withMetrics(handler: HttpHandler): HttpHandler {
  const counted = watched(handler, (req) => {
    const started = performance.now();
    return (answer) => {
      metrics().http(methodLabel(req.method), routeLabel(req), statusOf(answer)).observe(secondsSince(started));
      if (answer && isStream(answer) && answer.headers?.["content-type"]?.startsWith("text/event-stream")) return countedWhileOpen(answer);
    };
  });
  // Switched off at run time (the benchmark's unmetered scenarios): not even watched.
  return (req) => (metricsEnabled() ? counted(req) : handler(req));
}

function countedWhileOpen(stream: HttpStream): HttpStream {
  return {
    ...stream,
    start(sink) {
      const open = metrics().sseStreams;
      open.inc();
      let counted = true;
      const closed = () => {
        if (counted) open.dec();
        counted = false;
      };
      sink.onClose(closed); // the client went away
      const watchedSink: StreamSink = {
        write: (chunk) => sink.write(chunk),
        onDrain: (cb) => sink.onDrain(cb),
        end() {
          closed();
          sink.end();
        },
        get closed() {
          return sink.closed;
        },
        onClose: (cb) => sink.onClose(cb),
      };
      stream.start(watchedSink);
    },
  };
}

const METRICS_HEADERS = { "content-type": registry.contentType, "cache-control": "no-store" };

/** This process's metrics if the request is `GET /metrics`, else undefined. */
export function serveMetrics(req: HttpRequest): Promise<HttpResult> | undefined {
  if (req.path !== "/metrics" || (req.method !== "GET" && req.method !== "HEAD")) return undefined;
  return registry.metrics().then((body) => ({ status: 200, headers: METRICS_HEADERS, body: req.method === "HEAD" ? "" : body }));
}

/** In a cluster worker: answer the primary's requests for this worker's metrics. */
export function answerPrimaryForMetrics(): void {
  AggregatorRegistry.setRegistries([registry]);
  new AggregatorRegistry(); // its construction installs the worker's IPC listener
}

/** In the primary: every worker's metrics at GET /metrics on `port`; closed with the returned function. */
export function serveClusterMetrics(host: string, port: number): () => void {
  const gathered = new AggregatorRegistry();
  const server = http.createServer((req, res) => {
    if (req.url?.split("?")[0] !== "/metrics" || req.method !== "GET") {
      res.writeHead(404, { "content-type": "text/plain" }).end("Not Found: GET /metrics");
      return;
    }
    gathered.clusterMetrics().then(
      (body) => res.writeHead(200, { ...METRICS_HEADERS, "content-type": gathered.contentType }).end(body),
      (err: Error) => res.writeHead(503, { "content-type": "text/plain" }).end(`the workers' metrics are not available: ${err.message}`),
    );
  });
  server.on("error", (err) => log.error({ err }, `metrics: cannot serve the workers' metrics on ${host}:${port}`));
  server.listen(port, host, () => log.info(`the workers' metrics on port ${port} (GET /metrics)`));
  return () => server.close();
}
