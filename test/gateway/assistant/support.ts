/**
 * Helpers for the assistant's tests: an operator (the owner, given a password), JSON calls to the assistant's
 * endpoints, a knowledge base, and a local webhook receiver on 127.0.0.1.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { hashPassword } from "../../../runtime/secrets.ts";
import type { TestServer } from "../../support/server.ts";

export const OWNER_PASSWORD = "owner-password-1";

export interface JsonResponse {
  status: number;
  headers: Headers;
  body: any;
}

export async function call(
  server: { url: string },
  method: string,
  path: string,
  opts: { body?: unknown; raw?: string; key?: string; headers?: Record<string, string> } = {},
): Promise<JsonResponse> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  let body: string | undefined = opts.raw;
  if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await fetch(new URL(path, server.url), { method, headers, body });
  const text = await res.text();
  let parsed: any = text;
  if ((res.headers.get("content-type") ?? "").includes("json") && text) parsed = JSON.parse(text);
  return { status: res.status, headers: res.headers, body: parsed };
}

/** The owner gets a password (the first start creates it without one) so it can log in to the console. */
export async function operatorKey(server: TestServer): Promise<string> {
  await server.node.store.db
    .updateTable("users")
    .set({ password_hash: await hashPassword(OWNER_PASSWORD) })
    .where("delivery_email", "=", server.owner.email)
    .execute();
  const login = await call(server, "POST", "/api/internal/auth/login", { body: { email: server.owner.email, password: OWNER_PASSWORD } });
  if (login.status !== 200) throw new Error(`login: ${login.status} ${JSON.stringify(login.body)}`);
  const cookie = login.headers.get("set-cookie")!.split(";")[0]!;
  const key = await call(server, "POST", "/api/internal/api-keys", { body: {}, headers: { cookie, "x-csrf-token": login.body.csrf_token } });
  if (key.status !== 201) throw new Error(`api key: ${key.status} ${JSON.stringify(key.body)}`);
  return key.body.key;
}

export const HANDBOOK = [
  {
    title: "Refund policy",
    text: "Refunds are processed within 14 days of the request. To ask for a refund, write to billing with your order number.\n\nRefunds go back to the card used for the purchase.",
  },
  {
    title: "Shipping",
    text: "We ship worldwide with tracked couriers. Parcels to Europe arrive in three to five working days.\n\nShipping is free for orders above 50 euros.",
  },
  {
    title: "Opening hours",
    text: "The support desk is open Monday to Friday, from 9:00 to 17:00 Central European Time.",
  },
];

export async function createAgent(server: { url: string }, key: string, extra: Record<string, unknown> = {}) {
  const res = await call(server, "POST", "/api/internal/rag/agents", { key, body: { name: "Helper", ...extra } });
  if (res.status !== 201) throw new Error(`create agent: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body as { agent_id: string; agent_key: string; secret: string; mobile_webhook_secret?: string };
}

export async function createVersion(server: { url: string }, key: string, agentId: string, documents = HANDBOOK, extra: Record<string, unknown> = {}) {
  const res = await call(server, "POST", `/api/internal/rag/agents/${agentId}/versions`, { key, body: { documents, ...extra } });
  if (res.status !== 201) throw new Error(`create version: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.version_id as string;
}

export async function publishedAgent(server: { url: string }, key: string, extra: Record<string, unknown> = {}, versionExtra: Record<string, unknown> = {}) {
  const agent = await createAgent(server, key, extra);
  const versionId = await createVersion(server, key, agent.agent_id, HANDBOOK, versionExtra);
  const res = await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: versionId } });
  if (res.status !== 200) throw new Error(`publish: ${res.status} ${JSON.stringify(res.body)}`);
  return { ...agent, versionId };
}

export interface ReceivedHook {
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** An HTTP server on 127.0.0.1 recording every request; `answer` picks the status per request. */
export async function startReceiver(answer: (hook: ReceivedHook) => number = () => 200) {
  const received: ReceivedHook[] = [];
  const waiters: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const hook: ReceivedHook = { path: req.url ?? "", headers: req.headers as Record<string, string>, body: Buffer.concat(chunks).toString("utf8") };
      received.push(hook);
      res.statusCode = answer(hook);
      res.end();
      for (const w of waiters.splice(0)) w();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    /** Wait until `predicate` holds over what was received. */
    async until(predicate: (hooks: ReceivedHook[]) => boolean, timeoutMs = 5000): Promise<ReceivedHook[]> {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(received)) {
        if (Date.now() > deadline) throw new Error(`receiver: condition not met; got ${received.map((h) => h.path).join(", ")}`);
        await new Promise<void>((r) => {
          waiters.push(r);
          setTimeout(r, 50);
        });
      }
      return received;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/**
 * Hold the session actors' `record` asks (the commit of a streamed answer) until `release()`: what a client
 * receives meanwhile was sent before the answer was complete and committed.
 */
export function holdRecords(server: TestServer) {
  // The system's own (private) ask, which every typed reference sends through.
  const system = server.node.system as unknown as { ask(id: string, body: any, timeoutMs?: number): Promise<unknown> };
  const ask = system.ask.bind(system);
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  system.ask = async (id: string, body: any, timeoutMs?: number) => {
    if (body?.op === "record") await released;
    return ask(id, body, timeoutMs);
  };
  return {
    release,
    restore: () => {
      release();
      system.ask = ask;
    },
  };
}

/** Read until `done` holds (the webhook worker records a delivery just after the receiver saw it), for up to 5 s. */
export async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((r) => setTimeout(r, 25));
  }
}
