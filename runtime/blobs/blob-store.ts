/**
 * The blob store: where uploaded files' bytes live (their records are in the store). One seam, one engine per kind
 * of storage; the contract suite in test/runtime/blob-store.contract.test.ts runs against every engine.
 *
 * Guarantees:
 * - `put` streams: it holds at most a stream buffer of the data in memory, and honours the source's backpressure.
 * - A blob is visible only once `put` resolved: a source that fails or is destroyed (an aborted upload), or that runs
 *   past `limit`, leaves nothing behind under the key and nothing half-written anywhere.
 * - `put` never replaces a blob: keys are chosen fresh by the caller (a random part), so a second put of a key fails.
 * - `read` streams the whole blob or one inclusive byte range; `stat` says whether a blob is there and its size.
 * - `delete` is idempotent.
 * - Keys are `/`-separated segments of letters, digits, `.`, `_` and `-` (no `.` or `..` segment): a key can never
 *   name a place outside the store, whatever a request's path held.
 * Not guaranteed: a blob outlives a crash between its record's deletion and `delete` (an orphan, harmless).
 */
import type { Readable } from "node:stream";

export interface BlobStore {
  put(key: string, source: Readable, opts?: { limit?: number }): Promise<{ size: number }>;
  stat(key: string): Promise<{ size: number } | undefined>;
  /** The blob's bytes, or bytes `start` to `end` inclusive. The stream errors if the blob is missing. */
  read(key: string, range?: { start: number; end: number }): Readable;
  delete(key: string): Promise<void>;
}

/** A put's source ran past its limit; nothing was stored. */
export class BlobTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`blob larger than ${limit} bytes`);
  }
}

const SEGMENT = /^[A-Za-z0-9_-][A-Za-z0-9._-]*$/;

/** Throws unless `key` is a well-formed key (see the guarantees above). */
export function checkBlobKey(key: string): void {
  const segments = key.split("/");
  if (!key || segments.some((s) => !SEGMENT.test(s) || s === "." || s === "..")) throw new Error(`invalid blob key ${JSON.stringify(key)}`);
}
