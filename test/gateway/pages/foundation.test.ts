/**
 * The pages' foundation: the landing page through a real server and a real browser, its security headers, and the
 * bundled assets' caching (ETag, gzip, immutable hashed URLs; the widget's one fixed URL).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Browser } from "playwright-core";
import { startTestServer, type TestServer } from "../../support/server.ts";
import { collectPageErrors, HAVE_CHROMIUM, launchBrowser, screenshot } from "../../support/browser.ts";

// Starting a server and a browser together takes longer than one server on a busy 2-core machine.
vi.setConfig({ hookTimeout: 120_000 });

let server: TestServer;
let browser: Browser;

beforeAll(async () => {
  if (!HAVE_CHROMIUM) return;
  [server, browser] = await Promise.all([startTestServer("embedded"), launchBrowser()]);
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe.skipIf(!HAVE_CHROMIUM)("pages", () => {
  it("the landing page says what the server is, with strict security headers", async () => {
    const res = await fetch(`${server.url}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const csp = res.headers.get("content-security-policy")!;
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(res.headers.get("referrer-policy")).toBe("no-referrer");
    expect(res.headers.get("cache-control")).toBe("no-store");

    const context = await browser.newContext();
    const page = await context.newPage();
    const errors = collectPageErrors(page);
    await page.goto(`${server.url}/`);
    await expect.poll(() => page.locator("h1").textContent()).toBeTruthy();
    expect(await page.locator(".server-url").first().textContent()).toBe(server.url);
    expect(await page.locator('a[href="/console/"]').count()).toBe(1);
    // The stylesheet applied (served from /static/ under the CSP): the page's card has its border radius.
    expect(await page.locator("main").evaluate((el) => (globalThis as any).getComputedStyle(el).borderTopLeftRadius)).toBe("12px");
    await screenshot(page, "landing");
    expect(errors).toEqual([]);
    await context.close();
  });

  it("serves assets with ETag and gzip, hashed URLs for good, the widget under its fixed URL", async () => {
    const landing = await (await fetch(`${server.url}/`)).text();
    const script = /src="(\/static\/people-[0-9a-f]{8}\.js)"/.exec(landing)![1]!;
    const first = await fetch(`${server.url}${script}`, { headers: { "accept-encoding": "gzip" } });
    expect(first.status).toBe(200);
    expect(first.headers.get("content-encoding")).toBe("gzip");
    expect(first.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    const etag = first.headers.get("etag")!;
    const again = await fetch(`${server.url}${script}`, { headers: { "if-none-match": etag } });
    expect(again.status).toBe(304);

    const widget = await fetch(`${server.url}/widget.js`);
    expect(widget.status).toBe(200);
    expect(widget.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(widget.headers.get("cache-control")).toBe("public, max-age=300");
    expect(widget.headers.get("access-control-allow-origin")).toBe("*");

    expect((await fetch(`${server.url}/static/people-00000000.js`)).status).toBe(404);
    // A page's link cut before its final slash leads to the page.
    const cut = await fetch(`${server.url}/accounts/password/reset?from=mail`, { redirect: "manual" });
    expect(cut.status).toBe(301);
    expect(cut.headers.get("location")).toBe("/accounts/password/reset/?from=mail");
    expect((await fetch(`${server.url}/`, { method: "POST" })).status).toBe(405);
    // Other paths are still the APIs'.
    const api = await fetch(`${server.url}/api/v1/server_settings`);
    expect(api.status).toBe(200);
    expect(((await api.json()) as { result: string }).result).toBe("success");
  });
});
