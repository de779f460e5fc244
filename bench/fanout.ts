/**
 * The fan-out family (issue 26), run by bench/run.ts as `--scenario fanout-lp,fanout-sse,fanout-ws`: one channel of N
 * members, each a real client on its own keep-alive connection (fanout-lp: a long-poll loop on GET /events; fanout-sse:
 * one GET /events/stream each; fanout-ws: one WebSocket on GET /events/ws each), one sender posting at a fixed rate R. For each N of --members (default 100, 500, 2,000)
 * the rate is --rate when given, else 20,000 / N (20,000 deliveries/s offered, the issue's comparison point), and
 * --messages when given, else R × FANOUT_SECONDS of sending.
 *
 * Every delivery is checked (each acknowledged send reaches each member once, in order: bench/fanout-client.ts).
 * Reported per cell: deliveries/s (from the first send to the last receipt), send→receipt latency p50 / p99 / max
 * (the first tenth of the messages, which find cold caches, are checked but not timed), server CPU per delivery for
 * the Node process and for Postgres + Redis (their processes' /proc CPU time), the clients' CPU, and the ratio of
 * deliveries/s to the same run's uWS hello-world req/s. Each cell uses a channel and members of its own, so no cell
 * inherits another's queue contents. The sender and the members run in child processes (--client-procs of members).
 */
import fs from "node:fs";
import { EventClient, observed, type ServerSide } from "./events.ts";
import type { Population, Engine, EngineName } from "./scenarios.ts";
import type { FanoutRequest, FanoutTransport, MemberFigures, SendFigures } from "./fanout-client.ts";
import { xmppRoomUrl } from "./xmpp-session.ts";
import type { XmppPeer } from "./xmpp-peer.ts";
import { mergeHistograms, percentile, type Histogram } from "./histogram.ts";

export const FANOUT_SCENARIOS = ["fanout-lp", "fanout-sse", "fanout-ws"] as const;
export type FanoutScenarioName = (typeof FANOUT_SCENARIOS)[number];
/**
 * The same cells against the reference peer (bench/xmpp-peer.ts), run once each, not per engine: rooms in memory as
 * the issue measured it, and rooms that archive each message in Postgres before sending it (a Chorus send's durability).
 */
export const PEER_SCENARIOS = { "fanout-xmpp": { engine: "ejabberd", archive: false }, "fanout-xmpp-archive": { engine: "ejabberd+postgres", archive: true } } as const;
export type PeerScenarioName = keyof typeof PEER_SCENARIOS;
type PeerEngineName = (typeof PEER_SCENARIOS)[PeerScenarioName]["engine"];

export const FANOUT_MEMBERS = [100, 500, 2000];
/** Deliveries per second offered when no --rate is given: the rate is this / members. */
const OFFERED_DELIVERIES = 20_000;
/** Seconds of sending per cell when no --messages is given. */
const FANOUT_SECONDS = 5;
const MAX_IN_FLIGHT = 256;
/** How long members may take to receive everything after the last send was answered. */
const DRAIN_TIMEOUT_MS = 30_000;

/** The issue's targets (p99 at two points of the matrix, CPU per delivery). */
export const FANOUT_TARGETS = { p99Ms: { "100x200": 15, "500x40": 100 } as Record<string, number>, cpuPerDeliveryMicros: 20 };

export interface FanoutOptions {
  members: number[];
  /** Sends per second; undefined: OFFERED_DELIVERIES / members. */
  rate?: number;
  messages?: number;
  clientProcs: number;
  uwsReqPerSec?: number;
  profiled<T>(name: string, fn: () => Promise<T>): Promise<{ value: T; profile?: unknown }>;
}

export interface FanoutCell {
  name: FanoutScenarioName | PeerScenarioName;
  engine: EngineName | PeerEngineName;
  members: number;
  rate: number;
  messages: number;
  summary: string;
  problems: string[];
  /** Whether every delivery checked out (each acknowledged send to each member once, in order). */
  checked: boolean;
  /** The sender fell behind the asked rate: the server (or the machine) could not keep up. */
  saturated: boolean;
  deliveries: number;
  expectedDeliveries: number;
  deliveriesPerSec: number;
  latencyMs: { p50: number; p99: number; max: number; mean: number; count: number };
  send: Omit<SendFigures, "acked">;
  check: { missing: number; duplicates: number; outOfOrder: number; failedMembers: number; complete: boolean; errorSamples: string[] };
  cpuPerDeliveryMicros: { node: number; services?: number; total: number };
  clientCores: number;
  ratioToUws?: number;
  server: ServerSide;
  profile?: unknown;
}

