/**
 * runtime/metrics.ts's HotHistogram exposes what prom-client's own Histogram exposes for the same observations:
 * the same text for Prometheus (buckets cumulative, `+Inf`, `_sum`, `_count`, every label set) and the same JSON
 * (what a cluster's primary aggregates), so that swapping it in changed no series.
 */
import { describe, expect, it } from "vitest";
import { AggregatorRegistry, Histogram, Registry } from "prom-client";
import { HotHistogram } from "../../runtime/metrics.ts";

const BOUNDS = [0.001, 0.01, 0.1, 1];
const OBSERVED: Array<[string, string, number]> = [
  ["channel", "a", 0.0005],
  ["channel", "a", 0.001], // on a bound: counted in it, as Prometheus's `le` says
  ["channel", "a", 0.05],
  ["user", "b", 3],
  ["user", "b", 0.2],
  ["channel", "a", 0],
];

function pair() {
  const theirs = new Registry();
  const ours = new Registry();
  const reference = new Histogram({ name: "turns", help: "turns", labelNames: ["kind", "shard"], buckets: BOUNDS, registers: [theirs] });
  const hot = new HotHistogram("turns", "turns", ["kind", "shard"], BOUNDS, ours);
  for (const [kind, shard, value] of OBSERVED) {
    reference.labels(kind, shard).observe(value);
    hot.labels(kind, shard).observe(value);
  }
  return { theirs, ours };
}

describe("HotHistogram", () => {
  it("reads as prom-client's Histogram in Prometheus's text format", async () => {
    const { theirs, ours } = pair();
    const text = await ours.metrics();
    expect(text).toBe(await theirs.metrics());
    expect(text).toContain('turns_bucket{le="0.001",kind="channel",shard="a"} 3');
    expect(text).toContain('turns_bucket{le="+Inf",kind="user",shard="b"} 2');
    expect(text).toContain('turns_sum{kind="user",shard="b"} 3.2');
  });

  it("aggregates across workers as prom-client's Histogram does", async () => {
    const { theirs, ours } = pair();
    const sum = async (r: Registry) => AggregatorRegistry.aggregate([await r.getMetricsAsJSON(), await r.getMetricsAsJSON()]).metrics();
    expect(await sum(ours)).toBe(await sum(theirs));
    expect(await sum(ours)).toContain('turns_count{kind="channel",shard="a"} 8');
  });
});
