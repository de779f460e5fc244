/** Reads of the `realms` table: the server's organization and a realm's name. Nothing here writes. */
import type { Kysely } from "kysely";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database>;

/** The server's organization for unauthenticated links (one per server: the first realm, as /server_settings reports it). */
export async function serverRealmId(db: DB): Promise<number> {
  return (await db.selectFrom("realms").select("id").orderBy("id").executeTakeFirstOrThrow()).id;
}

/** The server organization for GET /server_settings (undefined before the first realm exists). */
export async function serverRealm(db: DB): Promise<{ id: number; name: string } | undefined> {
  return db.selectFrom("realms").select(["id", "name"]).orderBy("id").executeTakeFirst();
}

/** A realm's name and creation time (POST /register's realm_name, realm_date_created). */
export function realmNameAndDate(db: DB, realmId: number) {
  return db.selectFrom("realms").select(["name", "date_created"]).where("id", "=", realmId).executeTakeFirstOrThrow();
}
