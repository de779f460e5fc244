/**
 * Chorus as an operator runs it: `npm start`'s command in a child process, with its own data directory and port.
 * Each server is started in a process group of its own (it forks workers), and the whole group is killed when it is
 * stopped, and when the test process exits or is interrupted: a failed or interrupted run leaves no server behind.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "./services.ts";
import { copyPgliteTemplate } from "./store-templates.ts";
import { onHost, type ServicePlacement } from "./hosts.ts";
import { SERVER_NODE_FLAGS, serverBuild } from "./server-build.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Rate limits no test trips by accident, as settings (server.ts's GENEROUS_RATE_LIMITS for a spawned server). */
const GENEROUS_RATE_LIMIT_ENV = Object.fromEntries(
  ["RATE_LIMIT_API_BY_USER", "RATE_LIMIT_API_BY_IP", "RATE_LIMIT_AUTHENTICATE_BY_USERNAME", "RATE_LIMIT_AUTHENTICATE_BY_IP"].map((name) => [name, "60:1000000"]),
);

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/** Whether something accepts TCP connections at host:port (waited for at most 2 s). */
export function reachable(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, timeout: 2000 });
    socket.once("connect", () => (socket.destroy(), resolve(true)));
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => (socket.destroy(), resolve(false)));
  });
}

/** Process groups of the servers started and not yet exited. */
const liveGroups = new Set<number>();

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // the group is gone already
  }
}

function killLiveGroups(): void {
  for (const pid of liveGroups) killGroup(pid, "SIGKILL");
  liveGroups.clear();
}

let exitHooksInstalled = false;
function installExitHooks(): void {
  if (exitHooksInstalled) return;
  exitHooksInstalled = true;
  process.on("exit", killLiveGroups);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    const onSignal = () => {
      killLiveGroups();
      // Then die of the signal as we would have without this listener (unless someone else handles it).
      process.off(signal, onSignal);
      if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
    };
    process.on(signal, onSignal);
  }
}

export interface ChorusProcess {
  /** Where it listens: 127.0.0.1, or its host's address (`opts.host`). */
  address: string;
  port: number;
  dataDir: string;
  proc: ChildProcess;
  output(): string;
  /** SIGTERM, and wait for the exit; resolves with the exit code. */
  stop(): Promise<number | null>;
}

/**
 * Start what `npm start` runs (the built server, `node … dist/main.mjs`: gateway/build.ts; no npm in between) and
 * wait until it answers.
 * `joins`: a process joining a deployment that exists (it creates no organization, so writes no zuliprc; a
 * worker-only one answers only its probes): ready once `/ready` says so. `host`: run inside that host's network
 * namespace (test/support/hosts.ts), listening on its address.
 */
