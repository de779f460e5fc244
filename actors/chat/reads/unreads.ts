/** Reads of the user's unread messages (the `unread_messages` table, `user_messages` flags): Zulip's `unread_msgs` in POST /register. Nothing here writes. */
import { sql, type Kysely, type RawBuilder } from "kysely";
import type { Database } from "../../schema.ts";
import { NAMED_STATEMENT } from "../../../runtime/store/db.ts";
import { FLAG_BITS } from "../conversations/flags.ts";
import { VISIBILITY } from "../users/user-topics.ts";
import { EMPTY_TOPIC_DISPLAY_NAME } from "./topics.ts";
import { withLocalSetting } from "./messages.ts";

type DB = Kysely<Database>;

/** Zulip's MAX_UNREAD_MESSAGES: the most recent unreads considered; older ones set old_unreads_missing. */
export const MAX_UNREAD_MESSAGES = 50_000;

interface UnreadRow {
  id: number;
  flags: number;
  stream_id: number | null;
  topic: string;
  dm_key: string | null;
}

/**
 * Zulip's `unread_msgs` (zerver/lib/message.py, get_raw_unread_data and aggregate_unread_data): the newest
 * MAX_UNREAD_MESSAGES unread messages, leaving out channels the user unsubscribed from, each muted or not (a muted
 * topic, or a muted channel's topic not unmuted or followed). Muted messages stay listed under `streams` but count
 * neither in `count` nor, for wildcard mentions, in `mentions`.
 *
 * The rows come from `unread_messages` (migration 2026-11-28T0800), one index range of the user's rows with channel
 * and topic in them, plus the recipients still in a recipient list (few, until the expansion that follows a send),
 * in one statement (one snapshot: a list expanded meanwhile is seen once) whose text is the same for every user (a
 * named statement). The range is its own limited subquery and the union is left unsorted: sorted in SQL, the planner
 * sorted both parts whole instead of walking the index. A direct message's conversation is looked up for the
 * returned rows only. The user's mutes are read beside it and applied here: joined in the statement, they cost a lookup per row.
 */
