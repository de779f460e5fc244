/**
 * The cluster grows and shrinks while it serves: one process on Redis Streams and Postgres, then a worker-only
 * process joins (ROLE=worker: it takes its share of the shards, placed over the live members), a gateway-only one
 * starts beside them (ROLE=gateway: HTTP, no shards), and the worker leaves gracefully (its shards go back).
 * Messages are sent throughout through both gateways, each retried with its Idempotency-Key until acknowledged, and
 * several users' queues are long-polled throughout. Every acknowledged message must reach every queue exactly once,
 * in order, and no queue may be lost (a shard's move carries its queues).
 */
import { setMaxListeners } from "node:events";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { shardHolder, startChorus, startDistributed, type ChorusProcess } from "../support/process.ts";
import { api, readZuliprc, type Credentials } from "../support/server.ts";
import { REDIS_URL } from "../support/services.ts";
import { shardOf } from "../../runtime/actor.ts";
import { User } from "../../actors/chat/users/user.protocol.ts";

const SHARDS = 16;
const CHANNELS = ["grow-0", "grow-1", "grow-2", "grow-3"];
const USERS = 6;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

const target = (p: ChorusProcess) => ({ url: `http://127.0.0.1:${p.port}` });

/** The node id a process printed when it started listening. */
function nodeOf(p: ChorusProcess): string {
  const node = p.output().match(/\(pid \d+, node ([^,]+),/)?.[1];
  expect(node).toBeTruthy();
  return node!;
}

/** A queue's client: polls from its last event until `stop`, through whichever gateway `via()` names then. */
function follow(user: Credentials, queueId: string, via: () => ChorusProcess, stop: AbortSignal) {
  const state = { ids: [] as number[], lostQueue: false };
  const done = (async () => {
    let last = -1;
    while (!stop.aborted) {
      try {
        const res = await api(target(via()), "GET", "/events", { as: user, params: { queue_id: queueId, last_event_id: last }, signal: stop, validate: false });
        if (res.body.code === "BAD_EVENT_QUEUE_ID") {
          state.lostQueue = true;
          return;
        }
        if (res.status !== 200) {
          await sleep(100);
          continue;
        }
        for (const e of res.body.events) {
          last = Math.max(last, e.id);
          if (e.type === "message") state.ids.push(e.message.id);
        }
      } catch {
        await sleep(100); // aborted, or a connection lost: ask again from the same point
      }
    }
  })();
  return { state, done };
}

it("grows by a worker, serves through a gateway-only process, shrinks again: every acknowledged message reaches every queue once, in order", async () => {
  const first = await startDistributed({ WORKERS: "1", LEASE_SECONDS: "2" }, cleanups);
  const joined = { REDIS_URL, DATABASE_URL: first.databaseUrl, REDIS_PREFIX: first.redisPrefix, LEASE_SECONDS: "2" };
  const owner = readZuliprc(path.join(first.dataDir, "zuliprc"));
  expect((await api(target(first), "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: CHANNELS.map((name) => ({ name })) } })).status).toBe(200);

  const users: Credentials[] = [];
  for (let i = 0; i < USERS; i++) {
    const email = `member-${i}@example.com`;
    const created = await api(target(first), "POST", "/users", { as: owner, params: { email, password: `pw-${email}`, full_name: `Member ${i}` } });
    expect(created.status).toBe(200);
    const key = await api(target(first), "POST", "/fetch_api_key", { params: { username: email, password: `pw-${email}` } });
    const user = { email, key: key.body.api_key, id: created.body.user_id };
    expect((await api(target(first), "POST", "/users/me/subscriptions", { as: user, params: { subscriptions: CHANNELS.map((name) => ({ name })) } })).status).toBe(200);
    users.push(user);
  }
  const userShards = users.map((u) => shardOf(User.id((u as Credentials & { id: number }).id), SHARDS));

  let gateways: ChorusProcess[] = [first];
  const stopPolls = new AbortController();
  // fetch leaves a listener on the signal per request made with it: thousands over the run.
  setMaxListeners(0, stopPolls.signal);
  const followers = [];
  for (const [i, user] of users.entries()) {
    const registered = await api(target(first), "POST", "/register", { as: user, params: { event_types: ["message"] } });
    expect(registered.status).toBe(200);
    followers.push(follow(user, registered.body.queue_id, () => gateways[i % gateways.length]!, stopPolls.signal));
  }

  // Sends, each retried under its key until acknowledged, alternating between the gateways.
  const acknowledged = new Map<string, number[]>(CHANNELS.map((c) => [c, []]));
  let sending = true;
  let retries = 0;
  const senders = CHANNELS.map(async (channel) => {
    for (let i = 0; sending; i++) {
      for (let attempt = 0; ; attempt++) {
        const via = gateways[(i + attempt) % gateways.length]!;
        const res = await api(target(via), "POST", "/messages", {
          as: owner,
          params: { type: "stream", to: channel, topic: "growth", content: `${channel} ${i}` },
          headers: { "idempotency-key": `${channel}-${i}` },
          validate: false,
        }).catch(() => undefined);
        if (res?.status === 200) {
          acknowledged.get(channel)!.push(res.body.id);
          break;
        }
        retries++;
        expect(attempt).toBeLessThan(100);
        await sleep(100);
      }
      await sleep(20);
    }
  });

  await sleep(1_000);
  // A worker joins: it hosts actors only, and takes its share of the shards.
  const worker = await startChorus({ ...joined, ROLE: "worker" }, undefined, { joins: true });
  cleanups.push(() => worker.stop());
  const workerNode = nodeOf(worker);
  const heldByWorker = [];
  for (let shard = 0; shard < SHARDS; shard++) if ((await shardHolder(first.databaseUrl, shard)) === workerNode) heldByWorker.push(shard);
  expect(heldByWorker.length).toBeGreaterThan(0);
  expect(heldByWorker.length).toBeLessThan(SHARDS);
  // It answers its probes and nothing else.
  const refused = await api(target(worker), "GET", "/server_settings", { validate: false });
  expect(refused.status).toBe(404);
  expect(refused.body).toMatchObject({ result: "error", msg: expect.stringContaining("ROLE=worker") });

  await sleep(1_000);
  // A gateway-only process: HTTP without shards; the clients spread over both gateways from now on.
  const gateway = await startChorus({ ...joined, ROLE: "gateway" }, undefined, { joins: true });
  cleanups.push(() => gateway.stop());
  const ready = (await fetch(`${target(gateway).url}/ready`).then((r) => r.json())) as { checks: Record<string, string> };
  expect(Object.keys(ready.checks).sort()).toEqual(["database", "redis"]);
  gateways = [first, gateway];

  await sleep(1_500);
  // The worker leaves gracefully: its shards go back to the first process.
  expect(await worker.stop()).toBe(0);
  for (let i = 0; i < 50; i++) {
    const holders = await Promise.all(heldByWorker.map((shard) => shardHolder(first.databaseUrl, shard)));
    if (holders.every((h) => h === nodeOf(first))) break;
    await sleep(100);
  }
  for (const shard of heldByWorker) expect(await shardHolder(first.databaseUrl, shard)).toBe(nodeOf(first));

  await sleep(1_000);
  sending = false;
  await Promise.all(senders);

  const everyId = [...acknowledged.values()].flat().sort((a, b) => a - b);
  expect(everyId.length).toBeGreaterThan(20);
  for (let i = 0; i < 200 && followers.some((f) => f.state.ids.length < everyId.length && !f.state.lostQueue); i++) await sleep(100);
  stopPolls.abort();
  await Promise.all(followers.map((f) => f.done));

  console.info(`membership: ${everyId.length} messages, ${retries} retried sends, worker held shards ${heldByWorker.join(",")}; users' shards ${userShards.join(",")}`);
  for (const f of followers) {
    expect(f.state.lostQueue).toBe(false);
    // Exactly once; each channel's in the order they were stored.
    expect([...f.state.ids].sort((a, b) => a - b)).toEqual(everyId);
    for (const ids of acknowledged.values()) {
      const inChannel = new Set(ids);
      expect(f.state.ids.filter((id) => inChannel.has(id))).toEqual([...ids].sort((a, b) => a - b));
    }
  }
}, 180_000);
