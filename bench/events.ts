/**
 * The event system's benchmarks (issue 4, "Performance"): run by bench/run.ts against each engine after the HTTP
 * scenarios, selectable as scenarios like those (`--scenario wake,fanout,register,queues`).
 *
 * - wake: send-to-receive latency at a fixed send rate (--rate, 1,000 msg/s) while --parked (1,000) other
 *   long-polls are parked (100 users × 10 queues, on a channel that receives nothing). One receiver long-polls its
 *   own queue in a loop; latency = the poll returning the event − the start of the POST /messages that caused it.
 *   Beside it: the HTTP round trip of a raw uWS hello-world at the same rate from the same client (the floor).
 * - fanout: one message to a channel of --subscribers (10,000) users with one registered queue each. The server
 *   answers a send only once every queue has the event, so the POST /messages latency is the fan-out time; a
 *   sample of queues is then checked with dont_block polls.
 * - register: POST /register (event_types ["message"]) for --duration seconds, --connections at a time, over the
 *   fan-out users: mean / p99 latency and registers per second.
 * - queues: memory per idle queue: --queues (100,000) queues on users of their own, the server's RSS and JS heap
 *   (after a full GC) before and after, less what their user actors cost by themselves, divided by the queues.
 *
 * Setup goes around the HTTP API where the API is slow by design: users are created directly in the store with
 * actors/chat/organization/realm.ts insertAccount (no password hashing). Subscriptions and queues go through the API, concurrently.
 * The clients (senders, pollers, registrants) run in a child process (bench/event-client.ts).
 */
import { fork, type ChildProcess } from "node:child_process";
import path from "node:path";
import v8 from "node:v8";
import vm from "node:vm";
import { fileURLToPath } from "node:url";
import { constants as perfConstants, PerformanceObserver, type PerformanceEntry } from "node:perf_hooks";
import { api, loopDelayMonitor, machineCpuMs, Population, startRawUwsCeiling, type BenchUser, type Engine, type EngineName } from "./scenarios.ts";
import type { Auth, CheckResult, TouchResult, ClientReply, ClientRequest, LatencyFigures, QueueRef, RegisterResult, RttResult, SendResult, WakeResult } from "./event-client.ts";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, "..");

/** In the order they run. */
export const EVENT_SCENARIOS = ["wake", "fanout", "register", "queues"] as const;
export type EventScenarioName = (typeof EVENT_SCENARIOS)[number];

export const TARGETS = {
  wakeP99Ms: 5,
  wakeRate: 1000,
  fanoutMs: 100,
  fanoutQueues: 10_000,
  bytesPerQueue: 2048,
  queues: 100_000,
} as const;

export interface EventOptions {
  /** wake: messages per second the sender sends. */
  rate: number;
  /** wake: long-polls parked on idle queues meanwhile (10 per idle user). */
  parked: number;
  /** fanout: subscribers of the fan-out channel, each with one queue. */
  subscribers: number;
  /** fanout: measured sends (after one discarded). */
  repeat: number;
  /** queues: queues registered for the memory figure. */
  queues: number;
  duration: number;
  warmup: number;
  connections: number;
  /** uWS hello-world req/s measured in this run (the ceiling), when it was. */
  uwsReqPerSec?: number;
  /** Run `fn` under the CPU profiler when --cpu-prof (bench/run.ts saves the profile). */
  profiled<T>(name: string, fn: () => Promise<T>): Promise<{ value: T; profile?: unknown }>;
}

