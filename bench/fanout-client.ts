/**
 * The fan-out bench's clients (bench/fanout.ts), run in child processes so that neither the members' nor the
 * sender's work shares the server's event loop or counts in its CPU time. One process sends; one or more hold the
 * channel's members, each a real client on its own keep-alive connection: a long-poll loop on GET /events, one
 * GET /events/stream (SSE) per member, or one WebSocket on GET /events/ws per member.
 *
 * Latency crosses processes: the sender writes the wall-clock time it started each POST into the message's content
 * (`fo <index> <epoch ms>`), and a member takes its receipt time on the same clock (performance.timeOrigin +
 * performance.now(): both processes read the machine's one clock, at sub-millisecond resolution).
 *
 * Every delivery is checked per member: each acknowledged send arrives once (a bitmap of indices), message ids and
 * event ids only increase (Zulip delivers a queue's events in order).
 */
import http from "node:http";
import WebSocket from "ws";
import type { QueueRef } from "./event-client.ts";
import { agent, describeError, figures, request, sleep, type Answer } from "./http-client.ts";
import type { LatencyFigures } from "./event-client.ts";
import { emptyHistogram, record, type Histogram } from "./histogram.ts";
import { fanoutBodies, joinRoom, xmppRoom } from "./xmpp-session.ts";

/** Chorus's event transports, and "xmpp": occupants of a room on the reference peer (bench/xmpp-peer.ts). */
export type FanoutTransport = "lp" | "sse" | "ws" | "xmpp";

/** A member: a Chorus user's queue, or an XMPP occupant's nickname. */
export type FanoutMemberRef = QueueRef | { nick: string };

export type FanoutRequest =
  /**
   * Start every member's client (a first dont_block poll activates its queue, then the long-poll or the stream).
   * `warmup`: indices below are checked, not timed (known before the first message arrives). For "xmpp", `base` is
   * `xmpp://host:port/room@service` (xmppRoomUrl) and the members are nicknames.
   */
  | { op: "open"; base: string; transport: FanoutTransport; members: FanoutMemberRef[]; messages: number; warmup: number; concurrency: number }
  /**
   * Send `messages` messages at `rate` per second, at most `maxInFlight` unanswered. An `xmpp://` base sends into the
   * room; a send is answered when the room reflects it back to its sender.
   */
  | { op: "send"; base: string; sender: string; channel: string; rate: number; messages: number; maxInFlight: number }
  /** Wait until every member has every index in `acked` (or `timeoutMs` passes), then report. */
  | { op: "collect"; acked: number[]; timeoutMs: number }
  /** Stop every member's client. */
  | { op: "close" }
  /** This process's CPU time so far (µs). */
  | { op: "cpu" };

export type FanoutReply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: string };

export interface SendFigures {
  /** Indices of the sends answered with success. */
  acked: number[];
  errors: number;
  errorSamples: string[];
  sendLatency: LatencyFigures;
  /** Wall-clock time (epoch ms) the first send started. */
  firstSendAt: number;
  askedRate: number;
  achievedRate: number;
  /** How far the schedule fell behind at most (the in-flight cap was reached), ms. */
  maxScheduleLagMs: number;
}

export interface MemberFigures {
  members: number;
  /** Messages received (checked ones, warm-up included). */
  deliveries: number;
  /** Acknowledged sends some member never got (summed over members). */
  missing: number;
  duplicates: number;
  /** A message id or event id that did not increase. */
  outOfOrder: number;
  /** Members whose client failed (a poll or stream error), and a sample of why. */
  failedMembers: number;
  errorSamples: string[];
  latency: Histogram;
  /** Wall-clock time (epoch ms) of the last receipt. */
  lastReceiptAt: number;
  /** Whether every member had everything before the timeout. */
  complete: boolean;
}

const now = () => performance.timeOrigin + performance.now();


// ---- members ----------------------------------------------------------------------------------------------------

class Member {
  private seen: Uint8Array;
  private lastMessageId = -1;
  lastEventId = -1;
  received = 0;
  duplicates = 0;
  outOfOrder = 0;
  failed?: string;
  /** Called when stopping (the loop ends): destroys the request in flight, or closes the WebSocket. */
  stop?: () => void;
  /** The local port of the member's own connection (a stream's), once connected. */
  localPort?: number;

  constructor(
    readonly ref: FanoutMemberRef,
    messages: number,
    private readonly stats: { latency: Histogram; warmup: number; lastReceiptAt: number; onProgress(): void },
  ) {
    this.seen = new Uint8Array(messages);
  }

  has(index: number): boolean {
    return this.seen[index] === 1;
  }

