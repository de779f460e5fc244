import { sql, type Kysely } from "kysely";

/**
 * A partial index of the messages whose rendered content shows an image (narrow.ts HAS_CONTENT.image), by realm and
 * id: has:image asks it whether a realm has few such messages, and then reads the page by their ids
 * (reads/messages.ts imageMessagesIfFew). Without it a has:image page tested every message the reader could read
 * until it had its page: 167 ms a fetch at 1,000,000 messages with no image (docs/reads.md, 2026-12-05). The
 * predicate is the pattern as messages.ts spells it (a literal, so that the planner matches it). Idempotent.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`
    create index if not exists messages_has_image on messages (realm_id, id)
    where rendered_content ~* 'message_inline_image|<a [^>]*href="[^"]+\\.(bmp|gif|jpe?g|png|webp)(\\?[^"]*)?"'`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