/** What the server process (and Postgres / Redis) spent over a measured phase. */
export interface ServerSide {
  wallMs: number;
  serverCpuMs: number;
  serverCores: number;
  /** Postgres backends of this engine + the Redis server, when they are outside this process. */
  servicesCores?: number;
  clientCores: number;
  /** Busy cores of the whole machine, and what nobody above accounts for (other processes: well above 0 = disturbed). */
  machineCores: number;
  otherCores: number;
  /** CPU the hypervisor took from this VM meanwhile (see machineCpuMs): the run stalled for reasons outside it. */
  stealCores: number;
  /** The server's event-loop lateness (absent for a server in another process: the reference peer's). */
  loopDelayMs?: { p50: number; p99: number; max: number };
  /** The server's GC pauses over the run: scavenges, and the pauses of full GCs (their incremental steps included). */
  gc?: { minor: GcPauses; major: GcPauses };
}

export interface GcPauses {
  count: number;
  totalMs: number;
  maxMs: number;
}

export interface EventMeasurement {
  name: EventScenarioName;
  engine: EngineName;
  describe: string;
  /** The headline, one line, with its target. */
  summary: string;
  ok: boolean;
  problems: string[];
  figures: Record<string, unknown>;
  server?: ServerSide;
  setup: Record<string, unknown>;
  profile?: unknown;
}

// ---------------------------------------------------------------------------------------------------------------
// The client child

/** A client child process (bench/event-client.ts unless told otherwise), asked one request at a time over IPC. */
export class EventClient<Request extends object = ClientRequest> {
  private child?: ChildProcess;

  constructor(private readonly script = "event-client.ts") {}

  private nextId = 1;
  private pending = new Map<number, { resolve(v: { result: unknown; cpuMicros: number }): void; reject(e: Error): void }>();

  async start(): Promise<void> {
    const child = fork(path.join(HERE, this.script), [], {
      cwd: ROOT,
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      serialization: "advanced",
    });
    this.child = child;
    await new Promise<void>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`event client exited early (${code})`));
      child.once("exit", onExit);
      child.once("message", () => {
        child.off("exit", onExit);
        resolve();
      });
    });
    child.on("message", (msg: ClientReply) => {
      const waiter = this.pending.get(msg.id);
      if (!waiter) return;
      this.pending.delete(msg.id);
      if (msg.ok) waiter.resolve({ result: msg.result, cpuMicros: msg.cpuMicros });
      else waiter.reject(new Error(`event client: ${msg.error}`));
    });
    child.on("exit", (code) => {
      for (const w of this.pending.values()) w.reject(new Error(`event client exited (${code})`));
      this.pending.clear();
    });
  }

  call<T>(req: Request): Promise<{ result: T; cpuMicros: number }> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!this.child?.connected) return reject(new Error("event client is not running"));
      this.pending.set(id, { resolve: resolve as (v: { result: unknown; cpuMicros: number }) => void, reject });
      this.child.send({ ...req, id });
    });
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    if (child.connected) child.send({ exit: true, id: 0 });
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Setup: users, channels, queues of one engine, made once and shared by its scenarios

export const REGISTER_BODY = `event_types=${encodeURIComponent(JSON.stringify(["message"]))}`;

export class EventWorld extends Population {
  constructor(
    engine: Engine,
    readonly client: EventClient,
  ) {
    super(engine);
  }

