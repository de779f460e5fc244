/**
 * Faults under load, against a two-worker deployment on a Redis and a Postgres of this test's own (never the
 * machine's shared services): a worker killed with SIGKILL, a worker stopped (SIGSTOP) past its shard leases, Redis
 * killed and restarted (from its append-only file), Postgres stopped as in a crash and restarted. During each, clients send
 * continuously to four channels, each message with an Idempotency-Key of its own, and one client long-polls an event
 * queue. Afterwards, from Postgres and from the API:
 * - every acknowledged send (200 with an id) is stored, under that id, exactly once;
 * - no false error: no error answer (other than SEND_OUTCOME_UNKNOWN, which says it does not know) whose message
 *   is stored;
 * - every send not acknowledged, retried with its key until acknowledged, is then stored exactly once;
 * - the event queue is refused with BAD_EVENT_QUEUE_ID (its client registers again), or kept without a gap: its
 *   event ids increase and it holds every message sent in the meantime (a repeat is counted, not refused).
 * The counts of each fault are printed (`chaos:` lines) and recorded in docs/chaos.md.
 */
import fs from "node:fs";
import path from "node:path";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startChorus, workerPids, type ChorusProcess } from "../support/process.ts";
import { privateServicesAvailable, startPrivatePostgres, startPrivateRedis, type PrivatePostgres, type PrivateRedis } from "../support/private-services.ts";
import { readZuliprc } from "../support/server.ts";
import { redisKeys } from "../../runtime/transport/redis-keys.ts";
import { GROUP } from "../../runtime/transport/redis-streams.ts";

const LEASE_SECONDS = 2;
const CHANNELS = ["chaos-a", "chaos-b", "chaos-c", "chaos-d"];
/** A request with no answer in this long counts as unanswered (a stopped worker holds its connections). */
const REQUEST_TIMEOUT_MS = 15_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/**
 * CHAOS_REDIS_LOSES_DATA=1: Redis restarts empty (no persistence) instead of from an append-only file fsynced on
 * every write. Deliveries lost with its data are then owed to no one: the queue must be refused (BAD_EVENT_QUEUE_ID),
 * never kept with a gap.
 */
const REDIS_LOSES_DATA = process.env.CHAOS_REDIS_LOSES_DATA === "1";

type Outcome = { key: string; channel: string; status?: number; id?: number; code?: string };

interface Counts {
  fault: string;
  sent: number;
  acknowledged: number;
  errors: number;
  unanswered: number;
  unknown: number;
  found: number;
  lost: number;
  duplicated: number;
  falseErrors: number;
  retried: number;
  queue: string;
}

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

