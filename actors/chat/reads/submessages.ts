/**
 * Submessages read for message objects (Zulip's SubMessage.get_raw_db_rows): each message's, in the order they were
 * added. A page reads them as a subquery of its own statement instead (reads/messages.ts, RELATED.submessages).
 */
import type { Kysely } from "kysely";
import type { Database } from "../../schema.ts";
import type { Submessage } from "../rendering/message-format.ts";

export async function submessagesOf(db: Kysely<Database>, messageIds: number[]): Promise<Map<number, Submessage[]>> {
  const byMessage = new Map<number, Submessage[]>();
  if (!messageIds.length) return byMessage;
  const rows = await db
    .selectFrom("submessages")
    .select(["id", "message_id", "sender_id", "msg_type", "content"])
    .where("message_id", "in", messageIds)
    .orderBy("id")
    .execute();
  for (const r of rows) {
    const submessage = { msg_type: r.msg_type, content: r.content, message_id: Number(r.message_id), sender_id: r.sender_id, id: Number(r.id) };
    const list = byMessage.get(submessage.message_id);
    if (list) list.push(submessage);
    else byMessage.set(submessage.message_id, [submessage]);
  }
  return byMessage;
}
