/**
 * Webhooks, per Standard Webhooks (https://www.standardwebhooks.com): events are written to the `webhook_outbox`
 * table in the same transaction as the change they report (so a reply never waits on a receiver, and nothing is
 * lost if the process dies), and a delivery worker on every node sends them.
 *
 * - Signature: `webhook-signature: v1,<base64 HMAC-SHA256(secret, "<webhook-id>.<webhook-timestamp>.<body>")>`,
 *   where the secret is the bytes after `whsec_` (base64). The id is the same on every retry; the timestamp is
 *   the attempt's, so a receiver may refuse old timestamps (replays) without refusing our retries.
 * - Retries: any answer but 2xx (or a network failure) retries after base·2^attempt, with full jitter, up to an
 *   hour, until `webhookMaxAttempts`; 410 Gone disables the endpoint and cancels its pending deliveries.
 * - Claiming: a worker takes due rows with FOR UPDATE SKIP LOCKED and pushes their next attempt a minute ahead
 *   before sending, so two workers never send one row at once and a worker that dies mid-send is retried.
 * - Address guard: the target's host is resolved by our own `lookup` (Node's fetch ignores http.Agent, so the
 *   request goes through node:http with that lookup); every address but a global unicast one (isForbiddenAddress)
 *   is refused unless the host is in WEBHOOK_ALLOW_HOSTS. The address checked is the
 *   address connected to: no window for DNS rebinding.
 */
import crypto from "node:crypto";
import dns from "node:dns";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import ipaddr from "ipaddr.js";
import { sql, type Transaction } from "kysely";
import type { AssistantConfig } from "./config.ts";
import { ChorusError } from "../../runtime/errors.ts";
import type { Keyring } from "../../runtime/secrets.ts";
import type { Store } from "../../runtime/store/store.ts";
import type { Database } from "../schema.ts";
import { log } from "../../runtime/log.ts";
import { gauges } from "../../runtime/metrics.ts";

export const WEBHOOK_EVENTS = ["conversation.created", "message.received", "message.sent"] as const;
export const MANIFEST_EVENT = "agent.runtime_manifest";

export function newWebhookSecret(): string {
  return `whsec_${crypto.randomBytes(24).toString("base64")}`;
}

export function signWebhook(secret: string, msgId: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.startsWith("whsec_") ? secret.slice(6) : secret, "base64");
  return `v1,${crypto.createHmac("sha256", key).update(`${msgId}.${timestamp}.${body}`).digest("base64")}`;
}

/** Standard Webhooks' envelope: `{type, timestamp, data}`. */
function envelope(type: string, data: Record<string, unknown>): string {
  return JSON.stringify({ type, timestamp: new Date().toISOString(), data });
}

/**
 * Queue each event for every enabled endpoint of the agent subscribed to its type, inside the caller's
 * transaction: one read of the endpoints and one insert, whatever the number of events.
 */
export async function enqueueEvents(trx: Transaction<Database>, agentId: string, events: Array<{ type: string; data: Record<string, unknown> }>): Promise<number> {
  const endpoints = await trx
    .selectFrom("webhook_endpoints")
    .select(["id", "url", "secret_enc", "events"])
    .where("agent_id", "=", agentId)
    .where("disabled", "=", false)
    .execute();
  if (!endpoints.length) return 0;
  const now = Date.now();
  const rows = events.flatMap((event) => {
    const targets = endpoints.filter((e) => (e.events as string[]).includes(event.type));
    if (!targets.length) return [];
    const payload = envelope(event.type, event.data);
    return targets.map((e) => ({
      msg_id: `msg_${crypto.randomUUID()}`,
      endpoint_id: e.id,
      agent_id: agentId,
      url: e.url,
      secret_enc: e.secret_enc,
      event_type: event.type,
      payload,
      next_attempt_at: now,
      last_error: null,
      last_status: null,
      created_at: now,
    }));
  });
  if (rows.length) await trx.insertInto("webhook_outbox").values(rows).execute();
  return rows.length;
}

/** Queue one delivery to a URL that is not an endpoint row (the mobile backend's manifest sync). */
export async function enqueueDirect(
  trx: Transaction<Database>,
  target: { agentId: string; url: string; secretEnc: string },
  type: string,
  data: Record<string, unknown>,
): Promise<string> {
  const now = Date.now();
  const msgId = `msg_${crypto.randomUUID()}`;
  await trx
    .insertInto("webhook_outbox")
    .values({
      msg_id: msgId,
      endpoint_id: null,
      agent_id: target.agentId,
      url: target.url,
      secret_enc: target.secretEnc,
      event_type: type,
      payload: envelope(type, data),
      next_attempt_at: now,
      last_error: null,
      last_status: null,
      created_at: now,
    })
    .execute();
  return msgId;
}

/**
 * Send one of the agent's deliveries again (an operator's resend): the row is due now with a fresh count of
 * attempts, keeping its message (`webhook-id`, type, payload) and URL; its last answer stays until the next attempt.
 * 404 for another agent's delivery.
 */
