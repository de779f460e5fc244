/**
 * Runs in each test fork before its files. A node started in the fork on Postgres renews its leases from a thread
 * (runtime/lease-keeper.ts); run from source, that thread compiles its TypeScript through tsx at every start, about
 * a second and a half of CPU, a hundred times in a run. The run's server build (global-setup.ts) has the thread
 * built: the keeper starts that one instead, as a built server does (gateway/build.ts defines the same name).
 * Processes a test forks from source (test/runtime/lease-stall.test.ts's worker) still compile it, so both ways
 * of starting the thread are run.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { builtRenewerThread } from "./server-build.ts";

const thread = builtRenewerThread();
if (thread) {
  const runtime = fileURLToPath(new URL("../../runtime/", import.meta.url));
  (globalThis as { CHORUS_BUILT_RENEWER_THREAD?: string }).CHORUS_BUILT_RENEWER_THREAD = path.relative(runtime, thread).split(path.sep).join("/");
}
