/**
 * `npm run bench [-- options]`: throughput and latency of Chorus against the machine's ceiling, in one run.
 *
 * 1. The ceilings, on port 0 in this process: a raw uWebSockets.js hello-world (the ceiling every figure is a
 *    ratio of) and the same hello-world through gateway/http.ts (what the adapter itself costs).
 * 2. For each engine (embedded: memory + PGlite; redis+postgres: Redis Streams + a fresh Postgres database), a
 *    node started with startNode() in this process, then each scenario of bench/scenarios.ts (fetch, fetch1m, send,
 *    send-limited (send with the rate limit counted: its ratio to send is printed), send10, send1000, presence,
 *    subscribe) and the assistant's (bench/assistant.ts: embed JSON answers/s, then SSE time to first event), then
 *    the transfers of bench/transfer.ts (upload, download: MiB/s against a raw uWS server's), then
 *    the event system's scenarios of bench/events.ts (wake, fanout, register, queues), whose clients run in their
 *    own child process (bench/event-client.ts), then the fan-out family of bench/fanout.ts (fanout-lp, fanout-sse, fanout-ws:
 *    N members each on its own connection, a sender at a fixed rate), whose sender and members run in child
 *    processes (bench/fanout-client.ts); its cells also go to an SVG chart beside the JSON.
 *
 * Every measurement is a warm-up autocannon run (discarded) followed by the measured run, with the same fixed
 * flags everywhere. autocannon runs in a child process (bench/load.ts) so it neither shares the server's event
 * loop nor counts in its CPU time: "server CPU/req" is this process's CPU time over the measured run divided by
 * the responses; the CPU time of the engine's Postgres backends and of Redis is read from /proc and INFO; what
 * the machine spent beyond all of those is shown as "other cores" (a disturbed measurement when well above 0).
 * Results go to the terminal and to bench/results/<timestamp>.json (gitignored).
 */
import { execFileSync, fork, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Session } from "node:inspector/promises";
import type { Janitor, Resource } from "./janitor.ts";
import type { LoadFigures, LoadReply, LoadRequest, ToLoad } from "./load.ts";
import { EVENT_SCENARIOS, EventClient, EventWorld, TARGETS, describeServer, runEventScenario, type EventMeasurement, type EventOptions, type EventScenarioName } from "./events.ts";
import {
  ENGINES,
  SCENARIOS,
  Population,
  TIMED_SCENARIOS,
  startAdapterCeiling,
  loopDelayMonitor,
  machineCpuMs,
  startEngine,
  startRawUwsCeiling,
  HOST,
  type Ceiling,
  type Engine,
  type EngineName,
  type ServiceStats,
  type Target,
  type TimedScenario,
  type Verification,
  type AfterFigures,
} from "./scenarios.ts";
import { assistantScenario } from "./assistant.ts";
import { SERVER_CODE, serverCode } from "./server-code.ts";
import { FANOUT_MEMBERS, FANOUT_SCENARIOS, FANOUT_TARGETS, FanoutClients, PEER_SCENARIOS, runFanoutCell, runPeerCell, writeFanoutChart, type FanoutCell, type FanoutOptions, type PeerScenarioName } from "./fanout.ts";
import { XmppPeer, xmppPeerMissing } from "./xmpp-peer.ts";
import { READ_SCENARIOS, READ_TIMED_SCENARIOS } from "./reads.ts";
import { measureTransfer, measureTransferCeiling, TRANSFER_MIB, TRANSFER_SCENARIOS, transferFile, type TransferMeasurement } from "./transfer.ts";

/** The chat's HTTP scenarios, the reads of a generated organization, then the assistant's. */
const HTTP_SCENARIOS = [...SCENARIOS, ...READ_SCENARIOS, assistantScenario];
/** Operations timed one at a time: the chat's, then the reads'. */
const ALL_TIMED_SCENARIOS = [...TIMED_SCENARIOS, ...READ_TIMED_SCENARIOS];

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..");

// ---------------------------------------------------------------------------------------------------------------
// Options

interface Options {
  engines: EngineName[];
  scenarios: string[];
  /** Whether --scenario named them (else every scenario runs, and one that cannot run here is skipped with a note). */
  scenarioExplicit: boolean;
  duration: number;
  warmup: number;
  connections: number;
  pipelining: number;
  /** HTTP scenarios: a fixed offered rate instead of as fast as answered (CPU per request compares across loads). */
  overallRate?: number;
  timeout: number;
  /** Messages in the bench channel while fetch is measured. */
  history: number;
  ceiling: boolean;
  /** Profile the server process over each measured run (V8 CPU profile into bench/results/). */
  cpuProf: boolean;
  /** Event scenarios: wake's send rate, its parked polls, the fan-out channel's subscribers, measured fan-out sends, idle queues. */
  rate: number;
  parked: number;
  subscribers: number;
  repeat: number;
  queues: number;
  /** Fan-out family: channel sizes; the send rate when asked (else 20,000 / members); messages per cell when asked. */
  members: number[];
  fanoutRate?: number;
  messages?: number;
  clients: number;
}

