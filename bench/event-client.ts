/**
 * The event-system benchmark's client, run in a child process (forked by bench/events.ts) so that the clients'
 * HTTP work neither shares the server's event loop nor counts in its CPU time, like bench/load.ts for autocannon.
 * Every latency here is taken on this process's clock: a send's start and the receipt of its event are both
 * observed here. It takes one request at a time over IPC (parked polls keep running across requests) and answers
 * with figures and its own CPU time for that request.
 */
import http from "node:http";
import { agent, describeError, figures, request, sleep, type Answer } from "./http-client.ts";

export interface LatencyFigures {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

/** One user's credentials as an HTTP Basic header value. */
export type Auth = string;
export interface QueueRef {
  auth: Auth;
  queueId: string;
}

export type ClientRequest =
  | {
      op: "register";
      base: string;
      users: Auth[];
      /** Registers to make (round-robin over users); with `duration`, a time-boxed run instead. */
      count?: number;
      /** Seconds of measured registering, after `warmup` discarded seconds. */
      duration?: number;
      warmup?: number;
      concurrency: number;
      body: string;
      /** Return the queue ids (index-aligned with `users` when count = users.length). */
      keep: boolean;
    }
  | { op: "park"; base: string; queues: QueueRef[] }
  | { op: "unpark" }
  | {
      op: "wake";
      base: string;
      sender: Auth;
      receiver: QueueRef;
      /** Form body of a send, without the content (the client appends a sequence token). */
      sendBody: string;
      rate: number;
      warmup: number;
      duration: number;
      maxInFlight: number;
    }
  | { op: "rtt"; url: string; rate: number; warmup: number; duration: number }
  | { op: "send"; base: string; sender: Auth; body: string; reps: number }
  | { op: "check"; base: string; queues: QueueRef[]; ids: number[] }
  /** One dont_block poll per queue (activating its user's actor), `concurrency` at a time. */
  | { op: "touch"; base: string; queues: QueueRef[]; concurrency: number; expectBadQueue: boolean }
  /** DELETE /events for each queue, `concurrency` at a time. */
  | { op: "deleteQueues"; base: string; queues: QueueRef[]; concurrency: number }
  /** Open GET /events/stream on each queue (a connection each), `concurrency` at a time, and keep them open. */
  | { op: "openStreams"; base: string; queues: QueueRef[]; concurrency: number }
  /** Close every stream openStreams opened (the client goes away). */
  | { op: "closeStreams" };

export type ClientReply = { id: number; ok: true; result: unknown; cpuMicros: number } | { id: number; ok: false; error: string };

export interface RegisterResult {
  registers: LatencyFigures;
  /** Registers completed per second over the measured part. */
  perSecond: number;
  wallMs: number;
  errors: number;
  errorSamples: string[];
  queueIds?: string[];
}

export interface WakeResult {
  /** Send start → the receiver's poll returned the event, over the measured part. */
  latency: LatencyFigures;
  /** The POST /messages round trips of the measured part. */
  sendLatency: LatencyFigures;
  askedRate: number;
  /** Measured sends answered 2xx, per second from the first measured send to the last of their answers. */
  achievedRate: number;
  sent: number;
  /** Sends the schedule called for that were never made: the in-flight cap was reached until the window ended. */
  notSent: number;
  answered: number;
  sendErrors: number;
  errorSamples: string[];
  /** Measured sends answered with success whose event never reached the receiver. */
  missing: number;
  /** Events received more than once. */
  duplicates: number;
  /** How far the send schedule fell behind (in-flight cap reached), at most, in ms. */
  maxScheduleLagMs: number;
  receiverPolls: number;
  /** Parked polls that returned during the run (heartbeats or errors): 0 means they stayed parked. */
  parkedReturns: number;
  parkedErrors: number;
  measuredMs: number;
}

export interface RttResult {
  latency: LatencyFigures;
  achievedRate: number;
  errors: number;
}

export interface SendResult {
  latencies: number[];
  ids: number[];
  errors: string[];
}

export interface CheckResult {
  checked: number;
  complete: number;
  /** Queues that lack at least one of the ids, with what they lack (a sample). */
  incomplete: Array<{ queueId: string; missing: number[] }>;
  errors: string[];
}

// ---------------------------------------------------------------------------------------------------------------

// ---- register ---------------------------------------------------------------------------------------------------

async function register(req: Extract<ClientRequest, { op: "register" }>): Promise<RegisterResult> {
  const url = new URL("/api/v1/register", req.base);
  const latencies: number[] = [];
  const errorSamples: string[] = [];
  let errors = 0;
  const keep = req.keep ? new Array<string>(req.count ?? 0) : undefined;
  const t0 = performance.now();
  const timed = req.duration !== undefined;
  const measureFrom = t0 + (req.warmup ?? 0) * 1000;
  const stopAt = timed ? measureFrom + req.duration! * 1000 : Infinity;
  let next = 0;
  let measuredDone = 0;
  let measuredStart = timed ? measureFrom : t0;
  let lastEnd = t0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (!timed && i >= req.count!) return;
      if (timed && performance.now() >= stopAt) return;
      const start = performance.now();
      try {
        const a = await request(url, "POST", req.users[i % req.users.length]!, req.body);
        if (a.status !== 200 || typeof a.body?.queue_id !== "string") throw a;
        if (keep) keep[i] = a.body.queue_id;
        if (start >= measureFrom && a.end <= stopAt) {
          latencies.push(a.end - start);
          measuredDone++;
          lastEnd = Math.max(lastEnd, a.end);
        }
      } catch (err) {
        errors++;
        if (errorSamples.length < 5) errorSamples.push(describeError(err));
      }
    }
  };
  await Promise.all(Array.from({ length: req.concurrency }, worker));
  const end = timed ? stopAt : lastEnd;
  if (!timed) measuredStart = t0;
  const wallMs = end - measuredStart;
  return { registers: figures(latencies), perSecond: measuredDone / (wallMs / 1000), wallMs, errors, errorSamples, queueIds: keep };
}

