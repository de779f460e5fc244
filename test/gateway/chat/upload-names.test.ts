/**
 * The pure parts of uploads: Zulip's file-name sanitising and the Range header's one byte range.
 */
import { describe, expect, it } from "vitest";
import { byteRange, sanitizeFileName } from "../../../gateway/chat/uploads.ts";

describe("sanitizeFileName, as Zulip's sanitize_name", () => {
  it("keeps word characters, dots and dashes; runs of spaces and dashes become one dash", () => {
    expect(sanitizeFileName("my report (final)?.txt")).toBe("my-report-final.txt");
    expect(sanitizeFileName("  a -- b  .pdf ")).toBe("a-b-.pdf");
    expect(sanitizeFileName("résumé café.pdf")).toBe("résumé-café.pdf");
    expect(sanitizeFileName("../../etc/passwd")).toBe("....etcpasswd");
    expect(sanitizeFileName("ﬁle.txt")).toBe("file.txt"); // NFKC
  });

  it("never answers an empty name, . or ..", () => {
    for (const name of ["", "..", ".", "???", "  "]) expect(sanitizeFileName(name)).toBe("uploaded-file");
  });

  it("cuts a name to 255 bytes, keeping its extension and whole characters", () => {
    const long = sanitizeFileName("é".repeat(300) + ".jpeg");
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(255);
    expect(long.endsWith(".jpeg")).toBe(true);
    expect(long).not.toContain("\uFFFD");
  });
});

describe("byteRange", () => {
  it("reads first-last, first- and -suffix, clamped to the file", () => {
    expect(byteRange("bytes=0-9", 100)).toEqual({ start: 0, end: 9 });
    expect(byteRange("bytes=90-", 100)).toEqual({ start: 90, end: 99 });
    expect(byteRange("bytes=-10", 100)).toEqual({ start: 90, end: 99 });
    expect(byteRange("bytes=-500", 100)).toEqual({ start: 0, end: 99 });
    expect(byteRange("bytes=50-500", 100)).toEqual({ start: 50, end: 99 });
  });

  it("is unsatisfiable past the end, and absent for what it does not answer", () => {
    expect(byteRange("bytes=100-", 100)).toBe("unsatisfiable");
    expect(byteRange("bytes=5-2", 100)).toBe("unsatisfiable");
    expect(byteRange("bytes=-0", 100)).toBe("unsatisfiable");
    expect(byteRange(undefined, 100)).toBeUndefined();
    expect(byteRange("bytes=0-1,5-6", 100)).toBeUndefined();
    expect(byteRange("items=0-1", 100)).toBeUndefined();
    expect(byteRange("bytes=-", 100)).toBeUndefined();
  });
});
