/**
 * The blob store on a local directory (DATA_DIR/uploads by default; UPLOADS_DIR names a volume several hosts share).
 * A put writes to a temporary file in the same directory tree and renames it into place once complete, so a reader
 * never sees a partial blob and a failed or aborted put leaves only a temporary file that it removes itself.
 */
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { randomUUID } from "node:crypto";
import { Transform, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { BlobTooLarge, checkBlobKey, type BlobStore } from "./blob-store.ts";

const TEMPORARY = ".partial";

export class LocalDirectoryBlobStore implements BlobStore {
  constructor(private readonly root: string) {}

  private file(key: string): string {
    checkBlobKey(key);
    return path.join(this.root, ...key.split("/"));
  }

  async put(key: string, source: Readable, opts: { limit?: number } = {}): Promise<{ size: number }> {
    const target = this.file(key);
    const temporary = path.join(this.root, TEMPORARY, randomUUID());
    await fsp.mkdir(path.dirname(temporary), { recursive: true });
    let size = 0;
    const limit = opts.limit ?? Infinity;
    const counter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        size += chunk.length;
        done(size > limit ? new BlobTooLarge(limit) : null, chunk);
      },
    });
    // Opened before the pipeline, not by the write stream: a stream destroyed while still opening its file creates
    // it after the cleanup below has run, leaving a temporary file behind.
    const file = await fsp.open(temporary, "wx");
    try {
      await pipeline(source, counter, file.createWriteStream());
      await fsp.mkdir(path.dirname(target), { recursive: true });
      // link, not rename: it fails when the key is taken instead of replacing that blob.
      await fsp.link(temporary, target);
    } finally {
      await file.close().catch(() => {}); // the stream closes it when it finishes; not when it fails
      await fsp.rm(temporary, { force: true });
    }
    return { size };
  }

  async stat(key: string): Promise<{ size: number } | undefined> {
    try {
      const stats = await fsp.stat(this.file(key));
      return stats.isFile() ? { size: stats.size } : undefined;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  read(key: string, range?: { start: number; end: number }): Readable {
    return fs.createReadStream(this.file(key), range ? { start: range.start, end: range.end } : {});
  }

  async delete(key: string): Promise<void> {
    await fsp.rm(this.file(key), { force: true });
  }
}
