/**
 * What the tools that measure reads on a kept organization (`npx tsx bench/explain-reads.ts --keep`) share: its
 * readers, found by the email explain-reads gave them (`bench/scenarios.ts` population "readers"): the ordinary one
 * (50 channels, 50 conversations) and the heavy one (500 channels, 100,000 unread). Until 2026-12-03 fetch-cost and
 * search-cost took user 2, the organization's welcome bot, for the ordinary reader: a user in no channel.
 */
import { sql, type Kysely } from "kysely";
import { findUserById, type UserRow } from "../actors/chat/reads/users.ts";

export async function keptReader(db: Kysely<any>, which: "ordinary" | "heavy"): Promise<UserRow> {
  const email = which === "ordinary" ? "readers-0@bench.example" : "readers-1@bench.example";
  const { rows } = await sql<{ id: number; realm_id: number }>`select id, realm_id from users where email = ${email}`.execute(db);
  if (!rows[0]) throw new Error(`no ${email} in this store: is it one kept by bench/explain-reads.ts --keep?`);
  return (await findUserById(db, rows[0].realm_id, rows[0].id))!;
}