/** The sender and the member processes, started once per bench run. */
export class FanoutClients {
  private sender = new EventClient<FanoutRequest>("fanout-client.ts");
  private members: Array<EventClient<FanoutRequest>> = [];
  private started = false;

  constructor(private readonly procs: number) {}

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    this.members = Array.from({ length: this.procs }, () => new EventClient<FanoutRequest>("fanout-client.ts"));
    await Promise.all([this.sender, ...this.members].map((c) => c.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([this.sender, ...this.members].map((c) => c.stop().catch(() => {})));
  }

  async cpuMicros(): Promise<number> {
    const all = await Promise.all([this.sender, ...this.members].map((c) => c.call<number>({ op: "cpu" })));
    return all.reduce((n, r) => n + r.result, 0);
  }

  send(req: Extract<FanoutRequest, { op: "send" }>): Promise<SendFigures> {
    return this.sender.call<SendFigures>(req).then((r) => r.result);
  }

  /** The members dealt round-robin over the member processes. */
  async open(req: Omit<Extract<FanoutRequest, { op: "open" }>, "members">, members: Extract<FanoutRequest, { op: "open" }>["members"]) {
    const parts = await Promise.all(
      this.members.map((c, p) => c.call<{ open: number; failed: number; errorSamples: string[] }>({ ...req, members: members.filter((_, i) => i % this.members.length === p) })),
    );
    return { failed: parts.reduce((n, r) => n + r.result.failed, 0), errorSamples: parts.flatMap((r) => r.result.errorSamples) };
  }

  async collect(req: Extract<FanoutRequest, { op: "collect" }>): Promise<MemberFigures[]> {
    return (await Promise.all(this.members.map((c) => c.call<MemberFigures>(req)))).map((r) => r.result);
  }

  async close(): Promise<void> {
    await Promise.all(this.members.map((c) => c.call({ op: "close" })));
  }
}

const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || !Number.isFinite(n) ? "–" : n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** How many messages a cell sends at what rate (the issue's 20,000 deliveries/s offered unless --rate says). */
function cellShape(members: number, opts: FanoutOptions): { rate: number; messages: number } {
  const rate = opts.rate ?? Math.max(1, Math.round(OFFERED_DELIVERIES / members));
  return { rate, messages: opts.messages ?? Math.max(20, Math.round(rate * FANOUT_SECONDS)) };
}

export async function runFanoutCell(
  name: FanoutScenarioName,
  members: number,
  world: Population,
  clients: FanoutClients,
  opts: FanoutOptions,
): Promise<FanoutCell> {
  const engine: Engine = world.engine;
  const transport = name.slice("fanout-".length) as FanoutTransport;
  const { rate, messages } = cellShape(members, opts);
  const channel = `${name}-${members}`;
  const users = await world.users(channel, members, 1);
  await world.subscribe(channel, users);
  const opened = await clients.open({ op: "open", base: engine.baseUrl, transport, messages, warmup: Math.floor(messages / 10), concurrency: 50 }, users.map((u) => ({ auth: u.auth, queueId: u.queues[0]! })));
  let run;
  try {
    run = await opts.profiled(`${engine.name}-${name}-${members}`, () =>
      observed(engine, async () => {
        const cpu0 = await clients.cpuMicros();
        const sent = await clients.send({ op: "send", base: engine.baseUrl, sender: engine.authorization, channel, rate, messages, maxInFlight: MAX_IN_FLIGHT });
        const received = await clients.collect({ op: "collect", acked: sent.acked, timeoutMs: DRAIN_TIMEOUT_MS });
        return { result: { sent, received }, cpuMicros: (await clients.cpuMicros()) - cpu0 };
      }),
    );
  } finally {
    await clients.close();
  }
  return cellFigures({ name, engine: engine.name, members, rate, messages, opened, ...run.value.result, server: run.value.server, profile: run.profile, uwsReqPerSec: opts.uwsReqPerSec });
}

/**
 * The same cell against the reference peer: the members are occupants of a room of its own, the sender another
 * occupant, and a send counts as answered when the room reflects it back to the sender. Server CPU is ejabberd's.
 */
export async function runPeerCell(name: PeerScenarioName, members: number, peer: XmppPeer, clients: FanoutClients, opts: FanoutOptions): Promise<FanoutCell> {
  const { rate, messages } = cellShape(members, opts);
  const base = xmppRoomUrl(peer.room(`${name}-${members}-${Date.now()}`));
  // The members join first (the first makes the room and owns it: joins are announced to it); the sender joins as it starts.
  const opened = await clients.open(
    { op: "open", base, transport: "xmpp", messages, warmup: Math.floor(messages / 10), concurrency: 50 },
    Array.from({ length: members }, (_, i) => ({ nick: `m${i}` })),
  );
  let run;
  try {
    run = await observed(
      { serviceStats: () => peer.serviceStats() },
      async () => {
        const cpu0 = await clients.cpuMicros();
        const sent = await clients.send({ op: "send", base, sender: "", channel: "", rate, messages, maxInFlight: MAX_IN_FLIGHT });
        const received = await clients.collect({ op: "collect", acked: sent.acked, timeoutMs: DRAIN_TIMEOUT_MS });
        return { result: { sent, received }, cpuMicros: (await clients.cpuMicros()) - cpu0 };
      },
      () => peer.cpuMicros(),
    );
  } finally {
    await clients.close();
  }
  return cellFigures({ name, engine: PEER_SCENARIOS[name].engine, members, rate, messages, opened, ...run.result, server: run.server, uwsReqPerSec: opts.uwsReqPerSec });
}

/** A cell's figures and checks, from what its sender and members reported. */
function cellFigures(cell: {
  name: FanoutCell["name"];
  engine: FanoutCell["engine"];
  members: number;
  rate: number;
  messages: number;
  opened: { failed: number; errorSamples: string[] };
  sent: SendFigures;
  received: MemberFigures[];
  server: ServerSide;
  profile?: unknown;
  uwsReqPerSec?: number;
}): FanoutCell {
  const { name, members, rate, messages, sent, received, server } = cell;
  const peer = name in PEER_SCENARIOS;
  const problems: string[] = [];
  if (cell.opened.failed) problems.push(`${cell.opened.failed} of ${members} members could not connect: ${cell.opened.errorSamples.join("; ")}`);
  const latency: Histogram = mergeHistograms(received.map((r) => r.latency));
  const sum = (f: (r: MemberFigures) => number) => received.reduce((n, r) => n + f(r), 0);
  const deliveries = sum((r) => r.deliveries);
  const expectedDeliveries = sent.acked.length * members;
  const lastReceiptAt = Math.max(...received.map((r) => r.lastReceiptAt));
  const deliveriesPerSec = deliveries / (Math.max(1, lastReceiptAt - sent.firstSendAt) / 1000);
  const check = {
    missing: sum((r) => r.missing),
    duplicates: sum((r) => r.duplicates),
    outOfOrder: sum((r) => r.outOfOrder),
    failedMembers: sum((r) => r.failedMembers),
    complete: received.every((r) => r.complete),
    errorSamples: received.flatMap((r) => r.errorSamples).slice(0, 5),
  };
  if (sent.errors) problems.push(`${sent.errors} sends failed: ${sent.errorSamples.join("; ")}`);
  if (check.missing) problems.push(`${fmt(check.missing)} deliveries of acknowledged sends never arrived (of ${fmt(expectedDeliveries)})`);
  if (check.duplicates) problems.push(`${fmt(check.duplicates)} deliveries arrived twice`);
  if (check.outOfOrder) problems.push(`${fmt(check.outOfOrder)} events arrived out of order`);
  if (check.failedMembers) problems.push(`${check.failedMembers} members' clients failed: ${check.errorSamples.join("; ")}`);
  const checked = problems.length === 0 && check.complete;
  const saturated = sent.achievedRate < rate * 0.95;
  if (saturated) problems.push(`saturated: the sender achieved ${fmt(sent.achievedRate)} msg/s of the ${fmt(rate)} asked`);

  const nodeMicros = server.serverCpuMs * 1000;
  const servicesMicros = server.servicesCores === undefined ? undefined : server.servicesCores * server.wallMs * 1000;
  const per = (micros: number) => micros / Math.max(1, deliveries);
  const cpuPerDeliveryMicros = { node: per(nodeMicros), services: servicesMicros === undefined ? undefined : per(servicesMicros), total: per(nodeMicros + (servicesMicros ?? 0)) };
  const latencyMs = { p50: percentile(latency, 50), p99: percentile(latency, 99), max: latency.max, mean: latency.sum / Math.max(1, latency.count), count: latency.count };
  const ratioToUws = cell.uwsReqPerSec ? deliveriesPerSec / cell.uwsReqPerSec : undefined;
  const target = FANOUT_TARGETS.p99Ms[`${members}x${rate}`];
  const { acked: _acked, ...send } = sent;
  return {
    name,
    engine: cell.engine,
    members,
    rate,
    messages,
    summary:
      `${members} members × ${fmt(rate)} msg/s, ${fmt(messages)} messages: ${fmt(deliveriesPerSec)} deliveries/s` +
      `${ratioToUws === undefined ? "" : ` (${ratioToUws.toFixed(2)}× uWS)`}; send→receipt p50 ${fmt(latencyMs.p50, 1)} / p99 ${fmt(latencyMs.p99, 1)} / max ${fmt(latencyMs.max, 1)} ms` +
      `${target === undefined ? "" : ` (target p99 ≤ ${target} ms: ${latencyMs.p99 <= target ? "met" : "MISSED"})`}; ` +
      `server CPU ${fmt(cpuPerDeliveryMicros.total, 1)} µs/delivery (${peer ? "ejabberd's beam.smp" : "node"} ${fmt(cpuPerDeliveryMicros.node, 1)}` +
      `${cpuPerDeliveryMicros.services === undefined ? "" : `, ${peer ? "postgres" : "pg+redis"} ${fmt(cpuPerDeliveryMicros.services, 1)}`}); clients ${fmt(server.clientCores, 2)} cores; ` +
      `checked ${fmt(deliveries)}/${fmt(expectedDeliveries)} deliveries${problems.length ? "" : ": all once, in order"}`,
    problems,
    checked,
    saturated,
    deliveries,
    expectedDeliveries,
    deliveriesPerSec,
    latencyMs,
    send,
    check,
    cpuPerDeliveryMicros,
    clientCores: server.clientCores,
    ratioToUws,
    server,
    profile: cell.profile,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The chart: one row per cell, p50 and p99 bars on a log scale of milliseconds, deliveries/s and CPU beside.

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function fanoutChart(cells: FanoutCell[], title: string): string {
  const rowH = 26;
  const left = 250;
  const barW = 420;
  const right = 360;
  const top = 60;
  const width = left + barW + right;
  const height = top + rowH * cells.length + 50;
  const minMs = 0.5;
  const maxMs = Math.max(1000, ...cells.map((c) => c.latencyMs.max || 0));
  const decades = Math.ceil(Math.log10(maxMs / minMs));
  const x = (ms: number) => left + (barW * Math.log10(Math.max(minMs, ms) / minMs)) / decades;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${esc(title)}</text>`,
    `<text x="10" y="40" fill="#444">send→receipt latency (log scale): p50 <tspan fill="#3b7dd8">■</tspan>, p99 <tspan fill="#e8a33d">■</tspan>, max |; right: p50 / p99, deliveries/s, server CPU µs per delivery (node + pg/redis); red: a check failed</text>`,
  ];
  for (let d = 0; d <= decades; d++) {
    const ms = minMs * 10 ** d;
    const gx = x(ms);
    out.push(`<line x1="${gx}" y1="${top - 5}" x2="${gx}" y2="${top + rowH * cells.length}" stroke="#ddd"/>`);
    out.push(`<text x="${gx}" y="${top + rowH * cells.length + 15}" text-anchor="middle" fill="#666">${ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`}</text>`);
  }
  cells.forEach((c, i) => {
    const y = top + i * rowH;
    const bad = !c.checked;
    out.push(`<text x="${left - 8}" y="${y + 16}" text-anchor="end"${bad ? ' fill="#c00"' : ""}>${esc(`${c.engine} ${c.name.slice(7)} ${c.members}×${c.rate}`)}</text>`);
    out.push(`<rect x="${left}" y="${y + 3}" width="${x(c.latencyMs.p99) - left}" height="18" fill="#e8a33d"/>`);
    out.push(`<rect x="${left}" y="${y + 7}" width="${x(c.latencyMs.p50) - left}" height="10" fill="#3b7dd8"/>`);
    out.push(`<line x1="${x(c.latencyMs.max)}" y1="${y + 2}" x2="${x(c.latencyMs.max)}" y2="${y + 22}" stroke="#333" stroke-width="2"/>`);
    const cpu = c.cpuPerDeliveryMicros;
    out.push(
      `<text x="${left + barW + 10}" y="${y + 16}">${esc(
        `${fmt(c.latencyMs.p50, 1)} / ${fmt(c.latencyMs.p99, 1)} ms; ${fmt(c.deliveriesPerSec)}/s; ${fmt(cpu.node, 1)}${cpu.services === undefined ? "" : ` + ${fmt(cpu.services, 1)}`} µs` +
          `${bad ? "; CHECK FAILED" : c.saturated ? "; saturated" : ""}`,
      )}</text>`,
    );
  });
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}

export function writeFanoutChart(file: string, cells: FanoutCell[], title: string): void {
  fs.writeFileSync(file, fanoutChart(cells, title));
}
