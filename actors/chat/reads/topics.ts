/** Reads of a channel's topics (the `messages` table grouped by topic). Nothing here writes. */
import { sql, type Kysely } from "kysely";
import type { Database } from "../../../runtime/store/schema.ts";

type DB = Kysely<Database>;

/** Zulip's default `realm_empty_topic_display_name`: what clients without empty-topic support see. */
export const EMPTY_TOPIC_DISPLAY_NAME = "general chat";

/** Whether a channel's topic has messages besides `except` (say, the ones just moved into it). */
export async function topicHasOtherMessages(db: DB, streamId: number, topic: string, except: number[]): Promise<boolean> {
  const { rows } = await sql`
    select 1 from messages
    where stream_id = ${streamId} and lower(topic) = ${topic.toLowerCase()} and id <> all(${sql.val(except)}::bigint[])
    limit 1`.execute(db);
  return rows.length > 0;
}