const USAGE = `usage: npm run bench -- [options]
  --engine <embedded|redis+postgres|two-workers|both|all>
                                            engines to run (default both: embedded and redis+postgres; all adds
                                            two-workers, Redis + Postgres with 2 worker nodes; env BENCH_ENGINE)
  --scenario <list>                         scenarios to run (default all: fetch,fetch1m,send,send-limited,send-unmetered,
                                            send10,send1000,presence,reads-fetch,reads-fetch-feed,reads-fetch-unread,
                                            reads-search,reads-search-one,reads-register,reads-register-heavy,assistant,subscribe,upload,download,wake,fanout,register,queues,fanout-lp,fanout-sse,fanout-ws,fanout-xmpp,fanout-xmpp-archive;
                                            env BENCH_SCENARIO); HTTP ones first, then the event system's
  --duration <s>                            measured seconds per run (default 10; env BENCH_DURATION)
  --warmup <s>                              discarded warm-up seconds before each run (default 2; env BENCH_WARMUP)
  --connections <n>                         autocannon connections (default 50; env BENCH_CONNECTIONS)
  --pipelining <n>                          autocannon pipelining (default 1; env BENCH_PIPELINING)
  --overall-rate <n>                        HTTP scenarios: offer n requests/s in all (autocannon overallRate), not
                                            as many as answered: CPU per request then compares between builds
                                            on a loaded machine (env BENCH_OVERALL_RATE)
  --timeout <s>                             autocannon request timeout (default 10)
  --history <n>                             messages in the channel while fetch is measured (default 1000)
  --rate <n>                                wake: messages per second sent (default 1000)
  --parked <n>                              wake: long-polls parked on idle queues meanwhile (default 1000)
  --subscribers <n>                         fanout: subscribers of the channel, one queue each (default 10000);
                                            register runs over the same users
  --repeat <n>                              fanout: measured sends, after one discarded (default 5)
  --queues <n>                              queues: idle queues for memory per queue (default 100000)
  --members <list>                          fanout-lp/-sse/-ws: channel sizes, each a cell (default 100,500,2000);
                                            every member a client of its own (long-poll, SSE or WebSocket);
                                            fanout-xmpp: the same cells in a room of a private ejabberd, the
                                            reference peer (bench/xmpp-peer.ts), run once after the engines;
                                            fanout-xmpp-archive: its rooms archive each message in Postgres first
  --rate <n>                                fanout-*: when given, the send rate of every cell (else
                                            20,000 / members: 20,000 deliveries/s offered)
  --messages <n>                            fanout-*: messages per cell (default 5 s of sending)
  --clients <n>                             fanout-*: processes holding the members (default 1; the
                                            sender has a process of its own)
  --no-ceiling                              skip the ceiling runs (ratios are then left out)
  --cpu-prof                                V8 CPU profile of the server over each measured run, saved beside the
                                            results (open in Chrome DevTools); the top functions are printed.
                                            Profiling slows the server: do not compare those figures`;

