/** Reads of the `realms` table: the server's organization and a realm's name. Nothing here writes. */
import type { Kysely } from "kysely";
import type { Database } from "../../../runtime/store/schema.ts";

type DB = Kysely<Database>;

/** The server's organization for unauthenticated links (one per server: the first realm, as /server_settings reports it). */
export async function serverRealmId(db: DB): Promise<number> {
  return (await db.selectFrom("realms").select("id").orderBy("id").executeTakeFirstOrThrow()).id;
}
