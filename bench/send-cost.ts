/**
 * CPU per POST /messages of the server process alone, as a count that a loaded machine moves little: one node on
 * Redis + Postgres (bench/scenarios.ts's engine) takes `--sends` sends from a client in a process of its own,
 * `--in-flight` at a time over keep-alive connections, after a warm-up; printed are this process's CPU µs per send,
 * sends/s, and Postgres's and Redis's CPU and counts per send (Postgres transactions: every lookup outside a group
 * commit is one; use a Redis of your own, since its INFO counts everyone's commands). Under callgrind (`valgrind --tool=callgrind --instr-atstart=no node …`) it switches instrumentation
 * on for the measured sends only (`--callgrind`), so the output's instruction count divided by `--sends` is the
 * instructions per send. `--root` runs another checkout's server (A/B, interleaved).
 *
 *   TEST_REDIS_URL=redis://127.0.0.1:6397 node --max-semi-space-size=64 --import tsx bench/send-cost.ts [--sends 4000] [--root <dir>]
 */
import { execFileSync, fork } from "node:child_process";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";

const CLIENT = "--client";

if (process.argv.includes(CLIENT)) {
  // The client: `sends` requests, `inFlight` at a time, each on its own keep-alive connection; reports when done.
  process.on("message", (job: { url: string; authorization: string; body: string; sends: number; inFlight: number }) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: job.inFlight });
    const url = new URL(job.url);
    let next = 0;
    let failed = 0;
    const one = () =>
      new Promise<void>((resolve) => {
        const req = http.request(
          { host: url.hostname, port: url.port, path: url.pathname, method: "POST", agent, headers: { authorization: job.authorization, "content-type": "application/x-www-form-urlencoded", "content-length": Buffer.byteLength(job.body) } },
          (res) => {
            if (res.statusCode !== 200) failed++;
            res.resume().on("end", resolve);
          },
        );
        req.on("error", () => {
          failed++;
          resolve();
        });
        req.end(job.body);
      });
    const lane = async () => {
      while (next++ < job.sends) await one();
    };
    void Promise.all(Array.from({ length: job.inFlight }, lane)).then(() => {
      agent.destroy();
      process.send!({ failed });
    });
  });
} else {
  const { values } = parseArgs({
    options: {
      sends: { type: "string", default: "4000" },
      warmup: { type: "string", default: "3000" },
      "in-flight": { type: "string", default: "50" },
      root: { type: "string", default: path.resolve(import.meta.dirname, "..") },
      callgrind: { type: "boolean", default: false },
    },
  });
  const sends = Number(values.sends);
  const inFlight = Number(values["in-flight"]);
  const { startEngine, api, CHANNEL, SEND_BODY } = (await import(path.join(values.root, "bench/scenarios.ts"))) as typeof import("./scenarios.ts");

  const stops: Array<() => Promise<void>> = [];
  const janitor = { watch() {}, release() {} };
  const engine = await startEngine("redis+postgres", (stop) => stops.push(stop), janitor);
  const client = fork(import.meta.filename, [CLIENT], { execArgv: ["--import", "tsx"] });
  const run = (n: number) =>
    new Promise<number>((resolve) => {
      client.once("message", (m: { failed: number }) => resolve(m.failed));
      client.send({ url: `${engine.baseUrl}/api/v1/messages`, authorization: engine.authorization, body: SEND_BODY, sends: n, inFlight });
    });
  try {
    await api(engine, "POST", "/api/v1/users/me/subscriptions", { subscriptions: JSON.stringify([{ name: CHANNEL }]) });
    const warmFailed = await run(Number(values.warmup));
    const callgrind = (on: boolean) => values.callgrind && execFileSync("callgrind_control", ["-i", on ? "on" : "off", String(process.pid)]);
    callgrind(true);
    const services0 = await engine.serviceStats();
    const cpu0 = process.cpuUsage();
    const started = performance.now();
    const failed = await run(sends);
    const wallMs = performance.now() - started;
    const cpu = process.cpuUsage(cpu0);
    callgrind(false);
    const services1 = await engine.serviceStats();
    const perSend = (n: number) => Math.round((n / sends) * 100) / 100;
    const cpuOf = (stats: typeof services0, prefix: string) => [...stats.cpu].filter(([k]) => k.startsWith(prefix)).reduce((n, [, us]) => n + us, 0);
    const grown = (prefix: string) => cpuOf(services1, prefix) - cpuOf(services0, prefix);
    console.log(
      JSON.stringify({
        root: values.root,
        sends,
        inFlight,
        failed: warmFailed + failed,
        nodeMicrosPerSend: Math.round(((cpu.user + cpu.system) / sends) * 10) / 10,
        sendsPerSecond: Math.round(sends / (wallMs / 1000)),
        // Postgres backends that ended meanwhile are missed (none do while the node runs).
        postgresMicrosPerSend: perSend(grown("postgres:")),
        redisMicrosPerSend: perSend(grown("redis")),
        postgresTransactionsPerSend: perSend(services1.counters["postgres transactions"]! - services0.counters["postgres transactions"]!),
        redisCommandsPerSend: perSend(services1.counters["redis commands"]! - services0.counters["redis commands"]!),
        load: os.loadavg()[0]!.toFixed(1),
      }),
    );
  } finally {
    client.kill();
    for (const stop of stops) await stop();
    process.exit(0);
  }
}
