/**
 * The assistant's scenario of `npm run bench` (`--scenario assistant`):
 *
 * - embed JSON: POST /api/embed/{agentKey} under autocannon like every HTTP scenario (a new session per request:
 *   retrieval, extractive answer, one commit): answers per second, as a ratio of the ceiling's requests per second.
 * - embed SSE, measured after it: SSE_CONCURRENCY `stream: true` questions at once, SSE_ROUNDS times, from a
 *   child process (bench/sse-client.ts); time to the first event p50/p99 (and to the end of the stream), each
 *   also as a ratio of the ceiling's latency p50 measured in the same run.
 */
import { fork, type ChildProcess } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { hashPassword } from "../runtime/secrets.ts";
import type { Engine, Scenario } from "./scenarios.ts";
import type { SseFigures, SseRequest } from "./sse-client.ts";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SSE_CONCURRENCY = 200;
const SSE_ROUNDS = 5;
const HANDBOOK = [
  { title: "Refund policy", text: "Refunds are processed within 14 days of the request. Refunds go back to the card used for the purchase." },
  { title: "Shipping", text: "We ship worldwide with tracked couriers. Shipping is free for orders above 50 euros." },
];

/** Each engine's published agent, made by prepare. */
const agentKeys = new WeakMap<Engine, string>();

/** An operator key (the owner, given a password, logs in), then an agent with the handbook published. */
async function publishedAgent(engine: Engine): Promise<string> {
  const password = "bench-password";
  await engine.node.store.db.updateTable("users").set({ password_hash: await hashPassword(password) }).where("delivery_email", "=", engine.owner.email).execute();
  const post = async (p: string, body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(engine.baseUrl + p, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`${p}: ${res.status} ${await res.text()}`);
    return { json: (await res.json()) as any, headers: res.headers };
  };
  const login = await post("/api/internal/auth/login", { email: engine.owner.email, password });
  const cookie = login.headers.get("set-cookie")!.split(";")[0]!;
  const { key } = (await post("/api/internal/api-keys", {}, { cookie, "x-csrf-token": login.json.csrf_token })).json;
  const auth = { authorization: `Bearer ${key}` };
  const agent = (await post("/api/internal/rag/agents", { name: "bench", rate_limit_per_minute: 100_000 }, auth)).json;
  const { version_id } = (await post(`/api/internal/rag/agents/${agent.agent_id}/versions`, { documents: HANDBOOK }, auth)).json;
  await post("/api/internal/rag/publish", { agent_id: agent.agent_id, version_id }, auth);
  return agent.agent_key as string;
}

function percentile(values: number[], p: number): number {
  if (!values.length) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function sseClient(): Promise<ChildProcess> {
  const proc = fork(path.join(HERE, "sse-client.ts"), [], { cwd: path.resolve(HERE, ".."), execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  await new Promise<void>((resolve, reject) => {
    proc.once("exit", (code) => reject(new Error(`sse-client exited early (${code})`)));
    proc.once("message", () => resolve());
  });
  proc.removeAllListeners("exit");
  return proc;
}

async function measureSse(engine: Engine, ceilingLatencyP50Ms: number | undefined) {
  const client = await sseClient();
  try {
    const request: SseRequest = {
      url: `${engine.baseUrl}/api/embed/${agentKeys.get(engine)}`,
      body: JSON.stringify({ question: "Is shipping free?", stream: true }),
      concurrency: SSE_CONCURRENCY,
      rounds: SSE_ROUNDS,
    };
    const figures = await new Promise<SseFigures>((resolve) => {
      client.once("message", (m) => resolve(m as SseFigures));
      client.send(request);
    });
    const first = { p50: percentile(figures.firstEventMs, 50), p99: percentile(figures.firstEventMs, 99) };
    const complete = { p50: percentile(figures.completeMs, 50), p99: percentile(figures.completeMs, 99) };
    // autocannon reports whole milliseconds: a sub-millisecond ceiling counts as 1 ms
    const ceiling = ceilingLatencyP50Ms === undefined ? undefined : Math.max(1, ceilingLatencyP50Ms);
    const ratio = (ms: number) => (ceiling === undefined ? "" : ` (${(ms / ceiling).toFixed(1)}× ceiling p50)`);
    const streams = figures.firstEventMs.length;
    return {
      summary:
        `SSE, ${SSE_CONCURRENCY} concurrent streams × ${SSE_ROUNDS}: first event p50 ${first.p50.toFixed(1)} ms${ratio(first.p50)}, ` +
        `p99 ${first.p99.toFixed(1)} ms${ratio(first.p99)}; complete p50 ${complete.p50.toFixed(1)} ms, p99 ${complete.p99.toFixed(1)} ms; ` +
        `${streams} streams, ${figures.failures} failed`,
      figures: {
        concurrency: SSE_CONCURRENCY,
        rounds: SSE_ROUNDS,
        streams,
        failures: figures.failures,
        firstEventMs: first,
        completeMs: complete,
        ceilingLatencyP50Ms: ceiling,
        firstEventRatioToCeilingP50: ceiling === undefined ? undefined : { p50: first.p50 / ceiling, p99: first.p99 / ceiling },
      },
      problems: figures.failures ? [`${figures.failures} SSE streams failed`] : [],
    };
  } finally {
    client.kill();
  }
}

export const assistantScenario: Scenario = {
  name: "assistant",
  describe: "POST /api/embed/{agentKey} (JSON, new session per question); then SSE time to first event with 200 concurrent streams",
  async prepare(engine) {
    agentKeys.set(engine, await publishedAgent(engine));
    return { documents: HANDBOOK.length };
  },
  target(engine) {
    return {
      method: "POST",
      path: `/api/embed/${agentKeys.get(engine)}`,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ question: "How long do refunds take?" }),
    };
  },
  after: (engine, ceiling) => measureSse(engine, ceiling.latencyP50Ms),
};
