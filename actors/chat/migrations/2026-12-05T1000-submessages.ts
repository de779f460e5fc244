import { sql, type Kysely } from "kysely";

/**
 * Zulip's submessages (SubMessage): what a widget message (`/poll`, `/todo`) carries beside its content, the widget
 * itself first (its sender's, written with the message) and then each vote, option, task or strike, in the order of
 * their ids. A message's object lists them (`submessages`), so adding one bumps the message's version as a reaction
 * does (migration 2026-12-02T1800): a worker's kept records (actors/chat/reads/message-records.ts) see the change.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create table if not exists submessages (
      id bigserial primary key,
      message_id bigint not null references messages(id) on delete cascade,
      sender_id integer not null,
      msg_type text not null,
      content text not null
    )`.execute(db);
  await sql`create index if not exists submessages_message on submessages (message_id, id)`.execute(db);
  await sql`
    create or replace function submessages_bump_message_version() returns trigger language plpgsql as $$
    begin
      update messages set version = version + 1 where id = new.message_id;
      return null;
    end $$`.execute(db);
  await sql`drop trigger if exists submessages_message_version on submessages`.execute(db);
  await sql`
    create trigger submessages_message_version after insert on submessages
    for each row execute function submessages_bump_message_version()`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
