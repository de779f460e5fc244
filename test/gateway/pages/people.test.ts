/**
 * The people pages in a real browser against a real server: an invited person joins through the page from their
 * e-mail and then uses the API with the new account; a forgotten password is reset end to end (request form,
 * e-mail, link, new password); unusable links say why. (The API under them runs on both engines in
 * test/gateway/chat/users/password-reset.test.ts and the invitation tests.)
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import type { Browser, Page } from "playwright-core";
import { api, createUser, startTestServer, type TestServer } from "../../support/server.ts";
import { collectPageErrors, HAVE_CHROMIUM, launchBrowser, screenshot } from "../../support/browser.ts";
import { emailKeyFor, lastEmailTo } from "../../support/mail.ts";

// A browser test drives several pages, and its file starts a browser beside the server: on a busy 2-core machine
// both take longer than an API test.
vi.setConfig({ testTimeout: 90_000, hookTimeout: 120_000 });

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

/** A fresh page (own storage), and the script errors it collects: a test expects none. */
async function openPage(path: string): Promise<{ page: Page; errors: string[] }> {
  const page = await (await browser.newContext()).newPage();
  const errors = collectPageErrors(page);
  await page.goto(`${server.url}${path}`);
  return { page, errors };
}

const fetchApiKey = (username: string, password: string) => api(server, "POST", "/fetch_api_key", { params: { username, password } });

describe.skipIf(!HAVE_CHROMIUM)("people pages", () => {
  it("an invited person joins through the e-mailed link, then calls the API with the new account", async () => {
    expect((await api(server, "POST", "/invites", { as: server.owner, params: { invitee_emails: "ivy@example.com", stream_ids: [] } })).status).toBe(200);
    const mail = await lastEmailTo(server, "ivy@example.com");
    const link = /(http:\/\/\S+\/join\/[\w-]+\/)/.exec(mail.body)![1]!;
    expect(link.startsWith(`${server.url}/join/`)).toBe(true);
    expect(mail.body).not.toContain("curl");

    const { page, errors } = await openPage(new URL(link).pathname);
    expect(await page.locator(".invited-email").textContent()).toBe("ivy@example.com");
    await page.getByLabel("Your name").fill("Ivy Quinn");
    await page.getByLabel("Password").fill("short");
    await screenshot(page, "join-form");
    await page.getByRole("button", { name: "Create my account" }).click();
    // The browser's own check stops a password under 8 characters: nothing was created yet.
    expect((await fetchApiKey("ivy@example.com", "short")).status).toBe(401);
    await page.getByLabel("Password").fill("ivy-long-password");
    await page.getByRole("button", { name: "Create my account" }).click();
    await page.getByRole("heading", { name: "Welcome, Ivy Quinn!" }).waitFor();
    expect(await page.locator(".server-url").textContent()).toBe(server.url);
    await screenshot(page, "join-welcome");
    expect(errors).toEqual([]);

    const key = await fetchApiKey("ivy@example.com", "ivy-long-password");
    expect(key.status).toBe(200);
    const me = await api(server, "GET", "/users/me", { as: { email: key.body.email, key: key.body.api_key } });
    expect(me.body).toMatchObject({ full_name: "Ivy Quinn", delivery_email: "ivy@example.com" });

    // The same link again: the page says it was used, with no form.
    const again = await openPage(new URL(link).pathname);
    expect(await again.page.getByRole("alert").textContent()).toContain("This invitation has already been used");
    expect(await again.page.locator("form").count()).toBe(0);
    await screenshot(again.page, "join-used");
    const unknown = await fetch(`${server.url}/join/not-a-real-key/`);
    expect(unknown.status).toBe(404);
    expect(await unknown.text()).toContain("Invitation not found");
  });

  it("a reusable invitation link asks for the address and e-mails the invitation", async () => {
    const created = await api(server, "POST", "/invites/multiuse", { as: server.owner, params: { stream_ids: [], invite_expires_in_minutes: 60 } });
    const { page, errors } = await openPage(new URL(created.body.invite_link).pathname);
    await page.getByLabel("E-mail address").fill("lin@example.com");
    await page.getByRole("button", { name: "Send me the link" }).click();
    await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
    await screenshot(page, "join-link-sent");
    expect(errors).toEqual([]);
    expect((await lastEmailTo(server, "lin@example.com")).body).toContain(`${server.url}/join/`);
  });

  it("resets a forgotten password by e-mail", async () => {
    await createUser(server, "rose@example.com", "Rose");
    const { page, errors } = await openPage("/");
    await page.getByRole("link", { name: "Forgot your password?" }).click();
    await page.getByLabel("E-mail address").fill("rose@example.com");
    await screenshot(page, "reset-request");
    await page.getByRole("button", { name: "Send me a reset link" }).click();
    await page.getByRole("heading", { name: "Check your e-mail" }).waitFor();
    await screenshot(page, "reset-requested");

    const mail = await lastEmailTo(server, "rose@example.com");
    expect(mail.subject).toBe("Reset your password for Chorus");
    const link = /(http:\/\/\S+\/accounts\/password\/reset\/[\w-]+\/)/.exec(mail.body)![1]!;
    await page.goto(link);
    await page.getByLabel("Password", { exact: true }).fill("roses-are-red");
    await page.getByLabel("The same password again").fill("roses-are-blue");
    await page.getByRole("button", { name: "Set my password" }).click();
    expect(await page.getByRole("alert").textContent()).toBe("The two passwords differ. Type the same password twice.");
    await screenshot(page, "reset-mismatch");
    await page.getByLabel("The same password again").fill("roses-are-red");
    await page.getByRole("button", { name: "Set my password" }).click();
    await page.getByRole("heading", { name: "Password changed" }).waitFor();
    await screenshot(page, "reset-done");
    expect(errors).toEqual([]);
    expect((await fetchApiKey("rose@example.com", "roses-are-red")).status).toBe(200);

    // The link works once: the page says so.
    await page.goto(link);
    await page.getByLabel("Password", { exact: true }).fill("another-password");
    await page.getByLabel("The same password again").fill("another-password");
    await page.getByRole("button", { name: "Set my password" }).click();
    await expect.poll(() => page.getByRole("alert").textContent()).toBe("This password reset link has already been used.");
    await screenshot(page, "reset-used");
    expect((await fetchApiKey("rose@example.com", "another-password")).status).toBe(401);
    expect(await emailKeyFor(server, "rose@example.com")).toBe(new URL(link).pathname.split("/")[4]);
  });
});