function parseOptions(argv: string[]): Options {
  const env = process.env;
  const raw: Record<string, string | undefined> = {
    engine: env.BENCH_ENGINE,
    scenario: env.BENCH_SCENARIO,
    duration: env.BENCH_DURATION,
    warmup: env.BENCH_WARMUP,
    connections: env.BENCH_CONNECTIONS,
    pipelining: env.BENCH_PIPELINING,
    "overall-rate": env.BENCH_OVERALL_RATE,
    timeout: env.BENCH_TIMEOUT,
    history: env.BENCH_HISTORY,
    rate: env.BENCH_RATE,
    parked: env.BENCH_PARKED,
    subscribers: env.BENCH_SUBSCRIBERS,
    repeat: env.BENCH_REPEAT,
    queues: env.BENCH_QUEUES,
    members: env.BENCH_MEMBERS,
    messages: env.BENCH_MESSAGES,
    clients: env.BENCH_CLIENTS,
  };
  let ceiling = true;
  let cpuProf = false;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") {
      console.log(USAGE);
      process.exit(0);
    }
    if (arg === "--no-ceiling") {
      ceiling = false;
      continue;
    }
    if (arg === "--cpu-prof") {
      cpuProf = true;
      continue;
    }
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!m || !(m[1]! in raw)) throw new Error(`unknown argument ${arg}\n${USAGE}`);
    const value = m[2] ?? argv[++i];
    if (value === undefined) throw new Error(`${arg} needs a value`);
    raw[m[1]!] = value;
  }
  const num = (name: string, fallback: number, min: number) => {
    const v = raw[name];
    if (v === undefined || v === "") return fallback;
    const n = Number(v);
    if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number ≥ ${min}, got ${v}`);
    return n;
  };
  const engineArg = (raw.engine ?? "both").toLowerCase();
  const aliases: Record<string, EngineName[]> = {
    both: ["embedded", "redis+postgres"],
    all: [...ENGINES],
    embedded: ["embedded"],
    memory: ["embedded"],
    pglite: ["embedded"],
    "redis+postgres": ["redis+postgres"],
    redis: ["redis+postgres"],
    postgres: ["redis+postgres"],
    distributed: ["redis+postgres"],
    "redis+postgres×2": ["redis+postgres ×2"],
    "redis+postgres-x2": ["redis+postgres ×2"],
    "two-workers": ["redis+postgres ×2"],
  };
  const engines = [
    ...new Set(
      engineArg.split(",").flatMap((e) => {
        const found = aliases[e.trim()];
        if (!found) throw new Error(`--engine: expected embedded, redis+postgres, two-workers, both or all, got ${e}`);
        return found;
      }),
    ),
  ];
  const known = [...HTTP_SCENARIOS.map((s) => s.name), ...ALL_TIMED_SCENARIOS.map((s) => s.name), ...TRANSFER_SCENARIOS, ...EVENT_SCENARIOS, ...FANOUT_SCENARIOS, ...Object.keys(PEER_SCENARIOS)];
  const members = raw.members ? raw.members.split(",").map((m) => Number(m.trim())) : FANOUT_MEMBERS;
  if (members.some((m) => !Number.isInteger(m) || m < 1)) throw new Error(`--members: expected a list of positive integers, got ${raw.members}`);
  const scenarios = raw.scenario ? raw.scenario.split(",").map((s) => s.trim()) : known;
  for (const s of scenarios) if (!known.includes(s)) throw new Error(`--scenario: unknown ${s} (known: ${known.join(", ")})`);
  return {
    engines,
    scenarios,
    scenarioExplicit: raw.scenario !== undefined,
    duration: num("duration", 10, 1),
    warmup: num("warmup", 2, 0),
    connections: Math.round(num("connections", 50, 1)),
    pipelining: Math.round(num("pipelining", 1, 1)),
    overallRate: raw["overall-rate"] ? Math.round(num("overall-rate", 0, 1)) : undefined,
    timeout: num("timeout", 10, 1),
    history: Math.round(num("history", 1000, 20)),
    ceiling,
    cpuProf,
    rate: num("rate", 1000, 1),
    parked: Math.round(num("parked", 1000, 0)),
    subscribers: Math.round(num("subscribers", 10_000, 1)),
    repeat: Math.round(num("repeat", 5, 1)),
    queues: Math.round(num("queues", 100_000, 1)),
    members,
    fanoutRate: raw.rate ? num("rate", 1000, 0.1) : undefined,
    messages: raw.messages ? Math.round(num("messages", 0, 1)) : undefined,
    clients: Math.round(num("clients", 1, 1)),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The load generator child

class LoadGenerator implements Janitor {
  private child!: ChildProcess;
  private nextId = 1;
  private pending = new Map<number, { resolve(f: LoadFigures): void; reject(e: Error): void }>();

  async start(): Promise<void> {
    // tsx as a loader so the child runs bench/load.ts as it is; cwd = the project so `tsx` resolves.
    this.child = fork(path.join(HERE, "load.ts"), [], {
      cwd: ROOT,
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    await new Promise<void>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`load generator exited early (${code})`));
      this.child.once("exit", onExit);
      this.child.once("message", () => {
        this.child.off("exit", onExit);
        resolve();
      });
    });
    this.child.on("message", (msg: LoadReply) => {
      const waiter = this.pending.get(msg.id);
      if (!waiter) return;
      this.pending.delete(msg.id);
      if (msg.ok) waiter.resolve(msg.figures);
      else waiter.reject(new Error(`load generator: ${msg.error}`));
    });
    this.child.on("exit", (code) => {
      for (const w of this.pending.values()) w.reject(new Error(`load generator exited (${code})`));
      this.pending.clear();
    });
  }

  run(req: Omit<LoadRequest, "id">): Promise<LoadFigures> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.send({ ...req, id });
    });
  }

  private send(msg: ToLoad): void {
    if (this.child?.connected) this.child.send(msg);
  }

  /** End the run in progress early (its figures then cover what ran). */
  abort(): void {
    this.send({ abort: true });
  }

  watch(resource: Resource): void {
    this.send({ watch: resource });
  }

  release(resource: Resource): void {
    this.send({ release: resource });
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    this.send({ exit: true });
    // It removes whatever is still watched before exiting: give that time.
    const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Server-side observation: errors logged by the server while loaded

interface LoggedErrors {
  count: number;
  samples: string[];
}

const SHOWN_PER_RUN = 5;
let logged: LoggedErrors = { count: 0, samples: [] };
const originalError = console.error.bind(console);
const originalWarn = console.warn.bind(console);
function captureLog(kind: string, original: (...a: unknown[]) => void) {
  return (...args: unknown[]) => {
    logged.count++;
    const text = args.map((a) => (a instanceof Error ? (a.stack ?? a.message) : typeof a === "string" ? a : safeJson(a))).join(" ");
    if (logged.samples.length < SHOWN_PER_RUN) {
      logged.samples.push(`${kind}: ${text.slice(0, 600)}`);
      original(...args);
    } else if (logged.samples.length === SHOWN_PER_RUN && logged.count === SHOWN_PER_RUN + 1) {
      original(`bench: further server ${kind} lines are counted, not shown`);
    }
  };
}
function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}
console.error = captureLog("error", originalError);
console.warn = captureLog("warn", originalWarn);

// ---------------------------------------------------------------------------------------------------------------
// Measuring

interface Measurement {
  name: string;
  engine?: EngineName;
  describe: string;
  target: { method: string; path: string; body?: string };
  warmup?: LoadFigures;
  load: LoadFigures;
  /** CPU time of this (the server's) process over the measured run. */
  serverCpuMicros: number;
  serverCpuPerRequestMicros: number;
  /** Share of one core the server used over the measured run. */
  serverCpuCores: number;
  loadCpuCores: number;
  /** Busy time of all the machine's cores (server + load generator + Postgres + Redis + anything else). */
  machineCpuPerRequestMicros: number;
  machineBusyCores: number;
  /** CPU time of this engine's Postgres backends and of the Redis server over the measured run (redis+postgres). */
  services?: {
    postgresMicros: number;
    redisMicros: number;
    perRequestMicros: number;
    cores: number;
    /** Postgres transactions and Redis commands per response (Redis' count is server-wide: others add to it). */
    countersPerRequest: Record<string, number>;
  };
  /**
   * Busy cores not accounted for by the server, the load generator, Postgres backends and Redis: other processes
   * on the machine (and Postgres' shared background writers). Well above 0 means the figures are disturbed.
   */
  otherBusyCores: number;
  /** CPU the hypervisor took from this VM over the run (see machineCpuMs): stalls no process here accounts for. */
  stealCores: number;
  eventLoopDelayMs: { p50: number; p99: number; max: number };
  rssMb: number;
  serverLog: LoggedErrors;
  /** With --cpu-prof: the functions with the most self time over the measured run. */
  profile?: { file: string; top: Array<{ fn: string; selfMs: number; percent: number }> };
  verification?: Verification;
  /** What the scenario's prepare step recorded (data size and the like). */
  context?: Record<string, unknown>;
  ratioToUws?: number;
  ratioToAdapter?: number;
  /** The scenario's figures taken after the load run (Scenario.after). */
  after?: AfterFigures;
}

/** A timed scenario's figures: wall time per request, and this process's CPU time per request. */
interface TimedMeasurement {
  name: string;
  engine: EngineName;
  describe: string;
  context: Record<string, unknown>;
  rounds: number;
  /** The unmeasured requests before: how many, the first's time (a cold server's) and their median. */
  warm: { rounds: number; firstMs: number; p50Ms: number };
  /** p99: the value below which 99% of the measured requests fall (the slowest one with fewer than 100 rounds). */
  ms: { mean: number; p50: number; p99: number; max: number };
  /** The client's own time on each answer after its last byte (its parse), when the scenario reports it. */
  clientMs?: { p50: number; max: number };
  serverCpuMsPerRequest: number;
  /** Requests per second at the mean time, as a ratio to the raw uWS ceiling's req/s. */
  ratioToUws?: number;
}

function warmNote(m: TimedMeasurement): string {
  return m.warm.rounds === 1 ? `one unmeasured of ${fmt(m.warm.firstMs, 1)} ms` : `${m.warm.rounds} unmeasured: the first ${fmt(m.warm.firstMs, 1)} ms, p50 ${fmt(m.warm.p50Ms, 1)}`;
}

/** The client's own time on the answers, where the scenario measured it apart. */
function clientNote(m: TimedMeasurement): string {
  return m.clientMs ? `; then the client's parse p50 ${fmt(m.clientMs.p50, 1)} ms, max ${fmt(m.clientMs.max, 1)}` : "";
}

