/**
 * `npx tsx bench/store-floor.ts`: the embedded store's own ceiling for sends, with no HTTP and no actors: how many
 * `appendMessage` calls (one recipient row each) PGlite commits per second under a data directory, as `npm start`
 * runs it, with 50 and 100 appends in flight (group commit batches whatever is in flight). Any embedded send rate
 * is bounded by this, since PGlite runs on the server's own event loop.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { openDatabase } from "../runtime/store/db.ts";
import { SqlStore } from "../runtime/store/sql-store.ts";
import type { Database } from "../actors/schema.ts";
import { migrations } from "../actors/migrations/index.ts";
import { MessageLog, type NewMessage } from "../actors/chat/message-log.ts";

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
  return messageLog.appendMessage(message, fence, [{ user_id: 2, flags: 1 }]);
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
  console.log(`${total} appends, ${inFlight} in flight: ${Math.round(total / seconds)}/s, ${Math.round((used.user + used.system) / total)} µs CPU each`);
}

try {
  await measure(5_000, 50); // warm-up
  await measure(20_000, 50);
  await measure(20_000, 100);
} finally {
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
