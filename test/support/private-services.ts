/**
 * A Redis and a Postgres of a test's own, on ports of their own, for tests that kill or restart them (the chaos
 * tests): the machine's shared services are never touched. Postgres runs as the `postgres` account when the test
 * runs as root (initdb refuses root), from a data directory under the system's temporary directory.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { freePort } from "./process.ts";
import { onHost, type ServicePlacement } from "./hosts.ts";

const PG_BIN = process.env.PG_BIN ?? "/usr/lib/postgresql/15/bin";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Not execFileSync: the test's clients keep sending while a service stops and starts. */
const execAsync = promisify(execFile);

/** Whether this machine can run the private services (redis-server on PATH, Postgres's binaries at PG_BIN). */
export function privateServicesAvailable(): boolean {
  try {
    execFileSync("redis-server", ["--version"], { stdio: "ignore" });
    return fs.existsSync(path.join(PG_BIN, "initdb")) && fs.existsSync(path.join(PG_BIN, "pg_ctl"));
  } catch {
    return false;
  }
}

const LOOPBACK: ServicePlacement = { address: "127.0.0.1" };

export interface PrivateRedis {
  url: string;
  /** SIGKILL, then start again on the same port (with its append-only file, when `aof`). */
  restart(downMs: number): Promise<void>;
  stop(): Promise<void>;
}

/**
 * redis-server on a free port. `aof`: with an append-only file fsynced before each write is answered (`always`)
 * or every second (`everysec`: a crash loses up to a second of writes); false: nothing survives a restart.
 */
export async function startPrivateRedis(opts: { aof: "always" | "everysec" | false; placement?: ServicePlacement }): Promise<PrivateRedis> {
  const placement = opts.placement ?? LOOPBACK;
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-redis-"));
  const persistence = opts.aof ? ["--appendonly", "yes", "--appendfsync", opts.aof] : ["--appendonly", "no"];
  // Protected mode refuses every client but loopback's; on a host of its own, the other hosts are its clients.
  const reachable = placement === LOOPBACK ? [] : ["--protected-mode", "no"];
  const args = ["--port", String(port), "--bind", placement.address, "--dir", dir, "--save", "", ...persistence, ...reachable];
  let proc: ChildProcess;
  const start = async () => {
    proc = await spawnRedisServer(port, args, placement);
  };
  const kill = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once("exit", r));
    proc.kill("SIGKILL");
    await exited;
  };
  await start();
  return {
    url: `redis://${placement.address}:${port}`,
    async restart(downMs) {
      await kill();
      await sleep(downMs);
      await start();
    },
    async stop() {
      await kill();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** redis-server with `args` (which name `port`), once it answers PING. */
export async function spawnRedisServer(port: number, args: string[], placement = LOOPBACK): Promise<ChildProcess> {
  const proc = spawn(...onHost(placement, "redis-server", args), { stdio: "ignore" });
  for (let i = 0; i < 100; i++) {
    try {
      if ((await execAsync(...onHost(placement, "redis-cli", ["-h", placement.address, "-p", String(port), "ping"]))).stdout.trim() === "PONG") return proc;
    } catch {
      // not up yet
    }
    await sleep(50);
  }
  proc.kill("SIGKILL");
  throw new Error(`private redis-server on port ${port} did not start`);
}

export interface PrivateRedisCluster {
  /** REDIS_URL for Chorus: the first master, with `?cluster=on`. */
  url: string;
  stop(): Promise<void>;
}

/** A Redis Cluster of `masters` redis-servers on free local ports, no replicas, every slot assigned. */
export async function startPrivateRedisCluster(masters = 3): Promise<PrivateRedisCluster> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-redis-cluster-"));
  const ports: number[] = [];
  const procs: ChildProcess[] = [];
  const stop = async () => {
    for (const proc of procs) {
      if (proc.exitCode !== null || proc.signalCode !== null) continue;
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGKILL");
      await exited;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < masters; i++) {
      const port = await freePort();
      ports.push(port);
      const nodeDir = path.join(dir, String(port));
      fs.mkdirSync(nodeDir);
      procs.push(
        await spawnRedisServer(port, ["--port", String(port), "--bind", "127.0.0.1", "--dir", nodeDir, "--save", "", "--appendonly", "no", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]),
      );
    }
    await execAsync("redis-cli", ["--cluster", "create", ...ports.map((p) => `127.0.0.1:${p}`), "--cluster-replicas", "0", "--cluster-yes"]);
    // Every node must know every slot's owner before clients are pointed at it.
    for (const port of ports) {
      for (let i = 0; ; i++) {
        const info = (await execAsync("redis-cli", ["-p", String(port), "cluster", "info"])).stdout;
        if (info.includes("cluster_state:ok")) break;
        if (i > 100) throw new Error(`redis cluster node ${port} not ready: ${info}`);
        await sleep(100);
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { url: `redis://127.0.0.1:${ports[0]}/?cluster=on`, stop };
}

export interface PrivatePostgres {
  url: string;
  /** Stop (`immediate`: as a crash, recovery on start; else `fast`), wait `downMs`, start again on the same port. */
  restart(downMs: number, mode?: "fast" | "immediate"): Promise<void>;
  stop(): Promise<void>;
}

/** A new Postgres cluster (initdb) on a free port, trust authentication, fsync off (a test's data is disposable). */
export async function startPrivatePostgres(placement = LOOPBACK): Promise<PrivatePostgres> {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-pg-"));
  const data = path.join(dir, "data");
  const asRoot = process.getuid?.() === 0;
  if (asRoot) execFileSync("chown", ["postgres", dir]);
  const run = (bin: string, args: string[]) => {
    const cmd = path.join(PG_BIN, bin);
    return execAsync(...(asRoot ? onHost(placement, "runuser", ["-u", "postgres", "--", cmd, ...args]) : onHost(placement, cmd, args)));
  };
  await run("initdb", ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync"]);
  // initdb trusts loopback only; on a host of its own, the other hosts connect over their network.
  if (placement !== LOOPBACK) fs.appendFileSync(path.join(data, "pg_hba.conf"), "host all all 0.0.0.0/0 trust\n");
  const options = `-p ${port} -k ${dir} -c listen_addresses=${placement.address} -c fsync=off -c max_connections=100`;
  const start = () => run("pg_ctl", ["-D", data, "-o", options, "-l", path.join(dir, "log"), "-w", "start"]);
  const stopIt = (mode: string) => run("pg_ctl", ["-D", data, "-m", mode, "-w", "stop"]);
  await start();
  return {
    url: `postgres://postgres@${placement.address}:${port}/postgres`,
    async restart(downMs, mode = "fast") {
      await stopIt(mode);
      await sleep(downMs);
      await start();
    },
    async stop() {
      try {
        await stopIt("immediate");
      } catch {
        // already stopped
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
