/**
 * The embed widget on a host page of another origin (served by this test), in a real browser against a real
 * server: two questions and a follow-up streamed with their sources, the conversation kept across a reload, the
 * visitor's verified identity, keyboard use, the readable failures (429 with a timed retry, 403, the network gone
 * and back), isolation from the host page's CSS, and its size.
 */
import crypto from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { startTestServer, type TestServer } from "../../support/server.ts";
import { collectPageErrors, HAVE_CHROMIUM, launchBrowser, screenshot } from "../../support/browser.ts";
import { operatorKey, publishedAgent } from "../assistant/support.ts";

// The callbacks of page.evaluate run in the page, whose globals the Node typings do not have.
declare const document: any, window: any, MutationObserver: any, localStorage: any;

// A browser test drives several pages, and its file starts a browser beside the server: on a busy 2-core machine
// both take longer than an API test.
vi.setConfig({ testTimeout: 90_000, hookTimeout: 120_000 });

let server: TestServer;
let browser: Browser;
let host: http.Server;
let hostUrl: string;
let operator: string;

/**
 * The host page: the widget's one script tag with the attributes given in the query string, and CSS that would
 * wreck the widget if it reached into it.
 */
function hostPage(query: URLSearchParams): string {
  const attrs = [...query].map(([k, v]) => ` data-${k.replace(/[^a-z-]/g, "")}="${v.replace(/[^\w:.,#()% -]/g, "")}"`).join("");
  return `<!doctype html><html><head><title>Shop</title>
<style>* { color: red !important; font-family: serif !important; } button { background: yellow !important; } div, chorus-widget { border: 3px dashed green !important; }</style>
</head><body><h1>Our shop</h1><p>Welcome to the shop.</p>
<script src="${server.url}/widget.js"${attrs} async></script></body></html>`;
}

