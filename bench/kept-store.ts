/**
 * What the tools that measure reads on a kept organization (`npx tsx bench/explain-reads.ts --keep`) share: its
 * readers, found by the email explain-reads gave them (`bench/scenarios.ts` population "readers"): the ordinary one
 * (50 channels, 50 conversations) and the heavy one (500 channels, 100,000 unread). Until 2026-12-03 fetch-cost and
 * search-cost took user 2, the organization's welcome bot, for the ordinary reader: a user in no channel.
 */
import fs from "node:fs";
import path from "node:path";
import { sql, type Kysely } from "kysely";
import { findUserById, type UserRow } from "../actors/chat/reads/users.ts";

export async function keptReader(db: Kysely<any>, which: "ordinary" | "heavy"): Promise<UserRow> {
  const email = which === "ordinary" ? "readers-0@bench.example" : "readers-1@bench.example";
  const { rows } = await sql<{ id: number; realm_id: number }>`select id, realm_id from users where email = ${email}`.execute(db);
  if (!rows[0]) throw new Error(`no ${email} in this store: is it one kept by bench/explain-reads.ts --keep?`);
  return (await findUserById(db, rows[0].realm_id, rows[0].id))!;
}

/**
 * A kept organization for `npm run bench` to run on instead of generating its own (10,000,000 messages take about
 * 17 minutes to generate, a copy of the kept database about a minute): `READS_STORE=<the kept run's data
 * directory>`, as `npx tsx bench/explain-reads.ts --keep` prints it. The directory holds the kept database's URL
 * (`kept-database`), the secret its keys were made with and the owner's zuliprc. Each bench run gets a fresh copy of
 * the database (`create database … template`), so runs on one kept store start alike and leave it as it was.
 */
export interface KeptStore {
  dir: string;
  databaseName: string;
}

export const KEPT_DATABASE_FILE = "kept-database";

export function keptStoreFromEnv(): KeptStore | undefined {
  const dir = process.env.READS_STORE;
  if (!dir) return undefined;
  const url = fs.readFileSync(path.join(dir, KEPT_DATABASE_FILE), "utf8").trim();
  const databaseName = new URL(url).pathname.slice(1);
  if (!/^\w+$/.test(databaseName)) throw new Error(`READS_STORE: ${url} does not name a database this bench made`);
  return { dir, databaseName };
}

/** Give a kept store's data directory what a run on a copy of its database needs in its own (see KeptStore). */
export function copyKeptCredentials(kept: KeptStore, dataDir: string): void {
  for (const file of ["secret.key", "zuliprc"]) fs.copyFileSync(path.join(kept.dir, file), path.join(dataDir, file));
}