// ---- parked polls -----------------------------------------------------------------------------------------------

interface Parked {
  stopped: boolean;
  returns: number;
  errors: number;
  requests: Set<http.ClientRequest>;
}
let parked: Parked | undefined;

async function park(req: Extract<ClientRequest, { op: "park" }>): Promise<{ parked: number }> {
  if (parked) throw new Error("polls already parked");
  const state: Parked = { stopped: false, returns: 0, errors: 0, requests: new Set() };
  parked = state;
  let written = 0;
  let allWritten!: () => void;
  const ready = new Promise<void>((r) => (allWritten = r));
  if (!req.queues.length) allWritten();
  for (const q of req.queues) {
    void (async () => {
      let last = -1;
      let first = true;
      while (!state.stopped) {
        const url = new URL(`/api/v1/events?queue_id=${encodeURIComponent(q.queueId)}&last_event_id=${last}`, req.base);
        let sent: http.ClientRequest | undefined;
        try {
          const a = await request(url, "GET", q.auth, undefined, (r) => {
            sent = r;
            state.requests.add(r);
            r.on("finish", () => {
              if (first) {
                first = false;
                if (++written === req.queues.length) allWritten();
              }
            });
          });
          if (state.stopped) break;
          state.returns++;
          if (a.status !== 200) throw a;
          for (const e of a.body.events as Array<{ id: number }>) last = Math.max(last, e.id);
        } catch {
          if (state.stopped) break;
          state.errors++;
          await sleep(100);
        } finally {
          if (sent) state.requests.delete(sent);
        }
      }
    })();
  }
  await ready;
  // The requests are on the wire; give the server a moment to park them all.
  await sleep(1000);
  return { parked: req.queues.length };
}

function unpark(): { returns: number; errors: number } {
  const state = parked;
  parked = undefined;
  if (!state) return { returns: 0, errors: 0 };
  state.stopped = true;
  for (const r of state.requests) r.destroy();
  return { returns: state.returns, errors: state.errors };
}

// ---- wake latency -----------------------------------------------------------------------------------------------

