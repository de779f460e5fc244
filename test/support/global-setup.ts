/**
 * Runs once before the suite: the real Redis and Postgres must answer, or the run stops here with a clear
 * message instead of a hundred confusing failures. Says once, too, when Zulip's reference files are absent (the
 * checks that need them are skipped; see zulip-reference.ts). Then makes the migrated stores test servers start
 * from (store-templates.ts), the server's build that spawned servers run (server-build.ts), and a JSON copy of
 * Zulip's OpenAPI description (openapi.ts), removed after the run. Sets WELCOME_MESSAGES=off for the servers tests start.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { CHROMIUM, HAVE_CHROMIUM } from "./browser.ts";
import { hasZulipReference, ZULIP_REFERENCE_MISSING } from "./zulip-reference.ts";
import { freshDatabase } from "./services.ts";
import { makeStoreTemplates } from "./store-templates.ts";
import { writeZulipOpenApiJson } from "./openapi.ts";
import { makeServerBuild } from "./server-build.ts";
import { reachable } from "./process.ts";

export default async function setup(): Promise<() => Promise<void>> {
  const missing: string[] = [];
  if (!(await reachable("127.0.0.1", 6379))) missing.push("Redis at 127.0.0.1:6379");
  if (!(await reachable("127.0.0.1", 5432))) missing.push("PostgreSQL at 127.0.0.1:5432");
  if (missing.length) throw new Error(`The test suite needs ${missing.join(" and ")}: start them first.`);
  if (!hasZulipReference("zulip.yaml") || !hasZulipReference("markdown_test_cases.json")) {
    console.warn(`Note: ${ZULIP_REFERENCE_MISSING}.`);
  }
  if (!HAVE_CHROMIUM) console.warn(`Note: no Chromium at ${CHROMIUM} (apt-get install chromium): the page tests are skipped.`);
  // Welcome Bot's message to every new account (on by default) would be one more message, conversation and user in
  // every test's counts; the servers of the tests (in this process's forks, and the processes they spawn) start
  // without it, and test/gateway/chat/users/welcome.test.ts turns it on.
  process.env.WELCOME_MESSAGES ??= "off";
  const openApiDir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-openapi-"));
  writeZulipOpenApiJson(path.join(openApiDir, "zulip.json"));
  const [removeTemplates, removeBuild] = await Promise.all([makeStoreTemplates(() => freshDatabase()), makeServerBuild()]);
  return async () => {
    removeBuild();
    await removeTemplates();
    fs.rmSync(openApiDir, { recursive: true, force: true });
  };
}
