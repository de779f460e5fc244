/**
 * What the bench measures: the ceilings (a raw uWebSockets.js hello-world, and the same hello-world through the
 * project's uWS adapter, gateway/http.ts), the engines a Chorus node can run on, and the scenarios run against
 * each engine. bench/run.ts drives them and does the measuring.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { sql } from "kysely";
import uws from "uWebSockets.js";
import { cpuByProcess, procCpuMicros, TICKS_PER_SECOND } from "../test/support/proc-stat.ts";
import { loadConfig, ZULIP_RATE_LIMITS, type RateLimitRules } from "../runtime/config.ts";
import { placeShards } from "../runtime/placement.ts";
import { Keyring } from "../runtime/secrets.ts";
import { ROLE } from "../actors/chat/organization/realm.ts";
import { User } from "../actors/chat/users/user.protocol.ts";
import { roleGroups, systemGroups } from "../actors/chat/organization/groups.ts";
import type { RunningNode } from "../gateway/main.ts";
import { serverCode } from "./server-code.ts";
import { startHttpServer } from "../gateway/http.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "../test/support/services.ts";
import { copyKeptCredentials, keptStoreFromEnv } from "./kept-store.ts";
import { describeResource, removeResource, type Janitor, type Resource } from "./janitor.ts";
import type { Auth } from "./event-client.ts";

/** The benchmarks measure the server, not its rate limits: a few users send thousands of requests a second. */
const UNLIMITED: RateLimitRules = { apiByUser: [], apiByIp: [], authenticateByUsername: [], authenticateByIp: [] };

export const HOST = "127.0.0.1";

/** One HTTP request shape autocannon repeats. */
export interface Target {
  method: "GET" | "POST";
  path: string;
  headers?: Record<string, string>;
  body?: string;
  /** Authorization headers taken in turn, one per request: the load acts as many users instead of one. */
  authorizations?: string[];
}

// ---------------------------------------------------------------------------------------------------------------
// Ceilings

export interface Ceiling {
  name: string;
  describe: string;
  port: number;
  target: Target;
  close(): void;
}

/** `GET /` → "ok" straight on uWS: the machine's ceiling for one Node process (what the guide calls the ceiling). */
export function startRawUwsCeiling(): Promise<Ceiling> {
  const app = uws.App();
  app.get("/", (res) => {
    res.end("ok");
  });
  app.any("/*", (res) => {
    res.writeStatus("404 Not Found").end();
  });
  return new Promise((resolve, reject) => {
    app.listen(HOST, 0, (socket) => {
      if (!socket) return reject(new Error("raw uWS ceiling: cannot listen"));
      resolve({
        name: "ceiling:uws",
        describe: "raw uWebSockets.js hello-world (GET / → ok)",
        port: uws.us_socket_local_port(socket as unknown as uws.us_socket),
        target: { method: "GET", path: "/" },
        close() {
          uws.us_listen_socket_close(socket);
          (app as unknown as { close(): void }).close();
        },
      });
    });
  });
}

