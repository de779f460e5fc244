/**
 * The pages people open in a browser, served beside the two APIs: a page set per product area (people pages, the
 * widget, the operator console), each naming its script entries and its pages.
 *
 * A page is an HTML shell rendered here (title, the server's own text, data attributes for its script) that loads
 * its bundled script and stylesheet from /static/ (assets.ts). Every page is sent with a strict Content Security
 * Policy (scripts and styles from this origin only, no inline code, no framing unless the page allows it), no
 * referrer (join keys and reset tokens travel in page URLs) and `no-store`. Scripts talk to the server only through
 * its public APIs, so anything a page does a script can do too.
 *
 * Paths: `/static/{file}` (hashed asset names), a set's fixed-URL `scripts` (`/widget.js`), and the sets' pages.
 * Every other path is the APIs'.
 */
import type { HttpRequest, HttpResult } from "../http.ts";
import { Router } from "../router.ts";
import type { Services } from "../chat/app.ts";
import { assetsFor, serveAsset, type AssetEntries, type Assets } from "./assets.ts";
import { html, SafeHtml } from "./html.ts";
import { peoplePages } from "./people/pages.ts";
import { widgetPages } from "./widget/pages.ts";
import { consolePages } from "./console/pages.ts";

export interface PageContext {
  req: HttpRequest;
  pathParams: Record<string, string>;
  services: Services;
  /** The URL of this server as clients should use it. */
  siteUrl: string;
}

export interface PageContent {
  title: string;
  /** HTML of the page's `<main>`, already escaped (see `html`): what shows before, or without, the script. */
  main?: string;
  /** Data attributes for the page's script, set on `<main>` (`{ key: "…" }` → `data-key="…"`). */
  data?: Record<string, string>;
  status?: number;
}

export interface Page {
  /** A path template (gateway/router.ts): `/join/{key}/`; a `{name}` listed in `converters` as "path" spans segments. */
  path: string;
  converters?: Record<string, "str" | "path">;
  /** The name of the page's script entry in its set (its stylesheet, if the script imports CSS, is linked too). */
  script: string;
  /** `frame-ancestors` of the page; none by default. */
  frameAncestors?: string;
  render(ctx: PageContext): PageContent | Promise<PageContent>;
}

/** A fixed-URL script for other sites to include (`/widget.js`). */
export interface PublicScript {
  path: string;
  /** Its entry's output name: `widget.js`. */
  asset: string;
  /** Short: other sites link to one URL whose content changes with each release. */
  cacheControl: string;
}

export interface PageSet {
  /** Entry points by name, relative to gateway/pages/. */
  entries: AssetEntries;
  pages: Page[];
  scripts?: PublicScript[];
}

const PAGE_SETS: PageSet[] = [peoplePages, widgetPages, consolePages];

const ENTRIES: AssetEntries = Object.assign({}, ...PAGE_SETS.map((set) => set.entries));

/** Build the assets now (at start-up) rather than on the first request, so a broken build shows at once. */
export function warmAssets(): Promise<unknown> {
  return assetsFor(ENTRIES);
}

interface PageRoute {
  method: string;
  path: string;
  converters?: Record<string, "str" | "path">;
  page: Page;
}

const router = new Router<PageRoute>();
for (const set of PAGE_SETS) for (const page of set.pages) router.add({ method: "GET", path: page.path, converters: page.converters, page });
const scripts = new Map(PAGE_SETS.flatMap((set) => set.scripts ?? []).map((s) => [s.path, s]));

/** True for a path the pages answer (or a page's path without its final slash); every other path is the APIs'. */
export function isPagePath(path: string): boolean {
  if (path.startsWith("/static/") || scripts.has(path)) return true;
  if (path.startsWith("/api/")) return false;
  try {
    return router.match("GET", path).route !== undefined || withSlash(path) !== undefined;
  } catch {
    return false; // a path no router takes (a NUL in it): the API face answers it in its envelope
  }
}

/** A page's path that was given without its final slash (a link cut short), with it. */
function withSlash(path: string): string | undefined {
  return !path.endsWith("/") && router.match("GET", `${path}/`).route ? `${path}/` : undefined;
}

const TEXT = { "content-type": "text/plain; charset=utf-8", "x-content-type-options": "nosniff" };

export async function servePage(services: Services, req: HttpRequest): Promise<HttpResult> {
  if (req.method !== "GET") return { status: 405, headers: { ...TEXT, allow: "GET" }, body: "Method Not Allowed" };
  let assets: Assets;
  try {
    assets = await assetsFor(ENTRIES);
  } catch (err) {
    console.error("chorus: building the pages' scripts failed", err);
    return { status: 503, headers: { ...TEXT, "retry-after": "5" }, body: "The pages are not available: their scripts failed to build." };
  }
  const script = scripts.get(req.path);
  if (script) {
    req.route = req.path; // one of a few fixed paths
    return serveAsset(assets.get(script.asset)!, req, {
      "cache-control": script.cacheControl,
      // Any site may include it: the embed endpoint's own origin rules say who may ask.
      "access-control-allow-origin": "*",
      "cross-origin-resource-policy": "cross-origin",
    });
  }
  if (req.path.startsWith("/static/")) {
    req.route = "/static/{file}";
    const fileName = req.path.slice("/static/".length);
    const asset = [...assets.values()].find((a) => a.fileName === fileName);
    if (!asset) return { status: 404, headers: TEXT, body: "Not Found" };
    return serveAsset(asset, req, { "cache-control": "public, max-age=31536000, immutable" });
  }
  const { route, pathParams } = router.match("GET", req.path);
  if (route) req.route = route.path;
  else {
    const slashed = withSlash(req.path);
    if (slashed) return { status: 301, headers: { ...TEXT, location: slashed + (req.query ? `?${req.query}` : "") }, body: "" };
    return { status: 404, headers: TEXT, body: "Not Found" };
  }
  const page = route.page;
  let content: PageContent;
  try {
    content = await page.render({ req, pathParams, services, siteUrl: services.siteUrl(req.headers.host) });
  } catch (err) {
    console.error(`GET ${req.path} failed`, err);
    return { status: 503, headers: { ...TEXT, "retry-after": "5" }, body: "This page is not available right now. Try again in a moment." };
  }
  const stylesheet = assets.get(page.script.replace(/\.js$/, ".css"));
  return {
    status: content.status ?? 200,
    headers: pageHeaders(page),
    body: shell(content, assets.get(page.script)!.fileName, stylesheet?.fileName),
  };
}

function pageHeaders(page: Page): Record<string, string> {
  const csp = [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    `frame-ancestors ${page.frameAncestors ?? "'none'"}`,
  ].join("; ");
  return {
    "content-type": "text/html; charset=utf-8",
    "content-security-policy": csp,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    ...(page.frameAncestors ? {} : { "x-frame-options": "DENY" }),
  };
}

function shell(content: PageContent, script: string, stylesheet: string | undefined): string {
  const data = Object.entries(content.data ?? {})
    .map(([key, value]) => html` data-${key.replace(/[^a-z0-9-]/g, "")}="${value}"`.text)
    .join("");
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${content.title}</title>
<link rel="icon" href="data:,">
${stylesheet ? html`<link rel="stylesheet" href="/static/${stylesheet}">` : ""}
<script src="/static/${script}" defer></script>
</head>
<body>
<main id="page"${new SafeHtml(data)}>${new SafeHtml(content.main ?? "")}</main>
</body>
</html>
`.text;
}
