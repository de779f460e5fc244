/**
 * A real Chorus node listening on port 0, on either engine, and a small Zulip client for it that checks every
 * response against Zulip's OpenAPI description.
 */
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { loadConfig, type Config, type RateLimitRules } from "../../runtime/config.ts";
import { startNode, type RunningNode } from "../../gateway/main.ts";
import { loadChatConfig, type ChatConfig } from "../../actors/chat/config.ts";
import { componentValidator, expectZulipResponse, responseValidator } from "./openapi.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "./services.ts";
import { copyPgliteTemplate } from "./store-templates.ts";
import { sql } from "kysely";
import { Keyring } from "../../runtime/secrets.ts";
import { Realm } from "../../actors/chat/organization/realm.protocol.ts";
import { callZulip, type ApiResponse, type Credentials, type RawCallOptions } from "./zulip-call.ts";

export type EngineName = "embedded" | "redis+postgres";
export const ENGINES: EngineName[] = ["embedded", "redis+postgres"];

/**
 * Each engine twice: with flag rows, and with every message's recipients kept as a recipient list, never expanded
 * while the test runs (see actors/chat/message-log.ts). Reads and flag changes must answer the same either way.
 */
export const FLAG_STORAGES = ENGINES.flatMap((engine) => [
  { engine, storage: "rows", overrides: {} as Partial<Config & ChatConfig> },
  { engine, storage: "recipient lists", overrides: { recipientListAbove: 0, recipientListDelayMs: 3_600_000 } as Partial<Config & ChatConfig> },
]);

export type { Credentials } from "./zulip-call.ts";

export interface TestServer {
  url: string;
  node: RunningNode;
  owner: Credentials;
  dataDir: string;
  close(): Promise<void>;
}

export function readZuliprc(file: string): Credentials & { site: string } {
  const text = fs.readFileSync(file, "utf8");
  const get = (k: string) => text.match(new RegExp(`^${k}=(.*)$`, "m"))?.[1] ?? "";
  return { email: get("email"), key: get("key"), site: get("site") };
}

const GENEROUS = [{ seconds: 60, calls: 1_000_000 }];
/** Rate limits no test trips by accident (a test of the limits sets its own through `overrides`). */
export const GENEROUS_RATE_LIMITS: RateLimitRules = { apiByUser: GENEROUS, apiByIp: GENEROUS, authenticateByUsername: GENEROUS, authenticateByIp: GENEROUS };

/** The services an engine needs, created fresh for one server (and removed by `release`). */
export async function engineConfig(engine: EngineName, overrides: Partial<Config> = {}) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-test-"));
  const cleanups: Array<() => Promise<void>> = [async () => fs.rmSync(dataDir, { recursive: true, force: true })];
  let extra: Partial<Config> = {};
  if (engine === "embedded") copyPgliteTemplate(dataDir);
  if (engine === "redis+postgres") {
    const db = await freshDatabase({ migrated: true });
    const redis = freshRedisPrefix();
    cleanups.push(db.drop, redis.clean);
    extra = { databaseUrl: db.url, redisUrl: REDIS_URL, redisPrefix: redis.prefix };
  }
  const config = loadConfig({
    port: 0,
    host: "127.0.0.1",
    dataDir,
    databaseUrl: undefined,
    redisUrl: undefined,
    workers: 1,
    secret: "test-secret",
    leaseSeconds: 3,
    rateLimits: GENEROUS_RATE_LIMITS,
    // An access line per request would bury the test run's output (test/gateway/logs.test.ts covers the log).
    accessLog: false,
    ...extra,
    ...overrides,
  });
  return {
    config,
    dataDir,
    release: async () => {
      for (const c of cleanups.reverse()) await c().catch(() => {});
    },
  };
}

/** The organization owner's credentials, from the zuliprc a node writes into its data directory on first start. */
export function ownerCredentials(dataDir: string): Credentials {
  const rc = readZuliprc(path.join(dataDir, "zuliprc"));
  return { email: rc.email, key: rc.key };
}

/** `overrides` may set chat's settings (actors/chat/config.ts) beside the node's. */
export async function startTestServer(engine: EngineName, overrides: Partial<Config & ChatConfig> = {}): Promise<TestServer> {
  const { config, dataDir, release } = await engineConfig(engine, overrides);
  const node = await startNode(config, { chat: loadChatConfig(overrides) });
  return {
    url: `http://127.0.0.1:${node.port}`,
    node,
    owner: ownerCredentials(dataDir),
    dataDir,
    close: async () => {
      await node.close();
      await release();
    },
  };
}