/** The same hello-world through gateway/http.ts (onAborted, header copy, cork, status line): the adapter's cost. */
export async function startAdapterCeiling(): Promise<Ceiling> {
  const server = await startHttpServer({
    host: HOST,
    port: 0,
    maxBodyBytes: 1024,
    handler: () => ({ status: 200, body: "ok" }),
  });
  return {
    name: "ceiling:adapter",
    describe: "hello-world through gateway/http.ts (startHttpServer, synchronous handler)",
    port: server.port,
    target: { method: "GET", path: "/" },
    close: () => server.close(),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Engines

/**
 * `redis+postgres ×2`: two worker nodes in this one process, each holding its home shards (shard mod 2), the
 * load sent to the first: half of a message's hops cross between the nodes through Redis, as in a deployment of
 * WORKERS=2, where the one-worker engine has every hop local. The server figures are both nodes'. Both nodes run
 * on this process's one event loop, so its figures add the crossings' cost to one core's work; they are not what two
 * worker processes on two cores would reach (a fan-out's 5,000 cross-node poll replies are made and read here).
 */
export const ENGINES = ["embedded", "redis+postgres", "redis+postgres ×2"] as const;
export type EngineName = (typeof ENGINES)[number];

export interface ServiceStats {
  /**
   * CPU time (µs) by key: `postgres:<pid>` for each backend connected to this engine's database, `redis` for the
   * whole Redis server (shared with anyone else using it). Empty for the embedded engine, whose store runs inside
   * this process.
   */
  cpu: Map<string, number>;
  /**
   * Counters: `postgres transactions` (xact_commit + xact_rollback of this database; Postgres publishes these
   * with up to a second's delay), `redis commands` (the whole server's total_commands_processed).
   */
  counters: Record<string, number>;
}

export interface Engine {
  name: EngineName;
  describe: string;
  node: RunningNode;
  baseUrl: string;
  owner: { email: string; apiKey: string };
  /** HTTP Basic header of the owner. */
  authorization: string;
  startupMs: number;
  /** What the services outside this process have done so far (cumulative; the bench takes differences). */
  serviceStats(): Promise<ServiceStats>;
  /** Close the node, then drop the database / Redis keys / temp directory. Idempotent; never throws. */
  stop(): Promise<void>;
}

function readZuliprc(file: string): { email: string; apiKey: string } {
  const text = fs.readFileSync(file, "utf8");
  const email = /^email=(.*)$/m.exec(text)?.[1]?.trim();
  const apiKey = /^key=(.*)$/m.exec(text)?.[1]?.trim();
  if (!email || !apiKey) throw new Error(`no email/key in ${file}`);
  return { email, apiKey };
}

/**
 * Start one Chorus node on `name`'s engines in a fresh temp DATA_DIR (and a fresh Postgres database and Redis
 * prefix for redis+postgres). Everything created is registered as soon as it exists (its stop function with
 * `track`, each resource with the janitor), so an interrupted or killed run still cleans up.
 */
export async function startEngine(name: EngineName, track: (stop: () => Promise<void>) => void, janitor: Janitor): Promise<Engine> {
  const cleanups: Array<{ what: string; run: () => Promise<void> | void }> = [];
  const owned = (resource: Resource, remove: () => Promise<void> | void = () => removeResource(resource)) => {
    janitor.watch(resource);
    cleanups.push({
      what: describeResource(resource),
      run: async () => {
        await remove();
        janitor.release(resource);
      },
    });
  };
  let stopped: Promise<void> | undefined;
  const stop = () =>
    (stopped ??= (async () => {
      for (const step of cleanups.reverse()) {
        try {
          await step.run();
        } catch (err) {
          console.error(`bench: cleanup of ${step.what} failed:`, err);
        }
      }
    })());
  track(stop);

  const t0 = performance.now();
  try {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `chorus-bench-${name.replace(/\W/g, "-")}-`));
    owned({ kind: "dir", path: dataDir });

    let config;
    let describe: string;
    let serviceStats = async (): Promise<ServiceStats> => ({ cpu: new Map(), counters: {} });
    let node: RunningNode | undefined;
    let workers = 1;
    if (name === "embedded") {
      // Explicit undefineds: DATABASE_URL / REDIS_URL in the environment must not leak into the embedded engine.
      config = loadConfig({ port: 0, host: HOST, dataDir, databaseUrl: undefined, redisUrl: undefined, workers: 1, rateLimits: { ...UNLIMITED }, accessLog: false });
      describe = "memory transport + PGlite (temp DATA_DIR), one process";
    } else {
      const kept = keptStoreFromEnv();
      const database = await freshDatabase({ template: kept?.databaseName });
      owned({ kind: "database", url: database.url }, () => database.drop());
      if (kept) copyKeptCredentials(kept, dataDir);
      const redis = freshRedisPrefix();
      owned({ kind: "redis", url: REDIS_URL, prefix: redis.prefix }, () => redis.clean());
      workers = name === "redis+postgres ×2" ? 2 : 1;
      config = loadConfig({
        port: 0,
        host: HOST,
        dataDir,
        databaseUrl: database.url,
        redisUrl: REDIS_URL,
        redisPrefix: redis.prefix,
        workers,
        rateLimits: { ...UNLIMITED }, // a copy per node: send-limited turns a rule on and off in it
        // A line per request to the terminal would be measured as the server's work (and drown the report).
        accessLog: false,
      });
      describe = `Redis Streams transport (${REDIS_URL}) + Postgres (${kept ? `a copy of the kept ${kept.databaseName}` : "fresh database"}), ${workers === 1 ? "one process" : `${workers} worker nodes in one process`}`;
      const info = new Redis(REDIS_URL, { protocol: 2, maxRetriesPerRequest: 1, lazyConnect: true });
      cleanups.push({ what: "Redis INFO connection", run: () => void info.disconnect() });
      serviceStats = async () => {
        let cpu = new Map<string, number>();
        const counters: Record<string, number> = {};
        if (node) {
          const db = node.store.db;
          const { rows } = await sql<{ pid: number }>`select pid from pg_stat_activity where datname = current_database()`.execute(db);
          cpu = cpuByProcess("postgres", rows.map((r) => r.pid));
          const stat = await sql<{ n: string }>`select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()`.execute(db);
          counters["postgres transactions"] = Number(stat.rows[0]?.n ?? 0);
        }
        try {
          const text = (await info.info("cpu")) + (await info.info("stats"));
          const field = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, "m").exec(text)?.[1] ?? 0);
          cpu.set("redis", (field("used_cpu_sys") + field("used_cpu_user")) * 1e6);
          counters["redis commands"] = field("total_commands_processed");
        } catch {
          // no figures for Redis then
        }
        return { cpu, counters };
      };
    }

    const { startNode } = await serverCode();
    const running = await startNode(config);
    node = running;
    // Closed first (cleanups run in reverse): the database and Redis keys go after the node let go of them.
    cleanups.push({ what: "node", run: () => running.close() });
    const others: RunningNode[] = [];
    for (let workerIndex = 1; workerIndex < workers; workerIndex++) {
      const other = await startNode(config, { workerIndex, prepared: true });
      others.push(other);
      cleanups.push({ what: `worker node ${workerIndex}`, run: () => other.close() });
    }
    // The first node takes every shard until the others start; measure once each holds only its home shards.
    const nodes = [running, ...others];
    const homes = placeShards(config.shards, nodes.map((n) => n.system.nodeId));
    const settled = () => nodes.every((n) => n.system.heldShards().every((shard) => homes[shard] === n.system.nodeId));
    for (const deadline = Date.now() + 4 * config.leaseSeconds * 1000; !settled(); ) {
      if (Date.now() > deadline) throw new Error("the worker nodes did not settle on their home shards");
      await new Promise((r) => setTimeout(r, 100));
    }
    const owner = readZuliprc(path.join(dataDir, "zuliprc"));
    return {
      name,
      describe,
      node: running,
      baseUrl: `http://${HOST}:${running.port}`,
      owner,
      authorization: basicAuth(owner.email, owner.apiKey),
      startupMs: performance.now() - t0,
      serviceStats,
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}


