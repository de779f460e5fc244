/**
 * E-mail invitations (POST /invites, GET /invites, DELETE /invites/{id}) and accepting one, inside the realm actor
 * that serialises account creation. Rules follow Zulip's zerver/views/invite.py and zerver/actions/invites.py.
 *
 * An invitation and its e-mail are committed together: the e-mail goes to the `email_outbox` table, which the
 * mail sender (runtime/mail.ts) drains when SMTP is configured. The key is only in the e-mail; the table keeps
 * its SHA-256.
 */
import { sql } from "kysely";
import { actorId, type ActorContext } from "../runtime/actor.ts";
import { ChorusError, errors } from "../runtime/errors.ts";
import { hashEmailKey, newEmailKey, queueEmail } from "../runtime/mail.ts";
import type { ActorDeps } from "./deps.ts";
import { inGroupSetting, ROLE, type GroupSettingValue } from "./groups.ts";
import { realmSettings } from "./settings.ts";
import { dmKey } from "./dm.ts";
import { ensureSystemBot, NOTIFICATION_BOT, WELCOME_BOT } from "./system-bots.ts";
import { EMAIL, insertAccount } from "./accounts.ts";
import { CHANNEL, DM, USER, type AcceptInvite, type CreatedUser, type Invite, type RevokeInvite } from "./protocol.ts";

/** Zulip's default invitation validity, in minutes (ten days). */
export const DEFAULT_INVITE_EXPIRY_MINUTES = 14400;
/** Zulip's settings.INVITES_DEFAULT_REALM_DAILY_MAX. */
export const DAILY_INVITE_LIMIT = 100;
export const MAX_WELCOME_MESSAGE_LENGTH = 8000;

/** Zulip's InvitationError: a 400 with the per-address failures. */
function invitationFailed(msg: string, failures: [string, string, boolean][], sent: boolean, dailyLimitReached = false): ChorusError {
  return new ChorusError("INVITATION_FAILED", msg, 400, {
    errors: failures,
    sent_invitations: sent,
    license_limit_reached: false,
    daily_limit_reached: dailyLimitReached,
  });
}

export interface InvitationsRealm {
  /** An event for every active user of the realm. */
  tellRealm(event: Record<string, unknown>): Promise<void>;
  /** The `realm_user` add event of a new account. */
  announceUser(userId: number): Promise<void>;
}

