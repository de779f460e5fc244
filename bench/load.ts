/**
 * The load generator, run in a child process (forked by bench/run.ts) so that autocannon neither shares the
 * server's event loop nor counts in the server's CPU time. It takes one LoadRequest at a time over IPC and answers
 * with the trimmed autocannon result and its own CPU time for that run.
 *
 * It is also the bench's janitor: the bench process tells it what it created (watch) and removed (release); when
 * the IPC channel closes, whatever is still watched is removed before this process exits. It ignores SIGINT and
 * SIGTERM so that a Ctrl-C reaching the whole process group leaves it alive to do so.
 */
import autocannon from "autocannon";
import { describeResource, removeResource, resourceKey, type Resource } from "./janitor.ts";

export interface LoadRequest {
  id: number;
  url: string;
  method: "GET" | "POST";
  headers?: Record<string, string>;
  body?: string;
  /** Authorization headers taken in turn, one per request (see Target.authorizations). */
  authorizations?: string[];
  connections: number;
  pipelining: number;
  /** Requests per second over all connections (autocannon's overallRate); unset: as fast as answered. */
  overallRate?: number;
  /** Seconds. */
  duration: number;
  /** Seconds before a request counts as a timeout. */
  timeout: number;
}

export interface LoadFigures {
  /** Mean of the per-second request counts (autocannon's "Req/Sec" average). */
  reqPerSec: number;
  /** Responses received over the run. */
  totalRequests: number;
  /** Requests sent (responses + those in flight when the run stopped). */
  sent: number;
  latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  status: { "2xx": number; non2xx: number; "4xx": number; "5xx": number; codes: Record<string, number> };
  errors: number;
  timeouts: number;
  resets: number;
  durationSeconds: number;
  /** CPU time this load generator used during the run (user + system). */
  loadCpuMicros: number;
  wallMs: number;
}

export type ToLoad =
  | LoadRequest
  | { exit: true }
  | { abort: true }
  | { watch: Resource }
  | { release: Resource };

export type LoadReply = { id: number; ok: true; figures: LoadFigures } | { id: number; ok: false; error: string };

let current: { stop(): void } | undefined;
const watched = new Map<string, Resource>();

/** A setupRequest giving each request the next Authorization header of the list (all connections share the turn). */
function takeInTurn(authorizations: string[]) {
  let next = 0;
  return (request: { headers: Record<string, string> }) => {
    request.headers.authorization = authorizations[next++ % authorizations.length]!;
    return request;
  };
}

async function run(req: LoadRequest): Promise<LoadFigures> {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const instance = autocannon({
    url: req.url,
    method: req.method,
    headers: req.headers,
    body: req.body,
    requests: req.authorizations?.length ? [{ setupRequest: takeInTurn(req.authorizations) }] : undefined,
    connections: req.connections,
    pipelining: req.pipelining,
    overallRate: req.overallRate,
    duration: req.duration,
    timeout: req.timeout,
  });
  current = instance;
  let r;
  try {
    r = await instance; // a thenable, not a Promise: no .finally
  } finally {
    current = undefined;
  }
  const wallMs = performance.now() - t0;
  const used = process.cpuUsage(cpu);
  const codes: Record<string, number> = {};
  for (const [code, { count }] of Object.entries(r.statusCodeStats ?? {})) codes[code] = count;
  return {
    reqPerSec: r.requests.average,
    totalRequests: r.requests.total,
    sent: r.requests.sent ?? r.requests.total,
    latencyMs: { p50: r.latency.p50, p90: r.latency.p90, p99: r.latency.p99, max: r.latency.max, mean: r.latency.average },
    status: { "2xx": r["2xx"], non2xx: r.non2xx, "4xx": r["4xx"], "5xx": r["5xx"], codes },
    errors: r.errors,
    timeouts: r.timeouts,
    resets: r.resets,
    durationSeconds: r.duration,
    loadCpuMicros: used.user + used.system,
    wallMs,
  };
}

process.on("message", (msg: ToLoad) => {
  if ("exit" in msg) return process.connected ? process.disconnect() : undefined;
  if ("abort" in msg) return current?.stop();
  if ("watch" in msg) return void watched.set(resourceKey(msg.watch), msg.watch);
  if ("release" in msg) return void watched.delete(resourceKey(msg.release));
  run(msg).then(
    (figures) => process.send!({ id: msg.id, ok: true, figures } satisfies LoadReply),
    (err: unknown) => process.send!({ id: msg.id, ok: false, error: String((err as Error)?.stack ?? err) } satisfies LoadReply),
  );
});
process.on("disconnect", () => {
  current?.stop();
  void (async () => {
    if (watched.size) console.error(`bench: the bench process left ${watched.size} resource(s) behind; removing them`);
    for (const r of [...watched.values()].reverse()) {
      try {
        await removeResource(r);
      } catch (err) {
        console.error(`bench: could not remove ${describeResource(r)}:`, err);
      }
    }
    process.exit(0);
  })();
});
// The bench process decides when to stop; it tells us, or its going away does.
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});
process.send!({ ready: true });
