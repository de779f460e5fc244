/**
 * Event queues outlive their worker: with Redis Streams and Postgres, every worker is killed (SIGKILL) while a
 * queue holds unacknowledged events; once the workers are back the same queue answers with the same events,
 * under the same ids, and goes on receiving.
 */
import fs from "node:fs";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { startChorus, type ChorusProcess } from "../support/process.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "../support/services.ts";
import { api, readZuliprc } from "../support/server.ts";

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

function workerPids(server: ChorusProcess): number[] {
  return [...server.output().matchAll(/listening on port \d+ \(pid (\d+)/g)].map((m) => Number(m[1]));
}

it("restores a queue with its unacknowledged events after every worker is killed", async () => {
  const db = await freshDatabase();
  const redis = freshRedisPrefix();
  cleanups.push(db.drop, redis.clean);
  const server = await startChorus({ REDIS_URL, DATABASE_URL: db.url, REDIS_PREFIX: redis.prefix, WORKERS: "2", LEASE_SECONDS: "2", ASK_TIMEOUT_MS: "3000" });
  cleanups.push(async () => void (await server.stop()), async () => fs.rmSync(server.dataDir, { recursive: true, force: true }));
  const target = { url: `http://127.0.0.1:${server.port}` };
  const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
  for (let i = 0; i < 50 && workerPids(server).length < 2; i++) await new Promise((r) => setTimeout(r, 100));

  await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "durable" }] } });
  const queue = (await api(target, "POST", "/register", { as: owner, params: { event_types: ["message"] } })).body.queue_id;
  const send = (content: string) => api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: "durable", topic: "t", content } });
  const m1 = await send("one");
  const m2 = await send("two");
  const before = await api(target, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } });
  expect(before.body.events.map((e: any) => e.message.id)).toEqual([m1.body.id, m2.body.id]);

  for (const pid of workerPids(server)) process.kill(pid, "SIGKILL");
  const killed = workerPids(server).length;

  // Wait for the restarted workers (and the expired leases) to serve the queue again.
  let after: any;
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 200));
    if (workerPids(server).length < killed + 2) continue;
    after = await api(target, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } }).catch(() => undefined);
    if (after?.status === 200) break;
  }
  expect(after?.status).toBe(200);
  expect(after.body.events).toEqual(before.body.events);

  const lastId = after.body.events.at(-1).id;
  const m3 = await send("three");
  const next = await api(target, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: lastId, dont_block: true } });
  expect(next.body.events.map((e: any) => e.message.id)).toEqual([m3.body.id]);
  expect(next.body.events[0].id).toBeGreaterThan(lastId);

  const unknown = await api(target, "GET", "/events", { as: owner, params: { queue_id: "never-registered", last_event_id: -1, dont_block: true } });
  expect(unknown.body.code).toBe("BAD_EVENT_QUEUE_ID");
}, 90_000);
