/**
 * A per-realm cache of something built from the store, kept current by a version row per realm that triggers bump in
 * the writers' own transactions (realm_user_versions, channel_versions): whichever worker or process wrote, one
 * single-row read tells a worker whether its copy is current. The version is read before the rows are: a copy may be
 * newer than its version (then it is built again once), never older.
 */
import type { Kysely } from "kysely";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database>;

export class RealmVersionedCache<T> {
  /**
   * Per store (its `db`), then per realm: two stores in one process (a test file's two engines, one after the other)
   * have realms of the same ids at the same small versions, and must not be served each other's copy.
   */
  private readonly stores = new WeakMap<DB, Map<number, { version: string; value: Promise<T> }>>();

  constructor(
    private readonly versions: "realm_user_versions" | "channel_versions",
    private readonly build: (db: DB, realmId: number) => Promise<T>,
  ) {}

  async get(db: DB, realmId: number): Promise<T> {
    const row = await db.selectFrom(this.versions).select("version").where("realm_id", "=", realmId).executeTakeFirst();
    const version = String(row?.version ?? 0);
    let entries = this.stores.get(db);
    if (!entries) this.stores.set(db, (entries = new Map()));
    let entry = entries.get(realmId);
    if (entry?.version !== version) {
      const building = { version, value: this.build(db, realmId) };
      // A failed build is not kept: the next caller builds again.
      building.value.catch(() => entries.get(realmId) === building && entries.delete(realmId));
      entries.set(realmId, building);
      entry = building;
    }
    return entry.value;
  }
}