export async function requeueDelivery(trx: Transaction<Database>, agentId: string, deliveryId: number): Promise<number> {
  const row = await trx
    .updateTable("webhook_outbox")
    .set({ status: "pending", attempts: 0, next_attempt_at: Date.now() })
    .where("id", "=", deliveryId)
    .where("agent_id", "=", agentId)
    .returning("id")
    .executeTakeFirst();
  if (!row) throw new ChorusError("NOT_FOUND", "Delivery not found", 404);
  return row.id;
}

// ---- the address guard -------------------------------------------------------------------------------------

/**
 * Whether an address is one a webhook must not reach by default: anything but a global unicast address, by
 * ipaddr.js's table of special ranges (loopback, private, link-local, CGNAT, multicast, reserved, documentation,
 * and the IPv6 forms that carry or reach an IPv4 address: 6to4, Teredo, NAT64, IPv4-translated). An IPv4-mapped
 * address is judged as the IPv4 address it maps; IPv4 in decimal, octal or hex is read as what it means. Anything
 * that is not an address at all is refused too.
 */
export function isForbiddenAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return true;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === "ipv6" && parsed.match(IPV4_COMPATIBLE)) return true;
  return parsed.range() !== "unicast";
}

/** `::a.b.c.d`, deprecated by RFC 4291 and not in ipaddr.js's table: it would reach the IPv4 address it holds. */
const IPV4_COMPATIBLE = ipaddr.parseCIDR("::/96");

export class AddressRefused extends ChorusError {
  constructor(host: string, address: string) {
    super("WEBHOOK_ADDRESS_REFUSED", `Webhook host ${host} resolves to ${address}, which is not a public address`, 400);
  }
}

/** A `lookup` for node:http that refuses forbidden addresses unless the host is allowed. */
function guardedLookup(allowHosts: Set<string>): net.LookupFunction {
  return ((hostname: string, options: dns.LookupOptions, callback: (err: NodeJS.ErrnoException | null, address: any, family?: number) => void) => {
    dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, undefined);
      const list = addresses as dns.LookupAddress[];
      if (!allowHosts.has(hostname.toLowerCase())) {
        const bad = list.find((a) => isForbiddenAddress(a.address));
        if (bad) return callback(new AddressRefused(hostname, bad.address) as unknown as NodeJS.ErrnoException, undefined);
      }
      if (options.all) return callback(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  }) as net.LookupFunction;
}

/** Refuse a URL up front (when it is configured): scheme, and an IP literal host (which skips `lookup`). */
export function checkWebhookUrl(raw: string, allowHosts: Set<string>): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ChorusError("BAD_REQUEST", "url is not a valid URL", 400);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new ChorusError("BAD_REQUEST", "url must be http or https", 400);
  if (url.username || url.password) throw new ChorusError("BAD_REQUEST", "url must not carry credentials", 400);
  const host = hostOf(url);
  if (net.isIP(host) && !allowHosts.has(host.toLowerCase()) && isForbiddenAddress(host)) throw new AddressRefused(host, host);
  return url;
}

function hostOf(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, "");
}

export interface DeliveryResult {
  status?: number;
  error?: string;
}

/** One POST with the Standard Webhooks headers, through the guarded lookup. Never throws. */
export function postWebhook(rawUrl: string, headers: Record<string, string>, body: string, opts: { allowHosts: Set<string>; timeoutMs: number }): Promise<DeliveryResult> {
  return new Promise((resolve) => {
    let url: URL;
    try {
      url = checkWebhookUrl(rawUrl, opts.allowHosts);
    } catch (err) {
      return resolve({ error: (err as Error).message });
    }
    const mod = url.protocol === "https:" ? https : http;
    const req = mod.request(
      url,
      {
        method: "POST",
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), "user-agent": "chorus-webhooks", ...headers },
        lookup: guardedLookup(opts.allowHosts),
        timeout: opts.timeoutMs,
      },
      (res) => {
        res.resume(); // the body is not read: only the status matters
        res.on("end", () => resolve({ status: res.statusCode }));
        res.on("error", () => resolve({ status: res.statusCode }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`timed out after ${opts.timeoutMs} ms`)));
    req.on("error", (err) => resolve({ error: err.message }));
    req.end(body);
  });
}

// ---- the delivery worker -----------------------------------------------------------------------------------

const CLAIM_BATCH = 20;
/** Delivered, failed and cancelled rows are kept this long (for operators to inspect), then deleted. */
const RETENTION_MS = 7 * 24 * 3600_000;
const PRUNE_EVERY_MS = 3600_000;
const CLAIM_LEASE_MS = 60_000;
const MAX_DELAY_MS = 3_600_000;

export class WebhookDelivery {
  private closing = false;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private again = false;
  private unsample?: () => void;

  constructor(
    private readonly store: Store<Database>,
    private readonly keyring: Keyring,
    private readonly config: AssistantConfig,
  ) {}

  start(): void {
    this.schedule(0);
    this.unsample = gauges.webhookOutbox.add(async () => {
      const row = await this.store.db.selectFrom("webhook_outbox").select((eb) => eb.fn.countAll<string>().as("n")).where("status", "=", "pending").executeTakeFirst();
      return Number(row?.n ?? 0);
    });
  }

