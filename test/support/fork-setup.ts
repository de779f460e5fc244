/**
 * Runs in each test fork before each of its files: the lease renewer's thread from the build, and a report of the
 * CPU each file used when asked (TEST_CPU_REPORT, below).
 *
 * A node started in the fork on Postgres renews its leases from a thread (runtime/lease-keeper.ts); run from source,
 * that thread compiles its TypeScript through tsx at every start, about a second and a half of CPU, a hundred times
 * in a run. The run's server build (global-setup.ts) has the thread built: the keeper starts that one instead, as a
 * built server does (gateway/build.ts defines the same name). Processes a test forks from source
 * (test/runtime/lease-stall.test.ts's worker) still compile it, so both ways of starting the thread are run.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect } from "vitest";
import { builtRenewerThread } from "./server-build.ts";

const thread = builtRenewerThread();
if (thread) {
  const runtime = fileURLToPath(new URL("../../runtime/", import.meta.url));
  (globalThis as { CHORUS_BUILT_RENEWER_THREAD?: string }).CHORUS_BUILT_RENEWER_THREAD = path.relative(runtime, thread).split(path.sep).join("/");
}

/**
 * `TEST_CPU_REPORT=<file>`: each test file appends a JSON line there with the CPU its fork used over the file and
 * that of the processes the file started and reaped (/proc/self/stat's children times), in ms. Where a full run's
 * CPU goes, by file (docs/testing.md, 2026-12-06); a file's Postgres and Redis time is not in it.
 */
const cpuReport = process.env.TEST_CPU_REPORT;
if (cpuReport) {
  const { procStat } = await import("./proc-stat.ts");
  const cpuNow = () => {
    const self = procStat("self")!;
    return { fork: self.cpuMicros / 1000, started: self.childrenCpuMicros / 1000 };
  };
  let atStart = cpuNow();
  beforeAll(() => void (atStart = cpuNow()));
  afterAll(() => {
    const now = cpuNow();
    const line = { file: path.relative(process.cwd(), expect.getState().testPath ?? "?"), forkMs: Math.round(now.fork - atStart.fork), startedMs: Math.round(now.started - atStart.started) };
    fs.appendFileSync(cpuReport, `${JSON.stringify(line)}\n`);
  });
}
