/**
 * Changing one's e-mail address by confirmation, inside the realm actor that serialises what must be unique across
 * the realm. Rules follow Zulip's json_change_settings, do_start_email_change_process, confirm_email_change and
 * do_change_user_delivery_email (zerver/views/user_settings.py, zerver/actions/user_settings.py).
 *
 * PATCH /settings stores a pending change and queues a confirmation e-mail to the new address in one transaction;
 * the key is only in the e-mail, the table keeps its SHA-256. Confirming changes the address, tells the old
 * address, and sends the `realm_user` update events.
 */
import { type ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import { hashEmailKey, newEmailKey, queueEmail } from "./mail.ts";
import type { ActorDeps } from "../../deps.ts";
import { ROLE } from "./groups.ts";
import { accountWithEmail, avatarUpdate, canSeeDeliveryEmail, EMAIL, EMAIL_VISIBILITY } from "./accounts.ts";
import { realmSettings, storedUserSettings, USER_SETTINGS_DEFAULTS } from "../users/settings.ts";
import { EMAIL_REQUEST_LIMITS, longestWindow, refuseOverLimits } from "./rate-limits.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { ConfirmEmailChange, EmailChanged, EmailChangesProtocol, StartEmailChange } from "./realm.protocol.ts";
import { User } from "../users/user.protocol.ts";

/** Zulip's CONFIRMATION_LINK_DEFAULT_VALIDITY_DAYS for e-mail changes: one day. */
export const EMAIL_CHANGE_VALIDITY_SECONDS = 86400;


export class EmailChanges {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
  ) {}

  /** The e-mail change operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<EmailChangesProtocol, EmailChanges> = {
    startEmailChange: (changes, msg) => changes.start(msg),
    confirmEmailChange: (changes, msg) => changes.confirm(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  private async start(msg: StartEmailChange): Promise<Record<string, never>> {
    const user = await this.db.selectFrom("users").selectAll().where("id", "=", msg.userId).where("realm_id", "=", this.realmId).executeTakeFirstOrThrow();
    if (user.is_bot) throw errors.badRequest("This endpoint does not accept bot requests.");
    await this.checkChangesAllowed(user.role);
    const email = msg.email.trim();
    if (!EMAIL.test(email)) throw errors.badRequest("Invalid address.");
    await this.checkAddressFree(email);
    const now = Math.floor(Date.now() / 1000);
    await this.checkRequestRate(user.id, now);
    const realmName = (await this.db.selectFrom("realms").select("name").where("id", "=", this.realmId).executeTakeFirstOrThrow()).name;
    const { key, hash } = newEmailKey();
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      // Only the latest request counts: an older link would otherwise switch to an address the user gave up on.
      await trx.updateTable("email_changes").set({ status: "superseded" }).where("user_id", "=", user.id).where("status", "=", "pending").execute();
      await trx
        .insertInto("email_changes")
        .values({
          realm_id: this.realmId,
          user_id: user.id,
          old_email: user.delivery_email,
          new_email: email,
          key_hash: hash,
          created_at: now,
          expires_at: now + EMAIL_CHANGE_VALIDITY_SECONDS,
        })
        .execute();
      await queueEmail(trx, {
        to: email,
        subject: `Verify your new email address for ${realmName}`,
        body: [
          `${user.full_name} asked to change their e-mail address in ${realmName} from ${user.delivery_email} to ${email}.`,
          "",
          `Confirm it within a day: POST ${msg.siteUrl}/api/v1/settings/email/confirm with key=${key}.`,
          "If you did not ask for this, ignore this e-mail.",
        ].join("\n"),
      });
    });
    return {};
  }

  private async confirm(msg: ConfirmEmailChange): Promise<EmailChanged> {
    const change = await this.db.selectFrom("email_changes").selectAll().where("key_hash", "=", hashEmailKey(msg.key)).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!change) throw errors.badRequest("Invalid e-mail change key");
    if (change.status === "confirmed") throw errors.badRequest("This e-mail change has already been confirmed");
    if (change.status === "superseded") throw errors.badRequest("This e-mail change was replaced by a later request");
    if (change.expires_at <= Math.floor(Date.now() / 1000)) throw errors.badRequest("This e-mail change link has expired");
    const user = await this.db.selectFrom("users").selectAll().where("id", "=", change.user_id).executeTakeFirstOrThrow();
    if (!user.is_active) throw errors.badRequest("Account is deactivated");
    // Zulip's check: the address changed some other way since the request, so the link no longer applies.
    if (user.delivery_email !== change.old_email) throw errors.badRequest("Invalid e-mail change key");
    await this.checkChangesAllowed(user.role);
    await this.checkAddressFree(change.new_email);

    const visibility = await this.emailVisibility(user.id);
    // Only while the address is visible to everyone is the API `email` the real address, and changes with it.
    const publicEmail = visibility === EMAIL_VISIBILITY.everyone;
    const realmName = (await this.db.selectFrom("realms").select("name").where("id", "=", this.realmId).executeTakeFirstOrThrow()).name;
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx
        .updateTable("users")
        .set({ delivery_email: change.new_email, ...(publicEmail ? { email: change.new_email } : {}) })
        .where("id", "=", user.id)
        .execute();
      await trx.updateTable("email_changes").set({ status: "confirmed" }).where("id", "=", change.id).execute();
      // As Zulip does: the old address learns of the change, in case it was not its owner's doing.
      await queueEmail(trx, {
        to: change.old_email,
        subject: `Email address changed for ${realmName}`,
        body: `The e-mail address of your account in ${realmName} was changed to ${change.new_email}.\nIf you did not do this, contact your organization's administrators.`,
      });
    });
    await this.announce(user, change.new_email, visibility);
    return { user_id: user.id, old_email: change.old_email, new_email: change.new_email };
  }

  /** Zulip: realms may disable e-mail changes; administrators may change theirs anyway. */
  private async checkChangesAllowed(role: number): Promise<void> {
    const settings = await realmSettings(this.db, this.realmId);
    if (settings.realm_email_changes_disabled && role > ROLE.administrator) throw errors.badRequest("Email address changes are disabled in this organization.");
  }

  /** Zulip's validate_email_not_already_in_realm, with its short messages. */
  private async checkAddressFree(email: string): Promise<void> {
    const taken = await accountWithEmail(this.db, this.realmId, email);
    if (taken) throw errors.badRequest(taken.is_active ? "Already has an account." : "Account has been deactivated.");
  }

  /** Each request e-mails an address the requester chooses: limited, as Zulip does, so it cannot be used to spam. */
  private async checkRequestRate(userId: number, now: number): Promise<void> {
    const since = now - longestWindow(EMAIL_REQUEST_LIMITS);
    const recent = await this.db.selectFrom("email_changes").select("created_at").where("user_id", "=", userId).where("created_at", ">", since).execute();
    refuseOverLimits(recent.map((r) => Number(r.created_at)), EMAIL_REQUEST_LIMITS, now);
  }

  private async emailVisibility(userId: number): Promise<number> {
    return (await storedUserSettings(this.deps.store, userId))?.email_address_visibility ?? USER_SETTINGS_DEFAULTS.email_address_visibility;
  }

  /**
   * Zulip's do_change_user_delivery_email events: the new delivery_email to those allowed to see it (and the
   * user), the new API email to everyone when it is the real address, and the new Gravatar to everyone.
   */
  private async announce(user: { id: number; avatar_version: number }, newEmail: string, visibility: number): Promise<void> {
    const active = await this.db.selectFrom("users").select(["id", "role"]).where("realm_id", "=", this.realmId).where("is_active", "=", true).execute();
    const tell = (ids: number[], person: Record<string, unknown>) =>
      this.deps.system().broadcast(User, ids, { op: "deliverEvent", event: { type: "realm_user", op: "update", person: { user_id: user.id, ...person } } });
    const everyone = active.map((u) => u.id);
    await tell(
      active.filter((u) => u.id === user.id || canSeeDeliveryEmail(u.role, visibility)).map((u) => u.id),
      { delivery_email: newEmail },
    );
    if (visibility === EMAIL_VISIBILITY.everyone) await tell(everyone, { new_email: newEmail });
    await tell(everyone, avatarUpdate({ ...user, delivery_email: newEmail }));
  }
}