  /** Look for due deliveries now (called after an enqueue on this node). */
  wake(): void {
    if (this.closing) return;
    if (this.running) this.again = true;
    else this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.closing) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.running = this.tick()
        .catch((err) => log.error({ err }, "webhooks: delivery round failed"))
        .finally(() => {
          this.running = undefined;
          const soon = this.again;
          this.again = false;
          this.schedule(soon ? 0 : this.config.webhookPollMs);
        });
    }, ms);
    this.timer.unref();
  }

  private lastPrune = 0;

  private async tick(): Promise<void> {
    if (Date.now() - this.lastPrune > PRUNE_EVERY_MS) {
      this.lastPrune = Date.now();
      await this.store.db
        .deleteFrom("webhook_outbox")
        .where("status", "!=", "pending")
        .where("created_at", "<", Date.now() - RETENTION_MS)
        .execute()
        .catch((err) => log.error({ err }, "webhooks: pruning the outbox failed"));
    }
    while (!this.closing) {
      let rows;
      try {
        rows = await this.claim();
      } catch (err) {
        if (!this.closing) log.error({ err }, "webhooks: claiming deliveries failed");
        return;
      }
      if (!rows.length) return;
      await Promise.all(rows.map((row) => this.deliver(row).catch((err) => log.error({ err }, `webhooks: delivery ${row.msg_id} failed`))));
      if (rows.length < CLAIM_BATCH) return;
    }
  }

  private async claim() {
    const now = Date.now();
    const { rows } = await sql<{
      id: number;
      msg_id: string;
      endpoint_id: string | null;
      url: string;
      secret_enc: string;
      payload: string;
      attempts: number;
    }>`update webhook_outbox set next_attempt_at = ${now + CLAIM_LEASE_MS}
       where id in (select id from webhook_outbox where status = 'pending' and next_attempt_at <= ${now}
                    order by next_attempt_at limit ${CLAIM_BATCH} for update skip locked)
       returning id, msg_id, endpoint_id, url, secret_enc, payload, attempts`.execute(this.store.db);
    return rows.map((r) => ({ ...r, id: Number(r.id) }));
  }

  private async deliver(row: { id: number; msg_id: string; endpoint_id: string | null; url: string; secret_enc: string; payload: string; attempts: number }) {
    const timestamp = Math.floor(Date.now() / 1000);
    const signature = signWebhook(this.keyring.decrypt(row.secret_enc), row.msg_id, timestamp, row.payload);
    const result = await postWebhook(
      row.url,
      { "webhook-id": row.msg_id, "webhook-timestamp": String(timestamp), "webhook-signature": signature },
      row.payload,
      { allowHosts: this.config.webhookAllowHosts, timeoutMs: this.config.webhookTimeoutMs },
    );
    const attempts = row.attempts + 1;
    const db = this.store.db;
    try {
      if (result.status !== undefined && result.status >= 200 && result.status < 300) {
        await db.updateTable("webhook_outbox").set({ status: "delivered", attempts, last_status: result.status, last_error: null }).where("id", "=", row.id).execute();
      } else if (result.status === 410) {
        await db.transaction().execute(async (trx) => {
          await trx.updateTable("webhook_outbox").set({ status: "gone", attempts, last_status: 410 }).where("id", "=", row.id).execute();
          if (row.endpoint_id) {
            await trx
              .updateTable("webhook_endpoints")
              .set({ disabled: true, disabled_reason: "The receiver answered 410 Gone" })
              .where("id", "=", row.endpoint_id)
              .execute();
            await trx
              .updateTable("webhook_outbox")
              .set({ status: "cancelled", last_error: "endpoint disabled (410 Gone)" })
              .where("endpoint_id", "=", row.endpoint_id)
              .where("status", "=", "pending")
              .execute();
          }
        });
      } else {
        const error = result.error ?? `HTTP ${result.status}`;
        const failed = attempts >= this.config.webhookMaxAttempts;
        const ceiling = Math.min(MAX_DELAY_MS, this.config.webhookRetryBaseMs * 2 ** (attempts - 1));
        const delay = ceiling / 2 + Math.random() * (ceiling / 2); // jitter: half fixed, half random
        await db
          .updateTable("webhook_outbox")
          .set({
            status: failed ? "failed" : "pending",
            attempts,
            last_status: result.status ?? null,
            last_error: error.slice(0, 500),
            next_attempt_at: Date.now() + Math.round(delay),
          })
          .where("id", "=", row.id)
          .execute();
        if (!failed) this.scheduleRetryCheck(delay);
      }
    } catch (err) {
      if (!this.closing) log.error({ err }, `webhooks: recording delivery ${row.msg_id} failed`);
    }
  }

  /** A retry due before the next poll is looked for when it is due. */
  private scheduleRetryCheck(delay: number): void {
    if (delay >= this.config.webhookPollMs) return;
    const t = setTimeout(() => this.wake(), delay + 5);
    t.unref();
  }

  async close(): Promise<void> {
    this.closing = true;
    this.unsample?.();
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
