import { sql, type Kysely } from "kysely";

/**
 * The reads of a reader's unread messages walk the unread table (2026-11-28T0800) instead of the flag rows' partial
 * index of unread rows, `user_messages_unread`, which goes: both held the same rows (the table's triggers keep
 * exactly the unread flag rows in it), and every unread flag row a send wrote went into both.
 *
 * `unread_user_messages` is to `unread_messages` what `user_messages` is to `user_message_rows`: the table's rows and
 * the unread recipients still listed in `user_message_lists`, with their flags, one row per unread message of a
 * user. `is:unread` pages, the `first_unread` anchor and the mark-as-read statements read it.
 *
 * Why: on PGlite a channel message's flag rows cost 10.0-10.6 µs each with the index and 7.5-7.9 µs without it (100
 * recipients a message, 16 appends in flight, `npx tsx bench/store-floor.ts --recipients 100`, docs/performance.md
 * 2026-12-02): on the embedded engine those rows are most of what a fan-out's deliveries cost the store.
 * Idempotent.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create or replace view unread_user_messages as
      select user_id, message_id, flags from unread_messages
      union all
      select r.user_id, l.message_id, r.flags from user_message_lists l cross join lateral unnest(l.user_ids, l.flags) as r(user_id, flags)
      where (r.flags & 1) = 0`.execute(db);
  await sql`drop index if exists user_messages_unread`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
