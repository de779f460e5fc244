/**
 * `npm run bench:memory [-- --queues N --streams N --polls N --users N --rounds N]`: does the server's memory come
 * back, and what does a parked long-poll hold?
 * One node on Redis Streams + Postgres (a fresh database and key prefix, removed afterwards) started in this
 * process; its clients in a child process (bench/event-client.ts), so that only the server's memory is measured.
 * Each round registers `--queues` queues (POST /register, round-robin over `--users` users) and deletes them, then
 * registers `--streams` queues, opens GET /events/stream on each, closes every stream (the client goes away) and
 * deletes those queues, then parks `--polls` long-polls (GET /events on as many new queues), unparks them and
 * deletes those queues (what parked polls cost is the capacity model's figure: docs/capacity.md). After a warm-up round a tenth the size (code paths compiled, pools filled), the process's
 * RSS and its heap after full GCs are printed at each step; a round that leaks ends above the one before.
 */
import { EventClient, EventWorld, REGISTER_BODY, settledMemory } from "./events.ts";
import type { CountResult, QueueRef, RegisterResult } from "./event-client.ts";
import { startEngine, type Engine } from "./scenarios.ts";

interface Options {
  queues: number;
  streams: number;
  polls: number;
  users: number;
  rounds: number;
  concurrency: number;
}

function parseOptions(argv: string[]): Options {
  const opts: Options = { queues: 10_000, streams: 2_000, polls: 2_000, users: 100, rounds: 2, concurrency: 32 };
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i]!.replace(/^--/, "") as keyof Options;
    const value = Number(argv[i + 1]);
    if (!(name in opts) || !Number.isInteger(value) || value < 1) throw new Error(`usage: --queues N --streams N --polls N --users N --rounds N --concurrency N (got ${argv[i]} ${argv[i + 1]})`);
    opts[name] = value;
  }
  return opts;
}

const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(1);

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  const stops: Array<() => Promise<void>> = [];
  const client = new EventClient();
  let engine: Engine | undefined;
  const rows: Array<{ step: string; rss: number; heap: number }> = [];
  let gcAvailable = true;
  const measure = async (step: string) => {
    const m = await settledMemory();
    gcAvailable &&= m.gc;
    rows.push({ step, rss: m.rss, heap: m.heapUsed });
    console.log(`${step.padEnd(44)} RSS ${mb(m.rss).padStart(7)} MB   heap ${mb(m.heapUsed).padStart(7)} MB`);
  };
  try {
    // Resources are removed by engine.stop(); nothing outlives this process to watch for.
    engine = await startEngine("redis+postgres", (stop) => void stops.push(stop), { watch() {}, release() {} });
    await client.start();
    const world = new EventWorld(engine, client);
    const users = await world.users("memory", opts.users);
    const base = engine.baseUrl;
    const check = (what: string, r: CountResult | RegisterResult) => {
      if (r.errors) throw new Error(`${what}: ${r.errors} failed: ${r.errorSamples.join("; ")}`);
    };
    const register = async (count: number): Promise<QueueRef[]> => {
      const auths = users.map((u) => u.auth);
      const { result } = await client.call<RegisterResult>({ op: "register", base, users: auths, count, concurrency: opts.concurrency, body: REGISTER_BODY, keep: true });
      check("register", result);
      return result.queueIds!.map((queueId, i) => ({ auth: auths[i % auths.length]!, queueId }));
    };
    const deleteAll = async (queues: QueueRef[]) => check("delete", (await client.call<CountResult>({ op: "deleteQueues", base, queues, concurrency: opts.concurrency })).result);

    const round = async (label: string, queueCount: number, streamCount: number, pollCount: number, measured: boolean) => {
      const step = async (what: string) => void (measured && (await measure(`${label}: ${what}`)));
      const registered = await register(queueCount);
      await step(`${queueCount} queues registered`);
      await deleteAll(registered);
      await step(`… and deleted`);
      const queues = await register(streamCount);
      check("open", (await client.call<CountResult>({ op: "openStreams", base, queues, concurrency: opts.concurrency })).result);
      await step(`${streamCount} event streams open`);
      await client.call<number>({ op: "closeStreams" });
      await new Promise((r) => setTimeout(r, 1000)); // the server notices the closed sockets
      await step(`… closed`);
      await deleteAll(queues);
      await step(`… and their queues deleted`);
      const polled = await register(pollCount);
      await step(`${pollCount} queues registered for polls`);
      await client.call<{ parked: number }>({ op: "park", base, queues: polled });
      await step(`${pollCount} long-polls parked`);
      await client.call({ op: "unpark" });
      await new Promise((r) => setTimeout(r, 1000)); // the server notices the aborted polls
      await deleteAll(polled);
      await step(`… unparked, and their queues deleted`);
    };

    console.log(`bench:memory: ${engine.describe}; ${opts.users} users, ${opts.concurrency} requests at a time`);
    await round("warm-up", Math.ceil(opts.queues / 10), Math.ceil(opts.streams / 10), Math.ceil(opts.polls / 10), false);
    await measure("baseline (after a warm-up round a tenth the size)");
    for (let r = 1; r <= opts.rounds; r++) await round(`round ${r}`, opts.queues, opts.streams, opts.polls, true);
    const first = rows[0]!;
    const last = rows.at(-1)!;
    console.log(
      `end of round ${opts.rounds} against the baseline: RSS ${last.rss >= first.rss ? "+" : ""}${mb(last.rss - first.rss)} MB, ` +
        `heap ${last.heap >= first.heap ? "+" : ""}${mb(last.heap - first.heap)} MB` +
        (gcAvailable ? "" : " (no full GC available: heap figures include garbage)"),
    );
  } finally {
    await client.stop().catch(() => {});
    for (const stop of stops) await stop();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
