/**
 * `npx tsx bench/assistant.ts [--duration 10] [--engines embedded,redis+postgres]`: the assistant's figures
 * beside the machine's ceiling, in one run (a separate entry point from bench/run.ts, which the chat face owns).
 *
 * - ceiling: raw uWebSockets.js hello-world, autocannon (warm-up discarded, then measured).
 * - embed JSON: POST /api/embed/{agentKey} (a new session per request: retrieval, extractive answer, one commit),
 *   answers per second as a ratio of the ceiling's requests per second.
 * - embed SSE: 200 concurrent `stream: true` questions per round, time to the first event p50/p99 (and to the
 *   end of the stream), as ratios of the ceiling's latency p50 under the same load generator.
 * Load comes from child processes (bench/load.ts for autocannon, bench/sse-client.ts for the streams).
 */
import { fork, type ChildProcess } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { hashPassword } from "../runtime/secrets.ts";
import type { Resource } from "./janitor.ts";
import type { LoadFigures, LoadReply, LoadRequest } from "./load.ts";
import { ENGINES, HOST, startEngine, startRawUwsCeiling, type EngineName } from "./scenarios.ts";
import type { SseFigures, SseRequest } from "./sse-client.ts";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..");
const CONNECTIONS = 100;
const SSE_CONCURRENCY = 200;
const SSE_ROUNDS = 5;
const HANDBOOK = [
  { title: "Refund policy", text: "Refunds are processed within 14 days of the request. Refunds go back to the card used for the purchase." },
  { title: "Shipping", text: "We ship worldwide with tracked couriers. Shipping is free for orders above 50 euros." },
];

async function child(file: string): Promise<ChildProcess> {
  const proc = fork(path.join(HERE, file), [], { cwd: ROOT, execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  await new Promise<void>((resolve, reject) => {
    proc.once("exit", (code) => reject(new Error(`${file} exited early (${code})`)));
    proc.once("message", () => resolve());
  });
  proc.removeAllListeners("exit");
  return proc;
}

function ask<T>(proc: ChildProcess, msg: unknown, match: (m: any) => boolean = () => true): Promise<T> {
  return new Promise((resolve) => {
    const on = (m: any) => {
      if (!match(m)) return;
      proc.off("message", on);
      resolve(m as T);
    };
    proc.on("message", on);
    proc.send(msg as never);
  });
}

let loadId = 1;
async function load(proc: ChildProcess, req: Omit<LoadRequest, "id" | "connections" | "pipelining" | "timeout" | "duration">, duration: number): Promise<LoadFigures> {
  const run = async (d: number) => {
    const id = loadId++;
    const reply = await ask<LoadReply>(proc, { ...req, id, duration: d, connections: CONNECTIONS, pipelining: 1, timeout: 10 }, (m) => m.id === id);
    if (!reply.ok) throw new Error(reply.error);
    return reply.figures;
  };
  await run(Math.max(1, Math.round(duration / 3))); // warm-up, discarded
  return run(duration);
}

function percentile(values: number[], p: number): number {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { duration: { type: "string" }, engines: { type: "string" } } });
  const duration = Number(values.duration ?? 10);
  const engines = (values.engines?.split(",") ?? [...ENGINES]) as EngineName[];
  const loader = await child("load.ts");
  const sse = await child("sse-client.ts");
  const janitor = { watch: (r: Resource) => loader.send({ watch: r }), release: (r: Resource) => loader.send({ release: r }) };
  const stops: Array<() => Promise<void>> = [];
  try {
    const ceiling = await startRawUwsCeiling();
    const top = await load(loader, { url: `http://${HOST}:${ceiling.port}/`, method: "GET" }, duration);
    ceiling.close();
    console.log(`ceiling (raw uWS hello-world): ${Math.round(top.reqPerSec)} req/s, p50 ${top.latencyMs.p50} ms with ${CONNECTIONS} connections`);

    for (const name of engines) {
      const engine = await startEngine(name, (s) => stops.push(s), janitor);
      const db = engine.node.store.db;
      await db.updateTable("users").set({ password_hash: await hashPassword("bench-password") }).where("delivery_email", "=", engine.owner.email).execute();
      const post = async (p: string, body: unknown, headers: Record<string, string> = {}) => {
        const res = await fetch(engine.baseUrl + p, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
        if (!res.ok) throw new Error(`${p}: ${res.status} ${await res.text()}`);
        return { json: (await res.json()) as any, headers: res.headers };
      };
      const login = await post("/api/internal/auth/login", { email: engine.owner.email, password: "bench-password" });
      const cookie = login.headers.get("set-cookie")!.split(";")[0]!;
      const { key } = (await post("/api/internal/api-keys", {}, { cookie, "x-csrf-token": login.json.csrf_token })).json;
      const auth = { authorization: `Bearer ${key}` };
      const agent = (await post("/api/internal/rag/agents", { name: "bench", rate_limit_per_minute: 100_000 }, auth)).json;
      const { version_id } = (await post(`/api/internal/rag/agents/${agent.agent_id}/versions`, { documents: HANDBOOK }, auth)).json;
      await post("/api/internal/rag/publish", { agent_id: agent.agent_id, version_id }, auth);
      const url = `${engine.baseUrl}/api/embed/${agent.agent_key}`;

      const json = await load(loader, { url, method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ question: "How long do refunds take?" }) }, duration);
      const non2xx = json.status.non2xx ? ` (${json.status.non2xx} non-2xx!)` : "";
      console.log(
        `${name}: embed JSON ${Math.round(json.reqPerSec)} answers/s = ${(json.reqPerSec / top.reqPerSec).toFixed(3)} × ceiling; p50 ${json.latencyMs.p50} ms, p99 ${json.latencyMs.p99} ms${non2xx}`,
      );
      const figures = await ask<SseFigures>(sse, { url, body: JSON.stringify({ question: "Is shipping free?", stream: true }), concurrency: SSE_CONCURRENCY, rounds: SSE_ROUNDS } satisfies SseRequest);
      const p50 = percentile(figures.firstEventMs, 50);
      const p99 = percentile(figures.firstEventMs, 99);
      const ceilingP50 = Math.max(top.latencyMs.p50, 0.001);
      console.log(
        `${name}: SSE with ${SSE_CONCURRENCY} concurrent streams: first event p50 ${p50.toFixed(1)} ms (${(p50 / ceilingP50).toFixed(1)} × ceiling p50), p99 ${p99.toFixed(1)} ms (${(p99 / ceilingP50).toFixed(1)} ×); complete p50 ${percentile(figures.completeMs, 50).toFixed(1)} ms; ${figures.failures} failed`,
      );
      await engine.stop();
    }
  } finally {
    for (const stop of stops) await stop();
    sse.kill();
    loader.send({ exit: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
