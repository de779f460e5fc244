/**
 * The blob store contract (runtime/blobs/blob-store.ts), one behaviour suite run against every engine: today the
 * local directory (which is also the engine for a volume several hosts share).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { BlobTooLarge, type BlobStore } from "../../runtime/blobs/blob-store.ts";
import { LocalDirectoryBlobStore } from "../../runtime/blobs/local-directory.ts";

interface Engine {
  name: string;
  make(): { store: BlobStore; /** Every file the engine holds, temporary ones included. */ files(): string[]; dispose(): void };
}

function filesUnder(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return (fs.readdirSync(dir, { recursive: true }) as string[]).filter((f) => fs.statSync(path.join(dir, f)).isFile());
}

const engines: Engine[] = [
  {
    name: "local directory",
    make() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-blobs-"));
      return { store: new LocalDirectoryBlobStore(dir), files: () => filesUnder(dir), dispose: () => fs.rmSync(dir, { recursive: true, force: true }) };
    },
  },
];

/** A source of `chunks` chunks of `size` bytes, generated as read (never whole in memory). */
function generated(chunks: number, size: number): Readable {
  let sent = 0;
  return new Readable({
    read() {
      this.push(sent++ < chunks ? Buffer.alloc(size, sent % 251) : null);
    },
  });
}

describe.each(engines)("blob store: $name", (engine) => {
  let made: ReturnType<Engine["make"]>;
  beforeEach(() => {
    made = engine.make();
  });
  afterEach(() => made.dispose());

  it("stores a stream and reads it back whole and by range", async () => {
    const { size } = await made.store.put("1/abc", Readable.from([Buffer.from("hello "), Buffer.from("world")]));
    expect(size).toBe(11);
    expect(await made.store.stat("1/abc")).toEqual({ size: 11 });
    expect(await text(made.store.read("1/abc"))).toBe("hello world");
    expect(await text(made.store.read("1/abc", { start: 6, end: 10 }))).toBe("world");
  });

  it("a missing blob has no stat and its read stream errors", async () => {
    expect(await made.store.stat("1/missing")).toBeUndefined();
    await expect(text(made.store.read("1/missing"))).rejects.toThrow();
  });

  it("a source past the limit fails with BlobTooLarge and leaves nothing", async () => {
    await expect(made.store.put("1/big", generated(10, 1024), { limit: 5 * 1024 })).rejects.toBeInstanceOf(BlobTooLarge);
    expect(await made.store.stat("1/big")).toBeUndefined();
    expect(made.files()).toEqual([]);
  });

  it("a source that fails midway (an aborted upload) leaves nothing", async () => {
    let sent = 0;
    const failing = new Readable({
      read() {
        if (sent++ < 3) this.push(Buffer.alloc(64 * 1024));
        else this.destroy(new Error("client went away"));
      },
    });
    await expect(made.store.put("1/partial", failing)).rejects.toThrow("client went away");
    expect(await made.store.stat("1/partial")).toBeUndefined();
    expect(made.files()).toEqual([]);
  });

  it("never replaces a blob", async () => {
    await made.store.put("1/once", Readable.from([Buffer.from("first")]));
    await expect(made.store.put("1/once", Readable.from([Buffer.from("second")]))).rejects.toThrow();
    expect(await text(made.store.read("1/once"))).toBe("first");
    expect(made.files()).toHaveLength(1);
  });

  it("deletes, idempotently", async () => {
    await made.store.put("1/gone", Readable.from([Buffer.from("x")]));
    await made.store.delete("1/gone");
    await made.store.delete("1/gone");
    expect(await made.store.stat("1/gone")).toBeUndefined();
  });

  it("refuses keys that could leave the store", async () => {
    for (const key of ["../x", "1/../../x", "/etc/passwd", "1//x", "1/./x", "", "a\\b", "1/x\u0000"]) {
      await expect(made.store.put(key, Readable.from([Buffer.from("x")]))).rejects.toThrow("invalid blob key");
      await expect(made.store.stat(key)).rejects.toThrow("invalid blob key");
    }
  });

  // (That the bytes stream rather than gather in memory shows at the gateway: an upload's bytes are on disk before its
  // body is complete, test/gateway/chat/uploads.test.ts. Memory figures here would measure the garbage collector.)
  it("takes and gives back a large blob from a source generated as it is read (32 MiB)", async () => {
    const { size } = await made.store.put("1/large", generated(512, 64 * 1024));
    expect(size).toBe(32 * 1024 * 1024);
    let read = 0;
    for await (const chunk of made.store.read("1/large")) {
      read += (chunk as Buffer).length;
    }
    expect(read).toBe(size);
    expect(await made.store.stat("1/large")).toEqual({ size });
  });
});
