/**
 * Resetting a forgotten password by e-mail, inside the realm actor (which owns the accounts). Rules follow
 * Zulip's password reset form (zerver/forms.py PasswordResetForm, zerver/views/auth.py): the request says nothing
 * about whether an account has the address, so nobody learns who has one; only an active, non-bot account gets an
 * e-mail; requests per address are limited, silently, as Zulip does, so the form cannot be used to flood a mailbox.
 *
 * The link's key is only in the e-mail, the table keeps its SHA-256. A key sets a password once, within a day;
 * a later request replaces the earlier keys, and using one ends the others.
 */
import { sql } from "kysely";
import { type ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { ActorDeps } from "../../deps.ts";
import { hashEmailKey, newEmailKey, queueEmail } from "./mail.ts";
import { EMAIL_REQUEST_LIMITS, longestWindow } from "./rate-limits.ts";
import type { PasswordResetsProtocol, ResetPassword, StartPasswordReset } from "./realm.protocol.ts";

export const PASSWORD_RESET_VALIDITY_SECONDS = 86400;

/** The page a reset e-mail links to (gateway/pages/people). */
export const passwordResetLink = (siteUrl: string, key: string) => `${siteUrl}/accounts/password/reset/${key}/`;

export class PasswordResets {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
  ) {}

  /** The password reset operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<PasswordResetsProtocol, PasswordResets> = {
    startPasswordReset: (resets, msg) => resets.start(msg),
    resetPassword: (resets, msg) => resets.reset(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  private async start(msg: StartPasswordReset): Promise<Record<string, never>> {
    const user = await this.db
      .selectFrom("users")
      .select(["id", "delivery_email", "full_name", "is_active", "is_bot"])
      .where("realm_id", "=", this.realmId)
      .where(sql`lower(delivery_email)`, "=", msg.email.trim().toLowerCase())
      .executeTakeFirst();
    if (!user || !user.is_active || user.is_bot) return {};
    const now = Math.floor(Date.now() / 1000);
    if (await this.overLimit(user.id, now)) return {};
    const realmName = (await this.db.selectFrom("realms").select("name").where("id", "=", this.realmId).executeTakeFirstOrThrow()).name;
    const { key, hash } = newEmailKey();
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx.updateTable("password_resets").set({ status: "superseded" }).where("user_id", "=", user.id).where("status", "=", "pending").execute();
      await trx
        .insertInto("password_resets")
        .values({ realm_id: this.realmId, user_id: user.id, key_hash: hash, created_at: now, expires_at: now + PASSWORD_RESET_VALIDITY_SECONDS })
        .execute();
      await queueEmail(trx, {
        to: user.delivery_email,
        subject: `Reset your password for ${realmName}`,
        body: [
          `Someone (hopefully you) asked to reset the password of ${user.delivery_email} in ${realmName}.`,
          "",
          `Choose a new password within a day: ${passwordResetLink(msg.siteUrl, key)}`,
          "",
          "If you did not ask for this, ignore this e-mail: your password stays as it is.",
        ].join("\n"),
      });
    });
    return {};
  }

  private async reset(msg: ResetPassword): Promise<{ user_id: number }> {
    const reset = await this.db.selectFrom("password_resets").selectAll().where("key_hash", "=", hashEmailKey(msg.key)).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!reset) throw errors.badRequest("This password reset link is not valid.");
    if (reset.status === "used") throw errors.badRequest("This password reset link has already been used.");
    if (reset.status === "superseded") throw errors.badRequest("A newer password reset link replaced this one: use the latest e-mail.");
    if (reset.expires_at <= Math.floor(Date.now() / 1000)) throw errors.badRequest("This password reset link has expired.");
    const user = await this.db.selectFrom("users").select(["is_active"]).where("id", "=", reset.user_id).executeTakeFirstOrThrow();
    if (!user.is_active) throw errors.badRequest("Account is deactivated");
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx.updateTable("users").set({ password_hash: msg.passwordHash }).where("id", "=", reset.user_id).execute();
      await trx.updateTable("password_resets").set({ status: "superseded" }).where("user_id", "=", reset.user_id).where("status", "=", "pending").execute();
      await trx.updateTable("password_resets").set({ status: "used" }).where("id", "=", reset.id).execute();
    });
    return { user_id: reset.user_id };
  }

  /** Zulip's limits on e-mails to one address (two an hour, five a day); over them the request does nothing. */
  private async overLimit(userId: number, now: number): Promise<boolean> {
    const recent = await this.db
      .selectFrom("password_resets")
      .select("created_at")
      .where("user_id", "=", userId)
      .where("created_at", ">", now - longestWindow(EMAIL_REQUEST_LIMITS))
      .execute();
    return EMAIL_REQUEST_LIMITS.some(([seconds, limit]) => recent.filter((r) => Number(r.created_at) > now - seconds).length >= limit);
  }
}
