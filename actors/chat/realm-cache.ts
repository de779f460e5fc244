/**
 * A per-realm value read on the send path without a query per message (the realm's alert words, who muted whom,
 * its compiled linkifiers). The worker whose actor changes the underlying rows forgets its entry at once and tells
 * the other workers to (a transport notice, `<name>:<realm id>`); one that misses the notice reloads within
 * CACHE_MS. Users of it accept that staleness: for that moment a message is treated as one sent just before the
 * change.
 */
import type { Kysely } from "kysely";
import type { Database } from "../schema.ts";
import type { ActorSystem } from "../../runtime/system.ts";
import { log } from "../../runtime/log.ts";

const CACHE_MS = 2000;

export class NoticedRealmCache<T> {
  private readonly entries = new Map<number, { until: number; value: Promise<T> }>();

  constructor(
    /** The notice's prefix, unique per cache. */
    private readonly name: string,
    private readonly load: (db: Kysely<Database>, realmId: number) => Promise<T>,
  ) {}

  get(db: Kysely<Database>, realmId: number): Promise<T> {
    const hit = this.entries.get(realmId);
    if (hit && hit.until > Date.now()) return hit.value;
    const value = this.load(db, realmId);
    this.entries.set(realmId, { until: Date.now() + CACHE_MS, value });
    value.catch(() => this.entries.delete(realmId));
    return value;
  }

  /** The realm's rows changed: forget them here and on every other worker. */
  async changed(system: ActorSystem, realmId: number): Promise<void> {
    this.entries.delete(realmId);
    await system.announce(`${this.name}:${realmId}`).catch((err) => log.error({ err }, `${this.name}: telling the other workers failed`));
  }

  /** Every worker's listener for the notice (wired in gateway/main.ts). */
  onNotice(notice: string): void {
    if (notice.startsWith(`${this.name}:`)) this.entries.delete(Number(notice.slice(this.name.length + 1)));
  }
}