/**
 * A test server on `engine` whose node can be stopped and started again on the same store, data directory and
 * uploads (what a process restart leaves): `url` follows the running node.
 */
export async function startRestartableServer(engine: EngineName) {
  const { config, dataDir, release } = await engineConfig(engine);
  let node = await startNode(config);
  const owner = ownerCredentials(dataDir);
  await api({ url: `http://127.0.0.1:${node.port}` }, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "general" }] } });
  return {
    config,
    owner,
    get node() {
      return node;
    },
    get url() {
      return `http://127.0.0.1:${node.port}`;
    },
    /** Stops the node, runs `whileDown` (what happens while no process serves), and starts a new one. */
    restart: async (whileDown: () => Promise<void> = async () => {}) => {
      await node.close();
      await whileDown();
      node = await startNode(config);
    },
    close: async () => {
      await node.close();
      await release();
    },
  };
}

export type { ApiResponse } from "./zulip-call.ts";

export interface CallOptions extends RawCallOptions {
  /** Check the body against Zulip's OpenAPI description (default true). */
  validate?: boolean;
  /** The OpenAPI path template when the path has parameters. */
  template?: string;
}

/** One call to /api/v1, as a Zulip client makes it, its answer checked against Zulip's OpenAPI description. */
export async function api(server: { url: string }, method: string, apiPath: string, opts: CallOptions = {}): Promise<ApiResponse> {
  const res = await callZulip(server, method, apiPath, opts);
  const parsed = res.body;
  if (opts.validate !== false) {
    if (res.status === 200) expectZulipResponse(method, opts.template ?? apiPath, 200, documentedOnly(withRegisterRemindersChecked(parsed)));
    else {
      // The operation's own error schema where Zulip documents one for this status; else (Zulip documents few, and
      // its error classes add fields such as var_name or stream_id) the base coded-error shape without those.
      let errors = componentValidator("CodedError")(withoutDocumentedExtras(parsed));
      if (errors.length) {
        try {
          errors = responseValidator(method, opts.template ?? apiPath, res.status)(parsed);
        } catch {
          // no schema for this status: the base-shape errors stand
        }
      }
      if (errors.length) throw new Error(`${method} ${apiPath} ${res.status}: not a Zulip error:\n${errors.join("\n")}`);
    }
  }
  return res;
}

/**
 * Zulip's server puts `local_message_id` on the message event of the queue that sent it
 * (zerver/tornado/event_queue.py), but its OpenAPI description leaves the field out: set it aside for validation.
 */
function documentedOnly(body: any): any {
  if (!Array.isArray(body?.events)) return body;
  return { ...body, events: body.events.map(({ local_message_id, ...event }: any) => event) };
}

/**
 * POST /register's `reminders` are Zulip's reminder objects (zerver/lib/events.py: get_undelivered_reminders, the
 * objects the reminders events carry), but zulip.yaml documents them as scheduled messages: check them against the
 * Reminder schema here, and set them aside for the rest of the answer's validation.
 */
function withRegisterRemindersChecked(body: any): any {
  if (!Array.isArray(body?.reminders) || body.queue_id === undefined) return body;
  const errors = body.reminders.flatMap((r: unknown) => componentValidator("Reminder")(r));
  if (errors.length) throw new Error(`POST /register: reminders are not Zulip's reminder objects:\n${errors.join("\n")}`);
  return { ...body, reminders: [] };
}

/** Extra fields Zulip's error classes add to the envelope, by code. Anything else extra fails validation. */
const ERROR_EXTRAS: Record<string, string[]> = {
  STREAM_DOES_NOT_EXIST: ["stream", "stream_id"],
  REQUEST_VARIABLE_MISSING: ["var_name"],
  BAD_EVENT_QUEUE_ID: ["queue_id"],
  // RateLimitedError.
  RATE_LIMIT_HIT: ["retry-after"],
  // ValidationFailureError (a refused model, e.g. a linkifier): the messages by field.
  BAD_REQUEST: ["errors"],
  // CannotDeactivateGroupInUseError: where the group is used.
  CANNOT_DEACTIVATE_GROUP_IN_USE: ["objections"],
  // Named in the spec and in Zulip's description text; the re-serialized schema lost the properties.
  // CannotDeactivateLastUserError (DELETE /users/me documents them in its own error schema, not the operation's).
  CANNOT_DEACTIVATE_LAST_USER: ["is_last_owner", "entity"],
  MOVE_MESSAGES_TIME_LIMIT_EXCEEDED: ["first_message_id_allowed_to_move", "total_messages_in_topic", "total_messages_allowed_to_move"],
};