  /** One event from the server, received at `at` (epoch ms). */
  take(event: { id: number; type: string; message?: { id: number; content: string } }, at: number): void {
    if (event.id <= this.lastEventId) this.outOfOrder++;
    this.lastEventId = Math.max(this.lastEventId, event.id);
    if (event.type !== "message" || !event.message) return;
    const m = /^fo (\d+) ([\d.]+)$/.exec(event.message.content);
    if (m) this.receive(event.message.id, Number(m[1]), Number(m[2]), at);
  }

  /**
   * One message `fo <index> <sentAt>`; `order` must increase from one message to the next (Chorus: the message id;
   * XMPP, one sender on one connection: the index itself).
   */
  receive(order: number, index: number, sentAt: number, at: number): void {
    if (order <= this.lastMessageId) this.outOfOrder++;
    this.lastMessageId = Math.max(this.lastMessageId, order);
    if (this.seen[index]) {
      this.duplicates++;
      return;
    }
    this.seen[index] = 1;
    this.received++;
    if (index >= this.stats.warmup) record(this.stats.latency, at - sentAt);
    this.stats.lastReceiptAt = Math.max(this.stats.lastReceiptAt, at);
    this.stats.onProgress();
  }
}

let members: Member[] = [];
let stopped = false;
/**
 * Local ports of the streams this process closed at the end of earlier cells. A socket that drops at once reports
 * whether its port is one of them: on loopback, Linux reuses such a port while the server may still be closing its
 * side of the old connection (net.ipv4.tcp_tw_reuse = 2).
 */
const closedPorts = new Set<number>();
const portNote = (port: number | undefined) => (port === undefined ? "" : `, local port ${port}${closedPorts.has(port) ? ", which an earlier cell's stream had used" : ""}`);
const stats = { latency: emptyHistogram(), warmup: 0, lastReceiptAt: 0, onProgress: () => {} };

async function longPoll(base: string, member: Member, ref: QueueRef): Promise<void> {
  while (!stopped) {
    const url = new URL(`/api/v1/events?queue_id=${encodeURIComponent(ref.queueId)}&last_event_id=${member.lastEventId}`, base);
    let a: Answer;
    try {
      a = await request(url, "GET", ref.auth, undefined, (r) => (member.stop = () => r.destroy()));
    } catch (err) {
      if (!stopped) member.failed = describeError(err);
      return;
    }
    if (stopped) return;
    if (a.status !== 200) {
      member.failed = describeError(a);
      return;
    }
    const at = performance.timeOrigin + a.end;
    for (const e of a.body.events) member.take(e, at);
  }
}

/** The stream is open once its first comment (`: connected`) arrived. */
function stream(base: string, member: Member, ref: QueueRef): Promise<void> {
  return new Promise((resolve, reject) => {
    const url = new URL(`/api/v1/events/stream?queue_id=${encodeURIComponent(ref.queueId)}&last_event_id=${member.lastEventId}`, base);
    const r = http.get({ host: url.hostname, port: url.port, path: url.pathname + url.search, headers: { authorization: ref.auth }, agent: false }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        return reject(new Error(`GET /events/stream: ${res.statusCode}`));
      }
      member.localPort = res.socket?.localPort;
      res.setEncoding("utf8");
      let pending = "";
      res.on("data", (chunk: string) => {
        resolve();
        const at = now();
        pending += chunk;
        let end: number;
        while ((end = pending.indexOf("\n\n")) >= 0) {
          const block = pending.slice(0, end);
          pending = pending.slice(end + 2);
          const data = block.indexOf("data: ");
          if (data < 0) continue;
          const event = JSON.parse(block.slice(data + 6));
          if (event.result === "error") member.failed = `stream error: ${event.msg}`;
          else member.take(event, at);
        }
      });
      res.on("error", (err) => {
        if (!stopped) member.failed = String(err);
      });
      res.on("end", () => {
        if (!stopped) member.failed ??= `stream ended${portNote(member.localPort)}`;
      });
    });
    r.on("error", (err) => {
      if (!stopped) member.failed = String(err);
      reject(err);
    });
    member.stop = () => r.destroy();
  });
}