async function measureTimed(scenario: TimedScenario, engine: Engine): Promise<TimedMeasurement> {
  const warmRounds = scenario.warmRounds ?? 1;
  const context = await scenario.prepare(engine, warmRounds + scenario.rounds);
  const warmTimes: number[] = [];
  for (let round = 0; round < warmRounds; round++) {
    const t0 = performance.now();
    const timed = await scenario.once(engine, round);
    warmTimes.push(timed ? timed.ms : performance.now() - t0);
  }
  const times: number[] = [];
  const clientTimes: number[] = [];
  const cpu0 = process.cpuUsage();
  for (let round = warmRounds; round < warmRounds + scenario.rounds; round++) {
    const t0 = performance.now();
    const timed = await scenario.once(engine, round);
    times.push(timed ? timed.ms : performance.now() - t0);
    if (timed) clientTimes.push(timed.clientMs);
  }
  const cpu = process.cpuUsage(cpu0);
  const sorted = [...times].sort((a, b) => a - b);
  const clientSorted = [...clientTimes].sort((a, b) => a - b);
  return {
    name: scenario.name,
    engine: engine.name,
    describe: scenario.describe,
    context,
    rounds: scenario.rounds,
    warm: { rounds: warmRounds, firstMs: warmTimes[0]!, p50Ms: [...warmTimes].sort((a, b) => a - b)[Math.floor(warmTimes.length / 2)]! },
    ms: {
      mean: times.reduce((a, b) => a + b, 0) / times.length,
      p50: sorted[Math.floor(sorted.length / 2)]!,
      p99: sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!,
      max: sorted.at(-1)!,
    },
    ...(clientSorted.length ? { clientMs: { p50: clientSorted[Math.floor(clientSorted.length / 2)]!, max: clientSorted.at(-1)! } } : {}),
    serverCpuMsPerRequest: (cpu.user + cpu.system) / 1000 / scenario.rounds,
  };
}

async function measure(
  load: LoadGenerator,
  opts: Options,
  port: number,
  target: Target,
  serviceStats?: () => Promise<ServiceStats>,
  profileAs?: string,
): Promise<Omit<Measurement, "name" | "describe" | "engine">> {
  const req = {
    url: `http://${HOST}:${port}${target.path}`,
    method: target.method,
    headers: target.headers,
    body: target.body,
    authorizations: target.authorizations,
    connections: opts.connections,
    pipelining: opts.pipelining,
    overallRate: opts.overallRate,
    timeout: opts.timeout,
  };
  const warmup = opts.warmup > 0 ? await load.run({ ...req, duration: opts.warmup }) : undefined;

  logged = { count: 0, samples: [] };
  const services0 = await serviceStats?.();
  const session = profileAs ? new Session() : undefined;
  if (session) {
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.start");
  }
  const machine0 = machineCpuMs();
  const cpu0 = process.cpuUsage();
  const loop = loopDelayMonitor();
  const figures = await load.run({ ...req, duration: opts.duration });
  const eventLoopDelayMs = loop.stop();
  const cpu = process.cpuUsage(cpu0);
  const machine1 = machineCpuMs();
  let profile: Measurement["profile"];
  if (session && profileAs) {
    const { profile: p } = await session.post("Profiler.stop");
    session.disconnect();
    profile = saveProfile(p as CpuProfile, profileAs);
  }
  // Postgres publishes its transaction counters with up to a second's delay.
  if (serviceStats) await new Promise((r) => setTimeout(r, 1100));
  const services1 = await serviceStats?.();
  const serverLog = logged;

  const serverCpuMicros = cpu.user + cpu.system;
  const responses = Math.max(1, figures.totalRequests);
  const wallMicros = figures.wallMs * 1000;
  const busyMicros = (machine1.busy - machine0.busy) * 1000;
  let services: Measurement["services"];
  if (services0 && services1 && services1.cpu.size) {
    let postgresMicros = 0;
    let redisMicros = 0;
    for (const [key, end] of services1.cpu) {
      const used = Math.max(0, end - (services0.cpu.get(key) ?? 0));
      if (key === "redis") redisMicros += used;
      else postgresMicros += used;
    }
    const total = postgresMicros + redisMicros;
    const perRequest: Record<string, number> = {};
    for (const [k, end] of Object.entries(services1.counters)) perRequest[k] = (end - (services0.counters[k] ?? 0)) / responses;
    services = { postgresMicros, redisMicros, perRequestMicros: total / responses, cores: total / wallMicros, countersPerRequest: perRequest };
  }
  const accounted = serverCpuMicros + figures.loadCpuMicros + (services ? services.postgresMicros + services.redisMicros : 0);
  return {
    target: { method: target.method, path: target.path, body: target.body },
    warmup,
    load: figures,
    serverCpuMicros,
    serverCpuPerRequestMicros: serverCpuMicros / responses,
    serverCpuCores: serverCpuMicros / wallMicros,
    loadCpuCores: figures.loadCpuMicros / wallMicros,
    machineCpuPerRequestMicros: busyMicros / responses,
    machineBusyCores: busyMicros / wallMicros,
    services,
    otherBusyCores: Math.max(0, busyMicros - accounted) / wallMicros,
    stealCores: ((machine1.steal - machine0.steal) * 1000) / wallMicros,
    eventLoopDelayMs,
    rssMb: process.memoryUsage().rss / 2 ** 20,
    serverLog,
    profile,
  };
}

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  samples: number[];
  timeDeltas: number[];
}

