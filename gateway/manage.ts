/**
 * The operators' command line: `npm run manage -- <command> [--flag value ...]`. It works on the store directly
 * (as Zulip's manage.py does), so on the embedded store the server must be stopped first; on Postgres it can run
 * beside the workers. Agents, versions and webhooks are written with the same functions (actors/assistant/agent-records.ts)
 * and checked with the same schemas as the console's endpoints; the agent actors of a running server re-read
 * their row within a second, so a publish or rollback from here is served without a restart.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import type { ValidateFunction } from "ajv";
import type { Transaction } from "kysely";
import { loadAssistantConfig } from "../actors/assistant/config.ts";
import { loadConfig, type Config } from "../runtime/config.ts";
import { Keyring, hashPassword } from "../runtime/secrets.ts";
import type { Store } from "../runtime/store/store.ts";
import { createdAgent, insertAgent, insertVersion, insertWebhook, publishVersion, readAgent, rollbackAgent, type AgentRow } from "../actors/assistant/agent-records.ts";
import { agentsWithVersionCounts } from "../actors/assistant/reads.ts";
import { insertApiKey } from "../actors/assistant/operator.ts";
import { findUserByEmail } from "../actors/chat/reads/users.ts";
import { serverRealmId } from "../actors/chat/reads/realms.ts";
import type { KnowledgeDocument, Published } from "../actors/assistant/agent.protocol.ts";
import type { DocumentFormat } from "../actors/assistant/ingest.ts";
import { insertAccount, ROLE } from "../actors/chat/organization/realm.ts";
import { setPasswordHash } from "../actors/chat/organization/accounts.ts";
import { EMAIL } from "../actors/chat/organization/realm.ts";
import { WEBHOOK_EVENTS } from "../actors/assistant/webhooks.ts";
import { checkBody, isUuid } from "./assistant/app.ts";
import { isOperatorRole, newOperatorApiKey } from "./assistant/auth.ts";
import { AGENT_BODY, agentSpec, VERSION_BODY, versionSpec, WEBHOOK_BODY, webhookSpec, type AgentBody, type VersionBody } from "./assistant/internal.ts";
import { ajv } from "./validate.ts";
import { lockDataDir } from "./lock.ts";
import { prepareStore, siteFor, writeZuliprc } from "./prepare.ts";
import type { Database } from "../actors/schema.ts";

const HELP = `Usage: npm run manage -- <command> [options]

Accounts:
  create-user --email E --name N [--role owner|administrator|moderator|member|guest] [--password P]
      Create an account; prints its user id and API key.
  set-password --email E --password P
      Set an account's password (--password - reads it from standard input). The owner created on first start
      has none: give it one to log in to the assistant's console.
  zuliprc --email E [--site URL]
      Print a zuliprc for an existing account (its existing API key).

The assistant:
  create-api-key --email E
      A new API key for the assistant's internal and mobile endpoints (the account must be an owner or
      administrator); shown once.
  create-agent --name N [--origin HOST]... [--rate-limit N] [--mobile-webhook-url URL]
      Create an agent; prints its agent_id, public agent key and secret (shown once).
  list-agents
      Every agent: id, name, public key, published version, number of versions.
  add-version --agent ID [--title T] [--instructions TEXT | --instructions-file F] [--settings JSON] [--publish] FILE...
      A new version whose knowledge is the given text, markdown or HTML files (.txt, .md, .markdown, .html, .htm); each document's
      title is its file name without the extension, or --title (one file only). --publish publishes it too.
  publish --agent ID --version ID
  rollback --agent ID
      Publish a version; go back to the previously published one (one step per call).
  add-webhook --agent ID --url URL [--events conversation.created,message.received,message.sent]
      Add a webhook endpoint (default: every event); prints its id and whsec_ secret (shown once).

  help
      This text.

The store is the one the server uses: DATABASE_URL, else PGlite under DATA_DIR (default ./data).`;

const OPTIONS = {
  email: { type: "string" },
  name: { type: "string" },
  role: { type: "string" },
  password: { type: "string" },
  site: { type: "string" },
  agent: { type: "string" },
  version: { type: "string" },
  title: { type: "string" },
  instructions: { type: "string" },
  "instructions-file": { type: "string" },
  settings: { type: "string" },
  publish: { type: "boolean" },
  origin: { type: "string", multiple: true },
  "rate-limit": { type: "string" },
  "mobile-webhook-url": { type: "string" },
  url: { type: "string" },
  events: { type: "string" },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>["values"];

interface Context {
  store: Store<Database>;
  keyring: Keyring;
  config: Config;
  values: Values;
  files: string[];
}

/** A usage mistake: printed without a stack, exit status 1. */
class UsageError extends Error {}

