/**
 * The e-mail sender: drains the `email_outbox` table over SMTP (nodemailer) when SMTP_URL is configured. Without
 * it nothing is sent and the outbox keeps every e-mail (operators can read it there). Several workers may run a
 * sender: a row is claimed for a while with `for update skip locked` before it is sent, so each e-mail goes out
 * once unless a sender dies between sending and recording it (then it goes out again: at least once).
 */
import { createHash, randomBytes } from "node:crypto";
import nodemailer, { type Transporter } from "nodemailer";
import { sql, type Transaction } from "kysely";
import type { Store } from "../../../runtime/store/store.ts";
import type { Database } from "../../schema.ts";
import { log } from "../../../runtime/log.ts";

/** What the store keeps of a key sent by e-mail (invitations, e-mail changes): its SHA-256, never the key. */
export const hashEmailKey = (key: string) => createHash("sha256").update(key).digest("hex");

/** A fresh key for a link in an e-mail, and the hash to store. */
export function newEmailKey(): { key: string; hash: string } {
  const key = randomBytes(24).toString("base64url");
  return { key, hash: hashEmailKey(key) };
}

/** Queue an e-mail in the caller's transaction: it goes out if, and only if, that transaction commits. */
export async function queueEmail(trx: Transaction<Database>, mail: { to: string; subject: string; body: string }): Promise<void> {
  await trx
    .insertInto("email_outbox")
    .values({ to_address: mail.to, subject: mail.subject, body: mail.body, created_at: Math.floor(Date.now() / 1000), next_attempt_at: Date.now() })
    .execute();
}

const POLL_MS = 2000;
const CLAIM_MS = 60_000;
const BATCH = 20;
const MAX_ATTEMPTS = 8;

export interface MailConfig {
  smtpUrl: string;
  from: string;
}

export class MailSender {
  private closing = false;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private readonly transport: Transporter;

  constructor(
    private readonly store: Store<Database>,
    private readonly config: MailConfig,
  ) {
    this.transport = nodemailer.createTransport(config.smtpUrl);
  }

  start(): void {
    this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.closing) return;
    this.timer = setTimeout(() => {
      this.running = this.drain()
        .catch((err) => log.error({ err }, "mail: sending round failed"))
        .finally(() => {
          this.running = undefined;
          this.schedule(POLL_MS);
        });
    }, ms);
    this.timer.unref();
  }

  private async drain(): Promise<void> {
    while (!this.closing) {
      const now = Date.now();
      const { rows } = await sql<{ id: number; to_address: string; subject: string; body: string; attempts: number }>`
        update email_outbox set next_attempt_at = ${now + CLAIM_MS}, attempts = attempts + 1
        where id in (select id from email_outbox where sent_at is null and attempts < ${MAX_ATTEMPTS} and next_attempt_at <= ${now}
                     order by id limit ${BATCH} for update skip locked)
        returning id, to_address, subject, body, attempts`.execute(this.store.db);
      if (!rows.length) return;
      for (const row of rows) {
        try {
          await this.transport.sendMail({ from: this.config.from, to: row.to_address, subject: row.subject, text: row.body });
          await this.store.db.updateTable("email_outbox").set({ sent_at: Math.floor(Date.now() / 1000), last_error: null }).where("id", "=", row.id).execute();
        } catch (err) {
          // Back off exponentially; the claim already pushed next_attempt_at a minute out.
          const delay = Math.min(2 ** row.attempts * 30_000, 6 * 3600_000);
          await this.store.db
            .updateTable("email_outbox")
            .set({ last_error: String((err as Error)?.message ?? err).slice(0, 500), next_attempt_at: Date.now() + delay })
            .where("id", "=", row.id)
            .execute();
        }
      }
    }
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    this.transport.close();
  }
}