/** The socket is open once the upgrade is answered; each frame is a GET /events answer. */
function webSocket(base: string, member: Member, ref: QueueRef): Promise<void> {
  return new Promise((resolve, reject) => {
    const url = new URL(`/api/v1/events/ws?queue_id=${encodeURIComponent(ref.queueId)}&last_event_id=${member.lastEventId}`, base);
    url.protocol = "ws:";
    const socket = new WebSocket(url, { headers: { authorization: ref.auth }, perMessageDeflate: false });
    socket.on("open", () => {
      member.localPort = (socket as unknown as { _socket?: { localPort?: number } })._socket?.localPort;
      resolve();
    });
    socket.on("message", (data) => {
      const at = now();
      const answer = JSON.parse(String(data));
      if (answer.result !== "success") member.failed = `stream error: ${answer.msg}`;
      else for (const e of answer.events) member.take(e, at);
    });
    socket.on("unexpected-response", (_req, res) => {
      res.resume();
      reject(new Error(`GET /events/ws: ${res.statusCode}`));
    });
    socket.on("error", (err) => {
      if (!stopped) member.failed = String(err);
      reject(err);
    });
    const openedAt = performance.now();
    socket.on("close", (code, reason) => {
      if (!stopped) member.failed ??= `socket closed (code ${code}${reason.length ? ` ${reason}` : ""}, ${Math.round(performance.now() - openedAt)} ms after opening, ${member.received} messages in${portNote(member.localPort)})`;
    });
    member.stop = () => socket.terminate();
  });
}

/** An occupant of the reference peer's room: open once the room confirmed it. */
async function occupant(base: string, member: Member, nick: string): Promise<void> {
  const session = await joinRoom(xmppRoom(base), nick, {
    onMessages: (stanzas, at) => {
      for (const { index, sentAt } of fanoutBodies(stanzas)) member.receive(index, index, sentAt, at);
    },
    onError: (reason) => {
      if (!stopped) member.failed = reason;
    },
  });
  member.stop = () => session.close();
}

async function open(req: Extract<FanoutRequest, { op: "open" }>): Promise<{ open: number; failed: number; errorSamples: string[] }> {
  stopped = false;
  Object.assign(stats, { latency: emptyHistogram(), warmup: req.warmup, lastReceiptAt: 0 });
  members = req.members.map((ref) => new Member(ref, req.messages, stats));
  const errorSamples: string[] = [];
  let failed = 0;
  let next = 0;
  const worker = async () => {
    while (next < members.length) {
      const member = members[next++]!;
      const ref = member.ref;
      try {
        if ("nick" in ref) {
          await occupant(req.base, member, ref.nick);
          continue;
        }
        // Activates the member's user actor (its queue comes from the seeded snapshot), as a client's first poll.
        const url = new URL(`/api/v1/events?queue_id=${encodeURIComponent(ref.queueId)}&last_event_id=-1&dont_block=true`, req.base);
        const a = await request(url, "GET", ref.auth);
        if (a.status !== 200) throw a;
        for (const e of a.body.events) member.lastEventId = Math.max(member.lastEventId, e.id);
        if (req.transport === "sse") await stream(req.base, member, ref);
        else if (req.transport === "ws") await webSocket(req.base, member, ref);
        else void longPoll(req.base, member, ref);
      } catch (err) {
        failed++;
        member.failed = describeError(err);
        if (errorSamples.length < 5) errorSamples.push(member.failed);
      }
    }
  };
  await Promise.all(Array.from({ length: req.concurrency }, worker));
  // The long-polls are on the wire; give the server a moment to park them all.
  await sleep(500);
  return { open: members.length - failed, failed, errorSamples };
}

async function collect(req: Extract<FanoutRequest, { op: "collect" }>): Promise<MemberFigures> {
  const done = () => members.every((m) => m.failed !== undefined || req.acked.every((i) => m.has(i)));
  let complete = done();
  if (!complete) {
    complete = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), req.timeoutMs);
      let checked = 0;
      // Checked at most once per received batch's turn, not per event.
      stats.onProgress = () => {
        if (checked++) return;
        setImmediate(() => {
          checked = 0;
          if (done()) {
            clearTimeout(timer);
            resolve(true);
          }
        });
      };
    });
    stats.onProgress = () => {};
  }
  let missing = 0;
  for (const m of members) for (const i of req.acked) if (!m.has(i)) missing++;
  const failedMembers = members.filter((m) => m.failed !== undefined);
  return {
    members: members.length,
    deliveries: members.reduce((n, m) => n + m.received, 0),
    missing,
    duplicates: members.reduce((n, m) => n + m.duplicates, 0),
    outOfOrder: members.reduce((n, m) => n + m.outOfOrder, 0),
    failedMembers: failedMembers.length,
    errorSamples: failedMembers.slice(0, 5).map((m) => m.failed!),
    latency: stats.latency,
    lastReceiptAt: stats.lastReceiptAt,
    complete,
  };
}

