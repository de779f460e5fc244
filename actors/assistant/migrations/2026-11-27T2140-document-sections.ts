import type { Kysely } from "kysely";

/**
 * Sources name their section and link their page: a chunk keeps the heading of the section it was cut from, a
 * document the URL it was published with (optional).
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable("assistant_chunks").addColumn("heading", "text", (c) => c.notNull().defaultTo("")).execute();
  await db.schema.alterTable("assistant_documents").addColumn("url", "text").execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
