/**
 * The load generator, run in a child process (forked by bench/run.ts) so that autocannon neither shares the
 * server's event loop nor counts in the server's CPU time. It takes one LoadRequest at a time over IPC and answers
 * with the trimmed autocannon result and its own CPU time for that run.
 */
import autocannon from "autocannon";

export interface LoadRequest {
  id: number;
  url: string;
  method: "GET" | "POST";
  headers?: Record<string, string>;
  body?: string;
  connections: number;
  pipelining: number;
  /** Seconds. */
  duration: number;
  /** Seconds before a request counts as a timeout. */
  timeout: number;
}

export interface LoadFigures {
  /** Mean of the per-second request counts (autocannon's "Req/Sec" average). */
  reqPerSec: number;
  /** Completed requests / wall seconds of the run (includes the ramp-down after the last full sample). */
  totalRequests: number;
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

export type LoadReply = { id: number; ok: true; figures: LoadFigures } | { id: number; ok: false; error: string };

async function run(req: LoadRequest): Promise<LoadFigures> {
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const r = await autocannon({
    url: req.url,
    method: req.method,
    headers: req.headers,
    body: req.body,
    connections: req.connections,
    pipelining: req.pipelining,
    duration: req.duration,
    timeout: req.timeout,
  });
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

process.on("message", (msg: LoadRequest | { exit: true }) => {
  if ("exit" in msg) {
    process.disconnect();
    return;
  }
  run(msg).then(
    (figures) => process.send!({ id: msg.id, ok: true, figures } satisfies LoadReply),
    (err: unknown) => process.send!({ id: msg.id, ok: false, error: String((err as Error)?.stack ?? err) } satisfies LoadReply),
  );
});
process.send!({ ready: true });
