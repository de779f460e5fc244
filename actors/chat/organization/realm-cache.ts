/**
 * A value every worker keeps per realm for the send path (which must not query for it per message), loaded on
 * first use. The worker whose realm actor changes it forgets its entry at once and tells the other workers (a
 * transport notice, `<prefix><realm id>`); one that misses the notice reloads within TTL_MS.
 */
import type { Kysely } from "kysely";
import type { ActorSystem } from "../../../runtime/system.ts";
import type { Database } from "../../schema.ts";

const TTL_MS = 2000;

export class PerRealmCache<T> {
  private readonly entries = new Map<number, { until: number; value: Promise<T> }>();

  constructor(
    private readonly noticePrefix: string,
    private readonly load: (db: Kysely<Database>, realmId: number) => Promise<T>,
  ) {}

  get(db: Kysely<Database>, realmId: number): Promise<T> {
    const hit = this.entries.get(realmId);
    if (hit && hit.until > Date.now()) return hit.value;
    const value = this.load(db, realmId);
    this.entries.set(realmId, { until: Date.now() + TTL_MS, value });
    value.catch(() => this.entries.delete(realmId));
    return value;
  }

  /** After a committed change: forget here, and tell the other workers to. */
  async changed(system: ActorSystem, realmId: number): Promise<void> {
    this.entries.delete(realmId);
    await system.announce(this.noticePrefix + realmId).catch((err) => console.error(`${this.noticePrefix} telling the other workers failed`, err));
  }

  /** Every worker's listener for the notices (wired in gateway/main.ts). */
  onNotice(notice: string): void {
    if (notice.startsWith(this.noticePrefix)) this.entries.delete(Number(notice.slice(this.noticePrefix.length)));
  }
}
