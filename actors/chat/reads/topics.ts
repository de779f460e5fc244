/**
 * Reads of topics: a channel's topics (the `messages` table grouped by topic) and a user's visibility policies for
 * topics (`user_topics`, written by the user-topics actor). Nothing here writes.
 */
import { sql, type Kysely } from "kysely";
import type { Database } from "../../schema.ts";

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

/**
 * A channel's topics, latest first, each with its latest message id. Topics match case-insensitively; a topic shows
 * the name of its latest message, as in Zulip. In a channel with protected history only the topics of messages
 * `userId` received count. The empty topic is named "" for clients with the `empty_topic_name` capability
 * (`emptyTopicName`), else by its display name.
 */
export async function channelTopics(db: DB, stream: { id: number; history_public_to_subscribers: boolean }, userId: number, opts: { emptyTopicName: boolean }) {
  let query = db
    .selectFrom("messages as m")
    .select([sql<string>`(array_agg(m.topic order by m.id desc))[1]`.as("name"), sql<number>`max(m.id)`.as("max_id")])
    .where("m.stream_id", "=", stream.id)
    .groupBy(sql`lower(m.topic)`);
  if (!stream.history_public_to_subscribers) {
    query = query.where(({ exists, selectFrom }) =>
      exists(selectFrom("user_messages as um").select("um.user_id").whereRef("um.message_id", "=", "m.id").where("um.user_id", "=", userId)),
    );
  }
  const rows = await query.execute();
  return rows
    .map((r) => ({ name: r.name === "" && !opts.emptyTopicName ? EMPTY_TOPIC_DISPLAY_NAME : r.name, max_id: Number(r.max_id) }))
    .sort((a, b) => b.max_id - a.max_id);
}

/** The user's topic visibility policies (Zulip's `user_topics` in POST /register), oldest change first. */
export function userTopicsOf(db: DB, userId: number) {
  return db
    .selectFrom("user_topics")
    .select(["stream_id", "topic_name", "last_updated", "visibility_policy"])
    .where("user_id", "=", userId)
    .orderBy("last_updated")
    .execute();
}
