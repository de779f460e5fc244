/**
 * Nothing acknowledged is lost when a worker dies: two workers on Redis Streams and Postgres, messages sent
 * continuously, one worker killed with SIGKILL in the middle. Every send that was answered with success is stored,
 * once, in order; the others failed visibly; and the deployment serves again once the lease has moved.
 */
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { startDistributed } from "../support/process.ts";
import { api, readZuliprc } from "../support/server.ts";

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

it("keeps every acknowledged message when a worker is killed mid-traffic", async () => {
  const server = await startDistributed({ LEASE_SECONDS: "2", ASK_TIMEOUT_MS: "4000" }, cleanups);
  const target = { url: `http://127.0.0.1:${server.port}` };
  const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
  const victim = Number(server.output().match(/worker 1 listening on port \d+ \(pid (\d+)/)?.[1]);
  expect(victim).toBeGreaterThan(0);

  // Channels on both workers' shards, so the kill hits some of them.
  const channels = Array.from({ length: 6 }, (_, i) => `crash-${i}`);
  const sub = await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: channels.map((name) => ({ name })) } });
  expect(sub.status).toBe(200);

  const acknowledged = new Map<string, number[]>(channels.map((c) => [c, []]));
  let failures = 0;
  let sent = 0;
  const sender = async (channel: string) => {
    for (let i = 0; i < 40; i++) {
      sent++;
      try {
        const res = await api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: channel, topic: "t", content: `${channel} ${i}` }, validate: false });
        if (res.status === 200) acknowledged.get(channel)!.push(res.body.id);
        else failures++;
      } catch {
        failures++; // the connection was on the killed worker: not acknowledged
      }
    }
  };
  const senders = Promise.all(channels.map(sender));
  while (sent < 60) await new Promise((r) => setTimeout(r, 10));
  process.kill(victim, "SIGKILL");
  await senders;

  // The deployment recovers: the lease expires and the shard moves (or the restarted worker takes it back).
  let recovered = false;
  for (let i = 0; i < 60 && !recovered; i++) {
    const results = await Promise.all(
      channels.map((c) =>
        api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: c, topic: "after", content: "after" }, validate: false }).catch(() => undefined),
      ),
    );
    recovered = results.every((r) => r?.status === 200);
    if (!recovered) await new Promise((r) => setTimeout(r, 250));
  }
  expect(recovered).toBe(true);

  for (const channel of channels) {
    const res = await api(target, "GET", "/messages", {
      as: owner,
      params: { anchor: "oldest", num_before: 0, num_after: 1000, narrow: [{ operator: "channel", operand: channel }, { operator: "topic", operand: "t" }], apply_markdown: false },
    });
    const stored: number[] = res.body.messages.map((m: any) => m.id);
    const acked = acknowledged.get(channel)!;
    for (const id of acked) expect(stored).toContain(id);
    expect(new Set(stored).size).toBe(stored.length); // no duplicates
    expect([...stored].sort((a, b) => a - b)).toEqual(stored);
  }
  const total = [...acknowledged.values()].reduce((n, ids) => n + ids.length, 0);
  expect(server.output()).toContain("worker 1 exited (SIGKILL)");
  expect(total + failures).toBe(channels.length * 40);
  expect(total).toBeGreaterThan(0);
}, 120_000);