export class Invitations {
  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
    private readonly realmId: number,
    private readonly realm: InvitationsRealm,
  ) {}

  receive(msg: Invite | RevokeInvite | AcceptInvite): Promise<unknown> {
    switch (msg.op) {
      case "invite":
        return this.invite(msg);
      case "revokeInvite":
        return this.revoke(msg);
      case "acceptInvite":
        return this.accept(msg);
    }
  }

  private get db() {
    return this.deps.store.db;
  }

  private async invite(msg: Invite): Promise<Record<string, never>> {
    const db = this.db;
    // A redelivery of a request that committed: it is done (addresses it skipped are not reported again).
    if (await db.selectFrom("invitations").select("id").where("request_key", "=", msg.requestKey).executeTakeFirst()) return {};
    const acting = await db.selectFrom("users").selectAll().where("id", "=", msg.actingId).where("realm_id", "=", this.realmId).executeTakeFirstOrThrow();
    const settings = await realmSettings(db, this.realmId);
    if (!(await inGroupSetting(db, settings.realm_can_invite_users_group as GroupSettingValue, acting.id))) throw errors.badRequest("Insufficient permission");
    if (msg.inviteAs < acting.role) {
      throw errors.badRequest(msg.inviteAs === ROLE.owner ? "Must be an organization owner" : "Must be an organization administrator");
    }
    if (!msg.emails.length) throw errors.badRequest("You must specify at least one email address.");
    await this.checkStreams(acting, msg.streamIds, settings);
    await this.checkGroups(acting.id, msg.groupIds, settings);
    const welcome = acting.role <= ROLE.administrator ? msg.welcomeMessageCustomText : null;
    if (welcome && welcome.length > MAX_WELCOME_MESSAGE_LENGTH) {
      throw errors.badRequest(`welcome_message_custom_text is too long (limit: ${MAX_WELCOME_MESSAGE_LENGTH} characters)`);
    }

    // Zulip refuses the whole request when an address does not validate, and skips addresses that have accounts.
    const invalid = msg.emails.filter((e) => !EMAIL.test(e));
    if (invalid.length) {
      throw invitationFailed("Some emails did not validate, so we didn't send any invitations.", invalid.map((e) => [e, "Invalid address.", false]), false);
    }
    const existing = await db
      .selectFrom("users")
      .select(["delivery_email", "is_active"])
      .where("realm_id", "=", this.realmId)
      .where(sql`lower(delivery_email)`, "in", msg.emails.map((e) => e.toLowerCase()))
      .execute();
    const skipped: [string, string, boolean][] = [];
    const toInvite = msg.emails.filter((email) => {
      const user = existing.find((u) => u.delivery_email.toLowerCase() === email.toLowerCase());
      if (user) skipped.push([email, user.is_active ? "Already has an account." : "Account has been deactivated.", !user.is_active]);
      return !user;
    });
    if (!toInvite.length) throw invitationFailed("We weren't able to invite anyone.", skipped, false);

    const now = Math.floor(Date.now() / 1000);
    const sentToday = await db
      .selectFrom("invitations")
      .select(sql<number>`count(*)`.as("n"))
      .where("realm_id", "=", this.realmId)
      .where("created_at", ">", now - 86400)
      .executeTakeFirstOrThrow();
    if (Number(sentToday.n) + toInvite.length > DAILY_INVITE_LIMIT) {
      throw invitationFailed(
        "To protect users, Zulip limits the number of invitations you can send in one day. Because you have reached the limit, no invitations were sent.",
        [],
        false,
        true,
      );
    }

    const realmName = (await db.selectFrom("realms").select("name").where("id", "=", this.realmId).executeTakeFirstOrThrow()).name;
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      for (const email of toInvite) {
        const { key, hash } = newEmailKey();
        await trx
          .insertInto("invitations")
          .values({
            realm_id: this.realmId,
            email,
            referrer_id: acting.id,
            invited_as: msg.inviteAs,
            stream_ids: JSON.stringify(msg.streamIds),
            group_ids: JSON.stringify(msg.groupIds),
            include_realm_default_subscriptions: msg.includeRealmDefaultSubscriptions,
            notify_referrer_on_join: msg.notifyReferrerOnJoin,
            welcome_message_custom_text: welcome,
            key_hash: hash,
            created_at: now,
            expires_at: msg.expiresInMinutes === null ? null : now + msg.expiresInMinutes * 60,
            request_key: msg.requestKey,
          })
          .execute();
        await queueEmail(trx, { to: email, ...invitationEmail(acting.full_name, realmName, msg.siteUrl, key, welcome) });
      }
    });
    await this.invitesChanged(acting.id);
    if (skipped.length) {
      throw invitationFailed(
        "Some of those addresses are already using Zulip, so we didn't send them an invitation. We did send invitations to everyone else!",
        skipped,
        true,
      );
    }
    return {};
  }

  /**
   * Each channel must be one the caller can see; naming any but the realm's default channels needs permission to
   * subscribe others (Zulip's rule: a new user joins the default channels anyway).
   */
  private async checkStreams(acting: { id: number; role: number }, streamIds: number[], settings: Record<string, unknown>): Promise<void> {
    if (!streamIds.length) return;
    const db = this.db;
    const mayAddRealmWide = await inGroupSetting(db, settings.realm_can_add_subscribers_group as GroupSettingValue, acting.id);
    const streams = await db.selectFrom("streams").select(["id", "invite_only", "settings", "is_default"]).where("realm_id", "=", this.realmId).where("id", "in", streamIds).execute();
    let mayAddAll = true;
    for (const id of streamIds) {
      const stream = streams.find((s) => s.id === id);
      const visible =
        stream &&
        (!stream.invite_only ||
          (await db.selectFrom("subscriptions").select("user_id").where("stream_id", "=", id).where("user_id", "=", acting.id).where("active", "=", true).executeTakeFirst()));
      if (!visible) throw errors.badRequest(`Invalid channel ID ${id}. No invites were sent.`);
      const channelSetting = (stream.settings as Record<string, GroupSettingValue>).can_add_subscribers_group;
      if (!stream.is_default && !mayAddRealmWide && !(await inGroupSetting(db, channelSetting, acting.id))) mayAddAll = false;
    }
    if (!mayAddAll) throw errors.badRequest("You do not have permission to subscribe other users to channels.");
  }

  /** Each group must be a (non-system) group the caller may add members to. */
  private async checkGroups(actingId: number, groupIds: number[], settings: Record<string, unknown>): Promise<void> {
    if (!groupIds.length) return;
    const db = this.db;
    const groups = await db.selectFrom("user_groups").selectAll().where("realm_id", "=", this.realmId).where("id", "in", groupIds).execute();
    const managesAll = await inGroupSetting(db, settings.realm_can_manage_all_groups as GroupSettingValue, actingId);
    for (const id of groupIds) {
      const group = groups.find((g) => g.id === id);
      if (!group || group.deactivated || group.is_system_group) throw errors.badRequest(`Invalid user group ID: ${id}`);
      const own = group.settings as Record<string, GroupSettingValue>;
      const may = managesAll || (await inGroupSetting(db, own.can_add_members_group, actingId)) || (await inGroupSetting(db, own.can_manage_group, actingId));
      if (!may) throw errors.badRequest("Insufficient permission");
    }
  }

  private async revoke(msg: RevokeInvite): Promise<Record<string, never>> {
    const db = this.db;
    const acting = await db.selectFrom("users").select(["id", "role"]).where("id", "=", msg.actingId).executeTakeFirstOrThrow();
    const invite = await db
      .selectFrom("invitations")
      .select(["id", "referrer_id", "status"])
      .where("id", "=", msg.inviteId)
      .where("realm_id", "=", this.realmId)
      .executeTakeFirst();
    if (!invite || invite.status !== "pending") throw errors.badRequest("No such invitation");
    if (invite.referrer_id !== acting.id && acting.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("invitations").set({ status: "revoked" }).where("id", "=", invite.id).execute());
    await this.invitesChanged(invite.referrer_id);
    return {};
  }

  private async accept(msg: AcceptInvite): Promise<CreatedUser> {
    const now = Math.floor(Date.now() / 1000);
    const invite = await this.db.selectFrom("invitations").selectAll().where("key_hash", "=", hashEmailKey(msg.key)).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!invite) throw errors.badRequest("Invalid invitation key");
    if (invite.status === "accepted") throw errors.badRequest("This invitation has already been used");
    if (invite.status === "revoked") throw errors.badRequest("This invitation has been revoked");
    if (invite.expires_at !== null && invite.expires_at <= now) throw errors.badRequest("This invitation has expired");
    const groupIds = invite.group_ids as number[];
    const created = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const account = await insertAccount(trx, this.realmId, { email: invite.email, fullName: msg.fullName, passwordHash: msg.passwordHash, role: invite.invited_as }, this.deps.keyring);
      // Groups deactivated since the invitation are skipped.
      const live = groupIds.length ? await trx.selectFrom("user_groups").select("id").where("id", "in", groupIds).where("deactivated", "=", false).execute() : [];
      if (live.length) await trx.insertInto("user_group_members").values(live.map((g) => ({ group_id: g.id, user_id: account.user_id }))).execute();
      await trx.updateTable("invitations").set({ status: "accepted", user_id: account.user_id }).where("id", "=", invite.id).execute();
      return { account, groups: live.map((g) => g.id) };
    });
    const userId = created.account.user_id;
    await this.realm.announceUser(userId);
    for (const group_id of created.groups) await this.realm.tellRealm({ type: "user_group", op: "add_members", group_id, user_ids: [userId] });
    // The invited channels that still exist, and the realm's default channels when the invitation asked for them.
    const invited = invite.stream_ids as number[];
    const streams = await this.db
      .selectFrom("streams")
      .select("id")
      .where("realm_id", "=", this.realmId)
      .where((eb) => eb.or([eb("id", "in", [...invited, -1]), ...(invite.include_realm_default_subscriptions ? [eb("is_default", "=", true)] : [])]))
      .execute();
    for (const s of streams) await this.deps.system().ask(actorId(CHANNEL, s.id), { op: "subscribe", userIds: [userId] });
    if (invite.welcome_message_custom_text) {
      await this.botMessage(WELCOME_BOT, userId, invite.welcome_message_custom_text, `invite-welcome:${invite.id}`);
    }
    if (invite.notify_referrer_on_join) await this.notifyReferrer(invite.id, invite.referrer_id, userId, msg.fullName);
    await this.invitesChanged(invite.referrer_id);
    return created.account;
  }

  /** Notification Bot tells the referrer, as Zulip does (zerver/actions/create_user.py). */
  private async notifyReferrer(inviteId: number, referrerId: number, userId: number, fullName: string): Promise<void> {
    const referrer = await this.db.selectFrom("users").select("is_active").where("id", "=", referrerId).executeTakeFirst();
    if (!referrer?.is_active) return;
    await this.botMessage(NOTIFICATION_BOT, referrerId, `@_**${fullName}|${userId}** accepted your invitation to join Zulip!`, `invite-accepted:${inviteId}`);
  }

  /** A direct message from a system bot. `sendKey`: one per invitation, so a redelivered accept sends it once. */
  private async botMessage(which: typeof NOTIFICATION_BOT, to: number, content: string, sendKey: string): Promise<void> {
    const bot = await ensureSystemBot(this.deps.store, this.ctx.fence(), this.deps.keyring, this.realmId, which);
    await this.deps.system().ask(actorId(DM, dmKey([bot.id, to])), {
      op: "send",
      senderId: bot.id,
      sender: { email: bot.email, full_name: bot.full_name },
      content,
      client: "Internal",
      sendKey,
      readBySender: true,
    });
  }

  /** Zulip's invites_changed: administrators, and the referrer, refetch the invitation list. */
  private async invitesChanged(referrerId: number): Promise<void> {
    const admins = await this.db
      .selectFrom("users")
      .select("id")
      .where("realm_id", "=", this.realmId)
      .where("is_active", "=", true)
      .where("role", "<=", ROLE.administrator)
      .execute();
    const ids = new Set([...admins.map((a) => a.id), referrerId]);
    await this.deps.system().broadcast([...ids].map((id) => actorId(USER, id)), { op: "deliverEvent", event: { type: "invites_changed" } });
  }
}

