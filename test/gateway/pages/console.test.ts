/**
 * The operator console in a real browser against a real server (one browser for the file): an owner signs in,
 * creates an agent, uploads two documents, publishes, compares a second version with the published one, asks in
 * the test box (streamed, with sources, and a follow-up), rolls back, adds a webhook and resends a delivery, reads
 * the conversation, creates an API key for scripts, and signs out. A screenshot of every console page goes to
 * test/screenshots/console-*.png.
 * (The internal API under it runs on both engines in test/gateway/assistant/console-api.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Browser, Page } from "playwright-core";
import { startTestServer, type TestServer } from "../../support/server.ts";
import { collectPageErrors, HAVE_CHROMIUM, launchBrowser, screenshot } from "../../support/browser.ts";
import { call, OWNER_PASSWORD, operatorKey, startReceiver } from "../assistant/support.ts";

vi.setConfig({ testTimeout: 120_000 });

const ENV = { WEBHOOK_ALLOW_HOSTS: "127.0.0.1", WEBHOOK_POLL_MS: "50", WEBHOOK_RETRY_BASE_MS: "40", WEBHOOK_MAX_ATTEMPTS: "1" };

let server: TestServer;
let browser: Browser;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
const saved: Record<string, string | undefined> = {};

beforeAll(async () => {
  for (const [k, v] of Object.entries(ENV)) (saved[k] = process.env[k]), (process.env[k] = v);
  // The receiver refuses the first delivery, so the log shows a failure to resend.
  let answered = 0;
  receiver = await startReceiver(() => (answered++ === 0 ? 503 : 200));
  [server, browser] = await Promise.all([startTestServer("embedded"), launchBrowser()]);
  await operatorKey(server); // gives the owner a password
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
  await receiver?.close();
  for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
    else process.env[k] = v;
});

const REFUNDS = "# Refund policy\n\nRefunds are processed within 14 days of the request.\n\nRefunds go back to the card used for the purchase.\n";
const SHIPPING = "<h1>Shipping</h1><p>We ship worldwide with tracked couriers. Parcels to Europe arrive in three to five working days.</p>";

async function upload(page: Page, files: Array<{ name: string; text: string; title: string; url: string }>): Promise<void> {
  await page.getByLabel("Documents").setInputFiles(files.map((f) => ({ name: f.name, mimeType: "text/plain", buffer: Buffer.from(f.text) })));
  for (const [i, f] of files.entries()) {
    const set = page.getByRole("group", { name: `Document ${i + 1}: ${f.name}` });
    await set.getByLabel("Title").fill(f.title);
    await set.getByLabel("URL").fill(f.url);
  }
}

describe.skipIf(!HAVE_CHROMIUM)("operator console", () => {
  it("signs in, creates an agent, uploads and publishes documents, asks in the test box, rolls back, and signs out", async () => {
    const context = await browser.newContext();
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: server.url });
    const page = await context.newPage();
    const errors = collectPageErrors(page);

    // Sign in (a wrong password first). Asking who is signed in answers 401 before: the one expected browser error.
    await page.goto(`${server.url}/console/`);
    await page.getByRole("heading", { name: "Sign in to the console" }).waitFor();
    expect(errors.splice(0)).toEqual([expect.stringMatching(/status of 401/)]);
    await screenshot(page, "console-sign-in");
    await page.getByLabel("E-mail").fill(server.owner.email);
    await page.getByLabel("Password").fill("wrong password");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("form", { name: "Sign in" }).getByRole("status").textContent()).toContain("Wrong e-mail or password");
    errors.splice(0); // the refused sign-in's 401
    await page.getByLabel("Password").fill(OWNER_PASSWORD);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Agents", level: 1 }).waitFor();

    // Create an agent: its key, secret and embed snippet are shown once.
    await page.getByLabel("Name").fill("Support desk");
    await page.getByLabel("Allowed origins").fill("shop.example");
    await page.getByRole("button", { name: "Create agent" }).click();
    await page.getByRole("heading", { name: "Support desk: copy the secret now" }).waitFor();
    const secret = await page.getByRole("textbox", { name: "Secret", exact: true }).inputValue();
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    const snippet = await page.getByRole("textbox", { name: "Embed snippet" }).inputValue();
    expect(snippet).toMatch(new RegExp(`^<script src="${server.url}/widget.js" data-agent-key="ak_[\\w-]+" async></script>$`));
    await page.getByRole("button", { name: "Copy embed snippet" }).click();
    await expect.poll(() => page.evaluate(() => (globalThis as any).navigator.clipboard.readText() as Promise<string>)).toBe(snippet);
    expect(await page.getByRole("cell", { name: "Support desk" }).count()).toBe(1);
    await screenshot(page, "console-agents");
    const next = await page.getByRole("link", { name: "Next: add its knowledge (versions)" }).getAttribute("href");
    const agentId = /^#\/agents\/([\w-]+)\/versions$/.exec(next!)![1]!;

    // Settings.
    await page.getByRole("link", { name: "Support desk" }).click();
    await page.getByRole("heading", { name: "Support desk", level: 1 }).waitFor();
    await page.getByLabel("Questions per minute per visitor").fill("30");
    await page.getByRole("button", { name: "Save settings" }).click();
    await expect.poll(() => page.getByRole("form", { name: "Settings" }).getByRole("status").textContent()).toBe("Saved.");
    await screenshot(page, "console-agent-settings");

    // Upload two documents and publish them.
    await page.getByRole("link", { name: "Versions" }).click();
    await page.getByRole("heading", { name: "Support desk: versions" }).waitFor();
    await upload(page, [
      { name: "refunds.md", text: REFUNDS, title: "Refund policy", url: "https://shop.example/refunds" },
      { name: "shipping.html", text: SHIPPING, title: "", url: "https://shop.example/shipping" },
    ]);
    await screenshot(page, "console-versions-upload");
    await page.getByRole("button", { name: "Create version" }).click();
    await expect.poll(() => page.locator("#versions-status").textContent()).toMatch(/created: 2 documents/);
    await page.getByRole("button", { name: /^Publish version/ }).click();
    await expect.poll(() => page.locator("#versions-status").textContent()).toMatch(/is published/);
    const first = (await call(server, "GET", `/api/internal/rag/agents/${agentId}`, { headers: { cookie: await cookieOf(page) } })).body.published_version_id as string;
    expect(first).toMatch(/^[0-9a-f-]{36}$/);

    // What was ingested.
    await page.getByRole("link", { name: first.slice(0, 8) }).click();
    await page.getByRole("heading", { name: `Version ${first.slice(0, 8)}` }).waitFor();
    expect(await page.locator(".documents strong").allTextContents()).toEqual(["Refund policy", "shipping"]);
    await page.getByText("Show the text").first().click();
    await screenshot(page, "console-version-ingested");

    // A second version (refunds changed), compared with the published one, then published.
    await page.getByRole("link", { name: "Versions" }).click();
    await page.getByRole("heading", { name: "Support desk: versions" }).waitFor();
    await upload(page, [{ name: "refunds.md", text: REFUNDS.replace("14 days", "30 days"), title: "Refund policy", url: "https://shop.example/refunds" }]);
    await page.getByRole("button", { name: "Create version" }).click();
    await expect.poll(() => page.locator("#versions-status").textContent()).toMatch(/created: 1 documents/);
    const second = (await page.getByRole("button", { name: /^Publish version/ }).getAttribute("aria-label"))!.slice("Publish version ".length);
    await page.getByRole("link", { name: second }).click();
    await page.getByRole("heading", { name: "Compared with the published version" }).waitFor();
    expect(await page.locator(".changes li").allTextContents()).toEqual([expect.stringMatching(/^changed Refund policy \(\+1 −1 lines\)/), "removed shipping (+0 −1 lines)"]);
    await page.getByText("Show the changes").click();
    expect(await page.locator(".patch").textContent()).toContain("+Refunds are processed within 30 days");
    await screenshot(page, "console-version-compare");
    await page.getByRole("button", { name: "Publish" }).click();
    await expect.poll(() => page.locator("#versions-status").textContent()).toMatch(/is published/);

    // A webhook, to see deliveries of the test box's conversation.
    await page.getByRole("link", { name: "Webhooks" }).click();
    await page.getByRole("heading", { name: "Support desk: webhooks" }).waitFor();
    await page.getByLabel("Endpoint URL").fill(`${receiver.url}/hooks`);
    await page.getByLabel(/The agent answers/).uncheck();
    await page.getByLabel(/A visitor asks/).uncheck();
    await page.getByRole("button", { name: "Add webhook" }).click();
    await page.getByRole("heading", { name: "Copy the signing secret now" }).waitFor();
    expect(await page.getByRole("textbox", { name: "Signing secret" }).inputValue()).toMatch(/^whsec_/);

    // The test box: streamed answers with sources, and a follow-up in the same session.
    await page.getByRole("link", { name: "Test box" }).click();
    await page.getByRole("heading", { name: "Support desk: test box" }).waitFor();
    await page.getByLabel("Question").fill("How long do refunds take?");
    await page.getByRole("button", { name: "Ask" }).click();
    await expect.poll(() => page.locator(".exchange li.assistant .answer").first().textContent()).toContain("30 days");
    await page.locator(".exchange li.assistant .sources").first().waitFor();
    const sources = page.locator(".exchange li.assistant .sources").first();
    expect(await sources.textContent()).toContain("Refund policy");
    // A source links to its document's URL once versions keep the uploaded URLs (the answers work): then it must be this one.
    for (const href of await sources.locator("a").evaluateAll((links) => links.map((a) => a.getAttribute("href")))) expect(href).toBe("https://shop.example/refunds");
    await page.getByLabel("Question").fill("Do they go back to the card?");
    await page.getByRole("button", { name: "Ask" }).click();
    await expect.poll(() => page.locator(".exchange li.assistant").count()).toBe(2);
    await expect.poll(() => page.locator(".exchange li.assistant .answer").nth(1).textContent()).toContain("card");
    await screenshot(page, "console-test-box");

    // Roll back to the first version.
    await page.getByRole("link", { name: "Versions" }).click();
    await page.getByRole("button", { name: `Roll back to ${first.slice(0, 8)}` }).click();
    await expect.poll(() => page.locator("#versions-status").textContent()).toBe(`Rolled back: version ${first.slice(0, 8)} is published again.`);
    await screenshot(page, "console-versions");
    const rolledBack = await call(server, "POST", `/api/embed/${/data-agent-key="([\w-]+)"/.exec(snippet)![1]}`, { body: { question: "How long do refunds take?" } });
    expect(rolledBack.body.answer).toContain("14 days");

    // The delivery log: the first delivery failed (503, one attempt allowed); resend it.
    await page.getByRole("link", { name: "Webhooks" }).click();
    await page.getByRole("heading", { name: "Support desk: webhooks" }).waitFor();
    await expect
      .poll(async () => {
        await page.getByRole("button", { name: "Refresh" }).click();
        return page.locator("tbody tr").last().textContent();
      })
      .toMatch(/failed.*HTTP 503/);
    await page.getByRole("button", { name: /^Resend delivery/ }).last().click();
    await expect
      .poll(async () => {
        await page.getByRole("button", { name: "Refresh" }).click();
        return page.locator("tbody tr").last().textContent();
      })
      .toMatch(/delivered.*HTTP 200/);
    await screenshot(page, "console-webhooks");

    // Conversations: filtered by agent, then one read with its sources.
    await page.getByRole("link", { name: "Conversations" }).click();
    await page.getByRole("heading", { name: "Conversations" }).waitFor();
    await page.getByLabel("Agent").selectOption({ label: "Support desk" });
    await page.getByRole("button", { name: "Filter" }).click();
    await expect.poll(() => page.locator("tbody tr").count()).toBe(2);
    await screenshot(page, "console-conversations");
    await page.getByRole("row", { name: /Do they go back to the card|How long do refunds take/ }).first().getByRole("link").click();
    await page.getByRole("heading", { name: /^Conversation / }).waitFor();
    expect(await page.locator(".exchange li .who").allTextContents()).toEqual(expect.arrayContaining(["Visitor", "Agent"]));
    await screenshot(page, "console-conversation");

    // An API key for scripts, shown once: it reads what the console shows.
    await page.getByRole("link", { name: "API keys" }).click();
    await page.getByRole("button", { name: "Create an API key" }).click();
    await page.getByRole("heading", { name: "Copy the key now" }).waitFor();
    const apiKey = await page.getByRole("textbox", { name: "API key" }).inputValue();
    const listed = await call(server, "GET", "/api/internal/rag/agents", { key: apiKey });
    expect(listed.body.agents.map((a: { name: string }) => a.name)).toContain("Support desk");
    await screenshot(page, "console-api-keys");

    // Sign out: the session is gone, and the page asks to sign in again.
    const cookie = await cookieOf(page);
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in to the console" }).waitFor();
    expect((await call(server, "GET", "/api/internal/rag/agents", { headers: { cookie } })).status).toBe(401);
    expect(await cookieOf(page)).toBe("");
    expect(errors).toEqual([]);
    await context.close();
  });
});

async function cookieOf(page: Page): Promise<string> {
  const cookies = await page.context().cookies();
  return cookies.map((c) => `${c.name}=${c.value}`).join("; ");
}