const KNOWLEDGE_EXTENSIONS = new Map<string, DocumentFormat>([
  [".txt", "text"],
  [".md", "markdown"],
  [".markdown", "markdown"],
  [".html", "html"],
  [".htm", "html"],
]);

async function account(db: Store<Database>["db"], email: string | undefined) {
  const user = email ? await findUserByEmail(db, email) : undefined;
  if (!user) throw new UsageError(`no account with e-mail ${email ?? "(missing --email)"}`);
  return user;
}

async function agentOf(ctx: Context): Promise<AgentRow> {
  const id = ctx.values.agent?.toLowerCase();
  if (!id) throw new UsageError("--agent is required (an agent_id; see list-agents)");
  const agent = isUuid(id) ? await readAgent(ctx.store.db, id) : undefined;
  if (!agent) throw new UsageError(`no agent ${id}`);
  return agent;
}

/** The same checks as the HTTP endpoint's body (one schema), reported as a usage error. */
function validated<T>(validate: ValidateFunction, body: unknown): T {
  try {
    return checkBody<T>(validate, body);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

const validateAgent = ajv.compile(AGENT_BODY);
const validateVersion = ajv.compile(VERSION_BODY);
const validateWebhook = ajv.compile(WEBHOOK_BODY);

function transaction<T>(ctx: Context, fn: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
  return ctx.store.db.transaction().execute(fn);
}

function readPassword(values: Values): string {
  const password = values.password === "-" ? fs.readFileSync(0, "utf8").replace(/\r?\n$/, "") : values.password;
  if (!password) throw new UsageError("--password is required (or --password - to read it from standard input)");
  if (password.length > 1000) throw new UsageError("--password is longer than 1000 characters");
  return password;
}

/** The knowledge documents of add-version: text, markdown or HTML files, titled by file name or --title. */
function readDocuments(files: string[], title: string | undefined): KnowledgeDocument[] {
  if (!files.length) throw new UsageError("add-version needs at least one .txt, .md or .html file");
  if (title !== undefined && files.length > 1) throw new UsageError("--title names one document: give one file with it");
  return files.map((file) => {
    const ext = path.extname(file).toLowerCase();
    const format = KNOWLEDGE_EXTENSIONS.get(ext);
    if (!format) throw new UsageError(`${file}: only text, markdown and HTML files (.txt, .md, .markdown, .html, .htm) are knowledge`);
    let text: string;
    try {
      text = fs.readFileSync(file, "utf8");
    } catch (err) {
      throw new UsageError(`${file}: ${(err as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (err as Error).message}`);
    }
    if (text.includes("\u0000")) throw new UsageError(`${file}: not a text file`);
    return { title: title ?? path.basename(file, path.extname(file)), text, format };
  });
}

function printPublished(p: Published): void {
  console.log(`published version ${p.version_id} of agent ${p.agent_id}`);
}

const COMMANDS: Record<string, (ctx: Context) => Promise<void>> = {
  async "create-user"({ store, keyring, values }) {
    const email = values.email?.trim() ?? "";
    const name = values.name?.trim() ?? "";
    const role = ROLE[(values.role ?? "member") as keyof typeof ROLE];
    if (!EMAIL.test(email)) throw new UsageError("--email must be an e-mail address");
    if (!name) throw new UsageError("--name is required");
    if (!role) throw new UsageError(`--role must be one of ${Object.keys(ROLE).join(", ")}`);
    const realm = await serverRealmId(store.db);
    const passwordHash = values.password ? await hashPassword(values.password) : null;
    const created = await store.db.transaction().execute((trx) => insertAccount(trx, realm, { email, fullName: name, passwordHash, role }, keyring));
    console.log(`created user ${created.user_id} (${email}, role ${role})\nAPI key: ${created.api_key}`);
  },

  async "set-password"({ store, values }) {
    const user = await account(store.db, values.email);
    const passwordHash = await hashPassword(readPassword(values));
    await setPasswordHash(store.db, user.id, passwordHash);
    console.log(`password set for ${user.delivery_email}`);
  },

  async zuliprc({ store, keyring, config, values }) {
    const user = await account(store.db, values.email);
    const site = values.site ?? siteFor(config, config.port);
    console.log(`[api]\nemail=${user.email}\nkey=${keyring.decrypt(user.api_key_enc)}\nsite=${site}`);
  },

  async "create-api-key"(ctx) {
    const user = await account(ctx.store.db, ctx.values.email);
    if (!isOperatorRole(user.role) || !user.is_active) throw new UsageError(`${user.delivery_email} is not an active owner or administrator`);
    const { key, keyId, keyHash } = newOperatorApiKey(ctx.keyring);
    await transaction(ctx, (trx) => insertApiKey(trx, user.id, { keyId, keyHash }));
    console.log(`API key ${keyId} for ${user.delivery_email} (send it as Authorization: Bearer <key>; shown once):\n${key}`);
  },

  async "create-agent"(ctx) {
    const { values } = ctx;
    const body = validated<AgentBody>(validateAgent, {
      name: values.name,
      ...(values.origin ? { allowed_origins: values.origin } : {}),
      ...(values["rate-limit"] !== undefined ? { rate_limit_per_minute: Number(values["rate-limit"]) } : {}),
      ...(values["mobile-webhook-url"] !== undefined ? { mobile_webhook_url: values["mobile-webhook-url"] } : {}),
    });
    const spec = agentSpec(body, await serverRealmId(ctx.store.db), loadAssistantConfig());
    const row = await transaction(ctx, (trx) => insertAgent(trx, ctx.keyring, crypto.randomUUID(), spec));
    const created = createdAgent(row, ctx.keyring);
    console.log(`agent_id: ${created.agent_id}\nagent_key: ${created.agent_key}\nsecret: ${created.secret}`);
    if (created.mobile_webhook_secret) console.log(`mobile_webhook_secret: ${created.mobile_webhook_secret}`);
  },

  async "list-agents"({ store }) {
    const agents = await agentsWithVersionCounts(store.db);
    if (!agents.length) console.log("no agents");
    for (const a of agents) {
      console.log(`${a.id}  ${a.name}  key ${a.agent_key}  published ${a.published_version_id ?? "(none)"}  versions ${Number(a.versions ?? 0)}`);
    }
  },

  async "add-version"(ctx) {
    const { values } = ctx;
    const agent = await agentOf(ctx);
    if (values.instructions !== undefined && values["instructions-file"] !== undefined) throw new UsageError("give --instructions or --instructions-file, not both");
    let settings: unknown;
    if (values.settings !== undefined) {
      try {
        settings = JSON.parse(values.settings);
      } catch {
        throw new UsageError("--settings must be a JSON object");
      }
    }
    const instructions = values["instructions-file"] !== undefined ? fs.readFileSync(values["instructions-file"], "utf8") : values.instructions;
    const body = validated<VersionBody>(validateVersion, {
      documents: readDocuments(ctx.files, values.title),
      ...(instructions !== undefined ? { instructions } : {}),
      ...(settings !== undefined ? { settings } : {}),
    });
    const spec = versionSpec(body);
    const added = await transaction(ctx, (trx) => insertVersion(trx, agent.id, spec));
    console.log(`version_id: ${added.version_id} (${added.documents} documents, ${added.chunks} chunks)`);
    if (values.publish) printPublished(await transaction(ctx, (trx) => publishVersion(trx, agent.id, added.version_id)));
  },

  async publish(ctx) {
    const agent = await agentOf(ctx);
    const version = ctx.values.version?.toLowerCase();
    if (!version || !isUuid(version)) throw new UsageError("--version must be a version_id");
    printPublished(await transaction(ctx, (trx) => publishVersion(trx, agent.id, version)));
  },

  async rollback(ctx) {
    const agent = await agentOf(ctx);
    printPublished(await transaction(ctx, (trx) => rollbackAgent(trx, agent.id)));
  },

  async "add-webhook"(ctx) {
    const agent = await agentOf(ctx);
    const events = ctx.values.events?.split(",").map((e) => e.trim()).filter(Boolean) ?? [...WEBHOOK_EVENTS];
    const body = validated<{ url: string; events: string[] }>(validateWebhook, { url: ctx.values.url, events });
    const spec = webhookSpec(body, loadAssistantConfig());
    const created = await transaction(ctx, (trx) => insertWebhook(trx, ctx.keyring, agent.id, spec));
    console.log(`webhook_id: ${created.webhook_id}\nsecret: ${created.secret}`);
  },
};

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (!command || command === "help" || command === "--help") {
    console.log(HELP);
    return command ? 0 : 2;
  }
  const run = COMMANDS[command];
  if (!run) {
    console.error(`unknown command '${command}'\n\n${HELP}`);
    return 2;
  }
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: OPTIONS, allowPositionals: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (parsed.positionals.length && command !== "add-version") throw new UsageError(`${command} takes no file arguments (got ${parsed.positionals.join(" ")})`);
  const config = loadConfig();
  const unlock = config.databaseUrl ? () => {} : lockDataDir(config.dataDir, "the server");
  const keyring = Keyring.load(config.dataDir, config.secret);
  const { store, owner } = await prepareStore(config, keyring);
  if (owner) {
    const file = path.join(config.dataDir, "zuliprc");
    writeZuliprc(file, owner.email, owner.apiKey, siteFor(config, config.port));
    console.error(`manage: created the organization; the owner's credentials are in ${file}`);
  }
  try {
    await run({ store, keyring, config, values: parsed.values, files: parsed.positionals });
    return 0;
  } finally {
    await store.close();
    unlock();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`manage: ${err instanceof Error ? err.message : err}`);
    process.exit(1);
  },
);
