/**
 * Peer links (runtime/transport/peer-links.ts) between two actor systems on Redis Streams, as two workers of one host
 * have them: the asker holds no shard and knows where each lives (shardHomes); the holder holds them all. Each test
 * has its own key scope and socket directory. Whether an ask crossed on the link or through Redis is read off the
 * transport's `send`, spied on both sides.
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { PARKED, type ActorFactory, type Deferred } from "../../runtime/actor.ts";
import { ChorusError, errors } from "../../runtime/errors.ts";
import { registry } from "../../runtime/metrics.ts";
import { ActorSystem } from "../../runtime/system.ts";
import { PeerLinks } from "../../runtime/transport/peer-links.ts";
import { RedisPubSub } from "../../runtime/transport/redis-pubsub.ts";
import { RedisStreamsTransport } from "../../runtime/transport/redis-streams.ts";
import { until } from "../support/messages.ts";
import { freshRedisPrefix, REDIS_URL } from "../support/services.ts";
import { at, untypedKind } from "../support/untyped-actors.ts";

const SHARDS = 4;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** What the test actors did, in order, by the system that ran them. */
interface Probe {
  turns: string[];
  /** The work `acker` turns hold (ctx.holdAcknowledgement), settled by the test (failed with the error given). */
  ackHolds: Array<(error?: ChorusError) => void>;
}

function kinds(probe: Probe, where: string): Record<string, ActorFactory> {
  return {
    counter: (ctx) => {
      let total = 0;
      return {
        receive(m: { by?: number }) {
          probe.turns.push(`${where} ${ctx.id}`);
          total += m.by ?? 0;
          return total;
        },
      };
    },
    parker: () => {
      const waiting: Deferred<string>[] = [];
      return {
        receive(m: { op: string; value?: string }, ctx) {
          if (m.op === "wait") {
            waiting.push(ctx.defer<string>());
            return PARKED;
          }
          if (m.op === "push") for (const d of waiting) d.push(m.value!);
          else for (const d of waiting.splice(0)) d.resolve(m.value!);
          return waiting.length;
        },
      };
    },
    acker: (ctx) => ({
      receive(m: { n: number }) {
        probe.turns.push(`${where} ${ctx.id}`);
        ctx.holdAcknowledgement(new Promise<void>((resolve, reject) => probe.ackHolds.push((error) => (error ? reject(error) : resolve()))));
        return `answered ${m.n}`;
      },
    }),
  };
}

/** chorus_peer_link_asks_total so far, by outcome. */
async function linkAsks(): Promise<Record<string, number>> {
  const { values } = await registry.getSingleMetric("chorus_peer_link_asks_total")!.get();
  return Object.fromEntries(values.map(({ labels, value }) => [String(labels.outcome), value]));
}

const redisRun = freshRedisPrefix();
afterAll(async () => {
  await redisRun.clean();
});