function close(): number {
  stopped = true;
  for (const m of members) {
    if (m.localPort !== undefined) closedPorts.add(m.localPort);
    m.stop?.();
  }
  const n = members.length;
  members = [];
  return n;
}

// ---- the sender -------------------------------------------------------------------------------------------------

/** One send of `body`: resolves with the time (performance.now()) it was answered, rejects with why it failed. */
interface Poster {
  post(index: number, body: string): Promise<number>;
  close(): void;
}

/** POST /messages to the channel, answered when committed. */
function chorusPoster(req: Extract<FanoutRequest, { op: "send" }>): Poster {
  const url = new URL("/api/v1/messages", req.base);
  const prefix = `type=stream&to=${encodeURIComponent(req.channel)}&topic=t&content=`;
  return {
    post: (_index, body) =>
      request(url, "POST", req.sender, prefix + encodeURIComponent(body)).then((a) => {
        if (a.status !== 200 || a.body?.result !== "success") throw a;
        return a.end;
      }),
    close: () => {},
  };
}

/** A groupchat message into the room, answered when the room reflects it back to the sender. */
async function roomPoster(base: string): Promise<Poster> {
  const waiting = new Map<number, (end: number) => void>();
  let failed: string | undefined;
  const session = await joinRoom(xmppRoom(base), "sender", {
    onMessages: (stanzas, at) => {
      for (const { index } of fanoutBodies(stanzas)) {
        waiting.get(index)?.(at - performance.timeOrigin);
        waiting.delete(index);
      }
    },
    onError: (reason) => {
      failed = reason;
      for (const answer of waiting.values()) answer(Number.NaN);
      waiting.clear();
    },
  });
  return {
    post: (index, body) =>
      new Promise((resolve, reject) => {
        if (failed) return reject(new Error(failed));
        waiting.set(index, (end) => (Number.isNaN(end) ? reject(new Error(failed)) : resolve(end)));
        session.say(body);
      }),
    close: () => session.close(),
  };
}

async function send(req: Extract<FanoutRequest, { op: "send" }>): Promise<SendFigures> {
  const poster = req.base.startsWith("xmpp:") ? await roomPoster(req.base) : chorusPoster(req);
  const acked: number[] = [];
  const latencies: number[] = [];
  const errorSamples: string[] = [];
  let errors = 0;
  let inFlight = 0;
  let maxLag = 0;
  let lastAnswer = 0;
  let freed: (() => void) | undefined;
  const answered: Array<Promise<void>> = [];
  const t0 = performance.now();
  const firstSendAt = performance.timeOrigin + t0;
  for (let i = 0; i < req.messages; i++) {
    const due = t0 + (i * 1000) / req.rate;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    while (inFlight >= req.maxInFlight) await new Promise<void>((r) => (freed = r));
    maxLag = Math.max(maxLag, performance.now() - due);
    const start = performance.now();
    inFlight++;
    answered.push(
      poster
        .post(i, `fo ${i} ${(performance.timeOrigin + start).toFixed(3)}`)
        .then((end) => {
          acked.push(i);
          latencies.push(end - start);
          lastAnswer = Math.max(lastAnswer, end);
        })
        .catch((err) => {
          errors++;
          if (errorSamples.length < 5) errorSamples.push(describeError(err));
        })
        .finally(() => {
          inFlight--;
          freed?.();
          freed = undefined;
        }),
    );
  }
  await Promise.all(answered);
  poster.close();
  return {
    acked: acked.sort((a, b) => a - b),
    errors,
    errorSamples,
    sendLatency: figures(latencies),
    firstSendAt,
    askedRate: req.rate,
    achievedRate: acked.length / (Math.max(1, lastAnswer - t0) / 1000),
    maxScheduleLagMs: maxLag,
  };
}

// ---------------------------------------------------------------------------------------------------------------

async function handle(msg: FanoutRequest): Promise<unknown> {
  switch (msg.op) {
    case "open":
      return open(msg);
    case "send":
      return send(msg);
    case "collect":
      return collect(msg);
    case "close":
      return close();
    case "cpu": {
      const used = process.cpuUsage();
      return used.user + used.system;
    }
  }
}

process.on("message", (msg: FanoutRequest & { id: number; exit?: true }) => {
  if (msg.exit) {
    close();
    agent.destroy();
    return process.disconnect();
  }
  handle(msg).then(
    (result) => process.send!({ id: msg.id, ok: true, result } satisfies FanoutReply),
    (err: unknown) => process.send!({ id: msg.id, ok: false, error: String((err as Error)?.stack ?? err) } satisfies FanoutReply),
  );
});
process.on("disconnect", () => process.exit(0));
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});
process.send!({ ready: true });