async function wake(req: Extract<ClientRequest, { op: "wake" }>): Promise<WakeResult> {
  const sendUrl = new URL("/api/v1/messages", req.base);
  const token = `w${Date.now().toString(36)}x`;
  const sentAt = new Map<number, number>();
  const answeredOk = new Set<number>();
  const received = new Map<number, number>();
  let duplicates = 0;
  const sendLatencies: number[] = [];
  const errorSamples: string[] = [];
  let sendErrors = 0;
  let receiverPolls = 0;
  const parkedReturns0 = parked?.returns ?? 0;
  const parkedErrors0 = parked?.errors ?? 0;

  // The receiver: long-polls its queue in a loop, acknowledging what it got.
  let receiving = true;
  let receiverError: unknown;
  const receiver = (async () => {
    let last = -1;
    while (receiving) {
      const url = new URL(`/api/v1/events?queue_id=${encodeURIComponent(req.receiver.queueId)}&last_event_id=${last}`, req.base);
      let a: Answer;
      try {
        a = await request(url, "GET", req.receiver.auth);
      } catch (err) {
        receiverError = err;
        await sleep(50);
        continue;
      }
      receiverPolls++;
      if (a.status !== 200) {
        receiverError = a;
        await sleep(50);
        continue;
      }
      for (const e of a.body.events as Array<{ id: number; type: string; message?: { content: string } }>) {
        last = Math.max(last, e.id);
        if (e.type !== "message") continue;
        const content = e.message!.content;
        if (!content.startsWith(token)) continue;
        const seq = Number(content.slice(token.length));
        if (received.has(seq)) duplicates++;
        else received.set(seq, a.end);
      }
    }
  })();
  // Let the first poll park before sending.
  await sleep(200);

  const t0 = performance.now();
  const measureFrom = t0 + req.warmup * 1000;
  const stopAt = measureFrom + req.duration * 1000;
  const total = Math.round((req.warmup + req.duration) * req.rate);
  let seq = 0;
  let inFlight = 0;
  let maxLag = 0;
  let answered = 0;
  let lastAnswer = 0;
  const sends: Promise<void>[] = [];
  const sendOne = (n: number) => {
    inFlight++;
    const start = performance.now();
    sentAt.set(n, start);
    const p = request(sendUrl, "POST", req.sender, `${req.sendBody}${token}${n}`)
      .then((a) => {
        if (a.status !== 200) throw a;
        answeredOk.add(n);
        if (start >= measureFrom) {
          answered++;
          lastAnswer = Math.max(lastAnswer, a.end);
          sendLatencies.push(a.end - start);
        }
      })
      .catch((err) => {
        sendErrors++;
        if (errorSamples.length < 5) errorSamples.push(describeError(err));
      })
      .finally(() => {
        inFlight--;
      });
    sends.push(p);
  };
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - t0) * req.rate) / 1000) + 1);
      // Past the window, what the server's backlog kept from being sent is not sent: the run ends on time.
      if (now >= stopAt) return resolve();
      while (seq < due && inFlight < req.maxInFlight) sendOne(seq++);
      if (seq < due) maxLag = Math.max(maxLag, now - (t0 + (seq * 1000) / req.rate));
      if (seq >= total) return resolve();
      setTimeout(tick, 1);
    };
    tick();
  });
  const sendsDone = performance.now();
  await Promise.all(sends);
  // Wait for the receiver to catch up with every successful send (bounded).
  const deadline = performance.now() + 5000;
  while (performance.now() < deadline) {
    let pending = 0;
    for (const n of answeredOk) if (!received.has(n)) pending++;
    if (!pending) break;
    await sleep(20);
  }
  receiving = false;
  // The receiver's last poll is parked: a message to nobody's queue is not available, so just leave it; its
  // socket is destroyed with the agent's when the process exits or the queue expires. Unblock it by sending one
  // more message, which the receiver ignores (unknown token).
  await request(sendUrl, "POST", req.sender, `${req.sendBody}end`).catch(() => {});
  await Promise.race([receiver, sleep(2000)]);

  const latencies: number[] = [];
  let missing = 0;
  for (const [n, start] of sentAt) {
    if (start < measureFrom) continue;
    const got = received.get(n);
    if (got === undefined) {
      if (answeredOk.has(n)) missing++;
      continue;
    }
    latencies.push(got - start);
  }
  if (receiverError && errorSamples.length < 5) errorSamples.push(`receiver: ${describeError(receiverError)}`);
  // Sends answered over the time from the first measured send to the last answer of a measured send: below the
  // asked rate when the server cannot keep up (answers then trail the schedule).
  const measuredMs = Math.max(Math.min(stopAt, sendsDone), lastAnswer) - measureFrom;
  return {
    latency: figures(latencies),
    sendLatency: figures(sendLatencies),
    askedRate: req.rate,
    achievedRate: answered / (measuredMs / 1000),
    sent: seq,
    notSent: total - seq,
    answered: answeredOk.size,
    sendErrors,
    errorSamples,
    missing,
    duplicates,
    maxScheduleLagMs: maxLag,
    receiverPolls,
    parkedReturns: (parked?.returns ?? parkedReturns0) - parkedReturns0,
    parkedErrors: (parked?.errors ?? parkedErrors0) - parkedErrors0,
    measuredMs,
  };
}

