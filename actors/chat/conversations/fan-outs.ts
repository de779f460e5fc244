/**
 * Fan-outs an earlier holder of a shard may have left unfinished, made again by the shard's current holder.
 *
 * A chat send reaches its conversation without a transport entry when this process holds the conversation's shard
 * (System.askDirect), so no entry is left to deliver again if the process dies between the message's commit and the
 * last recipient's queue. Instead the commit records the fan-out as owed (a pending_fan_outs row, with the shard
 * and the epoch of the committing holder), and the row is deleted once the fan-out is done (MessageLog.fanOutDone).
 * A row of an earlier epoch than the one this process holds its shard at was left by a previous holder: a crash, or
 * a hand-over while the fan-out was still running. Its message goes to the conversation's actor to be delivered
 * again (Conversation.redeliver); a queue that has it already drops the repeat.
 *
 * Why the rows are complete when read: a message's commit reads its shard's lease FOR KEY SHARE, so a take-over of
 * the lease (FOR UPDATE) waits for a commit in flight, and a commit after the take-over is refused (FENCED). Every row of an earlier
 * epoch is committed before the current holder's lease is, hence before any sweep of its.
 */
import { sql } from "kysely";
import type { ActorSystem } from "../../../runtime/system.ts";
import { column } from "../../../runtime/store/group-commit.ts";
import type { Store } from "../../../runtime/store/store.ts";
import { log } from "../../../runtime/log.ts";
import type { MessageLog } from "../message-log.ts";
import type { Database } from "../../schema.ts";
import type { ActorRef } from "../../../runtime/protocol.ts";
import type { ConversationProtocol } from "./conversation.protocol.ts";
import { Channel } from "./channel.protocol.ts";
import { Dm } from "./dm.protocol.ts";

/** A record left by an earlier holder of its shard, with what says which conversation delivers it (none: deleted since). */
type LeftRecord = { message_id: string | number; shard: number; stream_id: number | null; dm_key: string | null };

/**
 * The most messages one `redeliver` ask makes again: its turn must end within the ask's timeout (a failed ask is made
 * again whole at the next sweep), and each message is a fan-out.
 */
const REDELIVER_BATCH = 100;

/** How often a process looks for fan-outs left on the shards it holds: the longest a left fan-out waits after a take-over. */
const SWEEP_EVERY_MS = 1_000;

/**
 * Look now and every `intervalMs` for fan-outs left on the shards this process holds, and have them made again;
 * returns the stop function. Every process that holds shards runs it, where the transport delivers a crashed
 * process's entries again (elsewhere every send goes on in one process, whose queues die with it).
 */
export function redeliverLeftFanOuts(system: ActorSystem, store: Store<Database>, messageLog: MessageLog, intervalMs = SWEEP_EVERY_MS): () => void {
  /**
   * Messages delivered again, or being so, whose record is still there: not asked for again while it is. A record
   * stays until the queues' rows are written (a write-behind may take a while); one no longer there is forgotten
   * here, and a failed ask is asked again at the next sweep.
   */
  const redelivering = new Set<number>();
  /**
   * Each shard's epoch at which a sweep found no record of an earlier one: none can appear afterwards (see the
   * module comment), so the shard is not looked at again until it is held at another epoch. The table is read once
   * per take-over of a shard, not every second: under load it holds thousands of records (the live ones, written by
   * this process at its own epoch) and many more deleted ones awaiting vacuum.
   */
  const cleanAt = new Map<number, number>();
  let sweeping = false;
  const sweep = async () => {
    const held = system.heldShardEpochs();
    for (const shard of cleanAt.keys()) if (!held.has(shard)) cleanAt.delete(shard);
    const looked = [...held].filter(([shard, epoch]) => cleanAt.get(shard) !== epoch);
    if (sweeping || !looked.length) return;
    sweeping = true;
    try {
      const shards = column(looked, ([shard]) => shard);
      const epochs = column(looked, ([, epoch]) => epoch);
      const { rows } = await sql<LeftRecord>`
        select p.message_id, p.shard, m.stream_id, r.dm_key
        from pending_fan_outs p
        join unnest(${shards}::integer[], ${epochs}::bigint[]) as h(shard, epoch) on h.shard = p.shard and p.epoch < h.epoch
        left join messages m on m.id = p.message_id
        left join recipients r on r.id = m.recipient_id`.execute(store.db);
      const still = new Set(rows.map((row) => Number(row.message_id)));
      for (const id of redelivering) if (!still.has(id)) redelivering.delete(id);
      const dirty = new Set(rows.map((row) => row.shard));
      for (const [shard, epoch] of looked) if (!dirty.has(shard)) cleanAt.set(shard, epoch);
      const left = rows.filter((row) => !redelivering.has(Number(row.message_id)));
      if (left.length) log.info(`delivering again ${left.length} message(s) whose fan-out an earlier holder of their shard may not have finished`);
      // One ask per conversation and batch, in id order (the order their queues get them).
      const byOwner = new Map<string, { owner: ActorRef<ConversationProtocol>; ids: number[] }>();
      for (const row of left.sort((a, b) => Number(a.message_id) - Number(b.message_id))) {
        const id = Number(row.message_id);
        if (row.stream_id === null && row.dm_key === null) {
          messageLog.fanOutDone(id); // deleted since: nothing to deliver
          continue;
        }
        const owner = row.stream_id !== null ? system.ref(Channel, row.stream_id) : system.ref(Dm, row.dm_key!);
        const entry = byOwner.get(owner.id) ?? byOwner.set(owner.id, { owner, ids: [] }).get(owner.id)!;
        entry.ids.push(id);
      }
      for (const { owner, ids } of byOwner.values()) {
        for (let from = 0; from < ids.length; from += REDELIVER_BATCH) {
          const batch = ids.slice(from, from + REDELIVER_BATCH);
          for (const id of batch) redelivering.add(id);
          owner.ask({ op: "redeliver", messageIds: batch }).catch((err) => {
            for (const id of batch) redelivering.delete(id);
            log.warn({ err }, `delivering ${batch.length} message(s) of ${owner.id} again failed; the next sweep tries again`);
          });
        }
      }
    } finally {
      sweeping = false;
    }
  };
  const run = () => void sweep().catch(() => {}); // shutting down, or the store is briefly away: the next sweep retries
  run();
  const timer = setInterval(run, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
