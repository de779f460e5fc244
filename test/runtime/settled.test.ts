import { describe, expect, it } from "vitest";
import { settledWithin } from "../../runtime/settled.ts";

const after = (ms: number, fail = false) => new Promise<void>((resolve, reject) => setTimeout(() => (fail ? reject(new Error("failed")) : resolve()), ms));

describe("settledWithin", () => {
  it("answers true once every promise settled, failed ones included, and false when the time runs out first", async () => {
    expect(await settledWithin([after(10), after(20, true)], 500)).toBe(true);
    expect(await settledWithin([], 0)).toBe(true);
    const started = Date.now();
    expect(await settledWithin([after(10), after(2_000)], 100)).toBe(false);
    expect(Date.now() - started).toBeLessThan(1_000);
  });

  it("waits for a promise that joins a set while it waits, and for a set its promises leave", async () => {
    const work = new Set<Promise<void>>();
    const track = (p: Promise<void>) => {
      work.add(p);
      void p.finally(() => work.delete(p));
    };
    track(after(20).then(() => track(after(30))));
    const started = Date.now();
    expect(await settledWithin(work, 1_000)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);

    track(after(20).then(() => track(after(2_000))));
    expect(await settledWithin(work, 200)).toBe(false);
  });
});
