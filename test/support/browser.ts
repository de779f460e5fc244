/**
 * A headless Chromium for the page tests: Debian's /usr/bin/chromium driven by playwright-core (no browser
 * download). One browser per test file (launching takes about a second); each test opens its own context, so
 * storage and cookies start empty. Screenshots go to test/screenshots/ (gitignored) for a person to look at.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";

export const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Without Chromium the page tests are skipped (global-setup says so once); `.ci/run` installs it, so CI runs them. */
export const HAVE_CHROMIUM = fs.existsSync(CHROMIUM);

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

export const SCREENSHOTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "screenshots");

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
}

/** Save the page as test/screenshots/{name}.png (whole page) and return the file's path. */
export async function screenshot(page: Page, name: string): Promise<string> {
  fs.mkdirSync(SCREENSHOTS_DIR, { recursive: true });
  const file = path.join(SCREENSHOTS_DIR, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

/** Errors the page's scripts threw or logged, and requests the Content Security Policy blocked: a test expects none. */
export function collectPageErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (err) => errors.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(`console: ${msg.text()}`);
  });
  return errors;
}
