/**
 * The scale-out tests' verdict on steady traffic (traffic.ts): every acknowledged message reached every queue, each
 * channel's in order, and no queue was lost.
 */
import { expect } from "vitest";
import { untilDelivered, type Follower, type FollowerState, type Senders } from "./traffic.ts";

/** Every acknowledged message, in id order. */
export const everyAcknowledged = (acknowledged: Map<string, number[]>) => [...acknowledged.values()].flat().sort((a, b) => a - b);

/**
 * Waits until every follower holds every acknowledged message (or 20 s), stops them, and checks each (see
 * expectDelivered). Returns how many message events were repeated.
 */
export async function expectEveryMessageDelivered(followers: Follower[], senders: Senders, stop: AbortController, repeatsAllowed: boolean): Promise<number> {
  await untilDelivered(followers, everyAcknowledged(senders.acknowledged), stop);
  return expectDelivered(
    followers.map((f) => f.state),
    senders.acknowledged,
    repeatsAllowed,
  );
}

/**
 * Checks each follower's state: its queue kept, every acknowledged message received, each channel's in order.
 * Returns how many message events were repeated (a message received twice: see docs/chaos.md on redelivery after a
 * worker is killed).
 */
export function expectDelivered(states: FollowerState[], acknowledged: Map<string, number[]>, repeatsAllowed: boolean): number {
  const everyId = everyAcknowledged(acknowledged);
  let repeated = 0;
  for (const state of states) {
    expect(state.lostQueue).toBe(false);
    const distinct = [...new Set(state.ids)];
    repeated += state.ids.length - distinct.length;
    expect(distinct.sort((a, b) => a - b)).toEqual(everyId);
    // Each channel's messages in the order they were stored (a repeat, if allowed, does not count as reordering).
    for (const ids of acknowledged.values()) {
      const inChannel = new Set(ids);
      const seen = state.ids.filter((id) => inChannel.has(id));
      expect([...new Set(seen)]).toEqual([...ids].sort((a, b) => a - b));
    }
  }
  if (!repeatsAllowed) expect(repeated).toBe(0);
  return repeated;
}
