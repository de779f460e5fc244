/**
 * Chorus on a Redis Cluster: two workers on a 3-master cluster of the test's own (REDIS_URL with `?cluster=on`) and
 * Postgres. Each shard's stream lives on whichever master owns its slot, so the workers' reads, scripts and replies
 * cross masters; notices (pub/sub) reach every worker. Messages sent to channels on every shard reach a long-polled
 * queue, once each, and a change made through one worker is served at once by the other.
 */
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startDistributed, type ChorusProcess } from "../support/process.ts";
import { startPrivateRedisCluster, type PrivateRedisCluster } from "../support/private-services.ts";
import { api, meOnNewConnection as me, readZuliprc, type Credentials } from "../support/server.ts";

const cleanups: Array<() => Promise<unknown>> = [];
let cluster: PrivateRedisCluster;
let server: ChorusProcess;
let owner: Credentials;
const target = () => ({ url: `http://127.0.0.1:${server.port}` });

beforeAll(async () => {
  cluster = await startPrivateRedisCluster(3);
  cleanups.push(() => cluster.stop());
  server = await startDistributed({ REDIS_URL: cluster.url, WORKERS: "2" }, cleanups);
  owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
}, 120_000);

afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

it("delivers every message sent to channels on every shard to a long-polled queue, once each", async () => {
  const channels = Array.from({ length: 8 }, (_, i) => `cluster-${i}`);
  expect((await api(target(), "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: channels.map((name) => ({ name })) } })).status).toBe(200);
  const registered = await api(target(), "POST", "/register", { as: owner, params: { event_types: ["message"] } });
  expect(registered.status).toBe(200);

  const sent: number[] = [];
  for (let round = 0; round < 5; round++) {
    const results = await Promise.all(
      channels.map((to) => api(target(), "POST", "/messages", { as: owner, params: { type: "stream", to, topic: "t", content: `${to} ${round}` } })),
    );
    for (const res of results) {
      expect(res.status).toBe(200);
      sent.push(res.body.id);
    }
  }

  const received: number[] = [];
  let last = -1;
  for (let i = 0; i < 50 && received.length < sent.length; i++) {
    const res = await api(target(), "GET", "/events", { as: owner, params: { queue_id: registered.body.queue_id, last_event_id: last, dont_block: true } });
    expect(res.status).toBe(200);
    for (const e of res.body.events) {
      last = Math.max(last, e.id);
      if (e.type === "message") received.push(e.message.id);
    }
    if (received.length < sent.length) await new Promise((r) => setTimeout(r, 100));
  }
  expect([...received].sort((a, b) => a - b)).toEqual([...sent].sort((a, b) => a - b));
}, 60_000);

it("tells every worker of a change through the cluster's pub/sub: a deactivated account is refused by both at once", async () => {
  const email = "leaving@example.com";
  const created = await api(target(), "POST", "/users", { as: owner, params: { email, password: `pw-${email}`, full_name: "Leaving" } });
  expect(created.status).toBe(200);
  const key = (await api(target(), "POST", "/fetch_api_key", { params: { username: email, password: `pw-${email}` } })).body.api_key;
  // Both workers cache the account (thirty connections: both get some, but for a 2^-29 chance).
  for (let i = 0; i < 30; i++) await me(server.port, { email, key });
  expect((await api(target(), "DELETE", `/users/${created.body.user_id}`, { as: owner })).status).toBe(200);
  for (let i = 0; i < 30; i++) expect((await me(server.port, { email, key }, 401)).code).toBe("USER_DEACTIVATED");
}, 60_000);