export async function startChorus(
  env: Record<string, string> = {},
  dataDir?: string,
  opts: {
    joins?: boolean;
    host?: ServicePlacement;
    /** Another checkout's Chorus (a base worktree, for A/B benchmarks), built by this checkout's gateway/build.ts. */
    root?: string;
    /** Node flags NODE_OPTIONS may not carry (--cpu-prof); cluster workers inherit them. */
    nodeFlags?: string[];
    /** How long it may take to answer (default a minute; a bench on a busy machine waits longer). */
    startTimeoutMs?: number;
  } = {},
): Promise<ChorusProcess> {
  const address = opts.host?.address ?? "127.0.0.1";
  const port = Number(env.PORT ?? (await freePort()));
  const dir = dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), "chorus-e2e-"));
  // A new embedded store starts from the run's migrated one (store-templates.ts); not another checkout's.
  if (!dataDir && !env.DATABASE_URL && !opts.root) copyPgliteTemplate(dir);
  const { main } = await serverBuild(opts.root);
  const proc = spawn(...onHost(opts.host ?? { address }, process.execPath, [...SERVER_NODE_FLAGS, ...(opts.nodeFlags ?? []), main]), {
    cwd: opts.root ?? ROOT,
    env: { ...process.env, DATA_DIR: dir, PORT: String(port), HOST: address, CHORUS_SECRET: "e2e-secret", ...GENEROUS_RATE_LIMIT_ENV, ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  installExitHooks();
  const group = proc.pid!;
  liveGroups.add(group);
  let log = "";
  proc.stdout!.on("data", (d) => (log += d));
  proc.stderr!.on("data", (d) => (log += d));
  const exited = new Promise<number | null>((resolve) =>
    proc.once("exit", (code) => {
      // Workers it forked may outlive it: the group goes with it.
      killGroup(group, "SIGKILL");
      liveGroups.delete(group);
      resolve(code);
    }),
  );
  const deadline = Date.now() + (opts.startTimeoutMs ?? 60_000);
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`chorus exited early:\n${log}`);
    try {
      if (opts.joins) {
        if ((await fetch(`http://${address}:${port}/ready`)).ok) break;
      } else {
        const res = await fetch(`http://${address}:${port}/api/v1/server_settings`);
        if (res.ok && fs.existsSync(path.join(dir, "zuliprc"))) break;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      killGroup(group, "SIGKILL");
      throw new Error(`chorus did not start in time:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  // It answered, but its start-up line (which names its node: nodeIdOf) may still be in the pipe: read it first.
  for (let i = 0; i < 50 && !/listening on port \d+ \(pid/.test(log); i++) await new Promise((r) => setTimeout(r, 100));
  return {
    address,
    port,
    dataDir: dir,
    proc,
    output: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => killGroup(group, "SIGKILL"), 20_000);
      const code = await exited;
      clearTimeout(timer);
      // Its last lines may still be in the pipes when it exits: read them (a test shows them when the code is wrong).
      await Promise.race([new Promise((r) => (proc.stdout!.readableEnded ? r(undefined) : proc.stdout!.once("end", r))), new Promise((r) => setTimeout(r, 1000))]);
      return code;
    },
  };
}

/** The pids of the workers that have announced themselves so far (a restarted worker adds its new pid). */
export function workerPids(server: ChorusProcess): number[] {
  return [...server.output().matchAll(/listening on port \d+ \(pid (\d+)/g)].map((m) => Number(m[1]));
}

/** The pid of the worker whose cluster node id is `node`, from the workers' start-up lines. */
export function workerPidOf(server: ChorusProcess, node: string): number | undefined {
  for (const m of server.output().matchAll(/listening on port \d+ \(pid (\d+), node ([^,]+),/g)) if (m[2] === node) return Number(m[1]);
  return undefined;
}

/** The cluster node id a process printed when it started listening (one process: one node). */
export function nodeIdOf(server: ChorusProcess): string {
  const node = server.output().match(/\(pid \d+, node ([^,]+),/)?.[1];
  if (!node) throw new Error(`no node id in the output:\n${server.output()}`);
  return node;
}

/** The node holding `shard`'s lease in the deployment's database (undefined while none does). */
export async function shardHolder(databaseUrl: string, shard: number): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ owner: string | null }>("select owner from shard_leases where shard = $1 and expires_at > now()", [shard]);
    return rows[0]?.owner ?? undefined;
  } finally {
    await client.end();
  }
}

/**
 * Chorus on Redis Streams and Postgres with `WORKERS` processes (default 2), in a database and a key prefix of its
 * own; resolves once every worker listens. `cleanups` receives what stops it and drops its database, keys and data
 * directory, in the order to run them backwards.
 */
export async function startDistributed(env: Record<string, string>, cleanups: Array<() => Promise<unknown>>): Promise<ChorusProcess & { databaseUrl: string; redisPrefix: string }> {
  const db = await freshDatabase({ migrated: true });
  const redis = freshRedisPrefix();
  cleanups.push(db.drop, redis.clean);
  const workers = Number(env.WORKERS ?? 2);
  // A metrics port of its own: the primary's default (9464) would be taken by another file's cluster running alongside.
  const metricsPort = String(await freePort());
  const server = await startChorus({ REDIS_URL, DATABASE_URL: db.url, REDIS_PREFIX: redis.prefix, WORKERS: String(workers), METRICS_PORT: metricsPort, ...env });
  cleanups.push(async () => fs.rmSync(server.dataDir, { recursive: true, force: true }), () => server.stop());
  for (let i = 0; i < 100 && workerPids(server).length < workers; i++) await new Promise((r) => setTimeout(r, 100));
  return { ...server, databaseUrl: db.url, redisPrefix: redis.prefix };
}
