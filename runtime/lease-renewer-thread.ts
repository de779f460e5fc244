/**
 * The lease renewer thread of a worker (ThreadLeaseKeeper in lease-keeper.ts): every third of a lease, on its own
 * Postgres connection, it writes the worker's heartbeat, renews the leases the event loop told it it holds, writes
 * each renewed lease's validity to the shared cells and reports the live members. It renews nothing while the
 * event loop has not checked in for `stallSeconds`: a wedged worker must lose its shards, not keep them forever.
 */
import { parentPort, workerData } from "node:worker_threads";
import { Kysely, PostgresDialect } from "kysely";
import pg from "pg";
import type { KernelTables } from "./store/schema.ts";
import { SqlStore } from "./store/sql-store.ts";
import type { Lease } from "./store/store.ts";
import { sharedCells, type FromRenewer, type RenewerData, type ToRenewer } from "./lease-keeper.ts";
import { log } from "./log.ts";

const data = workerData as RenewerData;
const port = parentPort!;
const cells = sharedCells(data.cells);
const held = new Map<number, Lease>();
const leaseMs = data.leaseSeconds * 1000;
const periodMs = Math.max(200, leaseMs / 3);
let stopping = false;
/** Told once per stall, not at every round of it. */
let stalled = false;
let wake: (() => void) | undefined;
/** The highest round request received (ToRenewer "round"), and the highest a round has answered. */
let requested = 0;
let answered = 0;

const tell = (message: FromRenewer) => port.postMessage(message);

port.on("message", (message: ToRenewer) => {
  if (message.type === "hold") held.set(message.shard, { shard: message.shard, epoch: message.epoch });
  else if (message.type === "forget") held.delete(message.shard);
  else if (message.type === "round") {
    requested = Math.max(requested, message.request);
    wake?.();
  } else {
    stopping = true;
    wake?.();
  }
});

// One connection, and not through openDatabase: that module brings the embedded engine along, which this thread
// never uses (its memory is the thread's main cost). The store's lease statements read no bigint column.
const pool = new pg.Pool({ connectionString: data.databaseUrl, max: 1 });
pool.on("error", (err) => log.error(`postgres: the lease renewer's idle connection was lost (${err.message})`));
const store = new SqlStore({
  db: new Kysely<KernelTables>({ dialect: new PostgresDialect({ pool }) }),
  engine: "postgres",
  prepared: () => Promise.reject(new Error("the lease renewer runs no prepared statements")),
});

async function round(): Promise<void> {
  // Answered by this round's report, or by none (stalled, failed): the loop's wait for it times out.
  const answers = (answered = requested);
  const stalledMs = Date.now() - cells.checkIn();
  if (stalledMs > data.stallSeconds * 1000) {
    if (!stalled) tell({ type: "stalled", sinceMs: stalledMs });
    stalled = true;
    return;
  }
  stalled = false;
  const members = await store.heartbeat(data.node, data.leaseSeconds);
  const leases = [...held.values()];
  const renewing = Date.now();
  const renewed = await store.renewLeases(leases, data.node, data.leaseSeconds);
  for (const lease of leases) {
    // Forgotten or taken again (a new epoch) while the statement ran: that lease's validity is not ours to write.
    if (held.get(lease.shard)?.epoch !== lease.epoch) continue;
    if (renewed.has(lease.shard)) cells.setValidUntil(lease.shard, renewing + leaseMs);
    else {
      held.delete(lease.shard);
      cells.setValidUntil(lease.shard, 0);
    }
  }
  tell({ type: "renewed", members: [...members], answers });
}

while (!stopping) {
  const started = Date.now();
  try {
    await round();
  } catch (err) {
    log.error({ err }, "lease renewal failed");
  }
  // A round asked for while this one ran goes next; otherwise the next is a period after this one began.
  const waitMs = requested > answered ? 0 : Math.max(0, periodMs - (Date.now() - started));
  await new Promise<void>((resolve) => {
    // Woken early, the timer goes too: a pending timer would keep a stopping thread alive until it fired.
    const timer = setTimeout(resolve, waitMs);
    wake = () => {
      clearTimeout(timer);
      resolve();
    };
  });
}
await store.close();
tell({ type: "stopped" });
port.close();
