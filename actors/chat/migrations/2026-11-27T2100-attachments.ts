import { sql, type Kysely } from "kysely";

/**
 * Zulip's Attachment: one row per uploaded file (its bytes are in the blob store under `blob_key`), and the messages
 * that link it. `path_id` is Zulip's (`{realm}/{xx}/{random}/{sanitised name}`), `url_path` the same as it appears in
 * a URL (the name percent-encoded). Times are UNIX seconds.
 *
 * The links are kept by a trigger on `messages`, so they commit with the message in whatever statement writes it (the
 * group commit of sends, edits, moves, scheduled sends) and go with it when it is deleted (the foreign key cascades).
 * A message claims a file its sender uploaded, or one already linked from a message its sender received (Zulip's
 * do_claim_attachments: a link to a file you could not read grants nobody access). The trigger fires only for rows
 * whose content mentions /user_uploads/, so other sends pay nothing.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("attachments")
    .addColumn("id", "serial", (c) => c.primaryKey())
    .addColumn("realm_id", "integer", (c) => c.notNull().references("realms.id"))
    .addColumn("owner_id", "integer", (c) => c.notNull().references("users.id"))
    .addColumn("path_id", "text", (c) => c.notNull().unique())
    .addColumn("url_path", "text", (c) => c.notNull().unique())
    .addColumn("blob_key", "text", (c) => c.notNull())
    .addColumn("file_name", "text", (c) => c.notNull())
    .addColumn("content_type", "text", (c) => c.notNull())
    .addColumn("size", "bigint", (c) => c.notNull())
    .addColumn("create_time", "bigint", (c) => c.notNull())
    .execute();
  await sql`create index attachments_owner on attachments (owner_id)`.execute(db);
  await sql`create index attachments_realm on attachments (realm_id)`.execute(db);
  await db.schema
    .createTable("attachment_messages")
    .addColumn("attachment_id", "integer", (c) => c.notNull().references("attachments.id").onDelete("cascade"))
    .addColumn("message_id", "bigint", (c) => c.notNull().references("messages.id").onDelete("cascade"))
    .addPrimaryKeyConstraint("attachment_messages_pk", ["attachment_id", "message_id"])
    .execute();
  await sql`create index attachment_messages_message on attachment_messages (message_id)`.execute(db);
  await sql`
    create function link_message_attachments() returns trigger
    language plpgsql as $fn$
    begin
      if tg_op = 'UPDATE' then
        delete from attachment_messages where message_id = new.id;
      end if;
      insert into attachment_messages (attachment_id, message_id)
        select a.id, new.id from attachments a
        where a.realm_id = new.realm_id
          and a.url_path in (select (regexp_matches(new.content, '/user_uploads/([0-9]+/[^][\\s()<>"''?#]+)', 'g'))[1])
          and (a.owner_id = new.sender_id or exists (
            select 1 from attachment_messages am join user_messages um on um.message_id = am.message_id
            where am.attachment_id = a.id and um.user_id = new.sender_id))
        on conflict do nothing;
      return null;
    end
    $fn$`.execute(db);
  await sql`
    create trigger messages_link_attachments after insert on messages for each row
    when (new.content like '%/user_uploads/%') execute function link_message_attachments()`.execute(db);
  await sql`
    create trigger messages_relink_attachments after update of content on messages for each row
    when (old.content like '%/user_uploads/%' or new.content like '%/user_uploads/%') execute function link_message_attachments()`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