describe.skipIf(!privateServicesAvailable())("chaos: faults under load", () => {
  let redis: PrivateRedis;
  let postgres: PrivatePostgres;
  let server: ChorusProcess;
  let auth: string;
  let base: string;
  let db: pg.Pool;

  beforeAll(async () => {
    redis = await startPrivateRedis({ aof: REDIS_LOSES_DATA ? false : "always" });
    cleanups.push(() => redis.stop());
    postgres = await startPrivatePostgres();
    cleanups.push(() => postgres.stop());
    server = await startChorus({
      REDIS_URL: redis.url,
      DATABASE_URL: postgres.url,
      REDIS_PREFIX: "chaos",
      WORKERS: "2",
      LEASE_SECONDS: String(LEASE_SECONDS),
      ASK_TIMEOUT_MS: "4000",
    });
    cleanups.push(async () => fs.rmSync(server.dataDir, { recursive: true, force: true }), () => server.stop());
    for (let i = 0; i < 100 && workerPids(server).length < 2; i++) await sleep(100);
    const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
    auth = `Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}`;
    base = `http://127.0.0.1:${server.port}/api/v1`;
    db = new pg.Pool({ connectionString: postgres.url, max: 2 });
    db.on("error", () => {});
    cleanups.push(() => db.end());
    const sub = await call("POST", "/users/me/subscriptions", { subscriptions: JSON.stringify(CHANNELS.map((name) => ({ name }))) });
    expect(sub.status).toBe(200);
  }, 120_000);

  /** One API call; rejects when no answer comes (connection refused or reset, or REQUEST_TIMEOUT_MS). */
  async function call(method: string, apiPath: string, params: Record<string, string>, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
    const form = new URLSearchParams(params).toString();
    const url = method === "GET" ? `${base}${apiPath}?${form}` : `${base}${apiPath}`;
    const res = await fetch(url, {
      method,
      headers: { authorization: auth, ...(method === "GET" ? {} : { "content-type": "application/x-www-form-urlencoded" }), ...headers },
      body: method === "GET" ? undefined : form,
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    const text = await res.text();
    let body: any;
    try {
      body = JSON.parse(text);
    } catch {
      body = { result: "error", code: `not JSON: ${text.slice(0, 80)}` };
    }
    return { status: res.status, body, headers: res.headers };
  }

  function send(o: Outcome): Promise<{ status: number; body: any; headers: Headers }> {
    return call("POST", "/messages", { type: "stream", to: o.channel, topic: "chaos", content: o.key }, { "idempotency-key": o.key });
  }

  /** Sends to every channel succeed again (the leases moved, the services are back). */
  async function recovered(deadlineMs = 60_000): Promise<void> {
    const until = Date.now() + deadlineMs;
    for (let n = 0; ; n++) {
      const answers = await Promise.all(
        CHANNELS.map((channel) => send({ key: `probe-${Date.now()}-${n}-${channel}`, channel }).catch(() => undefined)),
      );
      if (answers.every((a) => a?.status === 200)) return;
      if (Date.now() > until) {
        throw new Error(`not recovered: ${answers.map((a) => a?.status ?? "no answer").join(", ")}\n${await stuckState()}`);
      }
      await sleep(500);
    }
  }

  /**
   * What tells a stuck hand-over from a slow one, for a failure's message: the workers' last warnings, the leases,
   * each shard stream's entries pending by consumer, and the database sessions not idle.
   */
  async function stuckState(): Promise<string> {
    const said = server.output().split("\n").filter((line) => /"level":(40|50|60)/.test(line)).slice(-15);
    const leases = await db.query("select shard, owner, epoch, expires_at > now() as live from shard_leases order by shard").catch((err) => ({ rows: [String(err)] }));
    const sessions = await db
      .query("select pid, state, wait_event_type, wait_event, now() - xact_start as in_tx, left(query, 100) as query from pg_stat_activity where datname = current_database() and state <> 'idle' and pid <> pg_backend_pid()")
      .catch((err) => ({ rows: [String(err)] }));
    const redisConn = new Redis(redis.url, { lazyConnect: false, maxRetriesPerRequest: 1 });
    const pending: string[] = [];
    try {
      for (let shard = 0; shard < leases.rows.length; shard++) {
        const key = redisKeys("chaos").shard(shard);
        const summary = (await redisConn.call("XPENDING", key, GROUP).catch(() => null)) as [number, string, string, [string, string][]] | null;
        if (summary?.[0]) pending.push(`shard ${shard}: ${summary[0]} pending (${summary[3].map(([c, n]) => `${c.slice(0, 13)} ${n}`).join(", ")})`);
      }
    } finally {
      redisConn.disconnect();
    }
    return [
      "the workers' last warnings:", ...said,
      "leases:", ...leases.rows.map((r) => JSON.stringify(r)),
      "pending entries:", ...pending,
      "database sessions not idle:", ...sessions.rows.map((r) => JSON.stringify(r)),
    ].join("\n");
  }

  /** An event queue's client: polls until stopped; what it saw, and whether the queue was refused. */
  async function watchQueue() {
    const registered = await call("POST", "/register", { event_types: JSON.stringify(["message"]) });
    expect(registered.status).toBe(200);
    const queueId = registered.body.queue_id as string;
    const state = { eventIds: [] as number[], messages: [] as Array<{ id: number; content: string }>, refused: false, stopAt: Infinity };
    const done = (async () => {
      let last = -1;
      while (Date.now() < state.stopAt && !state.refused) {
        try {
          const res = await call("GET", "/events", { queue_id: queueId, last_event_id: String(last), ...(state.stopAt < Infinity ? { dont_block: "true" } : {}) });
          if (res.body.code === "BAD_EVENT_QUEUE_ID") state.refused = true;
          else if (res.status === 200) {
            for (const e of res.body.events) {
              state.eventIds.push(e.id);
              last = Math.max(last, e.id);
              if (e.type === "message") state.messages.push({ id: e.message.id, content: e.message.content });
            }
            if (state.stopAt < Infinity) await sleep(200);
          } else await sleep(200);
        } catch {
          await sleep(200); // no answer: ask again from the same point, as a client does
        }
      }
    })();
    return { state, done };
  }

  async function storedByContent(prefix: string): Promise<Map<string, number[]>> {
    const { rows } = await db.query<{ id: string; content: string }>("select id, content from messages where content like $1", [`${prefix}-%`]);
    const out = new Map<string, number[]>();
    for (const r of rows) out.set(r.content, [...(out.get(r.content) ?? []), Number(r.id)]);
    return out;
  }

  /** Load, the fault in the middle, then the checks; answers the counts. */
  async function underFault(label: string, fault: () => Promise<void>): Promise<Counts> {
    const queue = await watchQueue();
    const outcomes: Outcome[] = [];
    let stopSending = false;
    try {
      return await checked(label, fault, queue, outcomes, () => (stopSending = true), () => stopSending);
    } finally {
      // A failed check leaves nothing running into the next fault.
      stopSending = true;
      queue.state.stopAt = 0;
      await queue.done;
    }
  }

  async function checked(
    label: string,
    fault: () => Promise<void>,
    queue: Awaited<ReturnType<typeof watchQueue>>,
    outcomes: Outcome[],
    stop: () => void,
    stopped: () => boolean,
  ): Promise<Counts> {
    const senders = CHANNELS.map(async (channel) => {
      for (let i = 0; !stopped(); i++) {
        const o: Outcome = { key: `${label}-${channel}-${i}`, channel };
        outcomes.push(o);
        try {
          const res = await send(o);
          o.status = res.status;
          if (res.status === 200) o.id = res.body.id;
          else {
            o.code = res.body.code;
            if (res.status === 503) expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
            await sleep(100);
          }
        } catch {
          await sleep(100); // unanswered
        }
      }
    });
    await sleep(1_500);
    await fault();
    await sleep(3_000);
    stop();
    await Promise.all(senders);
    // Late commits would show here: the entries of abandoned attempts still in the transport run meanwhile.
    await recovered();
    await sleep(2_000);

    const stored = await storedByContent(label);
    const acknowledged = outcomes.filter((o) => o.status === 200);
    const errorAnswers = outcomes.filter((o) => o.status !== undefined && o.status !== 200);
    const lost = acknowledged.filter((o) => !(stored.get(o.key) ?? []).includes(o.id!));
    const duplicated = [...stored.values()].filter((ids) => ids.length > 1);
    const falseErrors = errorAnswers.filter((o) => o.code !== "SEND_OUTCOME_UNKNOWN" && stored.has(o.key));

    // Every send not acknowledged, retried with its key, is stored once.
    const unacknowledged = outcomes.filter((o) => o.status !== 200);
    for (const o of unacknowledged) {
      for (let tries = 0; ; tries++) {
        const res = await send(o).catch(() => undefined);
        if (res?.status === 200) {
          o.id = res.body.id;
          break;
        }
        if (tries > 40) throw new Error(`retry of ${o.key} failed: ${res?.status} ${JSON.stringify(res?.body)}`);
        await sleep(250);
      }
    }
    const after = await storedByContent(label);

    // The queue: drained until it holds every message of the run, or refused.
    const everyId = new Set([...after.values()].flat());
    queue.state.stopAt = Date.now() + 20_000;
    const queued = () => new Set(queue.state.messages.filter((m) => m.content.startsWith(`${label}-`)).map((m) => m.id)).size;
    while (!queue.state.refused && Date.now() < queue.state.stopAt && queued() < everyId.size) await sleep(200);
    queue.state.stopAt = 0;
    await queue.done;
    const seen = queue.state.messages.map((m) => m.id);
    const missing = [...everyId].filter((id) => !seen.includes(id));
    const repeated = seen.length - new Set(seen).size;

    const counts: Counts = {
      fault: label,
      sent: outcomes.length,
      acknowledged: acknowledged.length,
      errors: errorAnswers.length,
      unanswered: outcomes.filter((o) => o.status === undefined).length,
      unknown: errorAnswers.filter((o) => o.code === "SEND_OUTCOME_UNKNOWN").length,
      found: acknowledged.length - lost.length,
      lost: lost.length,
      duplicated: duplicated.length,
      falseErrors: falseErrors.length,
      retried: unacknowledged.length,
      queue: queue.state.refused ? "BAD_EVENT_QUEUE_ID" : `kept: ${seen.length} message events, ${missing.length} missing, ${repeated} repeated`,
    };
    console.log(`chaos: ${JSON.stringify(counts)}${falseErrors.length ? ` false errors: ${JSON.stringify(falseErrors.slice(0, 5))}` : ""}`);

    expect(acknowledged.length).toBeGreaterThan(0);
    expect(lost).toEqual([]);
    expect(duplicated).toEqual([]);
    expect(falseErrors).toEqual([]);
    for (const o of outcomes) expect(after.get(o.key)).toEqual([o.id]);
    // The API shows each channel's messages once, in order.
    for (const channel of CHANNELS) {
      // Paged as a client reads history: the faults before this one wrote to the same channels, and a quiet machine
      // sends more than one page's worth.
      const ids: number[] = [];
      for (let anchor = "oldest", newest = false; !newest; ) {
        const res = await call("GET", "/messages", {
          anchor,
          include_anchor: "false",
          num_before: "0",
          num_after: "1000",
          apply_markdown: "false",
          narrow: JSON.stringify([{ operator: "channel", operand: channel }, { operator: "topic", operand: "chaos" }]),
        });
        expect(res.status).toBe(200);
        for (const m of res.body.messages) if (m.content.startsWith(`${label}-${channel}-`)) ids.push(m.id);
        newest = res.body.found_newest || res.body.messages.length === 0;
        if (!newest) anchor = String(res.body.messages.at(-1).id);
      }
      const expected = outcomes.filter((o) => o.channel === channel).map((o) => o.id!);
      expect([...ids].sort((a, b) => a - b)).toEqual([...new Set(expected)].sort((a, b) => a - b));
    }
    if (!queue.state.refused) {
      // Increasing, not consecutive: a queue rebuilt on another worker goes on from its reserved block of ids.
      const ids = queue.state.eventIds;
      expect(ids).toEqual([...new Set(ids)].sort((a, b) => a - b));
      // Not checked: a message event repeated under a new event id. A poll may be answered with an event before
      // its row is written; when that worker then dies or stalls past its lease, the queue is rebuilt without the
      // event and the redelivered delivery queues it again (docs/chaos.md says why that is left as it is).
      expect(missing).toEqual([]);
    }
    return counts;
  }

  /** A worker process alive now (the primary restarts a killed one under a new pid). */
  async function liveWorker(): Promise<number> {
    for (let i = 0; i < 100; i++) {
      const alive = workerPids(server).filter((pid) => {
        try {
          return process.kill(pid, 0);
        } catch {
          return false;
        }
      });
      if (alive.length >= 2) return alive.at(-1)!;
      await sleep(100);
    }
    throw new Error("fewer than two workers alive");
  }

  it("kill -9 of a worker", async () => {
    const victim = await liveWorker();
    await underFault("kill", async () => void process.kill(victim, "SIGKILL"));
  }, 150_000);

  it("SIGSTOP of a worker past its shard leases", async () => {
    const victim = await liveWorker();
    await underFault("stop", async () => {
      process.kill(victim, "SIGSTOP");
      await sleep((LEASE_SECONDS * 2 + 2) * 1_000);
      process.kill(victim, "SIGCONT");
    });
  }, 150_000);

  it(`Redis killed and restarted ${REDIS_LOSES_DATA ? "empty" : "from its append-only file"}`, async () => {
    await underFault("redis", () => redis.restart(1_000));
  }, 150_000);

  it("Postgres stopped as in a crash and restarted", async () => {
    await underFault("postgres", () => postgres.restart(1_500, "immediate"));
  }, 150_000);
});
