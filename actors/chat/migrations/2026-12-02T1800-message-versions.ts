import { sql, type Kysely } from "kysely";

/**
 * A version per message that changes whenever what a fetch shows of it changes, whoever writes: an update of a
 * column the message object is made of (an edit, a move, its rendering), and a reaction added or removed. Kept by
 * triggers in the writer's own transaction, so that a worker that keeps message records in memory
 * (actors/chat/reads/message-records.ts) tells from a page's ids and versions alone which of its copies are current,
 * on any worker and either engine (issue 28: a channel's page spent most of its Postgres time on the message's
 * columns, its sender and its reactions, which do not depend on the reader).
 *
 * The update trigger names its columns, so that the background fill of the search documents
 * (actors/chat/search-fill.ts), which rewrites every message's `search_document`, does not change every version.
 * Adding a column with a constant default writes no row (Postgres 11 and later): instant on a large store.
 * Idempotent (`if not exists`, `or replace`): the read migrations' test forgets and re-runs it.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table messages add column if not exists version integer not null default 0`.execute(db);
  await sql`
    create or replace function messages_bump_version() returns trigger language plpgsql as $$
    begin
      new.version := old.version + 1;
      return new;
    end $$`.execute(db);
  await sql`drop trigger if exists messages_version on messages`.execute(db);
  await sql`
    create trigger messages_version before update of ${sql.raw(MESSAGE_OBJECT_COLUMNS)} on messages
    for each row execute function messages_bump_version()`.execute(db);
  // Not a column of the update trigger's list: this update is the bump itself, not a second one.
  await sql`
    create or replace function reactions_bump_message_version() returns trigger language plpgsql as $$
    begin
      update messages set version = version + 1 where id = (case when tg_op = 'DELETE' then old.message_id else new.message_id end);
      return null;
    end $$`.execute(db);
  await sql`drop trigger if exists reactions_message_version on reactions`.execute(db);
  await sql`
    create trigger reactions_message_version after insert or update or delete on reactions
    for each row execute function reactions_bump_message_version()`.execute(db);
}

/** The columns of `messages` that Zulip's message object shows (or is made from). */
const MESSAGE_OBJECT_COLUMNS =
  "sender_id, recipient_id, stream_id, topic, content, rendered_content, date_sent, sending_client, edit_history, last_edit_time, last_moved_time";

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
