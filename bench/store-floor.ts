/**
 * `npx tsx bench/store-floor.ts [--recipients N]`: the embedded store's own ceiling for sends, with no HTTP and no
 * actors: how many `appendMessage` calls PGlite commits per second under a data directory, as `npm start` runs it,
 * with 50 and 100 appends in flight (group commit batches whatever is in flight). Any embedded send rate is bounded
 * by this, since PGlite runs on the server's own event loop.
 *
 * `--recipients N` (default 1): flag rows per message, the sender's read and the others unread, as a channel
 * message to N members writes them (up to the recipient list threshold, DEFAULT_RECIPIENT_LIST_ABOVE: a bigger
 * message commits one list, expanded after). Past one recipient it also prints CPU per flag row: what each delivery
 * of a fan-out costs the embedded store. With more than one recipient, fewer appends are in flight (4 and 16: a
 * fan-out cell's sender has a few messages committing at a time).
 *
 * `--postgres`: on a fresh database of the machine's Postgres instead (dropped after), counting its backends' CPU
 * too. `--events`: each recipient's event row as well (its queue's durable copy, which every delivery writes unless
 * the queue acknowledged the event first), after its message commits as a delivery's is. With both, the figure per
 * flag row is what each delivery of a channel fan-out costs Node and Postgres at the least, with no HTTP, actors or
 * queues: the floor under the fan-out bench's "µs per delivery".
 *
 * `--owed`: each message also records its fan-out as owed (its `pending_fan_outs` row, written in the message's
 * commit) and clears it once committed (the batched delete), as a send on Redis Streams does: what that record costs
 * a send.
 *
 * `--without index:NAME,trigger:NAME,…`: those indexes and triggers of `messages` dropped after migrating, to see
 * what each costs an append (Postgres only).
 */
import fs from "node:fs";
import { parseArgs } from "node:util";
import { sql } from "kysely";
import os from "node:os";
import path from "node:path";
import { openDatabase } from "../runtime/store/db.ts";
import { SqlStore } from "../runtime/store/sql-store.ts";
import type { Database } from "../actors/schema.ts";
import { migrations } from "../actors/migrations/index.ts";
import { MessageLog, type NewMessage } from "../actors/chat/message-log.ts";
import { freshDatabase } from "../test/support/services.ts";
import { procCpuMicros } from "../test/support/proc-stat.ts";

const { values } = parseArgs({ options: { recipients: { type: "string", default: "1" }, postgres: { type: "boolean" }, events: { type: "boolean" }, owed: { type: "boolean" }, without: { type: "string", default: "" } } });
const recipientCount = Number(values.recipients);
if (!Number.isInteger(recipientCount) || recipientCount < 1) throw new Error("--recipients takes a whole number of at least 1");
// The sender (user 2) has read its own message; users 3, 4, … have not.
const recipients = Array.from({ length: recipientCount }, (_, i) => ({ user_id: 2 + i, flags: i === 0 ? 1 : 0 }));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-store-floor-"));
const database = values.postgres ? await freshDatabase() : undefined;
const store = new SqlStore<Database>(await openDatabase({ dataDir: dir, databaseUrl: database?.url }));
const messageLog = new MessageLog(store);
await store.migrate(migrations);
for (const item of values.without.split(",").filter(Boolean)) {
  const [kind, name] = item.split(":");
  if (kind === "index") await sql`drop index ${sql.id(name!)}`.execute(store.db);
  else if (kind === "trigger") await sql`drop trigger ${sql.id(name!)} on messages`.execute(store.db);
  else throw new Error(`--without takes index:NAME or trigger:NAME, not ${item}`);
}
await store.ensureShards(1);
const lease = await store.acquireLease(0, "floor", 600);
if (!lease) throw new Error("shard 0 is held");
const fence = { shard: 0, epoch: lease.epoch, node: "floor" };

let nextId = 1;
function append(): Promise<number> {
  const id = nextId++;
  const message: NewMessage = {
    id,
    realm_id: 1,
    sender_id: 2,
    recipient_type: "stream",
    recipient_id: 3,
    stream_id: 4,
    topic: "floor",
    content: `message ${id}`,
    rendered_content: `<p>message ${id}</p>`,
    date_sent: Math.floor(Date.now() / 1000),
    sending_client: "bench",
    send_key: null,
  };
  const committed = messageLog.appendMessage(message, fence, recipients, undefined, values.owed);
  if (values.owed) void committed.then((stored) => messageLog.fanOutDone(stored));
  if (!values.events) return committed;
  return committed.then(async (stored) => {
    const seq = nextSeq++;
    const payload = { kind: "message", messageId: stored, flags: [] };
    await Promise.all(recipients.map((r) => messageLog.appendUserEvent({ user_id: r.user_id, seq, payload }, fence)));
    return stored;
  });
}
let nextSeq = 1;

/** CPU µs of this database's Postgres backends so far (none on PGlite, which runs in this process). */
async function postgresCpu(): Promise<number> {
  if (!database) return 0;
  const { rows } = await sql<{ pid: number }>`select pid from pg_stat_activity where datname = ${database.name}`.execute(store.db);
  return rows.reduce((total, { pid }) => total + (procCpuMicros(pid) ?? 0), 0);
}

async function measure(total: number, inFlight: number): Promise<void> {
  let started = 0;
  const lane = async () => {
    while (started < total) {
      started++;
      await append();
    }
  };
  const postgres0 = await postgresCpu();
  const wall = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  await Promise.all(Array.from({ length: inFlight }, lane));
  const seconds = Number(process.hrtime.bigint() - wall) / 1e9;
  const used = process.cpuUsage(cpu);
  const nodeEach = (used.user + used.system) / total;
  const postgresEach = ((await postgresCpu()) - postgres0) / total;
  const cpuEach = nodeEach + postgresEach;
  const split = database ? ` (node ${Math.round(nodeEach)}, Postgres ${Math.round(postgresEach)})` : "";
  const perRow = recipientCount > 1 ? `, ${(cpuEach / recipientCount).toFixed(1)} µs per flag row${database ? ` (node ${(nodeEach / recipientCount).toFixed(1)}, Postgres ${(postgresEach / recipientCount).toFixed(1)})` : ""}` : "";
  const what = `${recipientCount} recipient${recipientCount > 1 ? "s" : ""}${values.events ? " and their event rows" : ""}${values.owed ? ", owed" : ""}${values.without ? `, without ${values.without}` : ""}`;
  console.log(`${total} appends of ${what}, ${inFlight} in flight: ${Math.round(total / seconds)}/s, ${Math.round(cpuEach)} µs CPU each${split}${perRow}`);
}

try {
  // The same work in rows either way: 20,000 appends of one recipient, or 20,000 flag rows of many.
  const appends = Math.max(500, Math.round(20_000 / recipientCount));
  const [few, more] = recipientCount > 1 ? [4, 16] : [50, 100];
  await measure(Math.round(appends / 4), few); // warm-up
  await measure(appends, few);
  await measure(appends, more);
} finally {
  await store.close();
  await database?.drop();
  fs.rmSync(dir, { recursive: true, force: true });
}
