/**
 * `npm start`'s command with a configuration that cannot work: each refuses with one line per problem on stderr,
 * no stack, exit code 1, within seconds. The unreachable services are ports nothing listens on; the read-only data
 * directory is a read-only tmpfs when the test may mount one (root), else a directory without write permission.
 */
import { execFile, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../support/process.ts";
import { SERVER_NODE_FLAGS, serverBuild } from "../support/server-build.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-startup-"));

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function start(env: Record<string, string>, cwd = ROOT): Promise<Outcome> {
  const { main } = await serverBuild();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [...SERVER_NODE_FLAGS, main],
      { cwd, timeout: 60_000, env: { ...process.env, HOST: "127.0.0.1", PORT: "0", CHORUS_SECRET: "s", DATA_DIR: fs.mkdtempSync(path.join(scratch, "data-")), ...env } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr }),
    );
  });
}

/** Exit 1 with exactly these lines on stderr. */
function expectRefusal(outcome: Outcome, ...lines: RegExp[]) {
  expect(outcome.code).toBe(1);
  const got = outcome.stderr.trimEnd().split("\n");
  expect(got).toHaveLength(lines.length);
  lines.forEach((line, i) => expect(got[i]).toMatch(line));
  expect(outcome.stderr).not.toMatch(/\n\s+at /); // no stack
}

afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

// Each case loads the whole server: a second or more each on a busy machine.
describe("start-up refusals", { timeout: 120_000 }, () => {
  it("names every malformed setting, one line each", async () => {
    const out = await start({ DATABASE_URL: "notaurl", PORT: "x", REDIS_URL: "http://h", RATE_LIMIT_API_BY_IP: "lots" });
    expectRefusal(
      out,
      /^chorus: PORT must be a non-negative integer, got "x"$/,
      /^chorus: DATABASE_URL must be a URL like postgres:\/\/user@host:5432\/database, got "notaurl"$/,
      /^chorus: REDIS_URL must be a URL like redis:\/\/host:6379, got "http:\/\/h"$/,
      /^chorus: RATE_LIMIT_API_BY_IP must be seconds:calls/,
    );
  });

  it("refuses WORKERS=2 without Redis and Postgres instead of restarting workers", async () => {
    expectRefusal(await start({ WORKERS: "2" }), /^chorus: WORKERS=2 needs REDIS_URL and DATABASE_URL: the embedded engines/);
  });

  it("names an unreachable Postgres and Redis after a short bounded retry", async () => {
    const [pgPort, redisPort] = [await freePort(), await freePort()];
    const out = await start({ DATABASE_URL: `postgres://postgres:secret@127.0.0.1:${pgPort}/x`, REDIS_URL: `redis://127.0.0.1:${redisPort}` });
    expectRefusal(
      out,
      new RegExp(`^chorus: cannot reach Postgres at postgres://postgres:\\*\\*\\*@127\\.0\\.0\\.1:${pgPort}/x \\(DATABASE_URL\\): connect ECONNREFUSED`),
      new RegExp(`^chorus: cannot reach Redis at redis://127\\.0\\.0\\.1:${redisPort} \\(REDIS_URL\\): connect ECONNREFUSED`),
    );
  });

  it("refuses a port in use", async () => {
    const server = net.createServer().listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    const port = (server.address() as net.AddressInfo).port;
    try {
      expectRefusal(await start({ PORT: String(port) }), new RegExp(`^chorus: port ${port} is already in use`));
    } finally {
      server.close();
    }
  });

  it("refuses a data directory it cannot write", async () => {
    const file = path.join(scratch, "a-file");
    fs.writeFileSync(file, "");
    expectRefusal(await start({ DATA_DIR: path.join(file, "data") }), /^chorus: DATA_DIR \S+ is not writable \(ENOTDIR: not a directory\)$/);

    const readOnly = fs.mkdtempSync(path.join(scratch, "ro-"));
    let mounted = false;
    try {
      execFileSync("mount", ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", readOnly], { stdio: "ignore" });
      mounted = true;
    } catch {
      fs.chmodSync(readOnly, 0o555); // not root: permissions are enforced
    }
    try {
      const out = await start({ DATA_DIR: path.join(readOnly, "data") });
      expectRefusal(out, mounted ? /^chorus: DATA_DIR \S+ is not writable \(EROFS: read-only file system\)$/ : /^chorus: DATA_DIR \S+ is not writable \(EACCES/);
    } finally {
      if (mounted) execFileSync("umount", [readOnly]);
    }
  });

  it("reads .env from the working directory, the environment winning", async () => {
    const cwd = fs.mkdtempSync(path.join(scratch, "cwd-"));
    fs.writeFileSync(path.join(cwd, ".env"), "DATABASE_URL=from-dotenv\nWORKERS=3\n");
    expectRefusal(
      await start({ WORKERS: "1" }, cwd),
      /^chorus: DATABASE_URL must be a URL like postgres:\/\/user@host:5432\/database, got "from-dotenv"$/,
    );
  });
});

// The README's command, as a process manager runs it: its SIGTERM goes to npm, which passes it to its script's
// process; the script must be node itself (`exec`), or a shell in between dies and leaves the server running.
describe("npm start", { timeout: 120_000 }, () => {
  it("stops the server gracefully when npm is sent SIGTERM", async () => {
    const port = await freePort();
    const data = fs.mkdtempSync(path.join(scratch, "data-"));
    const env: Record<string, string | undefined> = { ...process.env, HOST: "127.0.0.1", PORT: String(port), CHORUS_SECRET: "s", DATA_DIR: data };
    delete env.DATABASE_URL;
    delete env.REDIS_URL;
    const npm = spawn("npm", ["start"], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    npm.stdout!.on("data", (d) => (output += d));
    npm.stderr!.on("data", (d) => (output += d));
    const npmExited = new Promise((resolve) => npm.once("exit", resolve));
    const answers = () => fetch(`http://127.0.0.1:${port}/api/v1/server_settings`).then((r) => r.ok, () => false);
    for (let i = 0; i < 600 && !(await answers()); i++) await new Promise((r) => setTimeout(r, 100));
    expect(await answers(), output).toBe(true);
    const server = Number(fs.readFileSync(path.join(data, "chorus.pid"), "utf8"));
    expect(server).not.toBe(npm.pid);

    npm.kill("SIGTERM");
    await npmExited;
    const alive = () => {
      try {
        process.kill(server, 0);
        return true;
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 200 && alive(); i++) await new Promise((r) => setTimeout(r, 100));
    const stoppedItself = !alive();
    if (!stoppedItself) process.kill(server, "SIGKILL");
    expect(stoppedItself, output).toBe(true);
    expect(output).toMatch(/SIGTERM: shutting down/);
    expect(await answers()).toBe(false);
  });
});
