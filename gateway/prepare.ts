/**
 * What the server and the CLI (manage.ts) both do first: open and migrate the store, create the organization on
 * first use, and write a zuliprc. Apart from main.ts so that a CLI call does not load the HTTP server (uWS, the
 * routes, socket.io): a second of every `npm run manage`.
 */
import fs from "node:fs";
import path from "node:path";
import type { Config } from "../runtime/config.ts";
import type { Keyring } from "../runtime/secrets.ts";
import { openDatabase } from "../runtime/store/db.ts";
import { SqlStore } from "../runtime/store/sql-store.ts";
import { StoreMaintenance } from "../runtime/store/store-maintenance.ts";
import type { Store } from "../runtime/store/store.ts";
import { loadChatConfig, type ChatConfig } from "../actors/chat/config.ts";
import { MessageLog } from "../actors/chat/message-log.ts";
import { SearchDocumentFill } from "../actors/chat/search-fill.ts";
import { migrations } from "../actors/migrations/index.ts";
import { bootstrapOrganization } from "../actors/chat/organization/realm.ts";
import type { Database } from "../actors/schema.ts";

export const OWNER_EMAIL = "owner@chorus.example";

/** The configured store and chat's message log on it, as they are (a worker whose primary prepared them). */
export async function openStore(config: Config, chat: ChatConfig = loadChatConfig()): Promise<{ store: Store<Database>; messageLog: MessageLog }> {
  const store = new SqlStore<Database>(await openDatabase({ databaseUrl: config.databaseUrl, dataDir: config.dataDir }));
  const messageLog = new MessageLog(store, chat);
  // The search documents of messages stored before they were kept (migration 2026-11-28T0900), filled after migrating.
  new SearchDocumentFill(store);
  // PGlite runs no autovacuum: its vacuums and analyzes, in turn with the requests. On both, the empty tables the
  // planner has never seen analyzed (runtime/store/store-maintenance.ts).
  new StoreMaintenance(store, { autovacuum: store.engine === "pglite" });
  return { store, messageLog };
}

/** Open the store, migrate it, and create the organization on first start. Returns the owner's credentials then. */
export async function prepareStore(
  config: Config,
  keyring: Keyring,
  chat: ChatConfig = loadChatConfig(),
): Promise<{ store: Store<Database>; messageLog: MessageLog; owner?: { realmId: number; userId: number; email: string; apiKey: string } }> {
  const { store, messageLog } = await openStore(config, chat);
  await store.migrate(migrations);
  const owner = await bootstrapOrganization(store, keyring, {
    email: process.env.OWNER_EMAIL ?? OWNER_EMAIL,
    fullName: process.env.OWNER_NAME ?? "Owner",
    passwordHash: null,
  });
  return { store, messageLog, owner };
}

export function writeZuliprc(file: string, email: string, apiKey: string, site: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `[api]\nemail=${email}\nkey=${apiKey}\nsite=${site}\n`, { mode: 0o600 });
}

export function siteFor(config: Config, port: number): string {
  const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
  return process.env.SITE_URL ?? `http://${host}:${port}`;
}

