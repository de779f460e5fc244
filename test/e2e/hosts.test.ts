/**
 * Several hosts: four network namespaces on a bridge of the test's own, each with its own address, so that what
 * passes between them crosses a network as between machines. Redis and Postgres run on `db`; Chorus runs on `h1`
 * and `h2` (one process each, hosting actors and serving HTTP), and `h3` joins later. Every Chorus host has clients
 * of its own (test/support/host-clients.ts: a process inside the host's namespace) that send to two channels and
 * long-poll two users' queues, through every Chorus host up, in turn. While messages flow, `h3` joins and `h2`'s
 * Chorus process is killed (SIGKILL, as a host lost; its clients go on through the others): every acknowledged
 * message must reach every queue, each channel's in order, and no queue may be lost. Measured and printed: the
 * time from the kill until every shard is held by a live host again.
 *
 * Needs root (network namespaces) and the private services' binaries; skipped, with a note, where they are missing.
 */
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createNetwork, hostsAvailable, type TestNetwork } from "../support/hosts.ts";
import { privateServicesAvailable, startPrivatePostgres, startPrivateRedis } from "../support/private-services.ts";
import { nodeIdOf as nodeOf, shardHolder, startChorus, type ChorusProcess } from "../support/process.ts";
import { api, readZuliprc, type Credentials } from "../support/server.ts";
import { targetOf, type Gateway } from "../support/traffic.ts";
import { everyAcknowledged, expectDelivered } from "../support/delivery.ts";
import { startHostClients, type HostClients } from "../support/host-clients.ts";

const available = hostsAvailable() && privateServicesAvailable();
if (!available) console.info("hosts.test: skipped (needs root, iproute2, redis-server and Postgres's binaries)");

const SHARDS = 16;
const CLIENT_HOSTS = ["h1", "h2", "h3"];
/** Two channels and two users per client host. */
const CHANNELS = ["hosts-0", "hosts-1", "hosts-2", "hosts-3", "hosts-4", "hosts-5"];
const USERS = 6;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

describe.skipIf(!available)("several hosts", () => {
  it("delivers every acknowledged message to every queue while a host joins and another is killed", async () => {
    const net: TestNetwork = await createNetwork(["db", "h1", "h2", "h3"]);
    cleanups.push(net.remove);
    const redis = await startPrivateRedis({ aof: false, placement: net.hosts.db! });
    cleanups.push(redis.stop);
    const postgres = await startPrivatePostgres(net.hosts.db!);
    cleanups.push(postgres.stop);
    const env = { REDIS_URL: redis.url, DATABASE_URL: postgres.url, REDIS_PREFIX: "hosts", LEASE_SECONDS: "2", SHARDS: String(SHARDS) };

    const h1 = await startChorus(env, undefined, { host: net.hosts.h1 });
    cleanups.push(() => h1.stop());
    const h2 = await startChorus(env, undefined, { host: net.hosts.h2, joins: true });
    cleanups.push(() => h2.stop());
    const owner = readZuliprc(path.join(h1.dataDir, "zuliprc"));
    expect((await api(targetOf(h1), "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: CHANNELS.map((name) => ({ name })) } })).status).toBe(200);

    const gateways = (processes: ChorusProcess[]): Gateway[] => processes.map(({ address, port }) => ({ address, port }));
    const queues: Array<{ user: Credentials; queueId: string }> = [];
    for (let i = 0; i < USERS; i++) {
      const email = `host-user-${i}@example.com`;
      const via = i % 2 ? h2 : h1;
      const created = await api(targetOf(via), "POST", "/users", { as: owner, params: { email, password: `pw-${email}`, full_name: `Host user ${i}` } });
      expect(created.status).toBe(200);
      const key = await api(targetOf(via), "POST", "/fetch_api_key", { params: { username: email, password: `pw-${email}` } });
      const user: Credentials = { email, key: key.body.api_key };
      expect((await api(targetOf(via), "POST", "/users/me/subscriptions", { as: user, params: { subscriptions: CHANNELS.map((name) => ({ name })) } })).status).toBe(200);
      const registered = await api(targetOf(via), "POST", "/register", { as: user, params: { event_types: ["message"] } });
      expect(registered.status).toBe(200);
      queues.push({ user, queueId: registered.body.queue_id });
    }
    const clients: HostClients[] = [];
    for (const [i, name] of CLIENT_HOSTS.entries()) {
      const mine = (_: unknown, n: number) => n % CLIENT_HOSTS.length === i;
      const plan = { owner, channels: CHANNELS.filter(mine), topic: "hosts", queues: queues.filter(mine), gateways: gateways([h1, h2]) };
      const started = await startHostClients(net.hosts[name]!, plan);
      cleanups.push(async () => started.proc.kill("SIGKILL"));
      clients.push(started);
    }
    const route = (processes: ChorusProcess[]) => clients.forEach((c) => c.route(gateways(processes)));

    await sleep(1_500);
    const h3 = await startChorus(env, undefined, { host: net.hosts.h3, joins: true });
    cleanups.push(() => h3.stop());
    route([h1, h2, h3]);
    await sleep(1_500);

    // h2 is lost: its clients move to the other hosts; its shards move once their leases expire.
    const lostNode = nodeOf(h2);
    const lostShards = [];
    for (let shard = 0; shard < SHARDS; shard++) if ((await shardHolder(postgres.url, shard)) === lostNode) lostShards.push(shard);
    const killedAt = Date.now();
    h2.proc.kill("SIGKILL");
    // The clients go on through the other hosts (a request under way to h2 fails, and is tried again).
    route([h1, h3]);
    const liveNodes = [nodeOf(h1), nodeOf(h3)];
    let servingAgainMs = -1;
    for (let i = 0; i < 200; i++) {
      const holders = await Promise.all(lostShards.map((shard) => shardHolder(postgres.url, shard)));
      if (holders.every((h) => h !== undefined && liveNodes.includes(h))) {
        servingAgainMs = Date.now() - killedAt;
        break;
      }
      await sleep(50);
    }
    expect(servingAgainMs).toBeGreaterThanOrEqual(0);
    await sleep(1_500);
    const sending = await Promise.all(clients.map((c) => c.stopSending()));
    const acknowledged = new Map(sending.flatMap((s) => [...s.acknowledged]));
    const states = (await Promise.all(clients.map((c) => c.deliver(everyAcknowledged(acknowledged))))).flat();
    expect(states).toHaveLength(USERS);

    const repeated = expectDelivered(states, acknowledged, true);
    const sent = everyAcknowledged(acknowledged).length;
    const retried = sending.reduce((sum, s) => sum + s.retries, 0);
    console.info(
      `hosts: ${sent} messages acknowledged from ${CLIENT_HOSTS.length} hosts, ${retried} attempts retried, ${repeated} message events repeated; ` +
        `h2 held shards ${lostShards.join(",")}; every shard served again ${servingAgainMs} ms after the kill (LEASE_SECONDS=2)`,
    );
  }, 240_000);
});
