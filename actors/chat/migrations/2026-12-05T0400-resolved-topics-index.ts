import { sql, type Kysely } from "kysely";

/**
 * The messages of resolved topics (`is:resolved`: a topic starting with Zulip's "✔ "), newest first. Without it an
 * `is:resolved` page tested every message the reader could read: 196 ms a fetch at 1,000,000 messages when none was
 * resolved (docs/reads.md, 2026-12-05). The predicate is the page's condition as messages.ts spells it (a literal
 * pattern, so that the planner can match it); every insert tests it, a prefix comparison. Idempotent.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index if not exists messages_resolved on messages (id) where topic like '✔ %'`.execute(db);
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
