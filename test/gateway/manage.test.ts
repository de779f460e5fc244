/**
 * The management CLI, run as an operator runs it (a child process): accounts against the embedded store; the
 * assistant's commands against the embedded store (server stopped) and against Postgres beside a running server.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../runtime/config.ts";
import { startNode } from "../../gateway/main.ts";
import { serverBuild } from "../support/server-build.ts";
import { api, readZuliprc, startTestServer, type TestServer } from "../support/server.ts";
import { call } from "./assistant/support.ts";
import { copyPgliteTemplate } from "../support/store-templates.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const run = promisify(execFile);

interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Run the CLI against a store: the embedded one under `dataDir` unless `env` names a DATABASE_URL. */
async function cli(env: Record<string, string>, args: string[], input?: string): Promise<CliResult> {
  const child = run(process.execPath, [(await serverBuild()).manage, ...args], { cwd: ROOT, env: { ...process.env, DATABASE_URL: "", REDIS_URL: "", ...env } });
  if (input !== undefined) child.child.stdin!.end(input);
  return child.then(
    (r) => ({ code: 0, ...r }),
    (e) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
  );
}

function manage(dataDir: string, ...args: string[]) {
  return cli({ DATA_DIR: dataDir, CHORUS_SECRET: "manage-test" }, args);
}

describe("npm run manage", () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-manage-"));
  copyPgliteTemplate(dataDir);
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

/** `name: value` lines of the CLI's output. */
function fields(out: CliResult): Record<string, string> {
  if (out.code !== 0) throw new Error(`manage failed (${out.code}): ${out.stderr}`);
  return Object.fromEntries([...out.stdout.matchAll(/^([a-z_]+): (\S+)/gm)].map((m) => [m[1]!, m[2]!]));
}

function knowledgeFiles(dir: string) {
  const write = (name: string, text: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, text);
    return file;
  };
  return {
    refunds: write("refund-policy.md", "# Refunds\n\nRefunds are processed within 14 days of the request.\n"),
    shipping: write("shipping.txt", "We ship worldwide. Shipping is free for orders above 50 euros.\n"),
    hours: write("hours.html", "<html><body><nav>Home</nav><h1>Opening hours</h1><p>The desk is open <b>Monday to Friday</b>.</p></body></html>\n"),
    mascotPurple: write("mascot.md", "The mascot is purple.\n"),
    mascotOrange: write("mascot-v2.md", "The mascot is orange.\n"),
    binary: write("logo.png", "\u0089PNG"),
  };
}