function withoutDocumentedExtras(body: any): any {
  if (!body || typeof body !== "object") return body;
  const copy = { ...body };
  for (const k of ERROR_EXTRAS[body.code] ?? []) delete copy[k];
  return copy;
}

/** Create a member with a password; returns their credentials. */
export async function createUser(
  server: Pick<TestServer, "url" | "owner"> & { node?: RunningNode },
  email: string,
  fullName = email.split("@")[0]!,
): Promise<Credentials & { id: number }> {
  const created = await api(server, "POST", "/users", { as: server.owner, params: { email, password: "pw-" + email, full_name: fullName } });
  if (created.status !== 200) throw new Error(`createUser: ${JSON.stringify(created.body)}`);
  const id = created.body.user_id as number;
  return { email, key: server.node ? await storedApiKey(server.node, id) : await fetchApiKey(server, email, "pw-" + email), id };
}

/**
 * A user's key as the server in this process stored it: what POST /fetch_api_key answers, without its password
 * check, a second scrypt run per created user (about 140 ms of CPU; test files create dozens of users per server).
 */
async function storedApiKey(node: RunningNode, userId: number): Promise<string> {
  const stored = await node.store.db.selectFrom("users").select("api_key_enc").where("id", "=", userId).executeTakeFirstOrThrow();
  return Keyring.load(node.config.dataDir, node.config.secret).decrypt(stored.api_key_enc);
}

async function fetchApiKey(server: { url: string }, email: string, password: string): Promise<string> {
  const res = await api(server, "POST", "/fetch_api_key", { params: { username: email, password } });
  if (res.status !== 200) throw new Error(`fetch_api_key: ${JSON.stringify(res.body)}`);
  return res.body.api_key as string;
}

/**
 * Create a user of any role (the API creates members only) through the realm actor, as the management CLI does;
 * returns their credentials.
 */
export async function createUserWithRole(server: TestServer, email: string, role: number, fullName = email.split("@")[0]!): Promise<Credentials & { id: number }> {
  const realm = await server.node.store.db.selectFrom("realms").select("id").executeTakeFirstOrThrow();
  const created = await server.node.system.ref(Realm, realm.id).ask({ op: "createUser", email, fullName, passwordHash: null, role });
  return { email, key: created.api_key, id: created.user_id };
}

/** Change stored realm settings (`realm_*` keys), for the settings no route changes yet. */
export async function setRealmSettings(server: TestServer, settings: Record<string, unknown>): Promise<void> {
  await server.node.store.db
    .updateTable("realms")
    .set({ settings: sql`settings || ${JSON.stringify(settings)}::jsonb` })
    .execute();
}

/** An event queue for the user, and a way to read what it holds without waiting. */
export async function eventQueue(server: TestServer, as: Credentials, eventTypes?: string[]) {
  const registered = await api(server, "POST", "/register", { as, params: eventTypes ? { event_types: eventTypes } : {} });
  if (registered.status !== 200) throw new Error(`register: ${JSON.stringify(registered.body)}`);
  const queueId = registered.body.queue_id as string;
  return {
    state: registered.body,
    async events(): Promise<any[]> {
      const res = await api(server, "GET", "/events", { as, params: { queue_id: queueId, last_event_id: -1, dont_block: true } });
      return res.body.events.filter((e: any) => e.type !== "heartbeat");
    },
  };
}

/**
 * GET /users/me on a connection of its own (no keep-alive), so that successive calls land on either worker of a
 * deployment (the kernel spreads new connections over the processes listening on the port). `expected`: the status
 * the call must answer (200 by default, whose body is validated against Zulip's schema).
 */
export function meOnNewConnection(port: number, auth: { email: string; key: string }, expected = 200): Promise<any> {
  const authorization = `Basic ${Buffer.from(`${auth.email}:${auth.key}`).toString("base64")}`;
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/api/v1/users/me", agent: false, headers: { authorization } }, (res) => {
      let text = "";
      res.on("data", (chunk) => (text += chunk));
      res.on("end", () => {
        const body = JSON.parse(text);
        if (res.statusCode !== expected) reject(new Error(`GET /users/me answered ${res.statusCode}, not ${expected}: ${text}`));
        else {
          if (expected === 200) expectZulipResponse("GET", "/users/me", expected, body);
          resolve(body);
        }
      });
    });
    req.on("error", reject);
  });
}
