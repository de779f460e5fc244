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
 */
import fs from "node:fs";
import { parseArgs } from "node:util";
import os from "node:os";
import path from "node:path";
import { openDatabase } from "../runtime/store/db.ts";
import { SqlStore } from "../runtime/store/sql-store.ts";
import type { Database } from "../actors/schema.ts";
import { migrations } from "../actors/migrations/index.ts";
import { MessageLog, type NewMessage } from "../actors/chat/message-log.ts";

const { values } = parseArgs({ options: { recipients: { type: "string", default: "1" } } });
const recipientCount = Number(values.recipients);
if (!Number.isInteger(recipientCount) || recipientCount < 1) throw new Error("--recipients takes a whole number of at least 1");
// The sender (user 2) has read its own message; users 3, 4, … have not.
const recipients = Array.from({ length: recipientCount }, (_, i) => ({ user_id: 2 + i, flags: i === 0 ? 1 : 0 }));

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-store-floor-"));
const store = new SqlStore<Database>(await openDatabase({ dataDir: dir }));
const messageLog = new MessageLog(store);
await store.migrate(migrations);
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
  return messageLog.appendMessage(message, fence, recipients);
}

async function measure(total: number, inFlight: number): Promise<void> {
  let started = 0;
  const lane = async () => {
    while (started < total) {
      started++;
      await append();
    }
  };
  const wall = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  await Promise.all(Array.from({ length: inFlight }, lane));
  const seconds = Number(process.hrtime.bigint() - wall) / 1e9;
  const used = process.cpuUsage(cpu);
  const cpuEach = (used.user + used.system) / total;
  const perRow = recipientCount > 1 ? `, ${(cpuEach / recipientCount).toFixed(1)} µs per flag row` : "";
  console.log(`${total} appends of ${recipientCount} recipient${recipientCount > 1 ? "s" : ""}, ${inFlight} in flight: ${Math.round(total / seconds)}/s, ${Math.round(cpuEach)} µs CPU each${perRow}`);
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
  fs.rmSync(dir, { recursive: true, force: true });
}