/** The HTTP round trip of a hello-world at the same rate, from this client: the floor of any wake latency. */
async function rtt(req: Extract<ClientRequest, { op: "rtt" }>): Promise<RttResult> {
  const url = new URL(req.url);
  const latencies: number[] = [];
  let errors = 0;
  const t0 = performance.now();
  const measureFrom = t0 + req.warmup * 1000;
  const total = Math.round((req.warmup + req.duration) * req.rate);
  let seq = 0;
  let answered = 0;
  const all: Promise<void>[] = [];
  await new Promise<void>((resolve) => {
    const tick = () => {
      const due = Math.min(total, Math.floor(((performance.now() - t0) * req.rate) / 1000) + 1);
      while (seq < due) {
        seq++;
        const start = performance.now();
        all.push(
          request(url, "GET", undefined).then(
            (a) => {
              if (a.status !== 200) errors++;
              else if (start >= measureFrom) {
                answered++;
                latencies.push(a.end - start);
              }
            },
            () => void errors++,
          ),
        );
      }
      if (seq >= total) return resolve();
      setTimeout(tick, 1);
    };
    tick();
  });
  await Promise.all(all);
  return { latency: figures(latencies), achievedRate: answered / req.duration, errors };
}

// ---- fan-out sends and checks -------------------------------------------------------------------------------------

async function send(req: Extract<ClientRequest, { op: "send" }>): Promise<SendResult> {
  const url = new URL("/api/v1/messages", req.base);
  const out: SendResult = { latencies: [], ids: [], errors: [] };
  for (let i = 0; i < req.reps; i++) {
    const start = performance.now();
    try {
      const a = await request(url, "POST", req.sender, `${req.body}${i}`);
      if (a.status !== 200) throw a;
      out.latencies.push(a.end - start);
      out.ids.push(a.body.id);
    } catch (err) {
      out.errors.push(describeError(err));
    }
    await sleep(200);
  }
  return out;
}

async function check(req: Extract<ClientRequest, { op: "check" }>): Promise<CheckResult> {
  const out: CheckResult = { checked: 0, complete: 0, incomplete: [], errors: [] };
  await Promise.all(
    req.queues.map(async (q) => {
      const url = new URL(`/api/v1/events?queue_id=${encodeURIComponent(q.queueId)}&last_event_id=-1&dont_block=true`, req.base);
      try {
        const a = await request(url, "GET", q.auth);
        if (a.status !== 200) throw a;
        const seen = new Set((a.body.events as Array<{ type: string; message?: { id: number } }>).filter((e) => e.type === "message").map((e) => e.message!.id));
        out.checked++;
        const missing = req.ids.filter((id) => !seen.has(id));
        if (missing.length) {
          if (out.incomplete.length < 5) out.incomplete.push({ queueId: q.queueId, missing });
        } else out.complete++;
      } catch (err) {
        if (out.errors.length < 5) out.errors.push(describeError(err));
      }
    }),
  );
  return out;
}

export interface CountResult {
  ok: number;
  errors: number;
  errorSamples: string[];
}