export async function unreadMessages(db: DB, userId: number, opts: { emptyTopicName: boolean }) {
  const dmKey = sql`case when u.stream_id is null then (select r.dm_key from recipients r where r.id = u.recipient_id) end`;
  const subscribed = (streamId: RawBuilder<number | null>) =>
    sql`(${streamId} is null or ${streamId} <> all(array(select s.stream_id from subscriptions s where s.user_id = ${userId} and not s.active)))`;
  const [{ rows: found }, mutedChannels, topicPolicies] = await Promise.all([
    withoutJit(db, (trx) =>
      sql<UnreadRow>`
        select u.message_id as id, u.flags, u.stream_id, u.topic, ${dmKey} as dm_key
        from (
          (select message_id, flags, stream_id, topic, recipient_id
            from unread_messages u where u.user_id = ${userId} and ${subscribed(sql`u.stream_id`)}
            order by u.message_id desc
            limit ${MAX_UNREAD_MESSAGES + 1})
          union all
          (select l.message_id, r.flags, m.stream_id, m.topic, m.recipient_id
            from user_message_lists l cross join lateral unnest(l.user_ids, l.flags) as r(user_id, flags)
            join messages m on m.id = l.message_id
            where r.user_id = ${userId} and (r.flags & ${FLAG_BITS.read}) = 0 and ${subscribed(sql`m.stream_id`)})
        ) u ${sql.raw(NAMED_STATEMENT)}`.execute(trx),
    ),
    db.selectFrom("subscriptions").select("stream_id").where("user_id", "=", userId).where("active", "=", true).where("is_muted", "=", true).execute(),
    db.selectFrom("user_topics").select(["stream_id", "topic_key", "visibility_policy"]).where("user_id", "=", userId).execute(),
  ]);
  // The table's rows come newest first; listed recipients are few (their lists are expanded right after the send)
  // and are sorted in only when there are any.
  const newestFirst = found.every((r, i) => i === 0 || Number(r.id) < Number(found[i - 1]!.id));
  const rows = newestFirst ? found : found.sort((a, b) => Number(b.id) - Number(a.id)).slice(0, MAX_UNREAD_MESSAGES + 1);
  const muted = new Set(mutedChannels.map((s) => s.stream_id));
  const policies = new Map(topicPolicies.map((t) => [`${t.stream_id}\u0000${t.topic_key}`, t.visibility_policy]));
  const isMuted = (streamId: number, topicKey: string) => {
    const policy = policies.get(`${streamId}\u0000${topicKey}`);
    if (policy === VISIBILITY.unmuted || policy === VISIBILITY.followed) return false;
    return muted.has(streamId) || policy === VISIBILITY.muted;
  };
  const kept = rows.slice(0, MAX_UNREAD_MESSAGES).reverse();
  const pms = new Map<number, number[]>();
  const huddles = new Map<string, number[]>();
  const streams = new Map<string, { stream_id: number; topic: string; unread_message_ids: number[] }>();
  const mentions: number[] = [];
  let count = 0;
  const push = <K>(map: Map<K, number[]>, key: K, id: number) => {
    const list = map.get(key);
    if (list) list.push(id);
    else map.set(key, [id]);
  };
  for (const row of kept) {
    const id = Number(row.id);
    let rowMuted = false;
    if (row.stream_id === null) {
      const people = row.dm_key!.split(",").map(Number);
      // A conversation of one or two people is Zulip's one-on-one (with oneself: other_user_id is oneself).
      if (people.length <= 2) push(pms, people.find((u) => u !== userId) ?? userId, id);
      else push(huddles, row.dm_key!, id);
      count++;
    } else {
      const topic = row.topic === "" && !opts.emptyTopicName ? EMPTY_TOPIC_DISPLAY_NAME : row.topic;
      const topicKey = row.topic.toLowerCase();
      const key = `${row.stream_id}\u0000${topicKey}`;
      const entry = streams.get(key) ?? { stream_id: row.stream_id, topic, unread_message_ids: [] };
      entry.unread_message_ids.push(id);
      streams.set(key, entry);
      rowMuted = isMuted(row.stream_id, topicKey);
      if (!rowMuted) count++;
    }
    const wildcard = row.flags & (FLAG_BITS.stream_wildcard_mentioned | FLAG_BITS.topic_wildcard_mentioned);
    if (row.flags & FLAG_BITS.mentioned || (wildcard && !rowMuted)) mentions.push(id);
  }
  return {
    pms: [...pms].sort(([a], [b]) => a - b).map(([other, ids]) => ({ other_user_id: other, sender_id: other, unread_message_ids: ids })),
    streams: [...streams.values()].sort((a, b) => a.stream_id - b.stream_id || a.topic.toLowerCase().localeCompare(b.topic.toLowerCase())),
    huddles: [...huddles].sort(([a], [b]) => a.localeCompare(b)).map(([key, ids]) => ({ user_ids_string: key, unread_message_ids: ids })),
    mentions,
    count,
    old_unreads_missing: rows.length > MAX_UNREAD_MESSAGES,
  };
}

/**
 * Runs `read` in a transaction without JIT compilation. The heavy reader's range (50,001 rows) is estimated above
 * Postgres's jit_above_cost, and compiling it cost more than it saved: 80-90 ms of a 160-380 ms statement at a load
 * average of 22 (docs/reads.md). PGlite has no JIT; the setting is accepted and changes nothing.
 */
function withoutJit<T>(db: DB, read: (trx: DB) => Promise<T>): Promise<T> {
  return withLocalSetting(db, sql`set local jit = off`, read);
}

/** The user's unread messages from one sender (Zulip's do_mark_muted_user_messages_as_read marks them read). */
export async function unreadMessageIdsFrom(db: DB, userId: number, senderId: number): Promise<number[]> {
  const { rows } = await sql<{ id: number }>`
    select um.message_id as id from unread_user_messages um join messages m on m.id = um.message_id
    where um.user_id = ${userId} and m.sender_id = ${senderId}
    order by um.message_id`.execute(db);
  return rows.map((r) => Number(r.id));
}