function invitationEmail(referrer: string, realmName: string, siteUrl: string, key: string, welcome: string | null) {
  const lines = [
    `${referrer} invited you to join ${realmName} on Chorus.`,
    "",
    ...(welcome ? [welcome, ""] : []),
    `Accept the invitation: POST ${siteUrl}/api/v1/invites/accept with key=${key}, full_name and password.`,
  ];
  return { subject: `${referrer} invited you to join ${realmName}`, body: lines.join("\n") };
}

/** GET /invites: the unexpired pending invitations the caller may manage (administrators: all). */
export async function listInvites(db: ActorDeps["store"]["db"], realmId: number, viewer: { id: number; role: number }) {
  const now = Math.floor(Date.now() / 1000);
  let query = db
    .selectFrom("invitations")
    .select(["id", "email", "referrer_id", "invited_as", "created_at", "expires_at", "notify_referrer_on_join"])
    .where("realm_id", "=", realmId)
    .where("status", "=", "pending")
    .where((eb) => eb.or([eb("expires_at", "is", null), eb("expires_at", ">", now)]));
  if (viewer.role > ROLE.administrator) query = query.where("referrer_id", "=", viewer.id);
  const rows = await query.orderBy("id").execute();
  return rows.map((r) => ({
    id: r.id,
    email: r.email,
    invited_by_user_id: r.referrer_id,
    invited: Number(r.created_at),
    expiry_date: r.expires_at === null ? null : Number(r.expires_at),
    invited_as: r.invited_as,
    notify_referrer_on_join: r.notify_referrer_on_join,
    is_multiuse: false,
  }));
}