describe("npm run manage: the assistant, on the embedded store", () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-manage-assistant-"));
  copyPgliteTemplate(dataDir);
  afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));
  const files = knowledgeFiles(dataDir);
  const owner = () => readZuliprc(path.join(dataDir, "zuliprc")).email;

  it("sets the owner's password, creates a key, an agent and a published version from files, which a server then serves", async () => {
    const agent = fields(await manage(dataDir, "create-agent", "--name", "Helper", "--origin", "https://Shop.example.com", "--rate-limit", "100"));
    expect(agent.agent_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(agent.agent_key).toMatch(/^ak_/);
    expect(agent.secret).toMatch(/^[0-9a-f]{64}$/);
    expect((await cli({ DATA_DIR: dataDir, CHORUS_SECRET: "manage-test" }, ["set-password", "--email", owner(), "--password", "-"], "console-pass-1\n")).code).toBe(0);
    const key = (await manage(dataDir, "create-api-key", "--email", owner())).stdout.match(/^(chorus_\S+)$/m)?.[1];
    expect(key).toBeDefined();

    const v1 = fields(await manage(dataDir, "add-version", "--agent", agent.agent_id!, "--publish", files.refunds, files.shipping, files.hours));
    expect(v1.version_id).toMatch(/^[0-9a-f-]{36}$/);
    const refused = await manage(dataDir, "add-version", "--agent", agent.agent_id!, files.binary);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("only text, markdown and HTML");

    const node = await startNode(loadConfig({ port: 0, host: "127.0.0.1", dataDir, secret: "manage-test", databaseUrl: undefined, redisUrl: undefined, workers: 1 }));
    const server = { url: `http://127.0.0.1:${node.port}` };
    try {
      const login = await call(server, "POST", "/api/internal/auth/login", { body: { email: owner(), password: "console-pass-1" } });
      expect(login.status).toBe(200);
      expect((await call(server, "GET", "/chat/agents", { key })).body.agents).toEqual([{ agent_id: agent.agent_id, name: "Helper" }]);
      const answer = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "How long do refunds take?" }, headers: { origin: "https://shop.example.com" } });
      expect(answer.status).toBe(200);
      expect(answer.body.answer).toContain("within 14 days");
      expect(answer.body.sources[0]).toMatchObject({ title: "refund-policy", heading: "Refunds" }); // the file name, and the heading
      const hours = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "When is the desk open?" }, headers: { origin: "https://shop.example.com" } });
      expect(hours.body.answer).toBe("The desk is open Monday to Friday."); // the HTML file read as text
      expect(hours.body.sources[0]).toMatchObject({ title: "hours", heading: "Opening hours" });
      expect((await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "refunds" }, headers: { origin: "https://evil.example" } })).status).toBe(403);
      const manifest = await call(server, "GET", `/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { key });
      expect(manifest.body).toMatchObject({ version_id: v1.version_id, allowed_origins: ["shop.example.com"], rate_limit_per_minute: 100 });
      expect(manifest.body.knowledge.documents.map((d: { title: string }) => d.title)).toEqual(["refund-policy", "shipping", "hours"]);
    } finally {
      await node.close();
    }
  }, 120_000);
});

describe("npm run manage: the assistant, on Postgres beside a running server", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer("redis+postgres");
  });
  afterAll(async () => server?.close());
  const files = knowledgeFiles(fs.mkdtempSync(path.join(os.tmpdir(), "chorus-manage-pg-")));

  it("publishes and rolls back while the server answers, which serves the change within a second or so", async () => {
    const cfg = server.node.config;
    const env = { DATA_DIR: server.dataDir, CHORUS_SECRET: "test-secret", DATABASE_URL: cfg.databaseUrl!, REDIS_URL: cfg.redisUrl!, REDIS_PREFIX: cfg.redisPrefix };
    const manage = (...args: string[]) => cli(env, args);
    const agent = fields(await manage("create-agent", "--name", "Mascot"));
    const ask = async () => (await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "What colour is the mascot?" } })).body.answer as string;
    const eventually = async (expected: string) => {
      const deadline = Date.now() + 5000;
      let answer = await ask();
      while (!answer.includes(expected) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        answer = await ask();
      }
      return answer;
    };
    fields(await manage("add-version", "--agent", agent.agent_id!, "--publish", files.mascotPurple));
    expect(await eventually("purple")).toContain("purple");
    fields(await manage("add-version", "--agent", agent.agent_id!, "--publish", files.mascotOrange));
    expect(await eventually("orange")).toContain("orange");
    expect((await manage("rollback", "--agent", agent.agent_id!)).stdout).toContain("published version");
    expect(await eventually("purple")).toContain("purple");
    const key = (await manage("create-api-key", "--email", server.owner.email)).stdout.match(/^(chorus_\S+)$/m)![1]!;
    // the console's rollback continues from the history the CLI left: nothing left to roll back to
    expect((await call(server, "POST", "/api/internal/rag/rollback", { key, body: { agent_id: agent.agent_id } })).status).toBe(409);

    const titled = fields(await manage("add-version", "--agent", agent.agent_id!, "--title", "Colours", "--settings", '{"min_score":0.2}', files.mascotOrange));
    const versions = await server.node.store.db.selectFrom("assistant_documents").select("title").where("version_id", "=", titled.version_id!).execute();
    expect(versions).toEqual([{ title: "Colours" }]);
    expect((await manage("list-agents")).stdout).toContain(`${agent.agent_id}  Mascot  key ${agent.agent_key}  published `);
    const hook = fields(await manage("add-webhook", "--agent", agent.agent_id!, "--url", "https://hooks.example.com/chorus", "--events", "message.sent"));
    expect(hook.secret).toMatch(/^whsec_/);

    // mistakes are refused with a message and exit status 1 (and change nothing); run side by side, as they are
    // independent and each CLI start costs seconds
    const mistakes = [
      [["add-version", "--agent", agent.agent_id!, "--title", "T", files.mascotPurple, files.mascotOrange], "one file"],
      [["publish", "--agent", agent.agent_id!, "--version", crypto.randomUUID()], "Version not found"],
      [["create-agent", "--name", "X", "--origin", "not a host!"], "allowed_origins.0"],
      [["add-webhook", "--agent", agent.agent_id!, "--url", "http://10.0.0.1/hook"], "not a public address"],
      [["create-api-key", "--email", "nobody@example.com"], "no account"],
      [["set-password", "--email", server.owner.email], "--password is required"],
    ] as const;
    const refused = await Promise.all(mistakes.map(([args]) => manage(...args)));
    mistakes.forEach(([args, message], i) => {
      expect(refused[i]!.code, args.join(" ")).toBe(1);
      expect(refused[i]!.stderr).toContain(message);
    });
    expect((await manage("list-agents")).stdout.trim().split("\n")).toHaveLength(1);
  }, 180_000);
});
