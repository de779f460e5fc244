/**
 * The process's log: one JSON object a line on stdout (pino), with `level`, `time` (epoch ms), `worker` and `pid`,
 * and the active OpenTelemetry span's `trace_id` when a line is written inside one. `LOG_LEVEL` (trace, debug, info,
 * warn, error, fatal, silent; default info) sets what is written. Errors go under `err` with their stack.
 *
 * Every layer logs through this module (the runtime's own, actors', the gateway's), so it lives in the runtime and
 * knows nothing of HTTP: the gateway adds request ids to the lines it writes.
 */
import { pino, type Logger } from "pino";
import { trace } from "@opentelemetry/api";

const LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"];

function level(): string {
  const raw = (process.env.LOG_LEVEL ?? "").trim().toLowerCase();
  return LEVELS.includes(raw) ? raw : "info";
}

export const log: Logger = pino({
  level: level(),
  base: { pid: process.pid, worker: Number(process.env.WORKER_INDEX ?? 0) },
  mixin() {
    const span = trace.getActiveSpan();
    return span ? { trace_id: span.spanContext().traceId } : {};
  },
});

/** Whether LOG_LEVEL names a level (config.ts reports it when it does not). */
export const isLogLevel = (raw: string) => LEVELS.includes(raw.trim().toLowerCase());
