import { sql, type Kysely } from "kysely";

/**
 * One row per attempt to send a message (each POST /messages is one attempt; a client's retry is another attempt
 * under the same send key). The message's insert and its attempt's row commit in one statement, and a gateway that
 * could not learn a send's outcome (its ask timed out, the transport failed) inserts the attempt's row itself as a
 * tombstone: the primary key makes the two wait on each other, whatever their snapshots, so exactly one wins. The
 * message commits and the gateway finds it, or the tombstone is there first and the attempt can never commit.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable("send_attempts")
    .addColumn("attempt", "text", (c) => c.primaryKey())
    // true: the gateway's tombstone (the attempt was abandoned, never to commit); false: the message's own row.
    .addColumn("abandoned", "boolean", (c) => c.notNull())
    .addColumn("at", "timestamptz", (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

export async function down(): Promise<void> {
  throw new Error("migrations are append-only");
}
