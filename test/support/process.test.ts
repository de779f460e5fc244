/** A test process that is interrupted or exits leaves no Chorus server behind (process.ts kills its group). */
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("servers started by test support", () => {
  // SIGTERM is what vitest sends a test process it stops; SIGINT (^C) takes the same path in process.ts.
  it("die with the test process when it is terminated", async () => {
    const signal = "SIGTERM";
    const holder = spawn(path.join(ROOT, "node_modules/.bin/tsx"), ["test/support/fixtures/hold-chorus.ts"], { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"] });
    const started = await new Promise<{ pid: number; dataDir: string }>((resolve, reject) => {
      let out = "";
      holder.stdout!.on("data", (d) => {
        out += d;
        const line = out.split("\n").find((l) => l.startsWith("{"));
        if (line) resolve(JSON.parse(line));
      });
      holder.once("exit", (code) => reject(new Error(`the holder exited (${code}) before the server started`)));
    });
    try {
      expect(alive(started.pid)).toBe(true);
      const exited = new Promise((resolve) => holder.once("exit", resolve));
      holder.kill(signal);
      await exited;
      const deadline = Date.now() + 5000;
      while (alive(started.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(alive(started.pid)).toBe(false);
    } finally {
      if (alive(started.pid)) process.kill(started.pid, "SIGTERM"); // tsx passes it on to the server
      fs.rmSync(started.dataDir, { recursive: true, force: true });
    }
  }, 90_000);
});
