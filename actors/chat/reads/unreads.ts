/** Reads of the user's unread messages (`user_messages` flags): Zulip's `unread_msgs` in POST /register. Nothing here writes. */
import { sql, type Kysely } from "kysely";
import type { Database } from "../../schema.ts";
import { FLAG_BITS } from "../conversations/flags.ts";
import { VISIBILITY } from "../users/user-topics.ts";
import { EMPTY_TOPIC_DISPLAY_NAME } from "./topics.ts";

type DB = Kysely<Database>;

/** Zulip's MAX_UNREAD_MESSAGES: the most recent unreads considered; older ones set old_unreads_missing. */
export const MAX_UNREAD_MESSAGES = 50_000;

interface UnreadRow {
  id: number;
  flags: number;
  stream_id: number | null;
  topic: string;
  dm_key: string | null;
  muted: boolean;
}

/**
 * Zulip's `unread_msgs` (zerver/lib/message.py, get_raw_unread_data and aggregate_unread_data) from the user's
 * flag rows, in one query: the newest MAX_UNREAD_MESSAGES unread rows, leaving out channels the user unsubscribed
 * from, each with whether it is muted (a muted topic, or a muted channel's topic not unmuted or followed).
 * Muted messages stay listed under `streams` but count neither in `count` nor, for wildcard mentions, in `mentions`.
 */
export async function unreadMessages(db: DB, userId: number, opts: { emptyTopicName: boolean }) {
  const { rows } = await sql<UnreadRow>`
    select um.message_id as id, um.flags, m.stream_id, m.topic, r.dm_key,
      case
        when m.stream_id is null then false
        when ut.visibility_policy in (${VISIBILITY.unmuted}, ${VISIBILITY.followed}) then false
        when coalesce(s.is_muted, false) then true
        else coalesce(ut.visibility_policy = ${VISIBILITY.muted}, false)
      end as muted
    from user_messages um
    join messages m on m.id = um.message_id
    left join recipients r on r.id = m.recipient_id and m.stream_id is null
    left join subscriptions s on s.user_id = um.user_id and s.stream_id = m.stream_id
    left join user_topics ut on ut.user_id = um.user_id and ut.stream_id = m.stream_id and ut.topic_key = lower(m.topic)
    where um.user_id = ${userId} and (um.flags & ${FLAG_BITS.read}) = 0 and coalesce(s.active, true)
    order by um.message_id desc
    limit ${MAX_UNREAD_MESSAGES + 1}`.execute(db);
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
    if (row.stream_id === null) {
      const people = row.dm_key!.split(",").map(Number);
      // A conversation of one or two people is Zulip's one-on-one (with oneself: other_user_id is oneself).
      if (people.length <= 2) push(pms, people.find((u) => u !== userId) ?? userId, id);
      else push(huddles, row.dm_key!, id);
      count++;
    } else {
      const topic = row.topic === "" && !opts.emptyTopicName ? EMPTY_TOPIC_DISPLAY_NAME : row.topic;
      const key = `${row.stream_id}\u0000${row.topic.toLowerCase()}`;
      const entry = streams.get(key) ?? { stream_id: row.stream_id, topic, unread_message_ids: [] };
      entry.unread_message_ids.push(id);
      streams.set(key, entry);
      if (!row.muted) count++;
    }
    const wildcard = row.flags & (FLAG_BITS.stream_wildcard_mentioned | FLAG_BITS.topic_wildcard_mentioned);
    if (row.flags & FLAG_BITS.mentioned || (wildcard && !row.muted)) mentions.push(id);
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

/** The user's unread messages from one sender (Zulip's do_mark_muted_user_messages_as_read marks them read). */
export async function unreadMessageIdsFrom(db: DB, userId: number, senderId: number): Promise<number[]> {
  const { rows } = await sql<{ id: number }>`
    select um.message_id as id from user_messages um join messages m on m.id = um.message_id
    where um.user_id = ${userId} and m.sender_id = ${senderId} and (um.flags & ${FLAG_BITS.read}) = 0
    order by um.message_id`.execute(db);
  return rows.map((r) => Number(r.id));
}
