import { sql, type Kysely } from "kysely";

/**
 * The fan-outs still owed: a row per message committed by a send that reached its conversation without a transport
 * entry (System.askDirect), written in the message's own commit and deleted once every recipient's queue has the
 * message and what a crash would need to rebuild it. A row left by an earlier holder of its shard (a lower `epoch`)
 * is a fan-out that holder may not have finished: the shard's next holder delivers the message again
 * (actors/chat/conversations/fan-outs.ts). No foreign key: its check would cost every send an index probe, and a
 * row whose message was deleted meanwhile is simply dropped.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create table if not exists pending_fan_outs (
      message_id bigint primary key,
      shard integer not null,
      epoch bigint not null
    )`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