  /** The fan-out channel's subscribers, each with one queue. */
  async fanUsers(n: number): Promise<BenchUser[]> {
    return this.users("fan", n, 1);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Measuring the server side

/**
 * What the server and the machine did while `fn` ran. The server is this process (Chorus, started in it), or with
 * `peerCpuMicros` a process of its own (the reference peer: its CPU is read from that, and its loop and GC are not
 * this process's to report).
 */
export async function observed<T>(
  engine: Pick<Engine, "serviceStats">,
  fn: () => Promise<{ result: T; cpuMicros: number }>,
  peerCpuMicros?: () => number,
): Promise<{ result: T; server: ServerSide }> {
  const s0 = await engine.serviceStats().catch(() => undefined);
  const cpu0 = process.cpuUsage();
  const peer0 = peerCpuMicros?.();
  const machine0 = machineCpuMs();
  const t0 = performance.now();
  const loop = loopDelayMonitor();
  const gc = { minor: { count: 0, totalMs: 0, maxMs: 0 }, major: { count: 0, totalMs: 0, maxMs: 0 } };
  const countGc = (entries: PerformanceEntry[]) => {
    for (const e of entries) {
      const pauses = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind === perfConstants.NODE_PERFORMANCE_GC_MINOR ? gc.minor : gc.major;
      pauses.count++;
      pauses.totalMs += e.duration;
      pauses.maxMs = Math.max(pauses.maxMs, e.duration);
    }
  };
  const gcObserver = new PerformanceObserver((list) => countGc(list.getEntries()));
  gcObserver.observe({ entryTypes: ["gc"] });
  const { result, cpuMicros } = await fn();
  countGc(gcObserver.takeRecords());
  gcObserver.disconnect();
  const loopDelayMs = loop.stop();
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const machine1 = machineCpuMs();
  const machineCores = (machine1.busy - machine0.busy) / wallMs;
  const s1 = await engine.serviceStats().catch(() => undefined);
  let servicesCores: number | undefined;
  if (s0 && s1 && s1.cpu.size) {
    let used = 0;
    for (const [k, end] of s1.cpu) used += Math.max(0, end - (s0.cpu.get(k) ?? 0));
    servicesCores = used / 1000 / wallMs;
  }
  const serverCpuMs = peerCpuMicros ? (peerCpuMicros() - peer0!) / 1000 : (cpu.user + cpu.system) / 1000;
  const clientCores = cpuMicros / 1000 / wallMs;
  const benchCores = peerCpuMicros ? (cpu.user + cpu.system) / 1000 / wallMs : 0;
  const otherCores = Math.max(0, machineCores - serverCpuMs / wallMs - clientCores - (servicesCores ?? 0) - benchCores);
  return {
    result,
    server: {
      wallMs,
      serverCpuMs,
      serverCores: serverCpuMs / wallMs,
      servicesCores,
      clientCores,
      machineCores,
      otherCores,
      stealCores: (machine1.steal - machine0.steal) / wallMs,
      ...(peerCpuMicros ? {} : { loopDelayMs, gc }),
    },
  };
}

let gcFn: (() => void) | undefined;
/** A full GC without --expose-gc on the command line: the flag set at run time, `gc` taken from a new context. */
function fullGc(): boolean {
  if (!gcFn) {
    try {
      v8.setFlagsFromString("--expose-gc");
      gcFn = vm.runInNewContext("gc") as () => void;
    } catch {
      return false;
    }
  }
  gcFn();
  return true;
}

/** The process's memory once settled: three full GCs 200 ms apart (gc: whether a full GC was available). */
export async function settledMemory(): Promise<{ rss: number; heapUsed: number; external: number; gc: boolean }> {
  let gc = false;
  for (let i = 0; i < 3; i++) {
    await new Promise((r) => setTimeout(r, 200));
    gc = fullGc();
  }
  const m = process.memoryUsage();
  return { rss: m.rss, heapUsed: m.heapUsed, external: m.external, gc };
}

// ---------------------------------------------------------------------------------------------------------------
// The scenarios

const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || !Number.isFinite(n) ? "–" : n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
const lat = (f: LatencyFigures) => `p50 ${fmt(f.p50, 2)} / p99 ${fmt(f.p99, 2)} / max ${fmt(f.max, 1)} ms`;

/** The floor under wake latency, measured once per run: a raw uWS hello-world at the same rate, same client. */
let floorCache: { rate: number; result: RttResult } | undefined;
async function httpFloor(client: EventClient, rate: number): Promise<RttResult> {
  if (floorCache?.rate === rate) return floorCache.result;
  const ceiling = await startRawUwsCeiling();
  try {
    const { result } = await client.call<RttResult>({ op: "rtt", url: `http://127.0.0.1:${ceiling.port}/`, rate, warmup: 1, duration: 3 });
    floorCache = { rate, result };
    return result;
  } finally {
    ceiling.close();
  }
}

async function wake(world: EventWorld, opts: EventOptions): Promise<EventMeasurement> {
  const { engine, client } = world;
  const perUser = 10;
  const idle = await world.users("idle", Math.ceil(opts.parked / perUser), perUser);
  await world.subscribe("idle", idle);
  const [receiver] = await world.users("receiver", 1, 1);
  await world.subscribe("wake", [receiver!]);
  const receiverQueue: QueueRef = { auth: receiver!.auth, queueId: receiver!.queues[0]! };
  const idleQueues = idle.flatMap((u) => u.queues.map((queueId) => ({ auth: u.auth, queueId }))).slice(0, opts.parked);
  await client.call({ op: "park", base: engine.baseUrl, queues: idleQueues });
  let parkedAfter: { returns: number; errors: number } = { returns: 0, errors: 0 };
  try {
    const floor = await httpFloor(client, opts.rate);
    const diag = process.env.BENCH_DIAG ? timeStore(engine) : undefined;
    const run = await opts.profiled(`${engine.name}-wake`, () =>
      observed(engine, () =>
        client.call<WakeResult>({
          op: "wake",
          base: engine.baseUrl,
          sender: engine.authorization,
          receiver: receiverQueue,
          sendBody: "type=stream&to=wake&topic=t&content=",
          rate: opts.rate,
          warmup: opts.warmup,
          duration: opts.duration,
          maxInFlight: 1000,
        }),
      ),
    );
    const w = run.value.result;
    if (diag) console.log("\n[diag]", JSON.stringify(diag()));
    parkedAfter = (await client.call<{ returns: number; errors: number }>({ op: "unpark" })).result;
    const problems: string[] = [];
    if (w.sendErrors) problems.push(`${w.sendErrors} sends failed: ${w.errorSamples.join("; ")}`);
    if (w.missing) problems.push(`${w.missing} acknowledged sends never reached the receiver's queue`);
    if (w.duplicates) problems.push(`${w.duplicates} events received twice`);
    if (w.parkedErrors) problems.push(`${w.parkedErrors} parked polls failed`);
    if (w.achievedRate < opts.rate * 0.95) {
      problems.push(
        `saturated: achieved ${fmt(w.achievedRate)} msg/s of the ${fmt(opts.rate)} asked` +
          (w.notSent ? ` (${fmt(w.notSent)} scheduled sends not made: ${fmt(1000)} were in flight)` : ""),
      );
    }
    const meets = w.latency.p99 < TARGETS.wakeP99Ms && opts.rate >= TARGETS.wakeRate && opts.parked >= 1000;
    return {
      name: "wake",
      engine: engine.name,
      describe: `send→receive at ${opts.rate} msg/s to a channel with one long-polling receiver, ${opts.parked} other polls parked`,
      summary:
        `send→receive ${lat(w.latency)} at ${fmt(w.achievedRate)} msg/s (asked ${fmt(opts.rate)}), ${opts.parked} polls parked; ` +
        `target p99 < ${TARGETS.wakeP99Ms} ms: ${w.latency.p99 < TARGETS.wakeP99Ms ? "met" : "MISSED"}${meets || w.latency.p99 >= TARGETS.wakeP99Ms ? "" : " (at a scaled-down load)"}; ` +
        `HTTP floor (raw uWS at ${fmt(opts.rate)} req/s, same client) ${lat(floor.latency)} → p99 ${fmt(w.latency.p99 / floor.latency.p99, 1)}× floor`,
      ok: problems.length === 0,
      problems,
      figures: {
        latencyMs: w.latency,
        sendLatencyMs: w.sendLatency,
        askedRate: w.askedRate,
        achievedRate: w.achievedRate,
        sent: w.sent,
        notSent: w.notSent,
        answered: w.answered,
        sendErrors: w.sendErrors,
        missing: w.missing,
        duplicates: w.duplicates,
        maxScheduleLagMs: w.maxScheduleLagMs,
        receiverPolls: w.receiverPolls,
        eventsPerReceiverPoll: w.answered / Math.max(1, w.receiverPolls),
        serverCpuPerMessageMicros: (run.value.server.serverCpuMs * 1000) / Math.max(1, w.answered),
        parked: opts.parked,
        parkedPollReturnsDuringRun: w.parkedReturns,
        parkedPollErrors: w.parkedErrors,
        parkedPollReturnsOverall: parkedAfter.returns,
        measuredMs: w.measuredMs,
        floorLatencyMs: floor.latency,
        floorAchievedRate: floor.achievedRate,
        ratioP99ToFloor: w.latency.p99 / floor.latency.p99,
        ratioP50ToFloor: w.latency.p50 / floor.latency.p50,
        target: { p99Ms: TARGETS.wakeP99Ms, rate: TARGETS.wakeRate, parked: 1000 },
      },
      server: run.value.server,
      setup: { ...world.setup },
      profile: run.profile,
    };
  } finally {
    await client.call({ op: "unpark" }).catch(() => {});
  }
}

async function fanout(world: EventWorld, opts: EventOptions): Promise<EventMeasurement> {
  const { engine, client } = world;
  const fan = await world.fanUsers(opts.subscribers);
  await world.subscribe("fanout", fan);
  const queues = fan.map((u) => ({ auth: u.auth, queueId: u.queues[0]! }));
  if (!world.setup["activate fan-out users ms"]) {
    // Their actors activate (loading the seeded queue) on a first poll, as when their clients first poll.
    const t0 = performance.now();
    const { result } = await client.call<TouchResult>({ op: "touch", base: engine.baseUrl, queues, concurrency: opts.connections, expectBadQueue: false });
    if (result.errors) throw new Error(`${result.errors} of ${queues.length} first polls of the fan-out queues failed: ${result.errorSamples.join("; ")}`);
    world.setup["activate fan-out users ms"] = Math.round(performance.now() - t0);
  }
  const body = "type=stream&to=fanout&topic=t&content=fan";
  const warm = await client.call<SendResult>({ op: "send", base: engine.baseUrl, sender: engine.authorization, body, reps: 1 });
  const diag = process.env.BENCH_DIAG ? timeStore(engine) : undefined;
  const run = await opts.profiled(`${engine.name}-fanout`, () =>
    observed(engine, () => client.call<SendResult>({ op: "send", base: engine.baseUrl, sender: engine.authorization, body, reps: opts.repeat })),
  );
  if (diag) console.log("\n[diag]", JSON.stringify(diag()));
  const s = run.value.result;
  // Every measured message must be in a sample of the queues (dont_block polls, nothing acknowledged).
  const step = Math.max(1, Math.floor(queues.length / 200));
  const sample = queues.filter((_, i) => i % step === 0);
  const { result: check } = await client.call<CheckResult>({ op: "check", base: engine.baseUrl, queues: sample, ids: [...warm.result.ids, ...s.ids] });
  const problems: string[] = [];
  if (warm.result.errors.length || s.errors.length) problems.push(`sends failed: ${[...warm.result.errors, ...s.errors].join("; ")}`);
  if (check.errors.length) problems.push(`check polls failed: ${check.errors.join("; ")}`);
  if (check.checked !== check.complete) {
    problems.push(`${check.checked - check.complete} of ${check.checked} sampled queues lack a message the server acknowledged: ${JSON.stringify(check.incomplete)}`);
  }
  const ms = s.latencies;
  const mean = ms.reduce((a, b) => a + b, 0) / Math.max(1, ms.length);
  const best = Math.min(...ms);
  const worst = Math.max(...ms);
  const deliveriesPerSec = queues.length / (mean / 1000);
  const server = run.value.server;
  // The server CPU of the measured sends only (the client pauses 200 ms between them).
  const cpuPerDeliveryUs = (server.serverCpuMs * 1000) / (queues.length * Math.max(1, ms.length));
  return {
    name: "fanout",
    engine: engine.name,
    describe: `one POST /messages to a channel of ${queues.length} subscribers, each with one queue; ${opts.repeat} measured sends after 1 discarded (which activates their actors)`,
    summary:
      `fan-out to ${fmt(queues.length)} queues: mean ${fmt(mean, 1)} ms (min ${fmt(best, 1)}, max ${fmt(worst, 1)}; ${ms.map((x) => fmt(x, 0)).join(", ")} ms) = ` +
      `${fmt(deliveriesPerSec)} deliveries/s; target < ${TARGETS.fanoutMs} ms for ${fmt(TARGETS.fanoutQueues)}: ${mean < TARGETS.fanoutMs && queues.length >= TARGETS.fanoutQueues ? "met" : mean < TARGETS.fanoutMs ? "met at a scaled-down size" : "MISSED"}; ` +
      `${fmt(cpuPerDeliveryUs, 1)} µs server CPU per delivery${opts.uwsReqPerSec ? `; ${fmt(deliveriesPerSec / opts.uwsReqPerSec, 2)}× the uWS hello-world req/s` : ""}; ` +
      `sample check: ${check.complete}/${sample.length} queues hold every message${check.checked < sample.length ? ` (${sample.length - check.checked} polls failed)` : ""}`,
    ok: problems.length === 0,
    problems,
    figures: {
      queues: queues.length,
      latenciesMs: ms,
      warmupLatencyMs: warm.result.latencies[0],
      meanMs: mean,
      minMs: best,
      maxMs: worst,
      deliveriesPerSec,
      bestDeliveriesPerSec: queues.length / (best / 1000),
      serverCpuPerDeliveryMicros: cpuPerDeliveryUs,
      ratioToUws: opts.uwsReqPerSec ? deliveriesPerSec / opts.uwsReqPerSec : undefined,
      messageIds: s.ids,
      check,
      target: { ms: TARGETS.fanoutMs, queues: TARGETS.fanoutQueues },
    },
    server,
    setup: { ...world.setup },
    profile: run.profile,
  };
}

/**
 * POST /register (event_types ["message"]) for --duration seconds after --warmup discarded ones, --connections at a
 * time, round-robin over the fan-out users (active by now: their actors hold one queue each).
 */
async function register(world: EventWorld, opts: EventOptions): Promise<EventMeasurement> {
  const { engine, client } = world;
  const fan = await world.fanUsers(opts.subscribers);
  const run = await opts.profiled(`${engine.name}-register`, () =>
    observed(engine, () =>
      client.call<RegisterResult>({
        op: "register",
        base: engine.baseUrl,
        users: fan.map((u) => u.auth),
        duration: opts.duration,
        warmup: opts.warmup,
        concurrency: opts.connections,
        body: REGISTER_BODY,
        keep: false,
      }),
    ),
  );
  const r = run.value.result;
  const problems = r.errors ? [`${r.errors} registers failed: ${r.errorSamples.join("; ")}`] : [];
  return {
    name: "register",
    engine: engine.name,
    describe: `POST /register (event_types ["message"]) for ${opts.duration}s after ${opts.warmup}s discarded, ${opts.connections} at a time, round-robin over ${fmt(fan.length)} users`,
    summary:
      `register: mean ${fmt(r.registers.mean, 2)} ms, p50 ${fmt(r.registers.p50, 2)}, p99 ${fmt(r.registers.p99, 2)} ms; ${fmt(r.perSecond)} registers/s ` +
      `(${fmt(r.registers.count)} measured, ${opts.connections} concurrent)` +
      (opts.uwsReqPerSec ? `; ${fmt(r.perSecond / opts.uwsReqPerSec, 4)}× uWS hello-world req/s` : ""),
    ok: problems.length === 0,
    problems,
    figures: {
      latencyMs: r.registers,
      perSecond: r.perSecond,
      wallMs: r.wallMs,
      errors: r.errors,
      serverCpuPerRegisterMicros: (run.value.server.serverCpuMs * 1000) / Math.max(1, r.registers.count),
      ratioToUws: opts.uwsReqPerSec ? r.perSecond / opts.uwsReqPerSec : undefined,
      concurrency: opts.connections,
    },
    server: run.value.server,
    setup: { ...world.setup },
    profile: run.profile,
  };
}

const QUEUES_PER_MEMORY_USER = 20;

/**
 * Memory per idle queue: --queues queues, 20 per user, seeded (see EventWorld.users) on users no actor has seen,
 * then activated with one dont_block poll per user; the server's heap and RSS after a full GC, before and after.
 * A control group of users without queues, activated the same way (their poll answers BAD_EVENT_QUEUE_ID), gives
 * what an active user actor costs by itself: it is taken out, so the figure is the queues' own.
 */
async function queues(world: EventWorld, opts: EventOptions): Promise<EventMeasurement> {
  const { engine, client } = world;
  const userCount = Math.ceil(opts.queues / QUEUES_PER_MEMORY_USER);
  const controlCount = Math.min(userCount, 1000);
  const users = await world.users("mem", userCount, QUEUES_PER_MEMORY_USER);
  const control = await world.users("control", controlCount);
  const made = users.reduce((n, u) => n + u.queues.length, 0);
  const problems: string[] = [];

  const touch = async (refs: QueueRef[], expectBadQueue: boolean) => {
    const { result } = await client.call<TouchResult>({ op: "touch", base: engine.baseUrl, queues: refs, concurrency: opts.connections, expectBadQueue });
    if (result.errors) problems.push(`${result.errors} of ${refs.length} activation polls failed: ${result.errorSamples.join("; ")}`);
    return result;
  };
  const m0 = await settledMemory();
  const t0 = performance.now();
  const ctl = await touch(control.map((u) => ({ auth: u.auth, queueId: "no-such-queue" })), true);
  const m1 = await settledMemory();
  const t1 = performance.now();
  const act = await touch(users.map((u) => ({ auth: u.auth, queueId: u.queues[0]! })), false);
  const t2 = performance.now();
  const m2 = await settledMemory();

  const perActor = { heap: (m1.heapUsed - m0.heapUsed) / controlCount, rss: (m1.rss - m0.rss) / controlCount };
  // The heap after a full GC is exact enough to take the control's per-actor cost out. RSS is not (pages go back
  // to the system unevenly: the control's RSS delta is often negative), so RSS is reported with the actors in.
  const heapPer = (m2.heapUsed - m1.heapUsed - perActor.heap * userCount) / made;
  const heapWithActor = (m2.heapUsed - m1.heapUsed) / made;
  const rssWithActor = (m2.rss - m1.rss) / made;
  if (!m2.gc) problems.push("no full GC available: heap figures include garbage");
  const verdict = (v: number) => (v < TARGETS.bytesPerQueue ? "met" : "MISSED");
  return {
    name: "queues",
    engine: engine.name,
    describe: `${fmt(made)} idle queues, ${QUEUES_PER_MEMORY_USER} per user on ${fmt(userCount)} users; memory of the server process after a full GC, less ${fmt(controlCount)} control users' actors`,
    summary:
      `${fmt(made)} idle queues: JS heap ${fmt(heapPer)} B/queue (${fmt(heapWithActor)} with their user actors' share; one active user actor: ${fmt(perActor.heap)} B), ` +
      `RSS ${fmt(rssWithActor)} B/queue with the actors' share; ` +
      `target < ${fmt(TARGETS.bytesPerQueue)} B: heap ${verdict(heapPer)}, RSS ${verdict(rssWithActor)}` +
      `${made < TARGETS.queues ? ` (scaled down from ${fmt(TARGETS.queues)})` : ""}`,
    ok: problems.length === 0,
    problems,
    figures: {
      queues: made,
      users: userCount,
      controlUsers: controlCount,
      heapBytesPerQueue: heapPer,
      heapBytesPerQueueWithActors: heapWithActor,
      rssBytesPerQueueWithActors: rssWithActor,
      /** RSS is not exact enough for the control's subtraction: shown for the record only. */
      perActiveUserActor: perActor,
      memory: { before: m0, afterControl: m1, afterQueues: m2 },
      activationPollsPerSec: { control: ctl.perSecond, queues: act.perSecond },
      activationMs: { control: t1 - t0, queues: t2 - t1 },
      gcForced: m2.gc,
      target: { bytesPerQueue: TARGETS.bytesPerQueue, queues: TARGETS.queues },
    },
    setup: { ...world.setup },
  };
}

const RUNNERS: Record<EventScenarioName, (world: EventWorld, opts: EventOptions) => Promise<EventMeasurement>> = { wake, fanout, register, queues };

export function runEventScenario(name: EventScenarioName, world: EventWorld, opts: EventOptions): Promise<EventMeasurement> {
  return RUNNERS[name](world, opts);
}

export function describeServer(s: ServerSide | undefined): string {
  if (!s) return "";
  return (
    `server ${fmt(s.serverCores, 2)} cores` +
    (s.servicesCores !== undefined ? `, pg+redis ${fmt(s.servicesCores, 2)} cores` : "") +
    `, client ${fmt(s.clientCores, 2)} cores, other processes ${fmt(s.otherCores, 2)} cores${s.otherCores > 0.25 ? " (DISTURBED)" : ""}, ` +
    `stolen by the hypervisor ${fmt(s.stealCores, 2)} cores` +
    (s.loopDelayMs ? `, server loop delay p99 ${fmt(s.loopDelayMs.p99, 1)} ms (max ${fmt(s.loopDelayMs.max, 1)})` : "") +
    (s.gc
      ? `; GC pauses: ${fmt(s.gc.minor.count)} scavenges (mean ${fmt(s.gc.minor.totalMs / (s.gc.minor.count || 1), 1)}, max ${fmt(s.gc.minor.maxMs, 1)} ms), ` +
        `${fmt(s.gc.major.count)} full-GC pauses (total ${fmt(s.gc.major.totalMs, 1)}, max ${fmt(s.gc.major.maxMs, 1)} ms)`
      : "")
  );
}

/** BENCH_DIAG=1: time the store calls of a run (wraps the live store's and message log's methods; diagnosis only). */
function timeStore(engine: Engine): () => Record<string, { n: number; meanMs: number; maxMs: number }> {
  type Methods = Record<string, (...a: unknown[]) => Promise<unknown>>;
  const store = engine.node.store as unknown as Methods;
  const messageLog = engine.node.messageLog as unknown as Methods;
  const stats: Record<string, { n: number; total: number; max: number }> = {};
  const originals: Record<string, (...a: unknown[]) => Promise<unknown>> = {};
  const owner = (name: string) => (name in messageLog ? messageLog : store);
  for (const name of ["appendUserEvent", "appendMessage", "write", "saveSnapshot"]) {
    const target = owner(name);
    const original = target[name]!;
    originals[name] = original;
    const st = (stats[name] = { n: 0, total: 0, max: 0 });
    target[name] = function (this: unknown, ...a: unknown[]) {
      const t0 = performance.now();
      return original.apply(this, a).finally(() => {
        const dt = performance.now() - t0;
        st.n++;
        st.total += dt;
        st.max = Math.max(st.max, dt);
      });
    };
  }
  return () => {
    for (const [name, f] of Object.entries(originals)) owner(name)[name] = f;
    return Object.fromEntries(Object.entries(stats).map(([k, v]) => [k, { n: v.n, meanMs: v.total / Math.max(1, v.n), maxMs: v.max }]));
  };
}
