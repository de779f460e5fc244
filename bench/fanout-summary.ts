/**
 * The fan-out cells of several bench runs, as one table of medians and ranges and one chart: how the interleaved
 * rounds of the issue 26 matrix are reported (docs/performance.md, 2026-12-06 04:56).
 *
 *   npx tsx bench/fanout-summary.ts --since 2026-12-06T04-55 [--until 2026-12-06T05-11] [--chart docs/images/x.svg]
 *
 * Reads every bench/results/<time>.json whose time is in [since, until] (the file names' own form), groups the cells
 * by members × rate, server and transport, and prints per group the median and range of p50, p99, deliveries/s and
 * CPU per delivery, with how many runs were saturated or failed their check. The chart shows, per group, the run
 * of median p99.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { fanoutChart, type FanoutCell } from "./fanout.ts";

const RESULTS = path.join(path.dirname(fileURLToPath(import.meta.url)), "results");
const SERVERS = ["embedded", "redis+postgres", "redis+postgres ×2", "ejabberd", "ejabberd+postgres"];

function option(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at < 0 ? undefined : process.argv[at + 1];
}

const since = option("since");
if (!since) {
  console.error("usage: npx tsx bench/fanout-summary.ts --since <result time> [--until <result time>] [--chart <file.svg>]");
  process.exit(2);
}
const until = option("until") ?? "~";

const groups = new Map<string, FanoutCell[]>();
for (const file of fs.readdirSync(RESULTS).filter((f) => /^\d{4}-.*Z\.json$/.test(f)).sort()) {
  if (file < since || file > until) continue;
  for (const cell of (JSON.parse(fs.readFileSync(path.join(RESULTS, file), "utf8")).fanout ?? []) as FanoutCell[]) {
    const key = `${cell.members}×${cell.rate} ${cell.engine} ${cell.name}`;
    groups.set(key, [...(groups.get(key) ?? []), cell]);
  }
}
if (!groups.size) {
  console.error(`no fan-out cells in ${RESULTS} between ${since} and ${until}`);
  process.exit(1);
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)]! / 2 + sorted[Math.ceil((sorted.length - 1) / 2)]! / 2;
};
const num = (n: number) => (n >= 100 ? Math.round(n).toLocaleString("en-US") : n.toFixed(1));
const spread = (values: number[], show = num) => {
  const low = Math.min(...values);
  const high = Math.max(...values);
  return `${show(median(values))}${values.length > 1 ? ` (${show(low)}-${show(high)})` : ""}`;
};

/** A delivery missing, twice or out of order, a member's client failed, or the cell did not drain (saturation alone is not a failure). */
const failedCheck = (c: FanoutCell) => c.check.missing + c.check.duplicates + c.check.outOfOrder + c.check.failedMembers > 0 || !c.check.complete;

const ordered = [...groups.values()].sort(
  (a, b) =>
    a[0]!.members * a[0]!.rate - b[0]!.members * b[0]!.rate || // the offered deliveries/s first: latency cells, then saturation
    a[0]!.members - b[0]!.members ||
    SERVERS.indexOf(a[0]!.engine) - SERVERS.indexOf(b[0]!.engine) ||
    a[0]!.name.localeCompare(b[0]!.name),
);
let shape = "";
for (const cells of ordered) {
  const { members, rate } = cells[0]!;
  if (shape !== `${members}×${rate}`) {
    shape = `${members}×${rate}`;
    console.log(`\n**${members} members × ${rate} msg/s**\n`);
    console.log("| server / transport | p50 ms | p99 ms | deliveries/s | µs CPU a delivery (server + services) | saturated | check failed |");
    console.log("|---|---|---|---|---|---|---|");
  }
  const cpu = spread(cells.map((c) => c.cpuPerDeliveryMicros.total));
  const services = cells.some((c) => c.cpuPerDeliveryMicros.services !== undefined)
    ? ` (${spread(cells.map((c) => c.cpuPerDeliveryMicros.node))} + ${spread(cells.map((c) => c.cpuPerDeliveryMicros.services ?? 0))})`
    : "";
  console.log(
    `| ${cells[0]!.engine}, ${cells[0]!.name.slice("fanout-".length)} | ${spread(cells.map((c) => c.latencyMs.p50))} | ${spread(cells.map((c) => c.latencyMs.p99))} | ` +
      `${spread(cells.map((c) => c.deliveriesPerSec), (n) => `${(n / 1000).toFixed(1)}k`)} | ${cpu}${services} | ` +
      `${cells.filter((c) => c.saturated).length}/${cells.length} | ${cells.filter(failedCheck).length}/${cells.length} |`,
  );
}

const chart = option("chart");
if (chart) {
  const typical = ordered.map((cells) => [...cells].sort((a, b) => a.latencyMs.p99 - b.latencyMs.p99)[Math.floor(cells.length / 2)]!);
  fs.mkdirSync(path.dirname(chart), { recursive: true });
  fs.writeFileSync(chart, fanoutChart(typical, `Fan-out cells ${since} to ${until}: per group the run of median p99 (of ${Math.max(...ordered.map((c) => c.length))})`));
  console.log(`\nchart: ${chart}`);
}
