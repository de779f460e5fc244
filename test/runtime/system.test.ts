/**
 * The actor system (runtime/system.ts), one behaviour suite run over every transport: the memory transport, and
 * Redis Streams for real at 127.0.0.1:6379 (TEST_REDIS_URL overrides) under a key prefix unique to this run,
 * deleted afterwards. Each test gets its own key scope and its own systems; the shards are held directly with
 * `holdShard` (the shard manager and its store are covered by cluster.test.ts).
 *
 * The test actors record what happens to them in a per-test probe, so turns, activations and deactivations are
 * observed rather than inferred from timing alone.
 */
import { Redis } from "ioredis";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PARKED, shardOf, type ActorContext, type ActorFactory, type Deferred, type Fence } from "../../runtime/actor.ts";
import { ChorusError, errors } from "../../runtime/errors.ts";
import { log } from "../../runtime/log.ts";
import { ActorSystem } from "../../runtime/system.ts";
import { MemoryPubSub } from "../../runtime/transport/memory-pubsub.ts";
import { MemoryTransport } from "../../runtime/transport/memory.ts";
import type { PubSub } from "../../runtime/transport/pubsub.ts";
import { RedisPubSub } from "../../runtime/transport/redis-pubsub.ts";
import { RedisStreamsTransport } from "../../runtime/transport/redis-streams.ts";
import { redisKeys } from "../../runtime/transport/redis-keys.ts";
import { deleteRedisKeys } from "../../runtime/transport/redis-connection.ts";
import type { Transport } from "../../runtime/transport/transport.ts";
import { freshRedisPrefix, REDIS_URL } from "../support/services.ts";
import { at, broadcastAt, untypedKind } from "../support/untyped-actors.ts";