/** Run `one` over `items`, `concurrency` at a time, counting what threw. */
async function each<T>(items: T[], concurrency: number, one: (item: T) => Promise<void>): Promise<CountResult> {
  const out: CountResult = { ok: 0, errors: 0, errorSamples: [] };
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      try {
        await one(items[next++]!);
        out.ok++;
      } catch (err) {
        out.errors++;
        if (out.errorSamples.length < 5) out.errorSamples.push(describeError(err));
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return out;
}

export interface TouchResult extends CountResult {
  perSecond: number;
}

async function touch(req: Extract<ClientRequest, { op: "touch" }>): Promise<TouchResult> {
  const t0 = performance.now();
  const counted = await each(req.queues, req.concurrency, async (q) => {
    const url = new URL(`/api/v1/events?queue_id=${encodeURIComponent(q.queueId)}&last_event_id=-1&dont_block=true`, req.base);
    const a = await request(url, "GET", q.auth);
    const good = req.expectBadQueue ? a.status === 400 && a.body?.code === "BAD_EVENT_QUEUE_ID" : a.status === 200;
    if (!good) throw a;
  });
  return { ...counted, perSecond: req.queues.length / ((performance.now() - t0) / 1000) };
}

// ---- deleting queues, and event streams opened and closed (bench/memory.ts) -------------------------------------

function deleteQueues(req: Extract<ClientRequest, { op: "deleteQueues" }>): Promise<CountResult> {
  return each(req.queues, req.concurrency, async (q) => {
    const a = await request(new URL(`/api/v1/events?queue_id=${encodeURIComponent(q.queueId)}`, req.base), "DELETE", q.auth);
    if (a.status !== 200) throw a;
  });
}

const streams = new Set<http.ClientRequest>();

/** Each stream is open once its first comment (`: connected`) arrived; it stays open until closeStreams. */
function openStreams(req: Extract<ClientRequest, { op: "openStreams" }>): Promise<CountResult> {
  return each(
    req.queues,
    req.concurrency,
    (q) =>
      new Promise<void>((resolve, reject) => {
        const url = new URL(`/api/v1/events/stream?queue_id=${encodeURIComponent(q.queueId)}&last_event_id=-1`, req.base);
        const r = http.get({ host: url.hostname, port: url.port, path: url.pathname + url.search, headers: { authorization: q.auth }, agent: false }, (res) => {
          if (res.statusCode !== 200) {
            res.resume();
            return reject(new Error(`GET /events/stream: ${res.statusCode}`));
          }
          res.once("data", () => resolve());
          res.on("error", () => {}); // closed by closeStreams
        });
        r.on("error", reject);
        streams.add(r);
      }),
  );
}

function closeStreams(): number {
  const n = streams.size;
  for (const r of streams) r.destroy();
  streams.clear();
  return n;
}

// ---------------------------------------------------------------------------------------------------------------

async function handle(msg: ClientRequest): Promise<unknown> {
  switch (msg.op) {
    case "register":
      return register(msg);
    case "park":
      return park(msg);
    case "unpark":
      return unpark();
    case "wake":
      return wake(msg);
    case "rtt":
      return rtt(msg);
    case "send":
      return send(msg);
    case "check":
      return check(msg);
    case "touch":
      return touch(msg);
    case "deleteQueues":
      return deleteQueues(msg);
    case "openStreams":
      return openStreams(msg);
    case "closeStreams":
      return closeStreams();
  }
}

process.on("message", (msg: ClientRequest & { id: number; exit?: true }) => {
  if (msg.exit) {
    unpark();
    closeStreams();
    agent.destroy();
    return process.disconnect();
  }
  const cpu = process.cpuUsage();
  handle(msg).then(
    (result) => {
      const used = process.cpuUsage(cpu);
      process.send!({ id: msg.id, ok: true, result, cpuMicros: used.user + used.system } satisfies ClientReply);
    },
    (err: unknown) => process.send!({ id: msg.id, ok: false, error: String((err as Error)?.stack ?? err) } satisfies ClientReply),
  );
});
process.on("disconnect", () => process.exit(0));
process.on("SIGINT", () => {});
process.on("SIGTERM", () => {});
process.send!({ ready: true });
