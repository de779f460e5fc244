/**
 * A promise rejection nothing handled (runtime/unhandled.ts): logged with its stack and counted, and the process
 * goes on serving; without the guard, Node ends the process. Each case is a child process of its own, as `npm start`
 * is one.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

/** A child that forgets a rejection, then 100 ms later prints its count of unhandled rejections and exits 0. */
function forget(guarded: boolean) {
  const script = `
    const { keepRunningOnUnhandledRejections } = await import("./runtime/unhandled.ts");
    const { registry } = await import("./runtime/metrics.ts");
    if (${guarded}) keepRunningOnUnhandledRejections();
    Promise.reject(new Error("forgotten on purpose"));
    setTimeout(async () => {
      const counted = (await registry.getSingleMetric("chorus_unhandled_rejections_total").get()).values[0]?.value;
      console.log("still running; counted " + counted);
    }, 100);`;
  return spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { cwd: root, encoding: "utf8", timeout: 30_000 });
}

describe("unhandled rejections", () => {
  it("are logged and counted, and the process goes on", () => {
    const run = forget(true);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("still running; counted 1");
    const line = run.stdout.split("\n").find((l) => l.includes("nothing handled"));
    expect(JSON.parse(line!)).toMatchObject({ level: 50, err: { message: "forgotten on purpose", stack: expect.stringContaining("Error: forgotten on purpose") } });
  });

  it("end the process without the guard (Node's default)", () => {
    const run = forget(false);
    expect(run.status).not.toBe(0);
    expect(run.stdout).not.toContain("still running");
    expect(run.stderr).toContain("forgotten on purpose");
  });
});