/** One API call for setup, retried while the node is still taking its shards (503/504 or a refused connection). */
export async function api(
  engine: Engine,
  method: "GET" | "POST",
  apiPath: string,
  form?: Record<string, string>,
): Promise<Record<string, unknown>> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    let status = 0;
    let text = "";
    try {
      const res = await fetch(engine.baseUrl + apiPath, {
        method,
        headers: {
          authorization: engine.authorization,
          ...(form ? { "content-type": "application/x-www-form-urlencoded" } : {}),
        },
        body: form ? new URLSearchParams(form).toString() : undefined,
      });
      status = res.status;
      text = await res.text();
      if (res.ok) return JSON.parse(text) as Record<string, unknown>;
    } catch (err) {
      text = String(err);
    }
    if ((status !== 0 && status < 500) || Date.now() > deadline) {
      throw new Error(`${method} ${apiPath} → ${status}: ${text.slice(0, 300)}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Population: users and subscriptions of one engine, made once and shared by the scenarios that need them

export interface BenchUser {
  id: number;
  email: string;
  auth: Auth;
  /** The queues seeded for this user at creation (see Population.users). */
  queues: string[];
}

/** The HTTP Basic header of a user's e-mail and API key. */
const basicAuth = (email: string, apiKey: string) => "Basic " + Buffer.from(`${email}:${apiKey}`).toString("base64");

/** Principals per subscribe request. */
const CHUNK = 1000;

export class Population {
  private pools = new Map<string, BenchUser[]>();
  private subscribed = new Map<string, Set<number>>();
  private keyring?: Keyring;
  private realmId?: number;
  /** Setup timings, for the report. */
  readonly setup: Record<string, number> = {};

  constructor(readonly engine: Engine) {}

  /**
   * `n` members named `<pool>-<i>@bench.example`, created directly in the store (once), 500 rows per statement:
   * the rows actors/chat/organization/realm.ts insertAccount writes (a users row with a fresh API key, stored as HMAC + AES-GCM,
   * and the role's system-group memberships), without its one-at-a-time round trips.
   *
   * With `queuesPerUser`, each user also gets that many event queues (event_types ["message"], the defaults of
   * POST /register otherwise) seeded as its user actor's snapshot, the durable form actors/chat/users/user.ts keeps its queue
   * definitions in and rebuilds them from when it activates (as after a worker restart). Registering 10,000s of
   * queues through POST /register would take minutes (see the register figure); the actors are not active yet,
   * so the first request that reaches one (a poll, a delivery) activates it with these queues. Every scenario
   * then checks through the API that the queues exist and get their events.
   */
  async users(pool: string, n: number, queuesPerUser = 0): Promise<BenchUser[]> {
    const have = this.pools.get(pool) ?? [];
    if (have.length >= n) return have.slice(0, n);
    const t0 = performance.now();
    const config = this.engine.node.config;
    this.keyring ??= Keyring.load(config.dataDir, config.secret);
    const db = this.engine.node.store.db;
    this.realmId ??= (await db.selectFrom("realms").select("id").orderBy("id").executeTakeFirstOrThrow()).id;
    const keyring = this.keyring;
    const realmId = this.realmId;
    const groups = await systemGroups(db, realmId);
    const memberGroups = roleGroups(ROLE.member).map((name) => groups.get(name)!);
    const now = Math.floor(Date.now() / 1000);
    for (let from = have.length; from < n; from += 500) {
      const batch = Array.from({ length: Math.min(n, from + 500) - from }, (_, k) => {
        const i = from + k;
        return { email: `${pool}-${i}@bench.example`, fullName: `${pool} ${i}`, apiKey: Keyring.newApiKey() };
      });
      const made = await db.transaction().execute(async (trx) => {
        const rows = await trx
          .insertInto("users")
          .values(
            batch.map((b) => ({
              realm_id: realmId,
              email: b.email,
              delivery_email: b.email,
              full_name: b.fullName,
              role: ROLE.member,
              is_active: true,
              is_bot: false,
              bot_type: null,
              bot_owner_id: null,
              api_key_hash: keyring.hashApiKey(b.apiKey),
              api_key_enc: keyring.encrypt(b.apiKey),
              password_hash: null,
              date_joined: now,
              timezone: "",
              avatar_version: 1,
            })),
          )
          .returning(["id", "email"])
          .execute();
        const ids = new Map(rows.map((r) => [r.email, r.id]));
        await trx
          .insertInto("user_group_members")
          .values(rows.flatMap((r) => memberGroups.map((group_id) => ({ group_id, user_id: r.id }))))
          .execute();
        const users = batch.map((b) => ({
          id: ids.get(b.email)!,
          email: b.email,
          auth: basicAuth(b.email, b.apiKey),
          queues: Array.from({ length: queuesPerUser }, () => randomUUID()),
        }));
        if (queuesPerUser) {
          await trx
            .insertInto("actor_snapshots")
            .values(
              users.map((u) => ({
                kind: User.name,
                key: String(u.id),
                version: 1,
                state: JSON.stringify({
                  queues: u.queues.map((id) => ({
                    id,
                    eventTypes: ["message"],
                    narrow: [],
                    applyMarkdown: false,
                    clientGravatar: true,
                    allPublicStreams: false,
                    clientCapabilities: {},
                  })),
                  seqFloor: 1,
                }),
                updated_at: now,
              })),
            )
            .execute();
        }
        return users;
      });
      have.push(...made);
    }
    this.pools.set(pool, have);
    this.setup[`create ${pool} users (${n}${queuesPerUser ? `, ${queuesPerUser} queue(s) each` : ""}) ms`] = Math.round(performance.now() - t0);
    return have.slice(0, n);
  }

  /**
   * The pool's first `n` members as a kept store holds them (READS_STORE, bench/kept-store.ts), each given a fresh
   * API key: the keys they were made with were never written down.
   */
  async adopt(pool: string, n: number): Promise<BenchUser[]> {
    const config = this.engine.node.config;
    const keyring = (this.keyring ??= Keyring.load(config.dataDir, config.secret));
    const db = this.engine.node.store.db;
    const users: BenchUser[] = [];
    for (let i = 0; i < n; i++) {
      const email = `${pool}-${i}@bench.example`;
      const apiKey = Keyring.newApiKey();
      const row = await db
        .updateTable("users")
        .set({ api_key_hash: keyring.hashApiKey(apiKey), api_key_enc: keyring.encrypt(apiKey) })
        .where("email", "=", email)
        .returning("id")
        .executeTakeFirst();
      if (!row) throw new Error(`the kept store has no ${email}`);
      users.push({ id: row.id, email, auth: basicAuth(email, apiKey), queues: [] });
    }
    this.pools.set(pool, users);
    return users;
  }

  /** Subscribe `users` to `channel` (the owner creates it), through the API, `CHUNK` principals per request. */
  async subscribe(channel: string, users: BenchUser[]): Promise<void> {
    const done = this.subscribed.get(channel) ?? new Set<number>();
    this.subscribed.set(channel, done);
    const todo = users.filter((u) => !done.has(u.id));
    if (!todo.length) return;
    const t0 = performance.now();
    for (let i = 0; i < todo.length; i += CHUNK) {
      const chunk = todo.slice(i, i + CHUNK);
      await api(this.engine, "POST", "/api/v1/users/me/subscriptions", {
        subscriptions: JSON.stringify([{ name: channel }]),
        principals: JSON.stringify(chunk.map((u) => u.id)),
      });
      for (const u of chunk) done.add(u.id);
    }
    this.setup[`subscribe ${todo.length} to ${channel} ms`] = Math.round(performance.now() - t0);
  }

}

// ---------------------------------------------------------------------------------------------------------------
// Scenarios

export const CHANNEL = "bench";
export const SEND_BODY = "type=stream&to=bench&topic=t&content=hello";

export interface RunCounts {
  "2xx": number;
  connections: number;
  pipelining: number;
}

export interface Verification {
  ok: boolean;
  /** Messages in the channel that this scenario's runs (warm-up + measured) created. */
  stored: number;
  /** 2xx responses the load generator counted over the same runs. */
  acknowledged: number;
  /** stored - acknowledged. */
  difference: number;
  note: string;
}

export interface ScenarioOptions {
  /** Messages in the bench channel while reads are measured. */
  history: number;
  /** The engine's bench users, for scenarios that need more than the owner. */
  population: Population;
}

export interface Scenario {
  name: string;
  describe: string;
  /** Once per engine, before the warm-up; what it returns is recorded beside the figures (e.g. data size). */
  prepare(engine: Engine, options: ScenarioOptions): Promise<Record<string, unknown> | void>;
  target(engine: Engine): Target;
  /** After the measured run: check the server's state against what the load generator saw. */
  verify?(engine: Engine, runs: RunCounts[]): Promise<Verification>;
  /** After the measured run: figures autocannon cannot take (e.g. streams), given the ceiling measured in this run. */
  after?(engine: Engine, ceiling: { latencyP50Ms?: number }): Promise<AfterFigures>;
  /** Last, whatever happened: undo what prepare changed in the node for this scenario alone. */
  finish?(engine: Engine): Promise<void>;
  /** false: measured with the metrics switched off (runtime/metrics.ts), beside the same scenario with them on. */
  metrics?: boolean;
}

export interface AfterFigures {
  summary: string;
  figures: Record<string, unknown>;
  problems: string[];
}

async function channelId(engine: Engine, channel: string): Promise<number> {
  const row = await engine.node.store.db.selectFrom("streams").select("id").where("name", "=", channel).executeTakeFirst();
  if (!row) throw new Error(`channel "${channel}" does not exist`);
  return Number(row.id);
}

async function countMessages(engine: Engine, channel = CHANNEL): Promise<number> {
  const id = await channelId(engine, channel);
  const row = await engine.node.store.db
    .selectFrom("messages")
    .select((eb) => eb.fn.countAll<string | number>().as("n"))
    .where("stream_id", "=", id)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Subscribe the owner to a bench channel (creating it); idempotent. */
async function ensureChannel(engine: Engine, channel = CHANNEL): Promise<void> {
  await api(engine, "POST", "/api/v1/users/me/subscriptions", { subscriptions: JSON.stringify([{ name: channel }]) });
}

/** Messages in flight when autocannon stopped may still commit: wait until the count stops moving. */
async function settledCount(engine: Engine, channel: string): Promise<number> {
  let last = await countMessages(engine, channel);
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const now = await countMessages(engine, channel);
    if (now === last) return now;
    last = now;
  }
  return last;
}

/**
 * POST /messages as the owner to a channel of `subscribers` users (the owner and members made in the store; none
 * has an event queue, as most users of a large deployment at any moment). Verified afterwards: every 2xx is a
 * stored message and nothing else was stored.
 */
function sendScenario(name: string, channel: string, subscribers: number): Scenario {
  const body = `type=stream&to=${encodeURIComponent(channel)}&topic=t&content=hello`;
  let baseline = 0;
  return {
    name,
    describe: `POST /api/v1/messages (${body}) as the owner, to a channel of ${subscribers} subscriber(s)`,
    async prepare(engine, options) {
      await ensureChannel(engine, channel);
      if (subscribers > 1) await options.population.subscribe(channel, await options.population.users("members", subscribers - 1));
      baseline = await countMessages(engine, channel);
      return { channelMessagesBefore: baseline, subscribers };
    },
    target: (engine) => ({
      method: "POST",
      path: "/api/v1/messages",
      headers: { authorization: engine.authorization, "content-type": "application/x-www-form-urlencoded" },
      body,
    }),
    async verify(engine, runs) {
      const stored = (await settledCount(engine, channel)) - baseline;
      const acknowledged = runs.reduce((n, r) => n + r["2xx"], 0);
      const difference = stored - acknowledged;
      // autocannon stops at the deadline without waiting for answers in flight: those sends may still commit.
      const inFlight = runs.reduce((n, r) => n + r.connections * r.pipelining, 0);
      let ok = difference === 0;
      let note: string;
      if (ok) note = "every 2xx is a stored message and nothing else was stored";
      else if (difference > 0 && difference <= inFlight) {
        ok = true;
        note = `${difference} more stored than acknowledged: requests in flight when autocannon stopped (bound ${inFlight})`;
      } else if (difference < 0) note = `LOST: ${-difference} acknowledged sends are not stored`;
      else note = `${difference} more stored than acknowledged, above the in-flight bound ${inFlight}: duplicates or sends answered with an error yet stored`;
      return { ok, stored, acknowledged, difference, note };
    },
  };
}

export const send = sendScenario("send", CHANNEL, 1);

/**
 * `send` with the chat API's rate limit counted on every request, on the same node right after `send` (the summary
 * gives the ratio): one rule per user, as Zulip's default (api_by_user), counted where the node counts it (Redis on
 * redis+postgres, shared by the workers; memory on embedded), with a limit the load never reaches, so the figure is
 * the cost of counting, not of refusing. The node's rules are read per request, so turning them on and off here
 * changes nothing else.
 */
export const sendLimited: Scenario = (() => {
  const base = sendScenario("send-limited", CHANNEL, 1);
  const counted = [{ seconds: ZULIP_RATE_LIMITS.apiByUser[0]!.seconds, calls: 1_000_000_000 }];
  return {
    ...base,
    describe: `${base.describe}, with the api_by_user rate limit counted (${counted[0]!.calls} calls per ${counted[0]!.seconds} s)`,
    async prepare(engine, options) {
      engine.node.config.rateLimits.apiByUser = counted;
      return base.prepare(engine, options);
    },
    async finish(engine) {
      engine.node.config.rateLimits.apiByUser = [];
    },
  };
})();

/** `send` without metrics: the difference is what counting costs a send (HTTP histogram, turns, commits, counters). */
export const sendUnmetered: Scenario = { ...sendScenario("send-unmetered", CHANNEL, 1), metrics: false };
export const send10 = sendScenario("send10", "bench-10", 10);
export const send1000 = sendScenario("send1000", "bench-1000", 1000);

/** Send until the bench channel holds `count` messages, a few requests at a time. */
async function fillChannel(engine: Engine, count: number): Promise<number> {
  let n = await countMessages(engine);
  const form = Object.fromEntries(new URLSearchParams(SEND_BODY));
  while (n < count) {
    const batch = Math.min(16, count - n);
    await Promise.all(Array.from({ length: batch }, () => api(engine, "POST", "/api/v1/messages", form)));
    n += batch;
  }
  return countMessages(engine);
}

/**
 * Runs before send, on a channel filled to a fixed size (--history), so that its figures compare across engines
 * and runs: the cost of this read grows with the number of messages the user can see (see the report).
 */
export const fetchNewest: Scenario = {
  name: "fetch",
  describe: "GET /api/v1/messages?anchor=newest&num_before=20&num_after=0 as the owner",
  async prepare(engine, options) {
    await ensureChannel(engine);
    return { channelMessages: await fillChannel(engine, options.history) };
  },
  target: (engine) => ({
    method: "GET",
    path: "/api/v1/messages?anchor=newest&num_before=20&num_after=0",
    headers: { authorization: engine.authorization },
  }),
};

const BIG_STORE = 1_000_000;
const BIG_CHANNEL = "bench-1m";
const BIG_TOPICS = 100;

/**
 * A store of 1,000,000 messages (one channel, 100 topics, the owner's flag row for each), written straight into
 * the tables in one statement each: sending them through the API would take longer than the whole bench.
 */
async function fillBigStore(engine: Engine): Promise<Record<string, unknown>> {
  const db = engine.node.store.db;
  await ensureChannel(engine, BIG_CHANNEL);
  const have = await countMessages(engine, BIG_CHANNEL);
  if (have >= BIG_STORE) return { storeMessages: have };
  const t0 = performance.now();
  const streamId = await channelId(engine, BIG_CHANNEL);
  const { rows } = await sql<{ realm_id: number; owner: number; recipient_id: number }>`
    select s.realm_id, u.id as owner, r.id as recipient_id from streams s
    join recipients r on r.type = 2 and r.type_id = s.id
    join users u on u.realm_id = s.realm_id and u.email = ${engine.owner.email}
    where s.id = ${streamId}`.execute(db);
  const { realm_id, owner, recipient_id } = rows[0]!;
  const n = BIG_STORE - have;
  await db.transaction().execute(async (trx) => {
    // Ids from a block range of the message id sequence nobody else holds (see allocateMessageIds).
    const { rows: first } = await sql<{ id: number }>`select nextval('message_id_blocks') as id`.execute(trx);
    const base = Number(first[0]!.id);
    await sql`select setval('message_id_blocks', ${base + Math.ceil(n / 256) * 256})`.execute(trx);
    const now = Math.floor(Date.now() / 1000);
    await sql`insert into messages (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content, rendered_content, date_sent, sending_client)
      select ${base} + g, ${realm_id}, ${owner}, 'stream', ${recipient_id}, ${streamId}, 't' || (g % ${BIG_TOPICS}), 'message ' || g,
             '<p>message ' || g || '</p>', ${now - n} + g, 'bench'
      from generate_series(0, ${n - 1}) g`.execute(trx);
    await sql`insert into user_message_rows (user_id, message_id, flags) select ${owner}, ${base} + g, 1 from generate_series(0, ${n - 1}) g`.execute(trx);
  });
  await sql`analyze messages`.execute(db);
  await sql`analyze user_message_rows`.execute(db);
  return { storeMessages: await countMessages(engine, BIG_CHANNEL), fillSeconds: Math.round((performance.now() - t0) / 100) / 10 };
}

const BIG_NARROW = encodeURIComponent(JSON.stringify([{ operator: "channel", operand: BIG_CHANNEL }, { operator: "topic", operand: "t7" }]));

export const fetchBig: Scenario = {
  name: "fetch1m",
  describe: `GET /api/v1/messages?anchor=newest&num_before=100&num_after=0, narrowed to one topic (${BIG_STORE / BIG_TOPICS} messages) of a ${BIG_STORE.toLocaleString("en")}-message store`,
  prepare: (engine) => fillBigStore(engine),
  target: (engine) => ({
    method: "GET",
    path: `/api/v1/messages?anchor=newest&num_before=100&num_after=0&narrow=${BIG_NARROW}`,
    headers: { authorization: engine.authorization },
  }),
};

const PRESENCE_USERS = 10_000;
/** What clients send every minute while open, without asking for everyone's presence back (ping_only). */
const PRESENCE_BODY = "status=active&ping_only=true&new_user_input=false&slim_presence=true";
/** Pings in flight while the population comes online. */
const PRESENCE_SETUP_CONCURRENCY = 32;

/**
 * POST /users/me/presence with 10,000 users online, each request as the next of them in turn: the presence
 * heartbeat every open client sends. Every user pings once while preparing (through the API, as a client coming
 * online does), so the measured pings update users already online rather than announce new ones.
 */
const presenceAuth = new Map<EngineName, string[]>();
export const presence: Scenario = {
  name: "presence",
  describe: `POST /api/v1/users/me/presence (${PRESENCE_BODY}) as ${PRESENCE_USERS.toLocaleString("en")} online users in turn`,
  async prepare(engine, options) {
    const users = await options.population.users("members", PRESENCE_USERS);
    presenceAuth.set(engine.name, users.map((u) => u.auth));
    const t0 = performance.now();
    let next = 0;
    const pingAll = async () => {
      while (next < users.length) {
        const user = users[next++]!;
        const res = await fetch(`${engine.baseUrl}/api/v1/users/me/presence`, {
          method: "POST",
          headers: { authorization: user.auth, "content-type": "application/x-www-form-urlencoded" },
          body: PRESENCE_BODY,
        });
        if (!res.ok) throw new Error(`presence ping as ${user.email} → ${res.status}: ${(await res.text()).slice(0, 300)}`);
        await res.arrayBuffer();
      }
    };
    await Promise.all(Array.from({ length: PRESENCE_SETUP_CONCURRENCY }, pingAll));
    // The owner's own ping, asking for everyone's presence back: all of them must be there.
    const online = await api(engine, "POST", "/api/v1/users/me/presence", { status: "active", slim_presence: "true" });
    const count = Object.keys(online.presences as Record<string, unknown>).length;
    if (count < PRESENCE_USERS) throw new Error(`presence: ${count} users online after every one pinged, expected ${PRESENCE_USERS + 1}`);
    return {
      onlineUsers: count,
      comeOnlineSeconds: Math.round((performance.now() - t0) / 100) / 10,
    };
  },
  target: (engine) => ({
    method: "POST",
    path: "/api/v1/users/me/presence",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: PRESENCE_BODY,
    authorizations: presenceAuth.get(engine.name),
  }),
};

/** In the order they run against each engine. */
export const SCENARIOS: Scenario[] = [fetchNewest, fetchBig, send, sendLimited, sendUnmetered, send10, send1000, presence];

// ---------------------------------------------------------------------------------------------------------------
// Timed scenarios: operations too heavy, or changing too much state, to repeat under autocannon. Each measured
// request gets fresh state from `prepare`, runs alone, and is timed on its own.

export interface TimedScenario {
  name: string;
  describe: string;
  /** Measured requests. */
  rounds: number;
  /**
   * Unmeasured requests before them (default 1): enough for the server's code to be compiled and its caches filled,
   * or the figures are of a cold server (a register's first dozen run 1.5-10× slower than the ones after).
   */
  warmRounds?: number;
  /** Once per engine: the state for `requests` requests (warm-up and measured); what it returns is recorded beside the figures. */
  prepare(engine: Engine, requests: number): Promise<Record<string, unknown>>;
  /**
   * Request number `round` (the warm-up ones first, from 0); throws unless it did what it should. Timed whole, unless
   * it says what to count (`Timed`): a request whose answer the client then parses, or which needs undoing, times itself.
   */
  once(engine: Engine, round: number): Promise<void | Timed>;
}

/** What a timed request measured itself. */
export interface Timed {
  /** From sending the request to the last byte of its answer: the server's latency as the client sees it. */
  ms: number;
  /** The client's own work on the answer afterwards (parsing it), not counted in `ms`. */
  clientMs: number;
}

const BULK_USERS = 1000;
let bulkUserIds: number[] = [];

/**
 * POST /users/me/subscriptions with 1,000 principals into an existing channel: 1,000 subscription rows in one
 * commit, 1,000 `subscription add` events and one `peer_add` broadcast. The users are inserted straight into the
 * store (Population.users: their creation is not what is measured).
 */
export const subscribeThousand: TimedScenario = {
  name: "subscribe",
  describe: `POST /api/v1/users/me/subscriptions: ${BULK_USERS} principals into one channel, one request`,
  rounds: 10,
  async prepare(engine, requests) {
    bulkUserIds = (await new Population(engine).users("bulk", BULK_USERS)).map((u) => u.id);
    const channels = Array.from({ length: requests }, (_, i) => ({ name: `bulk-${i}` }));
    await api(engine, "POST", "/api/v1/users/me/subscriptions", { subscriptions: JSON.stringify(channels) });
    return { users: BULK_USERS, channels: channels.length };
  },
  async once(engine, round) {
    const body = await api(engine, "POST", "/api/v1/users/me/subscriptions", {
      subscriptions: JSON.stringify([{ name: `bulk-${round}` }]),
      principals: JSON.stringify(bulkUserIds),
    });
    const subscribed = Object.keys((body.subscribed ?? {}) as Record<string, unknown>).length;
    if (subscribed !== BULK_USERS) throw new Error(`subscribe: ${subscribed} of ${BULK_USERS} users subscribed`);
  },
};

export const TIMED_SCENARIOS: TimedScenario[] = [subscribeThousand];

/**
 * The server's event-loop delay over a run, in ms: how late a timer due every 10 ms fired. Node's histogram records
 * the whole interval between firings, the 10 ms included (an idle loop reads p50 10.1 ms); this reports the
 * lateness alone.
 */
export function loopDelayMonitor(): { stop(): { p50: number; p99: number; max: number } } {
  const RESOLUTION_MS = 10;
  const histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  histogram.enable();
  const late = (ns: number) => (Number.isFinite(ns) ? Math.max(0, ns / 1e6 - RESOLUTION_MS) : 0);
  return {
    stop() {
      histogram.disable();
      return { p50: late(histogram.percentile(50)), p99: late(histogram.percentile(99)), max: late(histogram.max) };
    },
  };
}

/**
 * The machine's CPU time so far, in ms summed over its cores: busy (user, nice, system, irq: what os.cpus() counts)
 * and stolen (time the hypervisor ran someone else while this VM had work: invisible to every process here, and
 * stalls no profile shows). From /proc/stat, since os.cpus() has no steal; elsewhere than Linux, steal reads 0.
 */
export function machineCpuMs(): { busy: number; steal: number } {
  try {
    const [, user, nice, system, , , irq, , steal] = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!.trim().split(/\s+/).map(Number);
    const tick = 1000 / TICKS_PER_SECOND;
    return { busy: (user! + nice! + system! + irq!) * tick, steal: (steal ?? 0) * tick };
  } catch {
    let busy = 0;
    for (const c of os.cpus()) busy += c.times.user + c.times.nice + c.times.sys + c.times.irq;
    return { busy, steal: 0 };
  }
}