const SHARDS = 8;
const ASK_TIMEOUT_MS = 3000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `check` until it holds (or fails the test after `ms`): waiting on an observable fact, not on a guess. */
async function until(check: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms: ${check.toString()}`);
    await sleep(5);
  }
}

async function rejection(p: Promise<unknown>): Promise<ChorusError> {
  const err = await p.then(
    () => {
      throw new Error("expected a rejection, got a result");
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ChorusError);
  return err as ChorusError;
}

/** The `n`-th key (0-based) of `kind` whose actor lives on `shard`. */
function idOn(kind: string, shard: number, n = 0, tag = "k"): string {
  for (let i = 0, found = 0; ; i++) {
    const id = `${kind}:${tag}${i}`;
    if (shardOf(id, SHARDS) === shard && found++ === n) return id;
  }
}

// ---- test actors ---------------------------------------------------------------------------------------------

interface Probe {
  /** `enter <id> <tag>` / `leave <id> <tag>` of the `slow` actors. */
  log: string[];
  activations: Map<string, number>;
  deactivations: Map<string, number>;
  turns: Map<string, number>;
  ticks: string[];
  /** `flaky` activations wait for this before failing (first attempt) or succeeding. */
  gate: Promise<void>;
  openGate(): void;
  /** The work of `acker` turns, settled by the test (failed with the error given). */
  ackHolds: Array<(error?: ChorusError) => void>;
  /** The `forgetful` actors told that the transport lost entries (entriesLost), in order. */
  heardLost: string[];
}

function newProbe(): Probe {
  let openGate!: () => void;
  const gate = new Promise<void>((r) => (openGate = r));
  return { log: [], activations: new Map(), deactivations: new Map(), turns: new Map(), ticks: [], gate, openGate, ackHolds: [], heardLost: [] };
}

function bump(map: Map<string, number>, id: string): number {
  const n = (map.get(id) ?? 0) + 1;
  map.set(id, n);
  return n;
}

type Msg = Record<string, any>;

function testKinds(p: Probe): Record<string, ActorFactory> {
  const lifecycle = (ctx: ActorContext) => ({
    activate: async () => void bump(p.activations, ctx.id),
    deactivate: async () => void bump(p.deactivations, ctx.id),
  });
  return {
    /** Adds; answers its total. `ms` makes the turn take that long before it counts. Keys `fail…` refuse `coded`. */
    counter: (ctx) => {
      let total = 0;
      return {
        ...lifecycle(ctx),
        async receive(m: Msg) {
          if (m.ms) await sleep(m.ms);
          bump(p.turns, ctx.id);
          if (m.op === "coded" && ctx.key.startsWith("fail")) throw new ChorusError("STREAM_DOES_NOT_EXIST", "Channel with ID '7' does not exist", 400, { stream_id: 7 });
          if (m.op === "add") total += m.by;
          return total;
        },
      };
    },
    /** Records entering and leaving an asynchronous turn. */
    slow: (ctx) => ({
      ...lifecycle(ctx),
      async receive(m: Msg) {
        p.log.push(`enter ${ctx.id} ${m.tag}`);
        await sleep(m.ms ?? 0);
        p.log.push(`leave ${ctx.id} ${m.tag}`);
        return m.tag;
      },
    }),
    /** Parks `wait` asks; a later `release` turn answers them, a `push` turn gives them an interim answer. */
    parker: (ctx) => {
      const waiting: Deferred<string>[] = [];
      return {
        ...lifecycle(ctx),
        receive(m: Msg) {
          if (m.op === "wait") {
            waiting.push(ctx.defer<string>());
            return PARKED;
          }
          if (m.op === "push") {
            for (const d of waiting) d.push(m.value);
            return waiting.length;
          }
          const parked = waiting.splice(0);
          for (const d of parked) d.resolve(m.value);
          return parked.length;
        },
      };
    },
    /** `hold` turns end at once but complete only when a later `finish` turn settles their work (ctx.completeWhen). */
    committer: (ctx) => {
      const held: Array<{ resolve(): void; reject(e: Error): void }> = [];
      return {
        receive(m: Msg) {
          if (m.op === "hold") {
            ctx.completeWhen(new Promise<void>((resolve, reject) => held.push({ resolve, reject })));
            return `held ${m.n}`;
          }
          const work = held.splice(0);
          for (const w of work) m.fail ? w.reject(new ChorusError("COMMIT_FAILED", "commit failed", 503)) : w.resolve();
          return work.length;
        },
      };
    },
    /** Answers at once, holding its entry's acknowledgement until the test settles the work (ctx.holdAcknowledgement). */
    acker: (ctx) => ({
      receive(m: Msg) {
        ctx.holdAcknowledgement(new Promise<void>((resolve, reject) => p.ackHolds.push((error) => (error ? reject(error) : resolve()))));
        return `answered ${m.n}`;
      },
    }),
    /** Its first activation fails (once the gate opens); later ones succeed. */
    flaky: (ctx) => ({
      async activate() {
        const attempt = bump(p.activations, ctx.id);
        await p.gate;
        if (attempt === 1) throw new ChorusError("NOT_READY", "state could not be loaded", 503, { attempt });
      },
      receive: (m: Msg) => `ok ${m.n}`,
    }),
    /** Throws what it is told to. */
    failing: (ctx) => ({
      receive(m: Msg) {
        bump(p.turns, ctx.id);
        if (m.op === "coded") throw new ChorusError("STREAM_DOES_NOT_EXIST", "Channel with ID '7' does not exist", 400, { stream_id: 7 });
        if (m.op === "plain") throw new Error("secret detail");
        return "fine";
      },
    }),
    /** Schedules `tick` turns to itself; `cancel` calls the cancel function of one. */
    timer: (ctx) => {
      const cancels = new Map<string, () => void>();
      return {
        receive(m: Msg) {
          if (m.op === "arm") cancels.set(m.tag, ctx.schedule(m.ms, { op: "tick", tag: m.tag }));
          else if (m.op === "cancel") cancels.get(m.tag)!();
          else if (m.op === "tick") p.ticks.push(`${ctx.id} ${m.tag}`);
          return "ok";
        },
      };
    },
    /** Answers whether it may have missed entries (unacknowledgedLost); records hearing of a loss (entriesLost). */
    forgetful: (ctx) => ({
      entriesLost: () => void p.heardLost.push(ctx.id),
      receive: () => ctx.unacknowledgedLost,
    }),
    /** Answers its fence. */
    fence: (ctx) => ({ receive: (): Fence => ctx.fence() }),
    /** Deactivates never (its deactivate does not settle). */
    stuck: () => ({ receive: () => "here", deactivate: () => new Promise<void>(() => {}) }),
    /** Idle actors: keys starting with `keep` refuse passivation. `ms` makes a turn last. */
    idle: (ctx) => ({
      ...lifecycle(ctx),
      canPassivate: () => !ctx.key.startsWith("keep"),
      async receive(m: Msg) {
        if (m?.ms) await sleep(m.ms);
        return p.deactivations.get(ctx.id) ?? 0;
      },
    }),
  };
}

// ---- engines -------------------------------------------------------------------------------------------------

interface Engine {
  name: string;
  /** Transports made with one scope are nodes of one cluster (a memory transport is a cluster of one). */
  distributed: boolean;
  make(scope: string): Transport;
  /** The pub/sub of a node (for the notices), of the same deployment as the transports made with `scope`. */
  makePubSub(scope: string): PubSub;
}

const redisRun = freshRedisPrefix();
const transportErrors: string[] = [];

const engines: Engine[] = [
  { name: "memory", distributed: false, make: () => new MemoryTransport(), makePubSub: () => new MemoryPubSub() },
  {
    name: "redis-streams",
    distributed: true,
    make: (scope) =>
      new RedisStreamsTransport({
        url: REDIS_URL,
        prefix: scope,
        blockMs: 200,
        claimIdleMs: 60_000,
        drainTimeoutMs: 1000,
        onError: (err, where) => void transportErrors.push(`${where}: ${String(err)}`),
      }),
    makePubSub: (scope) =>
      new RedisPubSub({ url: REDIS_URL, prefix: scope, onError: (err, where) => void transportErrors.push(`${where}: ${String(err)}`) }),
  },
];

afterAll(async () => {
  await redisRun.clean();
});

describe.each(engines)("ActorSystem over $name", (engine) => {
  let scope = "";
  let scopes = 0;
  let probe: Probe;
  let opened: { system: ActorSystem; transport: Transport; pubsub: PubSub }[] = [];

  /** A started system (a node) on this test's scope, holding the shards `hold` selects with epoch 100 + shard. */
  async function node(
    opts: { idleMs?: number; askTimeoutMs?: number; deactivationBoundMs?: number; hold?: (shard: number) => boolean } = {},
  ): Promise<ActorSystem> {
    const transport = engine.make(scope);
    const pubsub = engine.makePubSub(scope);
    const system = new ActorSystem({
      transport,
      pubsub,
      shards: SHARDS,
      kinds: testKinds(probe),
      askTimeoutMs: opts.askTimeoutMs ?? ASK_TIMEOUT_MS,
      idleMs: opts.idleMs,
      deactivationBoundMs: opts.deactivationBoundMs,
    });
    opened.push({ system, transport, pubsub });
    await system.start();
    for (let shard = 0; shard < SHARDS; shard++) {
      if (!opts.hold || opts.hold(shard)) await system.holdShard(shard, 100 + shard);
    }
    return system;
  }

  beforeEach(() => {
    scope = `${redisRun.prefix}:${engine.name}-${++scopes}`;
    probe = newProbe();
    transportErrors.length = 0;
  });

  afterEach(async () => {
    for (const { system, transport, pubsub } of opened.reverse()) {
      await system.close();
      await transport.close();
      await pubsub.close();
    }
    opened = [];
    vi.restoreAllMocks();
    expect(transportErrors).toEqual([]);
  });

  it("ask returns the actor's reply, and the actor keeps its state between turns", async () => {
    const system = await node();
    expect(await at(system, "counter:a").ask({ op: "add", by: 2 })).toBe(2);
    expect(await at(system, "counter:a").ask({ op: "add", by: 3 })).toBe(5);
    expect(await at(system, "counter:b").ask({ op: "add", by: 1 })).toBe(1);
    expect(probe.activations.get("counter:a")).toBe(1);
  });

  it("tell delivers without waiting for a reply, in order with later asks to the same actor", async () => {
    const system = await node();
    await expect(at(system, "counter:t").tell({ op: "add", by: 5, ms: 30 })).resolves.toBeUndefined();
    // tell resolved once the entry was accepted, before the (30 ms) turn ran
    expect(probe.turns.get("counter:t")).toBeUndefined();
    await at(system, "counter:t").tell({ op: "add", by: 1 });
    expect(await at(system, "counter:t").ask({ op: "get" })).toBe(6);
    expect(probe.turns.get("counter:t")).toBe(3);
  });

  it("runs one turn at a time per actor, in the order the asks were sent", async () => {
    const system = await node();
    const tags = ["a", "b", "c", "d", "e"];
    const replies = await Promise.all(tags.map((tag) => at(system, "slow:one").ask({ tag, ms: 15 })));
    expect(replies).toEqual(tags);
    expect(probe.log).toEqual(tags.flatMap((tag) => [`enter slow:one ${tag}`, `leave slow:one ${tag}`]));
  });

  it("runs different actors concurrently, on the same shard and on different shards", async () => {
    const system = await node();
    const a = idOn("slow", 3, 0);
    const b = idOn("slow", 3, 1);
    const c = idOn("slow", 5, 0);
    await Promise.all([a, b, c].map((id) => at(system, id).ask({ tag: "x", ms: 150 })));
    const firstLeave = probe.log.findIndex((l) => l.startsWith("leave"));
    expect(probe.log.slice(0, firstLeave).sort()).toEqual([`enter ${a} x`, `enter ${b} x`, `enter ${c} x`].sort());
  });

  it("an ask that gets no reply in time fails with REQUEST_TIMEOUT, and its late reply is ignored", async () => {
    const system = await node();
    const started = Date.now();
    const err = await rejection(at(system, "slow:late").ask({ tag: "late", ms: 200 }, 40));
    expect(Date.now() - started).toBeLessThan(190);
    expect(err.code).toBe("REQUEST_TIMEOUT");
    expect(err.status).toBe(503);
    expect(err.message).toContain("slow:late");
    // The turn still ends and replies; that reply finds no one waiting and must not answer anything else.
    await until(() => probe.log.includes("leave slow:late late"));
    const next = at(system, "slow:late").ask({ tag: "next", ms: 0 });
    await sleep(50);
    expect(await next).toBe("next");
  });

  it("errors thrown by receive reach the asker with code, status, message and extra intact", async () => {
    const system = await node();
    const err = await rejection(at(system, "failing:1").ask({ op: "coded" }));
    expect(err.toJSON()).toEqual({
      code: "STREAM_DOES_NOT_EXIST",
      msg: "Channel with ID '7' does not exist",
      status: 400,
      extra: { stream_id: 7 },
    });

    // Unknown failures become 500s that do not leak their detail (and are logged where they happened).
    const logged = vi.spyOn(log, "error").mockImplementation(() => log);
    const internal = await rejection(at(system, "failing:1").ask({ op: "plain" }));
    expect(internal.code).toBe("INTERNAL_SERVER_ERROR");
    expect(internal.status).toBe(500);
    expect(internal.message).toBe("Internal server error");
    expect(JSON.stringify(internal.toJSON())).not.toContain("secret detail");
    expect(logged).toHaveBeenCalled();

    // A failed turn does not break the actor; a failing told turn reaches nobody.
    await at(system, "failing:1").tell({ op: "coded" });
    expect(await at(system, "failing:1").ask({ op: "ok" })).toBe("fine");
    expect(probe.turns.get("failing:1")).toBe(4);

    // Unknown kinds fail the ask instead of hanging it, with an error that names what was unknown.
    logged.mockClear();
    const unknown = await rejection(at(system, "nosuchkind:1").ask({}));
    expect(unknown.code).toBe("UNKNOWN_OPERATION");
    expect(unknown.status).toBe(501);
    expect(unknown.message).toContain("nosuchkind");
  });

  it("a failing activate fails the queued asks, and the next message activates again", async () => {
    const system = await node();
    const first = at(system, "flaky:1").ask({ n: 1 });
    const second = at(system, "flaky:1").ask({ n: 2 });
    const firstErr = rejection(first);
    const secondErr = rejection(second);
    await until(() => probe.activations.get("flaky:1") === 1);
    await sleep(100); // both asks are queued behind the pending activation by now
    probe.openGate();
    for (const err of [await firstErr, await secondErr]) {
      expect(err.toJSON()).toEqual({ code: "NOT_READY", msg: "state could not be loaded", status: 503, extra: { attempt: 1 } });
    }
    expect(probe.activations.get("flaky:1")).toBe(1);
    expect(await at(system, "flaky:1").ask({ n: 3 })).toBe("ok 3");
    expect(probe.activations.get("flaky:1")).toBe(2);
    expect(await at(system, "flaky:1").ask({ n: 4 })).toBe("ok 4");
    expect(probe.activations.get("flaky:1")).toBe(2);
  });

  it("a parked ask (ctx.defer + PARKED) is answered when a later turn resolves it, without blocking the actor", async () => {
    const system = await node();
    let answered: string | undefined;
    const waits = [at(system, "parker:p").ask({ op: "wait" }), at(system, "parker:p").ask({ op: "wait" })];
    for (const w of waits) void w.then((v) => (answered = v));
    await sleep(50);
    expect(answered).toBeUndefined();
    // The actor takes further turns while the asks are parked; this one answers both.
    expect(await at(system, "parker:p").ask({ op: "release", value: "hello" })).toBe(2);
    expect(await Promise.all(waits)).toEqual(["hello", "hello"]);
    expect(await at(system, "parker:p").ask({ op: "release", value: "again" })).toBe(0);
  });

  it("ctx.completeWhen answers a turn only once its work settles, while later turns run", async () => {
    const system = await node();
    let answered = false;
    const first = at(system, "committer:a").ask({ op: "hold", n: 1 }).then((v) => ((answered = true), v));
    const second = at(system, "committer:a").ask({ op: "hold", n: 2 });
    await new Promise((r) => setTimeout(r, 50));
    expect(answered).toBe(false); // its turn ended, but its work has not settled
    expect(await at(system, "committer:a").ask({ op: "finish" })).toBe(2); // the mailbox did not wait
    expect(await first).toBe("held 1");
    expect(answered).toBe(true);
    await expect(second).resolves.toBe("held 2");
    const doomed = at(system, "committer:a").ask({ op: "hold", n: 3 });
    await at(system, "committer:a").ask({ op: "finish", fail: true });
    await expect(doomed).rejects.toMatchObject({ code: "COMMIT_FAILED", status: 503 });
  });

  it("ctx.holdAcknowledgement answers at once but keeps the entry in flight until its work settles", async () => {
    const system = await node();
    const shard = 3;
    expect(await at(system, idOn("acker", shard, 0)).ask({ op: "hold", n: 1 })).toBe("answered 1");
    await broadcastAt(system, [idOn("acker", shard, 1), idOn("acker", shard, 2)], { op: "hold", n: 2 }); // answered too
    expect(probe.ackHolds).toHaveLength(3);
    let released = false;
    const releasing = system.dropShard(shard).then(() => (released = true));
    await sleep(100);
    expect(released).toBe(false); // releasing the shard waits for its unacknowledged entries
    for (const settle of probe.ackHolds.splice(0, 2)) settle();
    await sleep(50);
    expect(released).toBe(false); // the broadcast entry waits for both of its turns' work
    probe.ackHolds.shift()!();
    await releasing;
  });

  it.runIf(engine.distributed)("an entry whose held work was refused as FENCED stays for the shard's next holder", async () => {
    const first = await node({ hold: (shard) => shard === 6 });
    const acker = idOn("acker", 6);
    expect(await at(first, acker).ask({ op: "hold", n: 1 })).toBe("answered 1");
    probe.ackHolds.shift()!(errors.fenced(6)); // the write-behind found the lease taken: its entry is not acknowledged
    await sleep(50); // past the acknowledgement's batching delay
    await first.dropShard(6);
    await node({ hold: (shard) => shard === 6 });
    await until(() => probe.ackHolds.length === 1); // the next holder ran the entry's turn again
  });

  it.runIf(engine.distributed)("an entry held back while its lease was in doubt, run once confirmed, whose held work was refused as FENCED stays for the shard's next holder", async () => {
    const first = await node({ hold: (shard) => shard === 6 });
    let sure = false;
    first.guardShards((shard) => shard !== 6 || sure);
    const answered = at(first, idOn("acker", 6)).ask({ op: "hold", n: 1 });
    await sleep(100);
    expect(probe.ackHolds).toHaveLength(0); // held back
    sure = true;
    first.leasesConfirmed();
    expect(await answered).toBe("answered 1");
    probe.ackHolds.shift()!(errors.fenced(6));
    await sleep(50); // past the acknowledgement's batching delay
    await first.dropShard(6);
    await node({ hold: (shard) => shard === 6 });
    await until(() => probe.ackHolds.length === 1); // the next holder ran the entry's turn again
  });

  it("broadcastHeld runs the turns of shards held here without the transport, the others through it, and hands over what they hold", async () => {
    const system = await node({ hold: (shard) => shard !== 6 });
    const send = vi.spyOn(opened.at(-1)!.transport, "send");
    const keyOf = (id: string) => id.slice("acker:".length);
    const held: Promise<void>[] = [];
    await system.broadcastHeld(untypedKind("acker"), [idOn("acker", 2, 0), idOn("acker", 2, 1), idOn("acker", 3, 0)].map(keyOf), { op: "hold", n: 1 }, held);
    expect(send).not.toHaveBeenCalled();
    expect(probe.ackHolds).toHaveLength(3); // every turn ran and answered, its work still held
    expect(held).toHaveLength(2); // one per shard
    let settled = false;
    void Promise.all(held).then(() => (settled = true));
    for (const settle of probe.ackHolds.splice(0, 2)) settle();
    await sleep(30);
    expect(settled).toBe(false); // one turn's work is still held
    probe.ackHolds.shift()!();
    await until(() => settled);

    // A shard held by nobody: through the transport, its entry's acknowledgement the transport's own.
    const nobodys = system.broadcastHeld(untypedKind("acker"), [keyOf(idOn("acker", 6))], { op: "hold", n: 2 }, held);
    await until(() => send.mock.calls.length === 1);
    expect(send.mock.calls[0]![0]).toBe(6);
    await system.holdShard(6, 106);
    await nobodys;
    expect(held).toHaveLength(2);
    probe.ackHolds.shift()!();
  });

  it.runIf(engine.distributed)("a turn broadcastHeld ran here whose held work was refused as FENCED goes to the shard's next holder", async () => {
    const first = await node({ hold: (shard) => shard === 6 });
    const held: Promise<void>[] = [];
    await first.broadcastHeld(untypedKind("acker"), [idOn("acker", 6).slice("acker:".length)], { op: "hold", n: 1 }, held);
    probe.ackHolds.shift()!(errors.fenced(6)); // the write-behind found the lease taken
    await Promise.all(held); // settled once the entry is in the transport
    // Served here until dropped, the entry's turn runs here again and is refused again; then the next holder has it.
    await until(() => probe.ackHolds.length === 1);
    probe.ackHolds.shift()!(errors.fenced(6));
    await sleep(50); // past the acknowledgement's batching delay
    await first.dropShard(6);
    await node({ hold: (shard) => shard === 6 });
    await until(() => probe.ackHolds.length === 1); // the next holder ran the turn again
  });

  it("a parked ask resolved after the asker timed out is ignored", async () => {
    const system = await node();
    const err = await rejection(at(system, "parker:gone").ask({ op: "wait" }, 30));
    expect(err.code).toBe("REQUEST_TIMEOUT");
    expect(await at(system, "parker:gone").ask({ op: "release", value: "late" })).toBe(1);
    // A fresh ask is not answered by the stale reply.
    const fresh = at(system, "parker:gone").ask({ op: "wait" });
    await sleep(30);
    expect(await at(system, "parker:gone").ask({ op: "release", value: "fresh" })).toBe(1);
    expect(await fresh).toBe("fresh");
  });

  it("ctx.schedule delivers a later turn, and its cancel function stops it", async () => {
    const system = await node();
    await at(system, "timer:1").ask({ op: "arm", tag: "kept", ms: 40 });
    await at(system, "timer:1").ask({ op: "arm", tag: "cancelled", ms: 40 });
    await at(system, "timer:1").ask({ op: "cancel", tag: "cancelled" });
    expect(probe.ticks).toEqual([]);
    await until(() => probe.ticks.length > 0);
    expect(probe.ticks).toEqual(["timer:1 kept"]);
    await sleep(80);
    expect(probe.ticks).toEqual(["timer:1 kept"]);
  });

  it("broadcast reaches every id once, across shards, and resolves after all their turns", async () => {
    const system = await node();
    const ids = Array.from({ length: 40 }, (_, i) => `counter:b${i}`);
    expect(new Set(ids.map((id) => shardOf(id, SHARDS))).size).toBeGreaterThan(3);
    await broadcastAt(system, ids, { op: "add", by: 1, ms: 20 });
    for (const id of ids) expect(probe.turns.get(id), id).toBe(1);
    const totals = await Promise.all(ids.map((id) => at(system, id).ask({ op: "get" })));
    expect(totals).toEqual(ids.map(() => 1));

    // A failing target fails its shard's entry with its error, once every turn of that entry has ended.
    const failing = idOn("counter", shardOf("counter:b0", SHARDS), 0, "fail");
    const err = await rejection(broadcastAt(system, ["counter:b0", failing], { op: "coded", by: 0, ms: 30 }));
    expect(err.code).toBe("STREAM_DOES_NOT_EXIST");
    expect(probe.turns.get("counter:b0")).toBe(3);
    expect(probe.turns.get(failing)).toBe(1);

    await expect(system.broadcast(untypedKind("counter"), [], { op: "add", by: 1 })).resolves.toBeUndefined();
  });

  it("ctx.fence() carries the epoch the shard was held with", async () => {
    const system = await node();
    for (const shard of [0, 3, SHARDS - 1]) {
      const fence = await at(system, idOn("fence", shard)).ask({});
      expect(fence).toEqual({ shard, epoch: 100 + shard, node: system.nodeId });
    }
  });

  it("passivates idle actors that agree, keeps those that refuse, and never one in the middle of a turn", async () => {
    const system = await node({ idleMs: 60 });
    expect(await at(system, "idle:p").ask({})).toBe(0);
    expect(await at(system, "idle:keep").ask({})).toBe(0);
    await until(() => probe.deactivations.get("idle:p") === 1);
    await sleep(200); // several sweeps
    expect(probe.deactivations.get("idle:keep")).toBeUndefined();
    expect(probe.activations.get("idle:keep")).toBe(1);

    // The passivated actor is activated again by its next message; the refusing one was never dropped.
    expect(await at(system, "idle:p").ask({})).toBe(1);
    expect(probe.activations.get("idle:p")).toBe(2);
    expect(await at(system, "idle:keep").ask({})).toBe(0);
    expect(probe.activations.get("idle:keep")).toBe(1);

    // A turn longer than idleMs is not cut short by passivation.
    expect(await at(system, "idle:busy").ask({ ms: 250 })).toBe(0);
  });

  it("dropShard waits for the turn in progress, deactivates that shard's actors only, and a later holder gets its entries", async () => {
    const system = await node();
    const [a1, a2, b1] = [idOn("counter", 1, 0), idOn("counter", 1, 1), idOn("counter", 2, 0)];
    for (const id of [a1, a2, b1]) expect(await at(system, id).ask({ op: "add", by: 1 })).toBe(1);
    const slow = idOn("slow", 1, 0);
    const slowAsk = at(system, slow).ask({ tag: "s", ms: 150 });
    await until(() => probe.log.includes(`enter ${slow} s`));

    await system.dropShard(1);
    expect(probe.log).toContain(`leave ${slow} s`);
    expect(await slowAsk).toBe("s");
    expect(probe.deactivations.get(a1)).toBe(1);
    expect(probe.deactivations.get(a2)).toBe(1);
    expect(probe.deactivations.get(slow)).toBe(1);
    expect(probe.deactivations.get(b1)).toBeUndefined();
    expect(system.heldShards()).not.toContain(1);
    expect(system.heldShards()).toHaveLength(SHARDS - 1);

    // Nobody holds shard 1 now: an ask waits for the next holder instead of failing.
    let settled = false;
    const waiting = at(system, a1).ask({ op: "add", by: 10 }).finally(() => (settled = true));
    const fence = at(system, idOn("fence", 1)).ask({});
    await sleep(100);
    expect(settled).toBe(false);
    await system.holdShard(1, 7);
    expect(await waiting).toBe(10); // a new activation: the dropped one's memory is gone
    expect(probe.activations.get(a1)).toBe(2);
    expect((await fence).epoch).toBe(7);
    expect(await at(system, b1).ask({ op: "get" })).toBe(1);
  });

  it("dropShard goes on without an actor whose deactivate does not end in its bound", async () => {
    const system = await node({ deactivationBoundMs: 300 });
    const stuck = idOn("stuck", 4);
    const counter = idOn("counter", 4);
    expect(await at(system, stuck).ask({})).toBe("here");
    expect(await at(system, counter).ask({ op: "add", by: 1 })).toBe(1);
    await system.dropShard(4); // before: never resolved
    expect(system.heldShards()).not.toContain(4);
    expect(probe.deactivations.get(counter)).toBe(1);
  });

  // The memory transport has no next holder to leave entries to: the guard is not used there.
  it.skipIf(!engine.distributed)("while a shard's lease is in doubt (guardShards) its entries wait: run in order once confirmed, or left to the next holder when the shard is dropped", async () => {
    const system = await node();
    let sure = true;
    system.guardShards((shard) => shard !== 1 || sure);
    const id = idOn("counter", 1, 0);
    expect(await at(system, id).ask({ op: "add", by: 1 })).toBe(1);
    sure = false;
    const added = at(system, id).ask({ op: "add", by: 10 });
    const got = at(system, id).ask({ op: "get" });
    // Other shards are served meanwhile.
    expect(await at(system, idOn("counter", 2, 0)).ask({ op: "add", by: 1 })).toBe(1);
    await sleep(200);
    system.leasesConfirmed(); // a renewal that did not confirm shard 1: still waiting
    await sleep(100);
    expect(probe.turns.get(id)).toBe(1);
    sure = true;
    system.leasesConfirmed();
    expect(await added).toBe(11);
    expect(await got).toBe(11);

    // In doubt again, then dropped (the lease was lost): the entry does not run here; the shard's next holder gets it.
    sure = false;
    const later = at(system, id).ask({ op: "add", by: 100 });
    await sleep(200);
    await system.dropShard(1);
    expect(probe.turns.get(id)).toBe(3);
    sure = true;
    await system.holdShard(1, 7);
    expect(await later).toBe(100); // a new activation on the next holding
  });

  it("close() rejects pending asks with SHUTTING_DOWN, deactivates every actor and refuses new asks", async () => {
    const system = await node();
    expect(await at(system, "counter:c").ask({ op: "add", by: 1 })).toBe(1);
    const parked = rejection(at(system, "parker:c").ask({ op: "wait" }));
    await until(() => probe.activations.get("parker:c") === 1);
    await sleep(20);
    await system.close();
    const err = await parked;
    expect(err.code).toBe("SHUTTING_DOWN");
    expect(err.status).toBe(503);
    expect(probe.deactivations.get("counter:c")).toBe(1);
    expect(probe.deactivations.get("parker:c")).toBe(1);
    expect(system.heldShards()).toEqual([]);
    expect((await rejection(at(system, "counter:c").ask({ op: "get" }))).code).toBe("SHUTTING_DOWN");
  });

  it("askTransient queues the turn here for a shard held here, and goes through the transport otherwise", async () => {
    const system = await node({ hold: (shard) => shard !== 6 });
    const send = vi.spyOn(opened.at(-1)!.transport, "send");
    const sentTo = () => send.mock.calls.map(([shard]) => shard);

    // Held here: the same activation answers it as an ask, and only the ask used the transport.
    const here = idOn("counter", 2);
    expect(await at(system, here).askTransient({ op: "add", by: 1 })).toBe(1);
    expect(await at(system, here).ask({ op: "add", by: 2 })).toBe(3);
    expect(await at(system, here).askTransient({ op: "get" })).toBe(3);
    expect(sentTo()).toEqual([2]);
    expect(probe.activations.get(here)).toBe(1);

    // Held by nobody: the entry waits in the transport until a holder takes the shard (which may also bring the
    // ask a second time: see resendTransient).
    const nobodys = idOn("counter", 6);
    const waiting = at(system, nobodys).askTransient({ op: "get" });
    await until(() => sentTo().length === 2);
    expect(sentTo()).toEqual([2, 6]);
    await system.holdShard(6, 106);
    expect(await waiting).toBe(0);

    // Dropped: no longer served here; the next holder answers, with a fresh activation.
    await system.dropShard(2);
    const afterDrop = at(system, here).askTransient({ op: "get" });
    await until(() => sentTo().filter((shard) => shard === 2).length === 2);
    await system.holdShard(2, 202);
    expect(await afterDrop).toBe(0);
    expect(probe.activations.get(here)).toBe(2);
  });

  it("askDirect queues the turn here for a shard held here and surely so, and goes through the transport otherwise", async () => {
    const system = await node({ hold: (shard) => shard !== 6 });
    let sure = true;
    system.guardShards((shard) => shard !== 3 || sure);
    const send = vi.spyOn(opened.at(-1)!.transport, "send");
    const sentTo = () => send.mock.calls.map(([shard]) => shard);

    // Held here: the same activation answers it as an ask, and only the ask used the transport.
    const here = idOn("counter", 2);
    expect(await at(system, here).askDirect({ op: "add", by: 1 })).toBe(1);
    expect(await at(system, here).ask({ op: "add", by: 2 })).toBe(3);
    expect(await at(system, here).askDirect({ op: "get" })).toBe(3);
    expect(sentTo()).toEqual([2]);
    expect(probe.activations.get(here)).toBe(1);

    // Held by nobody: the entry waits in the transport until a holder takes the shard.
    const waiting = at(system, idOn("counter", 6)).askDirect({ op: "add", by: 5 });
    await until(() => sentTo().length === 2);
    expect(sentTo()).toEqual([2, 6]);
    await system.holdShard(6, 106);
    expect(await waiting).toBe(5);

    // Held here but the lease in doubt (on a transport that gives a dropped shard's entries to its next holder): the
    // transport, where the entry waits rather than running now.
    if (engine.distributed) {
      sure = false;
      const doubtful = at(system, idOn("counter", 3)).askDirect({ op: "add", by: 7 });
      await until(() => sentTo().length === 3);
      expect(sentTo()).toEqual([2, 6, 3]);
      sure = true;
      system.leasesConfirmed();
      expect(await doubtful).toBe(7);
    }
  });

  it("askStream hears each interim answer in order, then the final one; other asks ignore interim answers", async () => {
    const system = await node();
    const parker = idOn("parker", 1);
    const heard: string[] = [];
    const stream = at(system, parker).askStream({ op: "wait" }, (v) => heard.push(v));
    const plain = at(system, parker).ask({ op: "wait" });
    await until(() => probe.activations.get(parker) === 1);
    expect(await at(system, parker).ask({ op: "push", value: "one" })).toBe(2);
    expect(await at(system, parker).ask({ op: "push", value: "two" })).toBe(2);
    await until(() => heard.length === 2);
    expect(heard).toEqual(["one", "two"]);
    expect(await at(system, parker).ask({ op: "release", value: "last" })).toBe(2);
    expect(await stream).toBe("last");
    expect(await plain).toBe("last"); // not "one": a plain ask's answer is the final one
    // Settled: later pushes reach nobody.
    expect(await at(system, parker).ask({ op: "push", value: "late" })).toBe(0);
    expect(heard).toEqual(["one", "two"]);
  });

  it("an askStream's timeout counts from its last interim answer", async () => {
    const system = await node({ askTimeoutMs: 1000 });
    const parker = idOn("parker", 2);
    const heard: string[] = [];
    const stream = at(system, parker).askStream({ op: "wait" }, (v) => heard.push(v));
    const outcome = stream.then(
      () => "answered",
      (e: ChorusError) => e.code,
    );
    // Interim answers for well over the timeout keep it open.
    for (let i = 0; i < 8; i++) {
      await at(system, parker).ask({ op: "push", value: `p${i}` });
      await sleep(250);
    }
    await until(() => heard.length === 8);
    // Then silence: it times out.
    expect(await outcome).toBe("REQUEST_TIMEOUT");
    expect(heard).toHaveLength(8);
  });

  it.runIf(engine.distributed)("two nodes: each ask reaches the node hosting the actor and the reply comes back", async () => {
    const a = await node({ hold: (shard) => shard % 2 === 0 });
    const b = await node({ hold: (shard) => shard % 2 === 1 });
    expect(a.nodeId).not.toBe(b.nodeId);
    const onA = idOn("fence", 2);
    const onB = idOn("fence", 3);

    // A asks an actor hosted by B, and B one hosted by A.
    expect(await at(a, onB).ask({})).toEqual({ shard: 3, epoch: 103, node: b.nodeId });
    expect(await at(b, onA).ask({})).toEqual({ shard: 2, epoch: 102, node: a.nodeId });

    // State lives on the hosting node: both askers see the same counter.
    const counter = idOn("counter", 5);
    expect(await at(a, counter).ask({ op: "add", by: 1 })).toBe(1);
    expect(await at(b, counter).ask({ op: "add", by: 1 })).toBe(2);
    await at(a, counter).tell({ op: "add", by: 1 });
    expect(await at(a, counter).ask({ op: "get" })).toBe(3);
    expect(probe.activations.get(counter)).toBe(1);

    // Errors and parked asks cross nodes too.
    const err = await rejection(at(a, idOn("failing", 7)).ask({ op: "coded" }));
    expect(err.toJSON()).toMatchObject({ code: "STREAM_DOES_NOT_EXIST", status: 400, extra: { stream_id: 7 } });
    const parker = idOn("parker", 1);
    const parked = at(a, parker).ask({ op: "wait" });
    await sleep(30);
    expect(await at(b, parker).ask({ op: "release", value: "from B" })).toBe(1);
    expect(await parked).toBe("from B");

    // A broadcast from A covering both nodes' shards.
    const ids = Array.from({ length: 16 }, (_, i) => `counter:n${i}`);
    await broadcastAt(a, ids, { op: "add", by: 1 });
    for (const id of ids) expect(probe.turns.get(id), id).toBe(1);
  });

  it.runIf(engine.distributed)("a transient ask parked on a holder that died is sent again to the shard's next holder", async () => {
    const asker = await node({ hold: () => false });
    await node({ hold: (shard) => shard === 3 });
    const dying = opened.at(-1)!.transport;
    // The holder announced the shard when it took it; an ask sent before the asker heard that would be sent again by it.
    await sleep(200);
    const parker = idOn("parker", 3);
    const waiting = at(asker, parker).askTransient({ op: "wait" });
    await until(() => probe.activations.get(parker) === 1);

    // The holder stops serving the shard without answering (as a SIGKILL leaves it); the parked turn is gone with it.
    await dying.release(3);
    await node({ hold: (shard) => shard === 3 }); // takes the shard and says so
    await until(() => probe.activations.get(parker) === 2);
    expect(await at(asker, parker).ask({ op: "release", value: "from the next holder" })).toBe(1);
    expect(await waiting).toBe("from the next holder");
  });

  it.runIf(engine.distributed)("an askStream across nodes hears its interim answers, and ends answered undefined when its shard's holder changes", async () => {
    const asker = await node({ hold: () => false });
    await node({ hold: (shard) => shard === 3 });
    const dying = opened.at(-1)!.transport;
    // The holder announced the shard when it took it; a stream asked before the asker heard that would be cut by it.
    await sleep(200);
    const parker = idOn("parker", 3);
    const heard: string[] = [];
    const stream = at(asker, parker).askStream({ op: "wait" }, (v) => heard.push(v));
    await until(() => probe.activations.get(parker) === 1);
    await sleep(30); // the turn has parked
    expect(await at(asker, parker).ask({ op: "push", value: "across" })).toBe(1);
    await until(() => heard.length === 1);
    expect(heard).toEqual(["across"]);

    // The holder stops serving the shard without answering; the next one takes it and says so. A stream is not sent
    // again (its asker knows where it stands, the runtime does not): it ends, answered undefined.
    await dying.release(3);
    await node({ hold: (shard) => shard === 3 });
    expect(await stream).toBeUndefined();
  });

  it.runIf(engine.distributed)("a transient ask whose reply Redis lost (the asker's reply stream vanished) is sent again", async () => {
    const asker = await node({ hold: () => false });
    const holder = await node();
    const parker = idOn("parker", 5);
    let answer: string | undefined;
    void at(asker, parker)
      .askTransient({ op: "wait" })
      .then((v) => (answer = v as string));
    await until(() => probe.activations.get(parker) === 1);
    await sleep(50); // the turn has parked

    // What a FLUSHALL does to the asker: its reply stream is gone, so the answer below is dropped at the source.
    const redis = new Redis(REDIS_URL);
    try {
      await redis.del(redisKeys(scope).reply(asker.nodeId));
    } finally {
      redis.disconnect();
    }
    expect(await at(holder, parker).ask({ op: "release", value: "dropped" })).toBe(1);
    // The asker notices within a read or two and asks again; the new turn parks and the next release answers it.
    const deadline = Date.now() + ASK_TIMEOUT_MS - 500;
    while (answer === undefined && Date.now() < deadline) {
      await at(holder, parker).ask({ op: "release", value: "again" });
      await sleep(50);
    }
    expect(answer).toBe("again");
  });

  it.runIf(engine.distributed)("when Redis loses its data, the actors of the shards held here hear it in a turn; those activated later see unacknowledgedLost", async () => {
    const system = await node({ hold: (shard) => shard === 2 || shard === 4 });
    const active = idOn("forgetful", 2);
    const later = idOn("forgetful", 4);
    expect(await at(system, active).ask({})).toBe(false);

    // What a FLUSHALL does to this deployment: every stream, group and pending entry gone.
    await deleteRedisKeys(REDIS_URL, scope);
    await until(() => probe.heardLost.length > 0);
    expect(probe.heardLost).toEqual([active]);
    expect(await at(system, active).ask({})).toBe(true);
    expect(await at(system, later).ask({})).toBe(true);
    expect(probe.heardLost).toEqual([active]); // heard once, by the actor active then
    // The loops' reads and acknowledgements failed on the vanished streams (UNBLOCKED, NOGROUP), and recovered.
    expect(transportErrors.every((e) => /UNBLOCKED|NOGROUP/.test(e))).toBe(true);
    transportErrors.length = 0;
  });

  it("announce reaches the notice listeners of every node, the announcer's included, once each", async () => {
    const a = await node();
    const b = engine.distributed ? await node() : a;
    const heard = new Map<ActorSystem, string[]>([a, b].map((system) => [system, []]));
    for (const [system, notices] of heard) system.onNotice((notice) => notices.push(notice));
    await a.announce("credentials-changed");
    for (const notices of heard.values()) await until(() => notices.length > 0);
    await sleep(30);
    for (const notices of heard.values()) expect(notices).toEqual(["credentials-changed"]);
  });
});