describe("peer links between two workers", () => {
  let scope = "";
  let scopes = 0;
  let directory = "";
  let probe: Probe;
  let opened: Array<{ system: ActorSystem; close(): Promise<void> }> = [];

  async function worker(name: string, holds: boolean) {
    const transport = new RedisStreamsTransport({ url: REDIS_URL, prefix: scope, blockMs: 200, claimIdleMs: 60_000, drainTimeoutMs: 1000 });
    const pubsub = new RedisPubSub({ url: REDIS_URL, prefix: scope });
    const peers = new PeerLinks({ nodeId: transport.nodeId, directory });
    const system = new ActorSystem({ transport, pubsub, peers, shards: SHARDS, kinds: kinds(probe, name), askTimeoutMs: 3000 });
    await system.start();
    if (holds) for (let shard = 0; shard < SHARDS; shard++) await system.holdShard(shard, 100 + shard);
    const close = async () => {
      await system.close();
      await transport.close();
      await pubsub.close();
    };
    opened.push({ system, close });
    return { system, transport, peers, send: vi.spyOn(transport, "send") };
  }

  /** A holder of every shard, and an asker told so, whose first ask opened the link. */
  async function pair() {
    const holder = await worker("holder", true);
    const asker = await worker("asker", false);
    asker.system.shardHomes(Array.from({ length: SHARDS }, () => holder.transport.nodeId));
    // The first ask opens the link and takes the transport meanwhile.
    expect(await at(asker.system, "counter:opening").askDirect({ by: 1 })).toBe(1);
    await until(() => asker.peers.openLinks().length === 1);
    asker.send.mockClear();
    return { holder, asker };
  }

  beforeEach(() => {
    scope = `${redisRun.prefix}:links-${++scopes}`;
    directory = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-links-"));
    probe = { turns: [], ackHolds: [] };
  });

  afterEach(async () => {
    for (const { close } of opened.reverse()) await close();
    opened = [];
    vi.restoreAllMocks();
    fs.rmSync(directory.endsWith("a-file") ? path.dirname(directory) : directory, { recursive: true, force: true });
  });

  it("askDirect, askTransient and askStream to a shard the other worker holds cross on the link, and are answered by its actors", async () => {
    const { holder, asker } = await pair();
    expect(await at(asker.system, "counter:a").askDirect({ by: 2 })).toBe(2);
    expect(await at(asker.system, "counter:a").askDirect({ by: 3 })).toBe(5);
    // The same activation, which a plain ask (through Redis) reaches too.
    expect(await at(asker.system, "counter:a").ask({ by: 0 })).toBe(5);
    expect(probe.turns.filter((t) => t.endsWith("counter:a"))).toEqual(["holder counter:a", "holder counter:a", "holder counter:a"]);

    const poll = at(asker.system, "parker:p").askTransient({ op: "wait" });
    const heard: string[] = [];
    const stream = at(asker.system, "parker:p").askStream({ op: "wait" }, (value) => heard.push(value));
    await sleep(50);
    expect(await at(holder.system, "parker:p").ask({ op: "push", value: "one" })).toBe(2);
    await until(() => heard.length === 1);
    expect(await at(holder.system, "parker:p").ask({ op: "release", value: "done" })).toBe(0);
    expect(await poll).toBe("done");
    expect(await stream).toBe("done");
    expect(heard).toEqual(["one"]);
    // Only the plain ask went through Redis.
    expect(asker.send).toHaveBeenCalledTimes(1);
  });

  it("broadcastHeld's turns on the other worker cross on the link; their held promise settles once the holder's held work has", async () => {
    const { asker } = await pair();
    const held: Promise<void>[] = [];
    await asker.system.broadcastHeld(untypedKind("acker"), ["x", "y", "z"], { n: 1 }, held);
    expect(asker.send).not.toHaveBeenCalled();
    expect(probe.ackHolds).toHaveLength(3);
    expect(held.length).toBeGreaterThan(0);
    let settled = false;
    void Promise.all(held).then(() => (settled = true));
    for (const settle of probe.ackHolds.splice(0, 2)) settle();
    await sleep(50);
    expect(settled).toBe(false);
    probe.ackHolds.shift()!();
    await until(() => settled);
  });

  it("a held turn whose work the holder had refused as FENCED goes to the shard's next holder through Redis", async () => {
    const { asker } = await pair();
    const held: Promise<void>[] = [];
    await asker.system.broadcastHeld(untypedKind("acker"), ["x"], { n: 1 }, held);
    probe.ackHolds.shift()!(errors.fenced(0));
    await Promise.all(held);
    expect(asker.send).toHaveBeenCalledTimes(1);
    expect(asker.send.mock.calls[0]![1]).not.toHaveProperty("replyTo"); // its asker had its answer
    await until(() => probe.ackHolds.length === 1); // the entry ran again (here: the same holder)
    probe.ackHolds.shift()!();
  });

  it("an entry the holder is not sure it serves is refused, and its asker sends it through Redis", async () => {
    const { holder, asker } = await pair();
    let sure = false;
    holder.system.guardShards(() => sure);
    const before = await linkAsks();
    const asked = at(asker.system, "counter:doubt").askDirect({ by: 7 });
    await until(() => asker.send.mock.calls.length === 1);
    expect(probe.turns).not.toContain("holder counter:doubt");
    sure = true;
    holder.system.leasesConfirmed();
    expect(await asked).toBe(7);
    const after = await linkAsks();
    expect([after.sent! - (before.sent ?? 0), after.refused! - (before.refused ?? 0)]).toEqual([1, 1]);
  });

  it("when the link closes: a direct ask in flight fails with a 503, a parked poll is sent again through Redis, a held turn answered but unsettled is sent again", async () => {
    const { holder, asker } = await pair();
    const held: Promise<void>[] = [];
    await asker.system.broadcastHeld(untypedKind("acker"), ["x"], { n: 1 }, held);
    const poll = at(asker.system, "parker:q").askTransient({ op: "wait" });
    // A direct ask still unanswered when the link closes: its turn parks.
    const direct = at(asker.system, "parker:d").askDirect({ op: "wait" });
    await sleep(50);
    const lostBefore = (await linkAsks()).lost ?? 0;
    await holder.peers.close();
    const failure = await direct.then(
      () => undefined,
      (err: ChorusError) => err,
    );
    expect(failure).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
    expect((await linkAsks()).lost! - lostBefore).toBe(3); // the poll, the direct ask, the held entry
    await Promise.all(held);
    await until(() => probe.ackHolds.length === 2); // the held turn ran again, from Redis
    for (const settle of probe.ackHolds.splice(0)) settle();
    // The poll parked again through Redis: releasing the parker answers it.
    await until(() => asker.send.mock.calls.some(([, entry]) => (entry.body as { op?: string }).op === "wait"));
    expect(await at(holder.system, "parker:q").ask({ op: "release", value: "again" })).toBe(0);
    expect(await poll).toBe("again");
  });

  it("a frame that is not JSON, or not a frame, closes only its link: the worker goes on serving", async () => {
    const { holder, asker } = await pair();
    for (const garbage of ["not json", "42", JSON.stringify({ shard: 0, mode: "direct" })]) {
      const socket = net.connect(path.join(directory, `${holder.transport.nodeId}.sock`));
      await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
      socket.resume(); // the holder's hello, read and dropped: a paused socket would not see its end
      const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
      socket.write(`${garbage}\n`);
      await closed;
    }
    expect(await at(asker.system, "counter:after").askDirect({ by: 4 })).toBe(4);
    expect(asker.send).not.toHaveBeenCalled();
  });

  it("a worker that cannot listen for links starts all the same, and is asked through Redis", async () => {
    directory = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "chorus-links-")), "a-file");
    fs.writeFileSync(directory, "not a directory");
    const holder = await worker("holder", true);
    const asker = await worker("asker", false);
    asker.system.shardHomes(Array.from({ length: SHARDS }, () => holder.transport.nodeId));
    expect(await at(asker.system, "counter:c").askDirect({ by: 1 })).toBe(1);
    await sleep(50);
    expect(await at(asker.system, "counter:c").askDirect({ by: 1 })).toBe(2);
    expect(asker.send).toHaveBeenCalledTimes(2);
    expect(asker.peers.openLinks()).toEqual([]);
  });

  it("a link whose holder never greets it is not used: a connection a dying process took into its backlog stays open, unanswered", async () => {
    const holder = await worker("holder", true);
    const asker = await worker("asker", false);
    // A socket under a node id that accepts connections and says nothing, as a process being killed may.
    const silent = net.createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(path.join(directory, "node-silent.sock"), resolve));
    try {
      asker.system.shardHomes(Array.from({ length: SHARDS }, () => "node-silent"));
      for (let by = 1; by <= 3; by++) {
        expect(await at(asker.system, "counter:c").askDirect({ by: 1 })).toBe(by);
        await sleep(50);
      }
      expect(asker.send).toHaveBeenCalledTimes(3); // each through Redis, to the real holder
      expect(asker.peers.openLinks()).toEqual([]);
    } finally {
      silent.close();
    }
    expect(holder.peers.openLinks()).toEqual([]);
  });

  it("a directory other users may write to is not used: whoever could replace a socket there could pose as a worker", async () => {
    fs.chmodSync(directory, 0o777);
    const holder = await worker("holder", true);
    const asker = await worker("asker", false);
    asker.system.shardHomes(Array.from({ length: SHARDS }, () => holder.transport.nodeId));
    expect(await at(asker.system, "counter:c").askDirect({ by: 1 })).toBe(1);
    expect(fs.readdirSync(directory)).toEqual([]);
    expect(asker.send).toHaveBeenCalledTimes(1);
    fs.chmodSync(directory, 0o700);
    const linked = await worker("linked", true);
    expect(fs.readdirSync(directory)).toEqual([`${linked.transport.nodeId}.sock`]);
  });

  it("a starting worker removes the sockets of workers gone, and leaves the live ones", async () => {
    const gone = path.join(directory, "node-gone.sock");
    // A process listening there, killed: its file stays, and nobody listens on it any more.
    const killed = spawn(process.execPath, ["-e", `require("node:net").createServer().listen(${JSON.stringify(gone)}, () => console.log("up"))`]);
    await new Promise<void>((resolve) => killed.stdout.once("data", () => resolve()));
    killed.kill("SIGKILL");
    await new Promise<void>((resolve) => killed.once("exit", () => resolve()));
    expect(fs.existsSync(gone)).toBe(true);
    const holder = await worker("holder", true);
    await worker("asker", false);
    await until(() => !fs.existsSync(gone));
    expect(fs.existsSync(path.join(directory, `${holder.transport.nodeId}.sock`))).toBe(true);
  });

  it("a shard whose home is this worker, or unknown, is asked through Redis", async () => {
    const holder = await worker("holder", true);
    const asker = await worker("asker", false);
    expect(await at(asker.system, "counter:b").askDirect({ by: 1 })).toBe(1);
    asker.system.shardHomes(Array.from({ length: SHARDS }, () => asker.transport.nodeId));
    expect(await at(asker.system, "counter:b").askDirect({ by: 1 })).toBe(2);
    expect(asker.send).toHaveBeenCalledTimes(2);
    expect(asker.peers.openLinks()).toEqual([]);
    expect(holder.send).not.toHaveBeenCalled();
  });
});
