/**
 * The transport contract (runtime/transport/transport.ts), one behaviour suite run against every engine.
 * Redis runs for real at 127.0.0.1:6379 (REDIS_URL overrides), under a prefix unique to this run, deleted after.
 * Every test gets its own key scope, so what one test leaves pending cannot leak into the next.
 */
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { Cluster, type Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { MemoryTransport } from "../../runtime/transport/memory.ts";
import { connectRedis, deleteRedisKeys, type RedisClient } from "../../runtime/transport/redis-connection.ts";
import { startPrivateRedisCluster, type PrivateRedisCluster } from "../support/private-services.ts";
import { redisKeys } from "../../runtime/transport/redis-keys.ts";
import { GROUP, RedisStreamsTransport, type RedisStreamsOptions } from "../../runtime/transport/redis-streams.ts";
import { LeftForNextHolder, type Entry, type Reply, type Transport, type TransportHandlers } from "../../runtime/transport/transport.ts";

const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const RUN_PREFIX = `chorus-test-${randomUUID().slice(0, 8)}`;
const WAIT = { timeout: 3000, interval: 5 };

/** Engine-specific probes, for what the contract cannot observe through the interface alone. */
interface Inspect {
  streamLength(scope: string, shard: number): Promise<number>;
  pendingCount(scope: string, shard: number): Promise<number>;
  /** The bodies of a shard stream's entries, in stream order. */
  streamBodies(scope: string, shard: number): Promise<unknown[]>;
  replyStreamExists(scope: string, node: string): Promise<boolean>;
  /** Delete a node's reply stream, as a FLUSHALL or a restart without persistence does. */
  loseReplyStream(scope: string, node: string): Promise<void>;
  /** Kill every Redis connection of a node (a network blip as Redis sees it). */
  killConnections(node: string): Promise<number>;
}

interface Engine {
  name: string;
  /** Transports made with one scope are nodes of one cluster (a memory transport is a cluster of one). */
  distributed: boolean;
  /** release/close give up on turns that never settle instead of waiting for them forever. */
  boundedDrain: boolean;
  make(scope: string, options: Partial<RedisStreamsOptions>): Transport;
  inspect?: Inspect;
}

/** The Redis Cluster engine's servers: three masters of this suite's own, started before the suite. */
let cluster: PrivateRedisCluster | undefined;
beforeAll(async () => {
  cluster = await startPrivateRedisCluster(3);
}, 60_000);

const admins: RedisClient[] = [];

/**
 * The Redis Streams engine on the server `url()` names (one Redis, or a Redis Cluster through any of its nodes),
 * probed through an admin connection of the test's own.
 */
function redisStreamsEngine(name: string, url: () => string): Engine {
  let admin: RedisClient | undefined;
  const redis = () => {
    if (!admin) admins.push((admin = connectRedis(url(), "contract-admin", () => {})));
    return admin;
  };
  const servers = async (): Promise<Redis[]> => {
    const conn = redis();
    if (!(conn instanceof Cluster)) return [conn];
    if (conn.status !== "ready") await once(conn, "ready");
    return conn.nodes("master");
  };
  return {
    name,
    distributed: true,
    boundedDrain: true,
    make: (scope, options) =>
      new RedisStreamsTransport({
        url: url(),
        prefix: scope,
        blockMs: 100,
        claimIdleMs: 60_000,
        drainTimeoutMs: 300,
        trimIntervalMs: 50,
        ...options,
      }),
    inspect: {
      streamLength: async (scope, shard) => Number(await redis().call("XLEN", redisKeys(scope).shard(shard))),
      pendingCount: async (scope, shard) => {
        const summary = (await redis().call("XPENDING", redisKeys(scope).shard(shard), GROUP)) as [number];
        return Number(summary[0]);
      },
      streamBodies: async (scope, shard) => {
        const rows = (await redis().call("XRANGE", redisKeys(scope).shard(shard), "-", "+")) as [string, string[]][];
        return rows.map(([, fields]) => (JSON.parse(fields[1]!) as Entry).body);
      },
      replyStreamExists: async (scope, node) =>
        Number(await redis().call("EXISTS", redisKeys(scope).reply(node))) === 1,
      loseReplyStream: async (scope, node) => void (await redis().call("DEL", redisKeys(scope).reply(node))),
      killConnections: async (node) => {
        let killed = 0;
        for (const server of await servers()) {
          const list = String(await server.call("CLIENT", "LIST"));
          const ids = [...list.matchAll(/^id=(\d+) .*?name=(\S*)/gm)]
            .filter(([, , name]) => name!.startsWith(`chorus:${node}:`))
            .map(([, id]) => id!);
          for (const id of ids) await server.call("CLIENT", "KILL", "ID", id);
          killed += ids.length;
        }
        return killed;
      },
    },
  };
}

const engines: Engine[] = [
  {
    name: "memory",
    distributed: false,
    boundedDrain: false,
    make: () => new MemoryTransport(),
  },
  redisStreamsEngine("redis-streams", () => REDIS_URL),
  redisStreamsEngine("redis-streams on a 3-master Redis Cluster", () => cluster!.url),
];

afterAll(async () => {
  await deleteRedisKeys(REDIS_URL, RUN_PREFIX);
  for (const admin of admins) admin.disconnect();
  await cluster?.stop();
});

/** Records what a node is handed; `hold` decides when each turn's promise settles (default: at once). */
class Recorder implements TransportHandlers {
  readonly entries: { shard: number; entry: Entry }[] = [];
  readonly replies: Reply[] = [];
  /** How many times the engine said it lost what it held (onLost). */
  lost = 0;
  hold?: (entry: Entry) => Promise<void>;
  onEntry(shard: number, entry: Entry): Promise<void> {
    this.entries.push({ shard, entry });
    return this.hold ? this.hold(entry) : Promise.resolve();
  }
  onReply(reply: Reply): void {
    this.replies.push(reply);
  }
  onLost(): void {
    this.lost++;
  }
  bodies(shard?: number): unknown[] {
    return this.entries.filter((e) => shard === undefined || e.shard === shard).map((e) => e.entry.body);
  }
}

function entry(body: unknown, extra: Partial<Entry> = {}): Entry {
  return { targets: ["channel:1"], body, ...extra };
}

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(engines)("transport contract: $name", (engine) => {
  let scope = "";
  let testNo = 0;
  let open: Transport[] = [];
  /** Turns a test kept open; settled before the nodes close so that no engine waits on them. */
  let parked: (() => void)[] = [];
  /** Errors the engine reported (it retries them); a test that provokes none must see none. */
  let reported: unknown[] = [];
  let provokesErrors = false;

  beforeEach(() => {
    reported = [];
    provokesErrors = false;
    scope = `${RUN_PREFIX}:${engine.name}:${++testNo}`;
    open = [];
    parked = [];
  });

  afterEach(async () => {
    for (const settle of parked) settle();
    await Promise.all(open.map((t) => t.close()));
    if (!provokesErrors) expect(reported).toEqual([]);
  });

  /** A started node of this test's cluster, with its recorder. */
  async function node(options?: Partial<RedisStreamsOptions>): Promise<{ t: Transport; rec: Recorder }> {
    const t = engine.make(scope, { onError: (err) => reported.push(err), ...options });
    open.push(t);
    const rec = new Recorder();
    await t.start(rec);
    return { t, rec };
  }

  /** A turn that ends only when the test says so (or at teardown). */
  function parkedTurn(): { promise: Promise<void>; settle: () => void } {
    let settle!: () => void;
    const promise = new Promise<void>((resolve) => (settle = resolve));
    parked.push(settle);
    return { promise, settle };
  }

  it("delivers a sent entry to the holder of its shard, intact, and nothing of shards it does not hold", async () => {
    const { t, rec } = await node();
    await t.acquire(3);
    const sent = entry({ text: "hello", n: 1 }, { targets: ["user:1", "user:2"], trace: { traceparent: "00-abc-def-01" } });
    await t.send(4, entry("not held"));
    await t.send(3, sent);
    await vi.waitFor(() => expect(rec.entries).toEqual([{ shard: 3, entry: sent }]), WAIT);
    await t.send(3, entry("barrier"));
    await vi.waitFor(() => expect(rec.bodies()).toEqual([sent.body, "barrier"]), WAIT);
  });

  it("hands a shard's entries over in the order they were accepted, without waiting for each turn", async () => {
    const { t, rec } = await node();
    const gate = parkedTurn();
    let settled = 0;
    rec.hold = () => gate.promise.then(() => void settled++);
    await t.acquire(0);
    await t.acquire(1);
    const n = 200;
    const sends: Promise<void>[] = [];
    for (let i = 0; i < n; i++) sends.push(t.send(0, entry(i)), t.send(1, entry(i)));
    await Promise.all(sends);
    await vi.waitFor(() => expect(rec.entries.length).toBe(2 * n), WAIT);
    const expected = Array.from({ length: n }, (_, i) => i);
    expect(rec.bodies(0)).toEqual(expected);
    expect(rec.bodies(1)).toEqual(expected);
    expect(settled).toBe(0); // every entry was handed over while all earlier turns were still open
    gate.settle();
    await vi.waitFor(() => expect(settled).toBe(2 * n), WAIT);
  });

  it("keeps entries sent while nobody holds the shard and delivers them, in order, on acquire", async () => {
    const sender = await node();
    const holder = engine.distributed ? await node() : sender;
    for (const body of ["a", "b", "c"]) await sender.t.send(5, entry(body));
    await tick(30);
    expect(holder.rec.entries).toEqual([]);
    await holder.t.acquire(5);
    await vi.waitFor(() => expect(holder.rec.bodies(5)).toEqual(["a", "b", "c"]), WAIT);
  });

  it("routes a reply, value or error, to the node that asked", async () => {
    const asker = await node();
    const holder = engine.distributed ? await node() : asker;
    holder.rec.hold = async (e) => {
      if (!e.replyTo) return;
      const body = e.body as { ok: boolean; say: string };
      await holder.t.reply(
        e.replyTo,
        body.ok
          ? { corr: e.replyTo.corr, value: { echo: body.say } }
          : { corr: e.replyTo.corr, error: { code: "BAD_REQUEST", msg: body.say, status: 400 } },
      );
    };
    await holder.t.acquire(7);
    await asker.t.send(7, entry({ ok: true, say: "ping" }, { replyTo: { node: asker.t.nodeId, corr: "c1" } }));
    await asker.t.send(7, entry({ ok: false, say: "nope" }, { replyTo: { node: asker.t.nodeId, corr: "c2" } }));
    await vi.waitFor(() => expect(asker.rec.replies.length).toBe(2), WAIT);
    expect(asker.rec.replies).toEqual([
      { corr: "c1", value: { echo: "ping" } },
      { corr: "c2", error: { code: "BAD_REQUEST", msg: "nope", status: 400 } },
    ]);
    if (holder !== asker) expect(holder.rec.replies).toEqual([]);
  });

  it("drops a reply to a node that is gone, without failing the replier", async () => {
    const { t, rec } = await node();
    await expect(t.reply({ node: "node-that-is-gone", corr: "x" }, { corr: "x", value: 1 })).resolves.toBeUndefined();
    await t.reply({ node: t.nodeId, corr: "barrier" }, { corr: "barrier", value: 2 });
    await vi.waitFor(() => expect(rec.replies).toEqual([{ corr: "barrier", value: 2 }]), WAIT);
    if (engine.inspect) expect(await engine.inspect.replyStreamExists(scope, "node-that-is-gone")).toBe(false);
  });

  it("does not deliver entries again once their turns settled and the shard changed hands", async () => {
    const first = await node();
    await first.t.acquire(2);
    await first.t.send(2, entry("e1"));
    await first.t.send(2, entry("e2"));
    await vi.waitFor(() => expect(first.rec.bodies()).toEqual(["e1", "e2"]), WAIT);
    await first.t.release(2);
    if (engine.inspect) expect(await engine.inspect.pendingCount(scope, 2)).toBe(0);
    const next = engine.distributed ? await node() : first;
    const before = next.rec.entries.length;
    await next.t.acquire(2);
    await first.t.send(2, entry("e3"));
    await vi.waitFor(() => expect(next.rec.bodies().slice(before)).toEqual(["e3"]), WAIT);
  });

  it("release stops delivery, waits for the turns in flight, and leaves later entries for the next acquire", async () => {
    const { t, rec } = await node();
    const turn = parkedTurn();
    rec.hold = (e) => (e.body === "e1" ? turn.promise : Promise.resolve());
    await t.acquire(6);
    await t.acquire(8);
    await t.send(6, entry("e1"));
    await vi.waitFor(() => expect(rec.bodies(6)).toEqual(["e1"]), WAIT);

    let released = false;
    const release = t.release(6).then(() => void (released = true));
    await tick(50);
    expect(released).toBe(false);
    turn.settle();
    await release;
    if (engine.inspect) expect(await engine.inspect.pendingCount(scope, 6)).toBe(0);

    await t.send(6, entry("e2"));
    await t.send(8, entry("barrier"));
    await vi.waitFor(() => expect(rec.bodies(8)).toEqual(["barrier"]), WAIT);
    await tick(30);
    expect(rec.bodies(6)).toEqual(["e1"]);

    await t.acquire(6);
    await vi.waitFor(() => expect(rec.bodies(6)).toEqual(["e1", "e2"]), WAIT);
  });

  it("close resolves promptly and refuses later sends", async () => {
    const { t, rec } = await node();
    await t.acquire(1);
    await t.acquire(2);
    await t.send(1, entry("e1"));
    await vi.waitFor(() => expect(rec.bodies()).toEqual(["e1"]), WAIT);
    const started = Date.now();
    await t.close();
    expect(Date.now() - started).toBeLessThan(1000);
    await expect(t.send(1, entry("late"))).rejects.toThrow(/closed/);
  });

  // A memory transport waits for every turn (its close would hang on a turn that never ends), and a crashed
  // single process takes its entries with it: there is no other holder to hand anything to.
  it.runIf(engine.boundedDrain)("close gives up on a turn that never ends instead of hanging", async () => {
    const { t, rec } = await node();
    rec.hold = () => new Promise<void>(() => {});
    await t.acquire(1);
    await t.send(1, entry("forever"));
    await vi.waitFor(() => expect(rec.bodies()).toEqual(["forever"]), WAIT);
    const started = Date.now();
    await t.close();
    expect(Date.now() - started).toBeLessThan(1500);
  });

  it.runIf(engine.distributed)("delivers an entry whose turn never ended to the next holder, after a takeover", async () => {
    const a = await node();
    a.rec.hold = () => new Promise<void>(() => {}); // a stalls: its lease will be taken over
    await a.t.acquire(2);
    const sent = entry({ n: 42 }, { replyTo: { node: a.t.nodeId, corr: "k" } });
    await a.t.send(2, sent);
    await vi.waitFor(() => expect(a.rec.entries).toEqual([{ shard: 2, entry: sent }]), WAIT);

    const b = await node();
    await b.t.acquire(2);
    await vi.waitFor(() => expect(b.rec.entries).toEqual([{ shard: 2, entry: sent }]), WAIT);
    await a.t.release(2); // gives up on the stalled turn (bounded) without acknowledging it
    await vi.waitFor(async () => expect(await engine.inspect!.pendingCount(scope, 2)).toBe(0), WAIT);
  });

  it.runIf(engine.distributed)("delivers an entry whose holder closed before its turn ended to the next holder", async () => {
    const a = await node();
    a.rec.hold = () => new Promise<void>(() => {});
    await a.t.acquire(4);
    await a.t.send(4, entry("unfinished"));
    await a.t.send(4, entry("also unfinished"));
    await vi.waitFor(() => expect(a.rec.bodies()).toEqual(["unfinished", "also unfinished"]), WAIT);
    await a.t.close();

    const b = await node();
    await b.t.acquire(4);
    await vi.waitFor(() => expect(b.rec.bodies()).toEqual(["unfinished", "also unfinished"]), WAIT);
  });

  it.runIf(engine.distributed)("a late settle on a former holder does not acknowledge what the next holder claimed", async () => {
    const a = await node();
    const late = parkedTurn();
    a.rec.hold = () => late.promise;
    await a.t.acquire(3);
    await a.t.send(3, entry("contested"));
    await vi.waitFor(() => expect(a.rec.bodies()).toEqual(["contested"]), WAIT);

    const b = await node();
    b.rec.hold = () => new Promise<void>(() => {}); // b claims it, then dies before finishing
    await b.t.acquire(3);
    await vi.waitFor(() => expect(b.rec.bodies()).toEqual(["contested"]), WAIT);

    late.settle(); // a, unaware it lost the shard, finishes its turn and tries to acknowledge
    await a.t.release(3); // resolves once a's acknowledgement attempt is done
    expect(await engine.inspect!.pendingCount(scope, 3)).toBe(1);
    await b.t.close();

    const c = await node();
    await c.t.acquire(3);
    await vi.waitFor(() => expect(c.rec.bodies()).toEqual(["contested"]), WAIT);
  });

  it.runIf(engine.distributed)("leaves an entry whose turn rejected with LeftForNextHolder unacknowledged, for the next holder", async () => {
    const a = await node();
    a.rec.hold = (e) => (e.body === "fenced" ? Promise.reject(new LeftForNextHolder("fenced here")) : Promise.resolve());
    await a.t.acquire(5);
    await a.t.send(5, entry("fenced"));
    await vi.waitFor(() => expect(a.rec.bodies()).toEqual(["fenced"]), WAIT);
    await a.t.send(5, entry("done")); // a take after the turn settled: it carries whatever acknowledgement is queued
    await vi.waitFor(() => expect(a.rec.bodies()).toEqual(["fenced", "done"]), WAIT);
    await tick(50); // past the acknowledgement's batching delay
    await a.t.release(5);

    const b = await node();
    await b.t.acquire(5);
    await vi.waitFor(() => expect(b.rec.bodies()).toEqual(["fenced"]), WAIT);
  });

  it.runIf(engine.distributed)("the holder claims entries a stale holder took but left idle past claimIdleMs", async () => {
    const stale = await node();
    stale.rec.hold = () => new Promise<void>(() => {});
    await stale.t.acquire(9);
    const holder = await node({ claimIdleMs: 200 });
    await holder.t.acquire(9); // both now read the shard: entries split between them until the claim
    for (let i = 0; i < 20; i++) await stale.t.send(9, entry(i));
    // Every entry was taken by one of the two (the holder may already have claimed some of the stale one's: more).
    await vi.waitFor(() => expect(stale.rec.entries.length + holder.rec.entries.length).toBeGreaterThanOrEqual(20), WAIT);
    await vi.waitFor(
      () => expect([...holder.rec.bodies()].sort((x, y) => Number(x) - Number(y))).toEqual([...Array(20).keys()]),
      WAIT,
    );
  });

  it.runIf(engine.inspect)("hands the holder's own entries and other nodes' over in the order the stream accepted them", async () => {
    // The holder's sends take their entries straight from the stream (appendAndTake) while its loop reads the
    // other node's: the two paths must not reorder the shard.
    const holder = await node();
    const other = await node();
    const gate = parkedTurn(); // nothing is acknowledged, so nothing is trimmed before the stream is read
    holder.rec.hold = () => gate.promise;
    await holder.t.acquire(2);
    const sends: Promise<void>[] = [];
    for (let i = 0; i < 300; i++) {
      sends.push(holder.t.send(2, entry(`h${i}`)), other.t.send(2, entry(`o${i}`)));
      if (i % 50 === 0) await tick(1);
    }
    await Promise.all(sends);
    await vi.waitFor(() => expect(holder.rec.entries.length).toBe(600), WAIT);
    const accepted = await engine.inspect!.streamBodies(scope, 2);
    expect(accepted).toHaveLength(600);
    expect(holder.rec.bodies(2)).toEqual(accepted);
    gate.settle();
  });

  it.runIf(engine.inspect && !engine.name.includes("Cluster"))(
    "writes a turn's sends to several shards, held here and elsewhere, and its replies to other nodes in one write to Redis",
    async () => {
      const sender = await node();
      const holder = await node();
      await Promise.all([0, 1, 2].map((shard) => sender.t.acquire(shard)));
      await Promise.all([3, 4, 5].map((shard) => holder.t.acquire(shard)));
      // The command connection's socket (a single server: a cluster client's commands go to several sockets).
      const socket = (sender.t as unknown as { cmd: Redis }).cmd.stream as unknown as Record<"_write" | "_writev", (...args: unknown[]) => unknown>;
      // What each write carried. Other writes may come between (the reply stream's refresh every blockMs, due
      // before the turn's end on a late event loop): what counts is that one write carried the whole turn.
      const writes: string[] = [];
      const text = (chunk: unknown) => (Buffer.isBuffer(chunk) ? chunk.toString("utf8") : String(chunk));
      for (const method of ["_write", "_writev"] as const) {
        const original = socket[method];
        socket[method] = (...args: unknown[]) => {
          const first = args[0];
          writes.push(method === "_writev" ? (first as { chunk: unknown }[]).map((c) => text(c.chunk)).join("") : text(first));
          return original.apply(socket, args);
        };
      }
      const sent = [0, 1, 2, 3, 4, 5].map((shard) => sender.t.send(shard, entry(`to ${shard}`)));
      sent.push(sender.t.reply({ node: holder.t.nodeId, corr: "1" }, { corr: "1", value: "answer" }));
      // The turn's batches are written at its end (setImmediate).
      await new Promise((resolve) => setImmediate(resolve));
      const turn = ["to 0", "to 1", "to 2", "to 3", "to 4", "to 5", "answer"];
      expect(writes.filter((w) => turn.some((marker) => w.includes(marker)))).toHaveLength(1);
      expect(writes.find((w) => w.includes("answer"))).toSatisfy((w: string) => turn.every((marker) => w.includes(marker)));
      await Promise.all(sent);
      await vi.waitFor(() => expect(sender.rec.bodies().sort()).toEqual(["to 0", "to 1", "to 2"]), WAIT);
      await vi.waitFor(() => expect(holder.rec.bodies().sort()).toEqual(["to 3", "to 4", "to 5"]), WAIT);
      await vi.waitFor(() => expect(holder.rec.replies.map((r) => r.value)).toEqual(["answer"]), WAIT);
    },
  );

  it.runIf(engine.inspect)("trims acknowledged entries but keeps the unacknowledged one for the next holder", async () => {
    const inspect = engine.inspect!;
    const a = await node();
    a.rec.hold = (e) => (e.body === 250 ? new Promise<void>(() => {}) : Promise.resolve());
    await a.t.acquire(0);
    const sends: Promise<void>[] = [];
    for (let i = 0; i < 400; i++) sends.push(a.t.send(0, entry(i, { targets: ["channel:1", "channel:2"] })));
    await Promise.all(sends);
    await vi.waitFor(() => expect(a.rec.entries.length).toBe(400), WAIT);
    await vi.waitFor(async () => expect(await inspect.pendingCount(scope, 0)).toBe(1), WAIT);
    await vi.waitFor(async () => expect(await inspect.streamLength(scope, 0)).toBeLessThan(400), WAIT);
    expect(await inspect.streamLength(scope, 0)).toBeGreaterThanOrEqual(150); // nothing from #250 on is gone
    await a.t.close();

    const b = await node();
    await b.t.acquire(0);
    await vi.waitFor(() => expect(b.rec.bodies()).toEqual([250]), WAIT);
    await b.t.send(0, entry("barrier"));
    await vi.waitFor(() => expect(b.rec.bodies()).toEqual([250, "barrier"]), WAIT);
  });

  it.runIf(engine.inspect)("tells a node whose reply stream Redis lost (onLost), once, and replies reach it again", async () => {
    const asker = await node();
    const holder = await node();
    holder.rec.hold = async (e) => {
      if (e.replyTo) await holder.t.reply(e.replyTo, { corr: e.replyTo.corr, value: e.body });
    };
    await holder.t.acquire(1);
    await engine.inspect!.loseReplyStream(scope, asker.t.nodeId);
    await vi.waitFor(() => expect(asker.rec.lost).toBe(1), WAIT);
    expect(await engine.inspect!.replyStreamExists(scope, asker.t.nodeId)).toBe(true);
    await asker.t.send(1, entry("after", { replyTo: { node: asker.t.nodeId, corr: "1" } }));
    await vi.waitFor(() => expect(asker.rec.replies.map((r) => r.value)).toEqual(["after"]), WAIT);
    await tick(300); // a few more reads: nothing else was lost
    expect(asker.rec.lost).toBe(1);
    expect(holder.rec.lost).toBe(0);
  });

  it.runIf(engine.inspect)("keeps delivering entries and replies after its connections were killed", async () => {
    provokesErrors = true;
    const asker = await node();
    const holder = await node();
    holder.rec.hold = async (e) => {
      if (e.replyTo) await holder.t.reply(e.replyTo, { corr: e.replyTo.corr, value: e.body });
    };
    await holder.t.acquire(1);
    await asker.t.send(1, entry("before", { replyTo: { node: asker.t.nodeId, corr: "1" } }));
    await vi.waitFor(() => expect(asker.rec.replies.map((r) => r.value)).toEqual(["before"]), WAIT);

    expect(await engine.inspect!.killConnections(holder.t.nodeId)).toBeGreaterThanOrEqual(3);
    expect(await engine.inspect!.killConnections(asker.t.nodeId)).toBeGreaterThanOrEqual(2);
    await asker.t.send(1, entry("after", { replyTo: { node: asker.t.nodeId, corr: "2" } }));
    await vi.waitFor(() => expect(asker.rec.replies.map((r) => r.value)).toEqual(["before", "after"]), WAIT);
    expect(holder.rec.bodies()).toEqual(["before", "after"]);
  });
});
