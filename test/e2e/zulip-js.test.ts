/**
 * The acceptance test of the foundation: Chorus started as `npm start` starts it, driven by the `zulip-js` client
 * from npm with the zuliprc the server wrote. Embedded, then Redis + Postgres with two workers.
 */
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startChorus, type ChorusProcess } from "../support/process.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "../support/services.ts";

const zulip = createRequire(import.meta.url)("zulip-js") as (config: { zuliprc: string }) => Promise<any>;

/** Subscribe, send, fetch, register and receive the message event, all through zulip-js. */
async function roundTrip(zuliprc: string, channel: string, sends: number) {
  const client = await zulip({ zuliprc });
  const sub = await client.users.me.subscriptions.add({ subscriptions: JSON.stringify([{ name: channel }]) });
  expect(sub.result).toBe("success");
  const queue = await client.queues.register({ event_types: ["message"] });
  expect(queue.result).toBe("success");
  let lastEventId = queue.last_event_id;
  const received: number[] = [];
  const sent: number[] = [];
  for (let i = 0; i < sends; i++) {
    const poll = client.events.retrieve({ queue_id: queue.queue_id, last_event_id: lastEventId });
    await new Promise((r) => setTimeout(r, 50));
    const res = await client.messages.send({ to: channel, type: "stream", topic: "e2e", content: `hello ${i}` });
    expect(res.result).toBe("success");
    sent.push(res.id);
    const events = await poll;
    expect(events.result).toBe("success");
    for (const e of events.events) {
      if (e.type === "message") received.push(e.message.id);
      lastEventId = Math.max(lastEventId, e.id);
    }
  }
  expect(received).toEqual(sent);
  const fetched = await client.messages.retrieve({
    anchor: "newest",
    num_before: 100,
    num_after: 0,
    narrow: [{ operator: "channel", operand: channel }],
    apply_markdown: false,
  });
  expect(fetched.result).toBe("success");
  expect(fetched.messages.map((m: any) => m.id)).toEqual(sent);
  expect(fetched.messages.map((m: any) => m.content)).toEqual(sent.map((_, i) => `hello ${i}`));
  await client.queues.deregister({ queue_id: queue.queue_id });
  return sent;
}

describe("zulip-js against npm start", () => {
  const running: ChorusProcess[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const p of running) await p.stop();
    for (const c of cleanups) await c().catch(() => {});
  });

  it("works on the embedded default, and the messages survive a restart", async () => {
    const first = await startChorus();
    running.push(first);
    cleanups.push(async () => fs.rmSync(first.dataDir, { recursive: true, force: true }));
    const zuliprc = path.join(first.dataDir, "zuliprc");
    expect(fs.readFileSync(zuliprc, "utf8")).toMatch(/^\[api\]\nemail=.+\nkey=[A-Za-z0-9]{32}\nsite=http:\/\/127\.0\.0\.1:\d+\n$/);
    const sent = await roundTrip(zuliprc, "embedded", 3);
    expect(await first.stop()).toBe(0); // graceful SIGTERM

    const second = await startChorus({ PORT: String(first.port) }, first.dataDir);
    running.push(second);
    expect(second.output()).not.toContain("created the organization");
    const client = await zulip({ zuliprc });
    const fetched = await client.messages.retrieve({ anchor: "newest", num_before: 10, num_after: 0, narrow: [{ operator: "channel", operand: "embedded" }] });
    expect(fetched.messages.map((m: any) => m.id)).toEqual(sent);
  }, 90_000);

  it("works on Redis Streams and Postgres with WORKERS=2", async () => {
    const db = await freshDatabase();
    const redis = freshRedisPrefix();
    cleanups.push(db.drop, redis.clean);
    const server = await startChorus({ REDIS_URL, DATABASE_URL: db.url, REDIS_PREFIX: redis.prefix, WORKERS: "2", LEASE_SECONDS: "3" });
    running.push(server);
    cleanups.push(async () => fs.rmSync(server.dataDir, { recursive: true, force: true }));
    // Both workers must hold their shards before traffic is meaningful; each answers on the shared port.
    await new Promise((r) => setTimeout(r, 1000));
    await roundTrip(path.join(server.dataDir, "zuliprc"), "distributed", 10);
    expect(server.output()).toMatch(/worker 0 listening/);
    expect(server.output()).toMatch(/worker 1 listening/);
    expect(await server.stop()).toBe(0);
  }, 90_000);
});
