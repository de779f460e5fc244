/**
 * The pub/sub contract (runtime/transport/pubsub.ts), one behaviour suite run against every engine.
 * Redis runs for real at 127.0.0.1:6379 (REDIS_URL overrides), under a prefix unique to this run, deleted after.
 * Every test gets its own prefix, so nothing one test publishes reaches the next.
 */
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { Cluster, type Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { MemoryPubSub } from "../../runtime/transport/memory-pubsub.ts";
import type { PubSub } from "../../runtime/transport/pubsub.ts";
import { connectRedis, deleteRedisKeys, type RedisClient } from "../../runtime/transport/redis-connection.ts";
import { startPrivateRedisCluster, type PrivateRedisCluster } from "../support/private-services.ts";
import { channels, redisKeys, type Channel } from "../../runtime/transport/redis-keys.ts";
import { RedisPubSub } from "../../runtime/transport/redis-pubsub.ts";

const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const RUN_PREFIX = `chorus-test-${randomUUID().slice(0, 8)}`;
const WAIT = { timeout: 3000, interval: 5 };
const { notices, assistantRoomEvents } = channels;

interface Engine {
  name: string;
  /** Instances made with one scope are nodes of one deployment (a MemoryPubSub is a deployment of one). */
  distributed: boolean;
  make(scope: string, name: string, onError: (err: unknown, where: string) => void): PubSub;
  /** Cut a node's subscriber connection (a network blip as Redis sees it); resolves once it has subscribed again. */
  blip?(scope: string, name: string, subscribed: Channel[]): Promise<void>;
}

/** The Redis Cluster engine's servers: three masters of this suite's own, started before the suite. */
let cluster: PrivateRedisCluster | undefined;
beforeAll(async () => {
  cluster = await startPrivateRedisCluster(3);
}, 60_000);

const admins: RedisClient[] = [];

/** The Redis engine on the server `url()` names: one Redis, or a Redis Cluster (whose pub/sub spans its masters). */
function redisEngine(name: string, url: () => string): Engine {
  let admin: RedisClient | undefined;
  /** Every server: a subscriber connection sits on one of them, and PUBSUB NUMSUB counts one server's. */
  const serversOf = async (): Promise<Redis[]> => {
    if (!admin) admins.push((admin = connectRedis(url(), "contract-admin", () => {})));
    if (!(admin instanceof Cluster)) return [admin];
    if (admin.status !== "ready") await once(admin, "ready");
    return admin.nodes("master");
  };
  return {
    name,
    distributed: true,
    make: (scope, node, onError) => new RedisPubSub({ url: url(), prefix: scope, name: node, onError }),
    blip: async (scope, node, subscribed) => {
      const servers = await serversOf();
      // A cluster's sharded subscriber has a connection per master (each for the channels whose slots it owns).
      const cluster = servers.length > 1;
      let killed = 0;
      for (const server of servers) {
        const list = String(await server.call("CLIENT", "LIST"));
        const ids = [...list.matchAll(/^id=(\d+) .*?name=(\S*)/gm)].filter(([, , n]) => n === `chorus:${node}:subscribe`).map(([, id]) => id!);
        for (const id of ids) await server.call("CLIENT", "KILL", "ID", id);
        killed += ids.length;
      }
      if (cluster) expect(killed).toBeGreaterThan(0);
      else expect(killed).toBe(1);
      const names = subscribed.map((channel) => redisKeys(scope).channel(channel));
      const counts = async () => {
        const total = names.map(() => 0);
        for (const server of await serversOf()) {
          const reply = (await server.call("PUBSUB", cluster ? "SHARDNUMSUB" : "NUMSUB", ...names)) as (string | number)[];
          reply.filter((_, i) => i % 2 === 1).forEach((n, i) => (total[i]! += Number(n)));
        }
        return total;
      };
      await vi.waitFor(async () => expect(await counts()).toEqual(names.map(() => 1)), WAIT);
    },
  };
}

const engines: Engine[] = [
  { name: "memory", distributed: false, make: (_scope, _name, onError) => new MemoryPubSub(onError) },
  redisEngine("redis", () => REDIS_URL),
  redisEngine("redis on a 3-master Redis Cluster", () => cluster!.url),
];

afterAll(async () => {
  await deleteRedisKeys(REDIS_URL, RUN_PREFIX);
  for (const admin of admins) admin.disconnect();
  await cluster?.stop();
});

/** A handler that records what it hears. */
function listener(): { heard: string[]; handler: (message: string) => void } {
  const heard: string[] = [];
  return { heard, handler: (message) => void heard.push(message) };
}

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(engines)("pub/sub contract: $name", (engine) => {
  let scope = "";
  let testNo = 0;
  let open: PubSub[] = [];
  let reported: string[] = [];

  beforeEach(() => {
    scope = `${RUN_PREFIX}:${engine.name}:${++testNo}`;
    reported = [];
  });

  afterEach(async () => {
    await Promise.all(open.map((p) => p.close()));
    open = [];
  });

  function node(name = `node-${randomUUID().slice(0, 8)}`, inScope = scope): PubSub {
    const p = engine.make(inScope, name, (err, where) => void reported.push(`${where}: ${String(err)}`));
    open.push(p);
    return p;
  }

  it("delivers a message to every handler of its channel on every node, the publisher's included, once each", async () => {
    const a = node();
    const b = engine.distributed ? node() : a;
    const [a1, a2, b1, other] = [listener(), listener(), listener(), listener()];
    await a.subscribe(notices, a1.handler);
    await a.subscribe(notices, a2.handler);
    await b.subscribe(notices, b1.handler);
    await b.subscribe(assistantRoomEvents, other.handler);
    await a.publish(notices, "credentials");
    await b.publish(notices, "settings");
    for (const { heard } of [a1, a2, b1]) {
      await vi.waitFor(() => expect([...heard].sort()).toEqual(["credentials", "settings"]), WAIT);
    }
    await tick(50);
    for (const { heard } of [a1, a2, b1]) expect(heard).toHaveLength(2);
    expect(other.heard).toEqual([]);
    expect(reported).toEqual([]);
  });

  it("keeps deployments apart: another prefix, another instance, hears nothing", async () => {
    const a = node();
    const stranger = node(undefined, `${scope}-other`);
    const [mine, theirs] = [listener(), listener()];
    await a.subscribe(notices, mine.handler);
    await stranger.subscribe(notices, theirs.handler);
    await a.publish(notices, "not yours");
    await vi.waitFor(() => expect(mine.heard).toEqual(["not yours"]), WAIT);
    await tick(30);
    expect(theirs.heard).toEqual([]);
  });

  it("hands one publisher's messages over in the order they were published", async () => {
    const a = node();
    const b = engine.distributed ? node() : a;
    const heard = listener();
    await b.subscribe(assistantRoomEvents, heard.handler);
    const sent = Array.from({ length: 200 }, (_, i) => `m${i}`);
    await Promise.all(sent.map((m) => a.publish(assistantRoomEvents, m)));
    await vi.waitFor(() => expect(heard.heard).toHaveLength(200), WAIT);
    expect(heard.heard).toEqual(sent);
  });

  it("runs handlers off the publisher's stack, and one that throws does not stop the others", async () => {
    const a = node();
    const heard = listener();
    await a.subscribe(notices, () => {
      throw new Error("boom");
    });
    await a.subscribe(notices, heard.handler);
    const publishing = a.publish(notices, "n1");
    expect(heard.heard).toEqual([]); // not during the call
    await publishing;
    await vi.waitFor(() => expect(heard.heard).toEqual(["n1"]), WAIT);
    expect(reported).toHaveLength(1);
    expect(reported[0]).toMatch(/boom/);
  });

  it("replays nothing published before a handler subscribed", async () => {
    const a = node();
    const b = engine.distributed ? node() : a;
    await a.publish(notices, "early");
    const heard = listener();
    await b.subscribe(notices, heard.handler);
    await a.publish(notices, "late");
    await vi.waitFor(() => expect(heard.heard).toEqual(["late"]), WAIT);
  });

  it("stops a handler at unsubscribe, leaves the others, and takes a channel up again", async () => {
    const a = node();
    const [kept, dropped] = [listener(), listener()];
    await a.subscribe(notices, kept.handler);
    await a.subscribe(notices, dropped.handler);
    await a.publish(notices, "both");
    await vi.waitFor(() => expect(kept.heard).toEqual(["both"]), WAIT);
    expect(dropped.heard).toEqual(["both"]);
    // Unsubscribed after the publish but before delivery: it hears nothing from the moment of the call.
    const publishing = a.publish(notices, "one");
    const unsubscribing = a.unsubscribe(notices, dropped.handler);
    await Promise.all([publishing, unsubscribing]);
    await vi.waitFor(() => expect(kept.heard).toEqual(["both", "one"]), WAIT);
    await a.unsubscribe(notices, kept.handler);
    await a.publish(notices, "nobody");
    const again = listener();
    await a.subscribe(notices, again.handler);
    await a.publish(notices, "again");
    await vi.waitFor(() => expect(again.heard).toEqual(["again"]), WAIT);
    await tick(30);
    expect(kept.heard).toEqual(["both", "one"]);
    expect(dropped.heard).toEqual(["both"]);
  });

  it("close silences handlers, makes publish a no-op, and can be called twice", async () => {
    const a = node();
    const b = engine.distributed ? node() : a;
    const heard = listener();
    await b.subscribe(notices, heard.handler);
    await a.publish(notices, "before");
    await vi.waitFor(() => expect(heard.heard).toEqual(["before"]), WAIT);
    const started = Date.now();
    await b.close();
    await b.close();
    expect(Date.now() - started).toBeLessThan(1000);
    await a.publish(notices, "after");
    await b.publish(notices, "from the closed one");
    await tick(30);
    expect(heard.heard).toEqual(["before"]);
    await expect(b.subscribe(notices, heard.handler)).rejects.toThrow(/closed/);
  });

  it.runIf(engine.blip)("subscribes again after its connection dropped, and hears what comes after", async () => {
    const name = `node-${randomUUID().slice(0, 8)}`;
    const a = node(name);
    const publisher = node();
    const [n, r] = [listener(), listener()];
    await a.subscribe(notices, n.handler);
    await a.subscribe(assistantRoomEvents, r.handler);
    await engine.blip!(scope, name, [notices, assistantRoomEvents]);
    await publisher.publish(notices, "after the blip");
    await publisher.publish(assistantRoomEvents, "room event");
    await vi.waitFor(() => expect(n.heard).toEqual(["after the blip"]), WAIT);
    await vi.waitFor(() => expect(r.heard).toEqual(["room event"]), WAIT);
  });
});
