/**
 * The pages' scripts and styles: TypeScript and CSS under gateway/pages/, bundled by esbuild in memory the first
 * time a page is asked for (or at start-up, `warmAssets`), then kept for the life of the process. No build step
 * and no output on disk, so `npm install && npm start` stays the whole set-up; the bundle takes a few hundred
 * milliseconds once.
 *
 * Each asset is served with an ETag (a hash of its bytes), gzipped when the client accepts it, and under a URL
 * carrying that hash (`/static/{name}-{hash}.{ext}`), so pages may cache it for good; the widget keeps its one
 * fixed URL (`/widget.js`) and a short cache lifetime instead, since other sites link to it.
 */
import crypto from "node:crypto";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import type { HttpRequest, HttpResult } from "../http.ts";

const PAGES_DIR = path.dirname(fileURLToPath(import.meta.url));

export interface Asset {
  /** The entry's name with its hash and extension: `people-3f2a9c1b.js`. */
  fileName: string;
  contentType: string;
  body: Buffer;
  gzip: Buffer;
  etag: string;
}

/** Entry points by name, relative to gateway/pages/; each becomes `{name}.js` (and `{name}.css` if it imports CSS). */
export type AssetEntries = Record<string, string>;

/** The built assets by output name (`people.js`, `people.css`). */
export type Assets = Map<string, Asset>;

const CONTENT_TYPES: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
};

export async function buildAssets(entries: AssetEntries): Promise<Assets> {
  const result = await esbuild.build({
    entryPoints: Object.fromEntries(Object.entries(entries).map(([name, file]) => [name, path.join(PAGES_DIR, file)])),
    bundle: true,
    minify: true,
    format: "iife",
    // Browsers of the last few years; Shadow DOM and fetch streams need nothing older.
    target: ["es2020", "chrome90", "firefox90", "safari15"],
    outdir: "/",
    write: false,
    legalComments: "none",
    logLevel: "silent",
  });
  const assets: Assets = new Map();
  for (const file of result.outputFiles) {
    const name = path.basename(file.path);
    const ext = path.extname(name);
    const body = Buffer.from(file.contents);
    const hash = crypto.createHash("sha256").update(body).digest("hex").slice(0, 16);
    assets.set(name, {
      fileName: `${name.slice(0, -ext.length)}-${hash.slice(0, 8)}${ext}`,
      contentType: CONTENT_TYPES[ext] ?? "application/octet-stream",
      body,
      gzip: zlib.gzipSync(body, { level: 9 }),
      etag: `"${hash}"`,
    });
  }
  return assets;
}

/** One built set per process and entry list: every node of a test process shares it. */
const built = new Map<string, Promise<Assets>>();

export function assetsFor(entries: AssetEntries): Promise<Assets> {
  const key = JSON.stringify(entries);
  let assets = built.get(key);
  if (!assets) {
    assets = buildAssets(entries);
    assets.catch(() => built.delete(key)); // a failed build is tried again on the next request
    built.set(key, assets);
  }
  return assets;
}

/** An asset as an HTTP answer: 304 for a matching If-None-Match, gzip when accepted. */
export function serveAsset(asset: Asset, req: HttpRequest, extraHeaders: Record<string, string>): HttpResult {
  const headers: Record<string, string> = {
    "content-type": asset.contentType,
    etag: asset.etag,
    vary: "Accept-Encoding",
    "x-content-type-options": "nosniff",
    ...extraHeaders,
  };
  const ifNoneMatch = req.headers["if-none-match"];
  if (ifNoneMatch && ifNoneMatch.split(",").some((tag) => [asset.etag, `W/${asset.etag}`, "*"].includes(tag.trim()))) {
    return { status: 304, headers, body: "" };
  }
  if (/\bgzip\b/.test(req.headers["accept-encoding"] ?? "")) {
    return { status: 200, headers: { ...headers, "content-encoding": "gzip" }, body: asset.gzip };
  }
  return { status: 200, headers, body: asset.body };
}
