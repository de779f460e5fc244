/**
 * What a fetch shows of a message that does not depend on the reader (its columns, its sender's address and name,
 * its reactions), kept in memory per store and per process, each record at the message's version and its realm's
 * user version (both kept by triggers in the writers' transactions: migrations 2026-12-02T1800-message-versions and
 * 2026-11-28T0120-realm-user-versions). A page's statement reads the ids, versions and the reader's flags; the
 * records this process does not hold at least as new as the page saw come in one statement by id. Whichever worker
 * or process wrote, a copy older than the store's is never served; one newer than the page's statement saw may be
 * (written between the two statements), as a fetch a moment later would show it.
 *
 * Bounded by size (LRU): records are mostly their content and its rendering.
 */
import { LRUCache } from "lru-cache";
import type { Kysely } from "kysely";

/** A message as the page reads it by id, with its version and its realm's user version. */
export interface VersionedRecord {
  id: number;
  version: number;
  /** realm_user_versions.version when it was read, as text (a bigint). */
  user_version: string;
  content: string;
  rendered_content: string;
  topic: string;
}

/** What one page saw of a message: its id and version (its realm's user version is the page's). */
export interface RecordRef {
  id: number;
  version: number;
}

/** At most this many bytes of records per store (an estimate: their strings' lengths, and a fixed part per record). */
const MAX_BYTES = 64 * 1024 * 1024;
const RECORD_OVERHEAD_BYTES = 600;

export class MessageRecordCache<R extends VersionedRecord> {
  /** Per store: two stores in one process (a test file's engines) have messages of the same ids and versions. */
  private readonly stores = new WeakMap<object, LRUCache<number, R>>();

  /** Reads records by id: the ids that exist come back, each at the version it is at when read. */
  constructor(private readonly load: (db: Kysely<any>, ids: number[]) => Promise<R[]>) {}

  /**
   * The records of these messages, each at least as new as the page saw it (`refs`, at `userVersion`): those held,
   * and the others read in one statement. A message deleted meanwhile is missing from the answer.
   */
  async current(db: Kysely<any>, refs: readonly RecordRef[], userVersion: string): Promise<Map<number, R>> {
    let held = this.stores.get(db);
    if (!held) this.stores.set(db, (held = new LRUCache<number, R>({ maxSize: MAX_BYTES, sizeCalculation: recordBytes })));
    const found = new Map<number, R>();
    const missing: number[] = [];
    const pageUsers = Number(userVersion);
    for (const ref of refs) {
      const record = held.get(ref.id);
      if (record && record.version >= ref.version && Number(record.user_version) >= pageUsers) found.set(ref.id, record);
      else missing.push(ref.id);
    }
    if (missing.length) {
      for (const record of await this.load(db, missing)) {
        held.set(record.id, record);
        found.set(record.id, record);
      }
    }
    return found;
  }
}

function recordBytes(record: VersionedRecord): number {
  return RECORD_OVERHEAD_BYTES + record.content.length + record.rendered_content.length + record.topic.length;
}