let resultStamp = "";
function saveProfile(p: CpuProfile, name: string): NonNullable<Measurement["profile"]> {
  const dir = path.join(HERE, "results");
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${resultStamp}-${name.replace(/[^\w.-]+/g, "_")}.cpuprofile`);
  fs.writeFileSync(file, JSON.stringify(p));
  const frames = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
  const self = new Map<string, number>();
  let total = 0;
  for (let i = 0; i < p.samples.length; i++) {
    const f = frames.get(p.samples[i]!);
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    if (!f) continue;
    const where = f.url ? `${f.url.replace(/^.*\/node_modules\//, "").replace(/^file:\/\/\/?.*?\/(?=(gateway|actors|runtime|bench)\/)/, "")}:${f.lineNumber + 1}` : "";
    const key = `${f.functionName || "(anonymous)"}${where ? ` ${where}` : ""}`;
    self.set(key, (self.get(key) ?? 0) + dt);
  }
  const top = [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)
    .map(([fn, us]) => ({ fn, selfMs: us / 1000, percent: total ? (100 * us) / total : 0 }));
  return { file: path.relative(process.cwd(), file), top };
}

// ---------------------------------------------------------------------------------------------------------------
// Output

function fmt(n: number | undefined, digits = 0): string {
  if (n === undefined || !Number.isFinite(n)) return "–";
  return n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function table(rows: Measurement[]): string {
  const head = [
    "run",
    "req/s",
    "p50 ms",
    "p99 ms",
    "2xx",
    "non-2xx",
    "errors",
    "× uWS",
    "× adapter",
    "srv CPU µs/req",
    "srv cores",
    "pg+redis µs/req",
    "loadgen cores",
    "other cores",
    "stolen cores",
    "loop p99 ms",
  ];
  const body = rows.map((m) => [
    m.engine ? `${m.engine} / ${m.name}` : m.name,
    fmt(m.load.reqPerSec),
    fmt(m.load.latencyMs.p50, 1),
    fmt(m.load.latencyMs.p99, 1),
    fmt(m.load.status["2xx"]),
    fmt(m.load.status.non2xx),
    fmt(m.load.errors + m.load.timeouts),
    m.ratioToUws === undefined ? "–" : `${m.ratioToUws.toFixed(3)}×`,
    m.ratioToAdapter === undefined ? "–" : `${m.ratioToAdapter.toFixed(3)}×`,
    fmt(m.serverCpuPerRequestMicros, 1),
    fmt(m.serverCpuCores, 2),
    m.services ? fmt(m.services.perRequestMicros, 1) : "–",
    fmt(m.loadCpuCores, 2),
    fmt(m.otherBusyCores, 2),
    fmt(m.stealCores, 2),
    fmt(m.eventLoopDelayMs.p99, 1),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  return [line(head), widths.map((w) => "─".repeat(w)).join("  "), ...body.map(line)].join("\n");
}

function gitInfo(): { commit?: string; dirtyFiles?: number } {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain"], { cwd: ROOT, encoding: "utf8" }).split("\n").filter(Boolean).length;
    return { commit, dirtyFiles: dirty };
  } catch {
    return {};
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Main

async function main(): Promise<number> {
  const opts = parseOptions(process.argv.slice(2));
  const started = new Date();
  resultStamp = started.toISOString().replace(/[:.]/g, "-");
  const stops = new Set<() => Promise<void>>();
  const load = new LoadGenerator();
  const eventClient = new EventClient();
  const fanoutClients = new FanoutClients(opts.clients);
  let eventClientStarted = false;
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    // tsx relays a second signal within ~30 ms when we are slow to acknowledge the first: ignore repeats.
    if (interrupted) return void originalError(`bench: ${signal} again: still cleaning up`);
    interrupted = true;
    originalError(`bench: ${signal}: stopping the load and cleaning up`);
    load.abort();
    void (async () => {
      await eventClient.stop().catch(() => {});
      await fanoutClients.stop();
      for (const stop of stops) await stop();
      await load.stop().catch(() => {});
      process.exit(130);
    })();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const flags = {
    connections: opts.connections,
    pipelining: opts.pipelining,
    duration: opts.duration,
    warmup: opts.warmup,
    timeout: opts.timeout,
    history: opts.history,
    cpuProf: opts.cpuProf,
    rate: opts.rate,
    parked: opts.parked,
    subscribers: opts.subscribers,
    repeat: opts.repeat,
    queues: opts.queues,
    members: opts.members,
    fanoutRate: opts.fanoutRate,
    messages: opts.messages,
    clients: opts.clients,
  };
  const cpus = os.cpus();
  const machine = {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model,
    totalMemMb: Math.round(os.totalmem() / 2 ** 20),
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    node: process.version,
    serverCode: SERVER_CODE,
    loadAverageAtStart: os.loadavg(),
    ...gitInfo(),
  };
  console.log(`chorus bench: ${machine.cpus} × ${machine.cpuModel}, node ${machine.node}, ${machine.platform}; the server: ${SERVER_CODE}`);
  console.log(
    `autocannon flags: -c ${opts.connections} -p ${opts.pipelining} -d ${opts.duration} (timeout ${opts.timeout}s), ` +
      `after a discarded ${opts.warmup}s warm-up with the same flags; autocannon in a child process`,
  );
  console.log(`engines: ${opts.engines.join(", ")}; scenarios: ${opts.scenarios.join(", ")}; fetch reads a channel of ${opts.history} messages\n`);

  const results: Measurement[] = [];
  const eventResults: Array<EventMeasurement & { serverLog: LoggedErrors }> = [];
  const fanoutResults: Array<FanoutCell & { serverLog: LoggedErrors }> = [];
  const timedResults: TimedMeasurement[] = [];
  const profiled = async <T>(name: string, fn: () => Promise<T>): Promise<{ value: T; profile?: Measurement["profile"] }> => {
    if (!opts.cpuProf) return { value: await fn() };
    const session = new Session();
    session.connect();
    try {
      await session.post("Profiler.enable");
      await session.post("Profiler.start");
      const value = await fn();
      const { profile } = await session.post("Profiler.stop");
      return { value, profile: saveProfile(profile as CpuProfile, name) };
    } finally {
      session.disconnect();
    }
  };
  const engineInfo: Array<{ name: EngineName; describe: string; store: string; startupMs: number }> = [];
  const transfers = TRANSFER_SCENARIOS.filter((s) => opts.scenarios.includes(s));
  const transferResults: TransferMeasurement[] = [];
  const payload = transfers.length ? transferFile() : undefined;
  const failures: string[] = [];
  let uws: Measurement | undefined;
  let adapter: Measurement | undefined;
  const fanoutOptions = (): FanoutOptions => ({ members: opts.members, rate: opts.fanoutRate, messages: opts.messages, clientProcs: opts.clients, uwsReqPerSec: uws?.load.reqPerSec, profiled });
  /** One fan-out cell measured and reported, its problems among the failures; false once interrupted. */
  const measureFanoutCell = async (label: string, run: () => Promise<FanoutCell>, serverLog: () => LoggedErrors): Promise<boolean> => {
    process.stdout.write(`measuring ${label} members … `);
    const t0 = performance.now();
    try {
      const cell = await run();
      fanoutResults.push({ ...cell, serverLog: serverLog() });
      console.log(`${cell.summary} [${fmt((performance.now() - t0) / 1000, 1)} s with setup]`);
      for (const p of cell.problems) failures.push(`${label}: ${p}`);
    } catch (err) {
      if (interrupted) return false;
      console.log("failed");
      failures.push(`${label}: ${(err as Error).stack ?? err}`);
      originalError(`bench: ${label} failed:`, err);
    }
    return !interrupted;
  };

  try {
    await load.start();

    if (opts.ceiling) {
      for (const start of [startRawUwsCeiling, startAdapterCeiling]) {
        const ceiling: Ceiling = await start();
        try {
          process.stdout.write(`measuring ${ceiling.name} (${ceiling.describe}) … `);
          const m: Measurement = {
            name: ceiling.name,
            describe: ceiling.describe,
            ...(await measure(load, opts, ceiling.port, ceiling.target, undefined, opts.cpuProf ? ceiling.name : undefined)),
          };
          console.log(`${fmt(m.load.reqPerSec)} req/s`);
          results.push(m);
          if (ceiling.name === "ceiling:uws") uws = m;
          else adapter = m;
        } finally {
          ceiling.close();
        }
      }
    }

    if (opts.ceiling && payload) {
      process.stdout.write(`measuring ceiling:uws transfers (${TRANSFER_MIB} MiB by curl) … `);
      const ceilings = await measureTransferCeiling(payload.file, TRANSFER_MIB);
      transferResults.push(...ceilings);
      console.log(ceilings.map((m) => `${m.name.split(" ")[1]} ${fmt(m.mibPerSec)} MiB/s`).join(", "));
    }

    // The reference peer's cells alone need no Chorus engine started.
    const peerNames = (Object.keys(PEER_SCENARIOS) as PeerScenarioName[]).filter((s) => opts.scenarios.includes(s));
    const engines = opts.scenarios.every((s) => s in PEER_SCENARIOS) ? [] : opts.engines;
    for (const name of engines) {
      if (interrupted) break;
      let engine: Engine | undefined;
      try {
        process.stdout.write(`starting ${name} … `);
        engine = await startEngine(name, (stop) => stops.add(stop), load);
        console.log(`${engine.node.store.engine} store, port ${engine.node.port}, ${fmt(engine.startupMs)} ms`);
        engineInfo.push({ name, describe: engine.describe, store: engine.node.store.engine, startupMs: engine.startupMs });
        const population = new Population(engine);
        for (const scenario of HTTP_SCENARIOS.filter((s) => opts.scenarios.includes(s.name))) {
          if (interrupted) break;
          process.stdout.write(`measuring ${name} / ${scenario.name} … `);
          let m: Measurement;
          try {
            const context = (await scenario.prepare(engine, { history: opts.history, population })) ?? undefined;
            // A scenario may run with the metrics switched off (METRICS=off's no-op instruments), to show what they cost.
            const { setMetricsEnabled } = await serverCode();
            setMetricsEnabled(scenario.metrics ?? true);
            let measured: Awaited<ReturnType<typeof measure>>;
            try {
              measured = await measure(load, opts, engine.node.port, scenario.target(engine), engine.serviceStats, opts.cpuProf ? `${name}-${scenario.name}` : undefined);
            } finally {
              setMetricsEnabled(true);
            }
            m = { name: scenario.name, engine: name, describe: scenario.describe, context, ...measured };
          } finally {
            await scenario.finish?.(engine);
          }
          if (scenario.verify) {
            const runs = [m.warmup, m.load]
              .filter((r): r is LoadFigures => r !== undefined)
              .map((r) => ({ "2xx": r.status["2xx"], connections: opts.connections, pipelining: opts.pipelining }));
            m.verification = await scenario.verify(engine, runs);
            if (!m.verification.ok) failures.push(`${name} / ${scenario.name}: ${m.verification.note}`);
          }
          if (m.load.status.non2xx || m.load.errors || m.load.timeouts) {
            failures.push(
              `${name} / ${scenario.name}: ${m.load.status.non2xx} non-2xx ${JSON.stringify(m.load.status.codes)}, ` +
                `${m.load.errors} errors, ${m.load.timeouts} timeouts`,
            );
          }
          const ctx = m.context ? ` [${Object.entries(m.context).map(([k, v]) => `${k}=${v}`).join(", ")}]` : "";
          console.log(`${fmt(m.load.reqPerSec)} req/s${ctx}${m.verification ? ` (${m.verification.note})` : ""}`);
          if (scenario.after) {
            process.stdout.write(`measuring ${name} / ${scenario.name} (after) … `);
            m.after = await scenario.after(engine, { latencyP50Ms: uws?.load.latencyMs.p50 });
            for (const p of m.after.problems) failures.push(`${name} / ${scenario.name}: ${p}`);
            console.log(m.after.summary);
          }
          results.push(m);
        }
        for (const scenario of ALL_TIMED_SCENARIOS.filter((s) => opts.scenarios.includes(s.name))) {
          if (interrupted) break;
          process.stdout.write(`measuring ${name} / ${scenario.name} … `);
          const m = await measureTimed(scenario, engine);
          timedResults.push(m);
          console.log(`${fmt(m.ms.mean, 1)} ms per request (p50 ${fmt(m.ms.p50, 1)}, p99 ${fmt(m.ms.p99, 1)}, max ${fmt(m.ms.max, 1)}; ${m.rounds} requests after ${warmNote(m)})${clientNote(m)}`);
        }
        if (payload && !interrupted) {
          process.stdout.write(`measuring ${name} / ${transfers.join(", ")} (${TRANSFER_MIB} MiB by curl) … `);
          const measured = await measureTransfer(engine, payload.file, TRANSFER_MIB, transfers);
          transferResults.push(...measured);
          console.log(measured.map((m) => `${m.name} ${fmt(m.mibPerSec)} MiB/s`).join(", "));
        }
        const eventNames = EVENT_SCENARIOS.filter((s) => opts.scenarios.includes(s));
        if (eventNames.length && !interrupted) {
          if (!eventClientStarted) {
            await eventClient.start();
            eventClientStarted = true;
          }
          const world = new EventWorld(engine, eventClient);
          const eventOpts: EventOptions = {
            rate: opts.rate,
            parked: opts.parked,
            subscribers: opts.subscribers,
            repeat: opts.repeat,
            queues: opts.queues,
            duration: opts.duration,
            warmup: opts.warmup,
            connections: opts.connections,
            uwsReqPerSec: uws?.load.reqPerSec,
            profiled,
          };
          for (const scenario of eventNames) {
            if (interrupted) break;
            process.stdout.write(`measuring ${name} / ${scenario} … `);
            const t0 = performance.now();
            logged = { count: 0, samples: [] };
            try {
              const m = await runEventScenario(scenario as EventScenarioName, world, eventOpts);
              eventResults.push({ ...m, serverLog: logged });
              console.log(`${m.summary} [${fmt((performance.now() - t0) / 1000, 1)} s with setup]`);
              for (const p of m.problems) failures.push(`${name} / ${scenario}: ${p}`);
            } catch (err) {
              if (interrupted) break;
              console.log("failed");
              failures.push(`${name} / ${scenario}: ${(err as Error).stack ?? err}`);
              originalError(`bench: ${name} / ${scenario} failed:`, err);
            }
          }
        }
        const fanoutNames = FANOUT_SCENARIOS.filter((s) => opts.scenarios.includes(s));
        if (fanoutNames.length && !interrupted) {
          await fanoutClients.start();
          const world = new Population(engine);
          for (const members of opts.members) {
            for (const scenario of fanoutNames) {
              if (interrupted) break;
              logged = { count: 0, samples: [] };
              const run = () => runFanoutCell(scenario, members, world, fanoutClients, fanoutOptions());
              if (!(await measureFanoutCell(`${name} / ${scenario} ${members}`, run, () => logged))) break;
            }
          }
        }
      } catch (err) {
        if (interrupted) break; // the signal handler is tearing things down: errors from that are expected
        failures.push(`${name}: ${(err as Error).stack ?? err}`);
        originalError(`bench: ${name} failed:`, err);
      } finally {
        if (engine) await engine.stop();
        for (const stop of stops) {
          await stop();
          stops.delete(stop);
        }
      }
    }
    for (const scenario of peerNames) {
      if (interrupted) break;
      const { engine, archive } = PEER_SCENARIOS[scenario];
      const missing = xmppPeerMissing(archive);
      if (missing) {
        // Asked for by name, its absence is a failure; in the default run of every scenario, a note.
        if (opts.scenarioExplicit) failures.push(`${scenario}: ${missing}`);
        console.log(`skipping ${scenario}: ${missing}`);
        continue;
      }
      process.stdout.write(`starting ${engine} (the reference peer) … `);
      const peer = await XmppPeer.start({ archive });
      console.log(`listening on ${peer.port}`);
      try {
        await fanoutClients.start();
        for (const members of opts.members) {
          if (interrupted) break;
          const run = () => runPeerCell(scenario, members, peer, fanoutClients, fanoutOptions());
          if (!(await measureFanoutCell(`${engine} / ${scenario} ${members}`, run, () => ({ count: 0, samples: [] })))) break;
        }
      } finally {
        await peer.stop();
      }
    }
  } finally {
    await eventClient.stop().catch(() => {});
    await fanoutClients.stop();
    for (const stop of stops) await stop();
    await load.stop().catch(() => {});
    payload?.remove();
  }

  for (const m of timedResults) if (uws && uws.load.reqPerSec > 0) m.ratioToUws = 1000 / m.ms.mean / uws.load.reqPerSec;
  for (const m of transferResults) {
    const ceiling = transferResults.find((c) => c.name === `ceiling:uws ${m.name}`);
    if (ceiling && m.engine) m.ratioToUws = m.mibPerSec / ceiling.mibPerSec;
  }
  for (const m of results) {
    if (uws && uws.load.reqPerSec > 0) m.ratioToUws = m.load.reqPerSec / uws.load.reqPerSec;
    if (adapter && adapter.load.reqPerSec > 0) m.ratioToAdapter = m.load.reqPerSec / adapter.load.reqPerSec;
  }

  console.log(`\n${table(results)}\n`);
  // What counting the rate limit costs a send: the two runs on the same node, one after the other.
  for (const limited of results.filter((m) => m.name === "send-limited")) {
    const plain = results.find((m) => m.name === "send" && m.engine === limited.engine);
    if (!plain || plain.load.reqPerSec <= 0) continue;
    console.log(
      `${limited.engine} / send with the rate limit counted: ${(limited.load.reqPerSec / plain.load.reqPerSec).toFixed(3)}× send's req/s, ` +
        `server CPU ${fmt(limited.serverCpuPerRequestMicros)} against ${fmt(plain.serverCpuPerRequestMicros)} µs per request`,
    );
  }
  console.log(
    "req/s: mean of autocannon's one-second samples of the measured run. × uWS: ratio to the raw uWS hello-world\n" +
      "measured just before with the same flags (the ceiling); × adapter: to the hello-world through gateway/http.ts.\n" +
      "srv CPU: this process (gateway + actors, and PGlite when embedded) per response; pg+redis: this engine's\n" +
      "Postgres backends and the Redis server per response; cores: CPU time / wall time of the measured run.\n" +
      "other cores: busy time of the machine nobody above accounts for (other processes): well above 0 = disturbed.\n" +
      "stolen cores: CPU time the hypervisor gave to other guests while this VM had work (/proc/stat steal): stalls\n" +
      "that show in p99 latency and in no profile.\n" +
      "Latencies are autocannon's, in whole milliseconds. loop p99: how late the server's event loop ran a 10 ms timer.",
  );
  for (const m of results) {
    if (m.verification) {
      const v = m.verification;
      console.log(`${m.engine} / ${m.name}: stored ${fmt(v.stored)}, 2xx ${fmt(v.acknowledged)} (warm-up + measured): ${v.ok ? "ok" : "MISMATCH"}: ${v.note}`);
    }
    if (m.load.status.non2xx) console.log(`${m.engine ?? ""} / ${m.name}: status codes ${JSON.stringify(m.load.status.codes)}`);
    if (m.services) {
      const per = Object.entries(m.services.countersPerRequest).map(([k, v]) => `${v.toFixed(2)} ${k}`);
      console.log(
        `${m.engine} / ${m.name}: per response ${per.join(", ")}; Postgres ${fmt(m.services.postgresMicros / Math.max(1, m.load.totalRequests), 1)} µs, ` +
          `Redis ${fmt(m.services.redisMicros / Math.max(1, m.load.totalRequests), 1)} µs CPU`,
      );
    }
    if (m.after) console.log(`${m.engine} / ${m.name}: ${m.after.summary}`);
    if (m.serverLog.count) console.log(`${m.engine ?? ""} / ${m.name}: the server logged ${m.serverLog.count} error/warn lines during the measured run`);
  }
  for (const m of timedResults) {
    const ratio = m.ratioToUws === undefined ? "" : `, ${m.ratioToUws.toExponential(2)}× the uWS ceiling's req/s`;
    console.log(
      `${m.engine} / ${m.name}: ${fmt(m.ms.mean, 1)} ms per request (p50 ${fmt(m.ms.p50, 1)}, p99 ${fmt(m.ms.p99, 1)}, max ${fmt(m.ms.max, 1)})${clientNote(m)}, ` +
        `server CPU ${fmt(m.serverCpuMsPerRequest, 1)} ms per request${ratio} [${m.describe}]`,
    );
  }
  for (const m of transferResults) {
    const ratio = m.ratioToUws === undefined ? "" : `, ${m.ratioToUws.toFixed(2)}× the raw uWS ${m.name}`;
    console.log(
      `${m.engine ? `${m.engine} / ` : ""}${m.name}: ${fmt(m.mibPerSec)} MiB/s best of ${m.rounds} (mean ${fmt(m.meanMibPerSec)}) for ${m.mib} MiB${ratio}`,
    );
  }
  if (transferResults.length) {
    console.log("transfers: curl in its own process, total time per file (connection included); the ceiling is a raw uWS server reading and dropping the body, or sending the file from memory.");
  }
  if (eventResults.length) {
    console.log(
      `\nevent system (targets: wake p99 < ${TARGETS.wakeP99Ms} ms at ${fmt(TARGETS.wakeRate)} msg/s with 1,000 parked polls; ` +
        `fan-out to ${fmt(TARGETS.fanoutQueues)} queues < ${TARGETS.fanoutMs} ms; < ${fmt(TARGETS.bytesPerQueue)} B per idle queue of ${fmt(TARGETS.queues)})`,
    );
    for (const m of eventResults) {
      console.log(`${m.engine} / ${m.name}: ${m.summary}`);
      const side = [describeServer(m.server), m.serverLog.count ? `the server logged ${m.serverLog.count} error/warn lines` : ""].filter(Boolean).join("; ");
      if (side) console.log(`    ${side}`);
    }
    console.log(
      "wake: latency = the receiver's long-poll returning the event − the start of the POST /messages, both on the client's\n" +
        "clock (a child process); warm-up discarded. HTTP floor: the same client's GET round trip to a raw uWS hello-world at\n" +
        "the same rate. fanout: the POST /messages round trip (answered once every queue has the event); deliveries/s =\n" +
        "queues / mean time. queues: (after − before) / queues of the server process, each after a forced full GC.",
    );
  }
  if (fanoutResults.length) {
    console.log(
      `\nfan-out (targets: p99 ≤ ${FANOUT_TARGETS.p99Ms["100x200"]} ms at 100 members × 200 msg/s, ≤ ${FANOUT_TARGETS.p99Ms["500x40"]} ms at 500 × 40; ` +
        `≤ ${FANOUT_TARGETS.cpuPerDeliveryMicros} µs server CPU per delivery, Node + Postgres + Redis)`,
    );
    for (const c of fanoutResults) {
      console.log(`${c.engine} / ${c.name}: ${c.summary}`);
      const side = [describeServer(c.server), c.serverLog.count ? `the server logged ${c.serverLog.count} error/warn lines` : ""].filter(Boolean).join("; ");
      if (side) console.log(`    ${side}`);
    }
    console.log(
      "fan-out: latency = a member's receipt of the message − the start of its POST /messages (wall clock, sender and members\n" +
        "in child processes); the first tenth of each cell's messages are checked, not timed. deliveries/s: received / (last\n" +
        "receipt − first send). µs/delivery: CPU time of the server process, and of its Postgres backends + Redis, over the cell.\n" +
        "ejabberd (fanout-xmpp, and fanout-xmpp-archive with each message archived in Postgres first): the same cells in a room\n" +
        "of a private ejabberd, sent by an occupant (answered when the room reflects it back); server CPU is its Erlang VM's.",
    );
  }
  const profiledEvents = [...eventResults, ...fanoutResults.map((c) => ({ ...c, name: `${c.name} ${c.members}` }))].filter((m) => m.profile) as Array<{ engine: string; name: string; profile: NonNullable<Measurement["profile"]> }>;
  for (const m of profiledEvents) {
    console.log(`\n${m.engine} / ${m.name}: top self time in the server (${m.profile.file})`);
    for (const t of m.profile.top.slice(0, 12)) console.log(`  ${t.percent.toFixed(1).padStart(5)}%  ${fmt(t.selfMs).padStart(6)} ms  ${t.fn}`);
  }
  for (const m of results) {
    if (!m.profile) continue;
    console.log(`\n${m.engine ? `${m.engine} / ` : ""}${m.name}: top self time in the server (${m.profile.file})`);
    for (const t of m.profile.top.slice(0, 10)) console.log(`  ${t.percent.toFixed(1).padStart(5)}%  ${fmt(t.selfMs).padStart(6)} ms  ${t.fn}`);
  }
  const disturbed = results.filter((m) => m.otherBusyCores > 0.25);
  if (disturbed.length) {
    console.log(
      `\nwarning: other processes kept ${disturbed.map((m) => `${fmt(m.otherBusyCores, 2)} cores busy during ${m.engine ? `${m.engine} / ` : ""}${m.name}`).join(", ")}: ` +
        "those figures are disturbed; rerun on a quiet machine to compare.",
    );
  }
  if (failures.length) console.log(`\nproblems:\n  ${failures.join("\n  ")}`);

  const out = {
    startedAt: started.toISOString(),
    finishedAt: new Date().toISOString(),
    machine,
    flags,
    engines: engineInfo,
    ceiling: { uws: uws?.load.reqPerSec, adapter: adapter?.load.reqPerSec },
    results,
    events: eventResults,
    fanout: fanoutResults,
    timed: timedResults,
    transfers: transferResults,
    failures,
  };
  const dir = path.join(HERE, "results");
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${resultStamp}.json`);
  fs.writeFileSync(file, JSON.stringify(out, null, 2) + "\n");
  console.log(`\nresults: ${path.relative(process.cwd(), file)}`);
  if (fanoutResults.length) {
    const chart = path.join(dir, `${resultStamp}-fanout.svg`);
    writeFanoutChart(chart, fanoutResults, `Chorus fan-out, ${started.toISOString().slice(0, 16)}Z, ${machine.commit ?? ""} (${machine.cpus} cores, load ${machine.loadAverageAtStart.map((l) => l.toFixed(1)).join(" ")})`);
    console.log(`fan-out chart: ${path.relative(process.cwd(), chart)}`);
  }
  return failures.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    originalError("bench failed:", err);
    process.exit(1);
  },
);
