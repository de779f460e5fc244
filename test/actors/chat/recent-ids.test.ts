/**
 * The message ids a user actor delivered lately (RecentIds), which drop a delivery that comes again after a crash:
 * an id delivered is found whatever order the ids came in, one never delivered is not, and the older of its two
 * generations is forgotten only after a second turn-over.
 */
import { describe, expect, it } from "vitest";
import { RECENT_MESSAGES_CAP, RecentIds } from "../../../actors/chat/users/user.ts";

describe("RecentIds", () => {
  it("finds every id added, in or out of order, and no other", () => {
    const recent = new RecentIds();
    expect(recent.has(1)).toBe(false);
    for (const id of [50, 20, 70, 60]) recent.add(id);
    for (const id of [20, 50, 60, 70]) expect(recent.has(id)).toBe(true);
    for (const id of [19, 21, 65, 71, 1000]) expect(recent.has(id)).toBe(false);
  });

  it("keeps the previous generation through one turn-over and forgets it at the next", () => {
    const recent = new RecentIds();
    recent.add(7); // the first generation
    for (let i = 0; i < RECENT_MESSAGES_CAP; i++) recent.add(1_000_000 - i); // fills it: the next add turns it over
    recent.add(5); // below every id since: found only by looking in the sets
    expect([recent.has(7), recent.has(5), recent.has(1_000_000)]).toEqual([true, true, true]);
    for (let i = 0; i < RECENT_MESSAGES_CAP; i++) recent.add(2_000_000 + i); // the second turn-over drops the first generation
    expect([recent.has(7), recent.has(1_000_000), recent.has(5), recent.has(2_000_000)]).toEqual([false, false, true, true]);
  });
});
