import { sql, type Kysely } from "kysely";

/**
 * Partial indexes of the messages two narrows keep, newest first: `is:resolved` (a topic starting with Zulip's "✔ ")
 * and `has:link` (a link in the rendered content, narrow.ts HAS_CONTENT.link). Without them such a page tested every
 * message the reader could read until it had its page: at 1,000,000 messages, when none matched, 139-153 ms a fetch
 * for `is:resolved` and 1.3 s for `has:link` (docs/reads.md, 2026-12-05). Each predicate is the page's condition as
 * messages.ts spells it (a literal pattern, so that the planner matches it); every insert tests both, a prefix
 * comparison and one regular expression. Idempotent.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index if not exists messages_resolved on messages (id) where topic like '✔ %'`.execute(db);
  await sql`create index if not exists messages_has_link on messages (id) where rendered_content ~* '<a [^>]*href="(https?://|/user_uploads/)'`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
