/**
 * Steady chat traffic against a deployment whose processes come and go (the scale-out tests): senders that retry
 * each message under its Idempotency-Key until it is acknowledged, and queue followers that long-poll from their
 * last event through whichever gateway is up, as Zulip clients do. Nothing here needs the test runner: a client
 * process inside a host of the several-hosts test runs it too (host-clients.ts); the checks are in delivery.ts.
 */
import { setMaxListeners } from "node:events";
import { callZulip as api, type Credentials } from "./zulip-call.ts";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A Chorus process clients call: a ChorusProcess, or its address as a client in another host knows it. */
export interface Gateway {
  address: string;
  port: number;
}
export const targetOf = (p: Gateway) => ({ url: `http://${p.address}:${p.port}` });

/** The message ids a queue's follower received, in order; whether its queue was lost. */
export interface FollowerState {
  ids: number[];
  lostQueue: boolean;
}

export interface Follower {
  state: FollowerState;
  done: Promise<void>;
}

/** Polls `queueId` from its last event until `stop`, through the gateway `via()` names at each poll. */
export function followQueue(user: Credentials, queueId: string, via: () => Gateway, stop: AbortSignal): Follower {
  const state: FollowerState = { ids: [], lostQueue: false };
  const done = (async () => {
    let last = -1;
    while (!stop.aborted) {
      try {
        const res = await api(targetOf(via()), "GET", "/events", { as: user, params: { queue_id: queueId, last_event_id: last }, signal: stop });
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
export function steadySenders(owner: Credentials, channels: string[], via: (attempt: number) => Gateway, topic = "traffic"): Senders {
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
        }).catch(() => undefined);
        if (res?.status === 200) {
          acknowledged.get(channel)!.push(res.body.id);
          break;
        }
        retries++;
        if (attempt >= 200) throw new Error(`${channel} ${i}: not acknowledged after 200 attempts`);
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

/** Waits until every follower holds every one of `everyId` or lost its queue (or 20 s), then stops them all. */
export async function untilDelivered(followers: Follower[], everyId: number[], stop: AbortController): Promise<void> {
  const complete = (f: Follower) => new Set(f.state.ids).size >= everyId.length;
  for (let i = 0; i < 200 && followers.some((f) => !complete(f) && !f.state.lostQueue); i++) await sleep(100);
  stop.abort();
  await Promise.all(followers.map((f) => f.done));
}
