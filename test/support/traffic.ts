/**
 * Steady chat traffic against a deployment whose processes come and go (the scale-out tests): senders that retry
 * each message under its Idempotency-Key until it is acknowledged, and queue followers that long-poll from their
 * last event through whichever gateway is up, as Zulip clients do.
 */
import { setMaxListeners } from "node:events";
import { expect } from "vitest";
import type { ChorusProcess } from "./process.ts";
import { api, type Credentials } from "./server.ts";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
export const targetOf = (p: ChorusProcess) => ({ url: `http://${p.address}:${p.port}` });

export interface Follower {
  state: { ids: number[]; lostQueue: boolean };
  done: Promise<void>;
}

/** Polls `queueId` from its last event until `stop`, through the gateway `via()` names at each poll. */
export function followQueue(user: Credentials, queueId: string, via: () => ChorusProcess, stop: AbortSignal): Follower {
  const state = { ids: [] as number[], lostQueue: false };
  const done = (async () => {
    let last = -1;
    while (!stop.aborted) {
      try {
        const res = await api(targetOf(via()), "GET", "/events", { as: user, params: { queue_id: queueId, last_event_id: last }, signal: stop, validate: false });
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

export interface Senders {
  /** Message ids acknowledged, per channel, in the order acknowledged. */
  acknowledged: Map<string, number[]>;
  /** Attempts that were not acknowledged (and were tried again). */
  retries(): number;
  /** Stop sending and wait for the messages under way. */
  stop(): Promise<void>;
}

/** One sender per channel, sending as `owner` through the gateways `via(n)` names (the n-th attempt overall). */
export function steadySenders(owner: Credentials, channels: string[], via: (attempt: number) => ChorusProcess, topic = "traffic"): Senders {
  const acknowledged = new Map<string, number[]>(channels.map((c) => [c, []]));
  let sending = true;
  let retries = 0;
  let attempts = 0;
  const running = channels.map(async (channel) => {
    for (let i = 0; sending; i++) {
      for (let attempt = 0; ; attempt++) {
        const res = await api(targetOf(via(attempts++)), "POST", "/messages", {
          as: owner,
          params: { type: "stream", to: channel, topic, content: `${channel} ${i}` },
          headers: { "idempotency-key": `${channel}-${i}` },
          validate: false,
        }).catch(() => undefined);
        if (res?.status === 200) {
          acknowledged.get(channel)!.push(res.body.id);
          break;
        }
        retries++;
        expect(attempt).toBeLessThan(200);
        await sleep(100);
      }
      await sleep(20);
    }
  });
  return {
    acknowledged,
    retries: () => retries,
    async stop() {
      sending = false;
      await Promise.all(running);
    },
  };
}

/** An AbortController for many requests: fetch leaves a listener on the signal per request made with it. */
export function manyRequestsController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/**
 * Waits until every follower holds every acknowledged message (or 20 s), stops them, and checks each: its queue
 * kept, every acknowledged message received, each channel's in order. Returns how many message events were repeated
 * (a message received twice: see docs/chaos.md on redelivery after a worker is killed).
 */
export async function expectEveryMessageDelivered(followers: Follower[], senders: Senders, stop: AbortController, repeatsAllowed: boolean): Promise<number> {
  const everyId = [...senders.acknowledged.values()].flat().sort((a, b) => a - b);
  const complete = (f: Follower) => new Set(f.state.ids).size >= everyId.length;
  for (let i = 0; i < 200 && followers.some((f) => !complete(f) && !f.state.lostQueue); i++) await sleep(100);
  stop.abort();
  await Promise.all(followers.map((f) => f.done));
  let repeated = 0;
  for (const f of followers) {
    expect(f.state.lostQueue).toBe(false);
    const distinct = [...new Set(f.state.ids)];
    repeated += f.state.ids.length - distinct.length;
    expect(distinct.sort((a, b) => a - b)).toEqual(everyId);
    // Each channel's messages in the order they were stored (a repeat, if allowed, does not count as reordering).
    for (const ids of senders.acknowledged.values()) {
      const inChannel = new Set(ids);
      const seen = f.state.ids.filter((id) => inChannel.has(id));
      expect([...new Set(seen)]).toEqual([...ids].sort((a, b) => a - b));
    }
  }
  if (!repeatsAllowed) expect(repeated).toBe(0);
  return repeated;
}
