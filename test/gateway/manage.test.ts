/** The management CLI, run as an operator runs it, against the embedded store. */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../runtime/config.ts";
import { startNode } from "../../gateway/main.ts";
import { api, readZuliprc } from "../support/server.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const run = promisify(execFile);

function manage(dataDir: string, ...args: string[]) {
  return run(path.join(ROOT, "node_modules/.bin/tsx"), ["gateway/manage.ts", ...args], {
    cwd: ROOT,
    env: { ...process.env, DATA_DIR: dataDir, CHORUS_SECRET: "manage-test", DATABASE_URL: "", REDIS_URL: "" },
  }).then(
    (r) => ({ code: 0, ...r }),
    (e) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
  );
}

describe("npm run manage", () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-manage-"));
  afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

  it("creates users with a role, prints zuliprc files that work, and refuses while the server holds the store", async () => {
    const created = await manage(dataDir, "create-user", "--email", "mod@example.com", "--name", "Moderator", "--role", "moderator", "--password", "s3cret");
    expect(created.code).toBe(0);
    const key = created.stdout.match(/API key: ([A-Za-z0-9]{32})/)?.[1];
    expect(key).toBeDefined();
    expect(fs.existsSync(path.join(dataDir, "zuliprc"))).toBe(true); // first use created the organization

    const dup = await manage(dataDir, "create-user", "--email", "MOD@example.com", "--name", "Again");
    expect(dup.code).toBe(1);
    expect(dup.stderr).toContain("already in use");
    expect((await manage(dataDir, "create-user", "--email", "x@example.com", "--name", "X", "--role", "king")).code).toBe(1);

    const rc = await manage(dataDir, "zuliprc", "--email", "mod@example.com", "--site", "http://chat.example.com");
    expect(rc.stdout).toBe(`[api]\nemail=mod@example.com\nkey=${key}\nsite=http://chat.example.com\n`);

    const node = await startNode(loadConfig({ port: 0, host: "127.0.0.1", dataDir, secret: "manage-test", databaseUrl: undefined, redisUrl: undefined, workers: 1 }));
    try {
      const me = await api({ url: `http://127.0.0.1:${node.port}` }, "GET", "/users/me", { as: { email: "mod@example.com", key: key! } });
      expect(me.body).toMatchObject({ email: "mod@example.com", role: 300, full_name: "Moderator" });
      const owner = readZuliprc(path.join(dataDir, "zuliprc"));
      expect((await api({ url: `http://127.0.0.1:${node.port}` }, "GET", "/users/me", { as: owner })).body.role).toBe(100);
      const locked = await manage(dataDir, "create-user", "--email", "late@example.com", "--name", "Late");
      expect(locked.code).toBe(1);
      expect(locked.stderr).toContain("in use by process");
    } finally {
      await node.close();
    }
  }, 90_000);
});