beforeAll(async () => {
  if (!HAVE_CHROMIUM) return;
  [server, browser] = await Promise.all([startTestServer("embedded"), launchBrowser()]);
  operator = await operatorKey(server);
  host = http.createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(hostPage(new URL(req.url!, "http://x").searchParams));
  });
  await new Promise<void>((resolve) => host.listen(0, "127.0.0.1", resolve));
  // localhost, not 127.0.0.1: the host page is of another origin than the server, as on a real site.
  hostUrl = `http://localhost:${(host.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await browser?.close();
  host?.close();
  await server?.close();
});

async function openHost(context: BrowserContext, attrs: Record<string, string>): Promise<{ page: Page; errors: string[] }> {
  const page = await context.newPage();
  const errors = collectPageErrors(page);
  await page.goto(`${hostUrl}/?${new URLSearchParams(attrs)}`);
  await page.getByRole("button", { name: /Open chat/ }).waitFor();
  return { page, errors };
}

/** Ask through the widget's text box (Enter sends) and wait for the answer to complete. */
async function askWidget(page: Page, question: string): Promise<void> {
  const before = await page.locator(".msg.assistant:not(.greeting)").count();
  await page.getByRole("textbox", { name: "Your question" }).fill(question);
  await page.getByRole("textbox", { name: "Your question" }).press("Enter");
  // Not the greeting: it is an assistant message that is never busy.
  await expect.poll(() => page.locator(".msg.assistant:not(.greeting):not([aria-busy])").count()).toBeGreaterThan(before);
}

const lastAnswer = (page: Page) => page.locator(".msg.assistant").last();

describe.skipIf(!HAVE_CHROMIUM)("embed widget", () => {
  it("answers two questions and a follow-up, streamed with sources, and keeps the conversation across page loads", async () => {
    const agent = await publishedAgent(server, operator, { allowed_origins: ["localhost"] });
    const context = await browser.newContext();
    const { page, errors } = await openHost(context, { "agent-key": agent.agent_key, title: "Shop help", greeting: "Hi! Ask about refunds or shipping.", color: "#0a7d55" });
    await page.getByRole("button", { name: "Open chat: Shop help" }).click();
    await expect.poll(() => page.evaluate(() => document.querySelector("[data-chorus-widget]")!.shadowRoot!.activeElement?.id)).toBe("chorus-question");

    // Record the answer's text each time it changes while it streams.
    await page.evaluate(() => {
      const root = document.querySelector("[data-chorus-widget]")!.shadowRoot!;
      const seen: string[] = (window.streamed = []);
      new MutationObserver(() => {
        const streaming = root.querySelector('.msg[aria-busy="true"] .text');
        if (streaming?.textContent) seen.push(streaming.textContent);
      }).observe(root.querySelector(".log")!, { subtree: true, childList: true, characterData: true });
    });
    const stream = page.waitForResponse((r) => r.url().includes("/api/embed/") && r.request().method() === "POST");
    await askWidget(page, "How long do refunds take?");
    const first = await lastAnswer(page).locator(".text").textContent();
    expect(first).toContain("14 days");
    // The answer came as several server-sent pieces. (How many the page showed apart depends on how they were
    // packed into reads: pieces that arrive together are drawn in one task, which the observer sees once.)
    const events = (await (await stream).text()).split("\n\n").filter((e) => e.includes('"done":false'));
    expect(events.length).toBeGreaterThan(1);
    // Whatever the page showed while it streamed was the answer so far.
    const streamed: string[] = await page.evaluate(() => window.streamed);
    expect(streamed.length).toBeGreaterThan(0);
    for (const shown of streamed) expect(first!.startsWith(shown), JSON.stringify({ shown, first })).toBe(true);
    expect(await lastAnswer(page).getByRole("list", { name: "Sources" }).textContent()).toContain("Refund policy");

    await askWidget(page, "Is shipping free?");
    expect(await lastAnswer(page).locator(".text").textContent()).toContain("50 euros");
    expect(await lastAnswer(page).getByRole("list", { name: "Sources" }).textContent()).toContain("Shipping");

    // The host page's CSS does not reach in: the user's message keeps the widget's own colours and font.
    const style = await page.locator(".msg.user").first().evaluate((el) => {
      const s = (globalThis as any).getComputedStyle(el);
      return { color: s.color, background: s.backgroundColor, font: s.fontFamily };
    });
    expect(style).toEqual({ color: "rgb(255, 255, 255)", background: "rgb(10, 125, 85)", font: expect.stringContaining("system-ui") });
    expect(await page.locator("chorus-widget").evaluate((el) => (globalThis as any).getComputedStyle(el).borderTopStyle)).toBe("none");
    await screenshot(page, "widget-two-answers");

    // A reload keeps the conversation (and its session): the follow-up belongs to it.
    await page.reload();
    await page.getByRole("button", { name: /Open chat/ }).click();
    expect(await page.locator(".msg.user").allTextContents()).toEqual(["You: How long do refunds take?", "You: Is shipping free?"]);
    await askWidget(page, "And when is the support desk open?");
    expect(await lastAnswer(page).locator(".text").textContent()).toContain("Monday to Friday");
    await screenshot(page, "widget-follow-up");
    const sessions = await server.node.store.db.selectFrom("assistant_sessions").select("id").where("agent_id", "=", agent.agent_id).execute();
    expect(sessions).toHaveLength(1);
    const messages = await server.node.store.db.selectFrom("assistant_messages").select("id").where("session_id", "=", sessions[0]!.id).execute();
    expect(messages).toHaveLength(6);

    // Keyboard: Escape closes the panel and gives focus back to the bubble.
    await page.keyboard.press("Escape");
    expect(await page.locator("#chorus-panel").isHidden()).toBe(true);
    expect(await page.evaluate(() => document.querySelector("[data-chorus-widget]")!.shadowRoot!.activeElement?.className)).toBe("launcher");
    expect(errors).toEqual([]);
    await context.close();
  });

  it("passes a verified visitor's identity", async () => {
    const agent = await publishedAgent(server, operator, { allowed_origins: ["localhost"] });
    const context = await browser.newContext();
    const userHash = crypto.createHmac("sha256", agent.secret).update("customer-42").digest("hex");
    const { page } = await openHost(context, { "agent-key": agent.agent_key, "user-id": "customer-42", "user-hash": userHash });
    await page.getByRole("button", { name: /Open chat/ }).click();
    await askWidget(page, "Is shipping free?");
    const session = await server.node.store.db.selectFrom("assistant_sessions").select("user_id").where("agent_id", "=", agent.agent_id).executeTakeFirstOrThrow();
    expect(session.user_id).toBe("customer-42");

    // The page's script signs another visitor in: it forgets the conversation and identifies the new one.
    const otherHash = crypto.createHmac("sha256", agent.secret).update("customer-43").digest("hex");
    await page.evaluate(([userId, userHash]) => {
      window.ChorusWidget.reset();
      window.ChorusWidget.identify({ userId, userHash });
    }, ["customer-43", otherHash]);
    expect(await page.locator(".msg").count()).toBe(0);
    await askWidget(page, "How long do refunds take?");
    const sessions = await server.node.store.db.selectFrom("assistant_sessions").select("user_id").where("agent_id", "=", agent.agent_id).orderBy("created_at").execute();
    expect(sessions.map((s) => s.user_id).sort()).toEqual(["customer-42", "customer-43"]);
    await context.close();
  });

  it("says what went wrong, and retries when that can help: rate limit, refused origin, lost network", async () => {
    const limited = await publishedAgent(server, operator, { allowed_origins: ["localhost"], rate_limit_per_minute: 1 });
    const context = await browser.newContext();
    const { page } = await openHost(context, { "agent-key": limited.agent_key, theme: "dark", position: "left" });
    await page.getByRole("button", { name: /Open chat/ }).click();
    await askWidget(page, "Is shipping free?");
    await page.getByRole("textbox", { name: "Your question" }).fill("How long do refunds take?");
    await page.getByRole("button", { name: "Send" }).click();
    const alert = page.getByRole("alert");
    await expect.poll(() => alert.textContent()).toMatch(/Too many questions at once\. You can ask again in \d+ seconds?\./);
    expect(await alert.getByRole("button", { name: /Try again \(\d+\)/ }).isDisabled()).toBe(true);
    await screenshot(page, "widget-rate-limited");
    await context.close();

    const elsewhere = await publishedAgent(server, operator, { allowed_origins: ["shop.example.com"] });
    const refused = await openHost(await browser.newContext(), { "agent-key": elsewhere.agent_key });
    await refused.page.getByRole("button", { name: /Open chat/ }).click();
    await refused.page.getByRole("textbox", { name: "Your question" }).fill("Hello?");
    await refused.page.getByRole("textbox", { name: "Your question" }).press("Enter");
    await expect.poll(() => refused.page.getByRole("alert").textContent()).toBe("This assistant is not available on this website.");
    expect(await refused.page.getByRole("alert").getByRole("button").count()).toBe(0);
    await screenshot(refused.page, "widget-refused");

    const agent = await publishedAgent(server, operator, { allowed_origins: ["localhost"] });
    const offline = await browser.newContext();
    const { page: lost } = await openHost(offline, { "agent-key": agent.agent_key });
    await lost.getByRole("button", { name: /Open chat/ }).click();
    await offline.setOffline(true);
    await lost.getByRole("textbox", { name: "Your question" }).fill("How long do refunds take?");
    await lost.getByRole("textbox", { name: "Your question" }).press("Enter");
    await expect.poll(() => lost.getByRole("alert").textContent()).toContain("The connection was lost.");
    await screenshot(lost, "widget-offline");
    await offline.setOffline(false);
    await lost.getByRole("alert").getByRole("button", { name: "Try again" }).click();
    await expect.poll(() => lastAnswer(lost).locator(".text").textContent()).toContain("14 days");
    expect(await lost.locator(".msg.user").count()).toBe(1); // the retry did not repeat the question in the log
    expect(await lost.getByRole("alert").isHidden()).toBe(true);
    await offline.close();
  });

  it("shows a source with a web address as a link, and never a script address", async () => {
    const agent = await publishedAgent(server, operator, { allowed_origins: ["localhost"] });
    const context = await browser.newContext();
    // A kept conversation whose answer cites two sources (as answers do once documents have addresses).
    await context.addInitScript(
      ([key, value]) => localStorage.setItem(key, value),
      [
        `chorus-widget:${server.url}:${agent.agent_key}`,
        JSON.stringify({
          messages: [
            { role: "user", text: "Refunds?" },
            { role: "assistant", text: "Within 14 days.", sources: [{ title: "Refund policy", url: "https://docs.example.com/refunds" }, { title: "Tricky", url: "javascript:alert(1)" }] },
          ],
        }),
      ],
    );
    const { page } = await openHost(context, { "agent-key": agent.agent_key });
    await page.getByRole("button", { name: /Open chat/ }).click();
    const link = page.getByRole("link", { name: "Refund policy" });
    expect(await link.getAttribute("href")).toBe("https://docs.example.com/refunds");
    expect(await link.getAttribute("rel")).toBe("noopener noreferrer");
    expect(await page.getByRole("link", { name: "Tricky" }).count()).toBe(0);
    expect(await page.getByRole("list", { name: "Sources" }).textContent()).toContain("Tricky");
    await screenshot(page, "widget-source-links");
    await context.close();
  });

  it("is small: under 20 KB gzipped", async () => {
    const res = await fetch(`${server.url}/widget.js`, { headers: { "accept-encoding": "gzip" } });
    expect(res.headers.get("content-encoding")).toBe("gzip");
    // fetch decompresses; the compressed size is the server's Content-Length-less body as sent, so measure it raw.
    const raw = await new Promise<number>((resolve, reject) => {
      http.get(`${server.url}/widget.js`, { headers: { "accept-encoding": "gzip" } }, (r) => {
        let bytes = 0;
        r.on("data", (c: Buffer) => (bytes += c.length));
        r.on("end", () => resolve(bytes));
      }).on("error", reject);
    });
    console.log(`widget.js: ${raw} bytes gzipped, ${(await res.text()).length} bytes minified`);
    expect(raw).toBeLessThan(20 * 1024);
  });
});
