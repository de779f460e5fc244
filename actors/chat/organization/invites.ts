/**
 * Invitations, inside the realm actor that serialises account creation: e-mail invitations (POST /invites, resent
 * with POST /invites/{id}/resend), reusable invitation links (POST /invites/multiuse), revoking either, and
 * accepting. Rules follow Zulip's zerver/views/invite.py and zerver/actions/invites.py.
 *
 * An invitation and its e-mail are committed together: the e-mail goes to the `email_outbox` table, which the
 * mail sender (actors/chat/organization/mail.ts) drains when SMTP is configured. An e-mailed key is only in the e-mail; the table
 * keeps its SHA-256. A link's key is kept encrypted too, since GET /invites shows the link again.
 *
 * Using a link is two steps, as in Zulip, so that nobody signs up with an address they do not own: the person
 * gives their address with the link's key (POST /invites/join), which makes an e-mail invitation carrying the
 * link's terms (`link_id` set), and its e-mail is accepted as any other.
 */
import { sql, type Insertable, type Transaction } from "kysely";
import { type ActorContext } from "../../../runtime/actor.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import { hashEmailKey, newEmailKey, queueEmail } from "./mail.ts";
import type { Keyring } from "../../../runtime/secrets.ts";
import type { InvitationTable } from "../schema.ts";
import type { ActorDeps } from "../../deps.ts";
import { inGroupSetting, ROLE, type GroupSettingValue } from "./groups.ts";
import { realmSettings } from "../users/settings.ts";
import { NOTIFICATION_BOT, sendAsSystemBot, WELCOME_BOT } from "./system-bots.ts";
import { welcomeNewUser } from "./onboarding.ts";
import { EMAIL, insertAccount } from "./accounts.ts";
import { EMAIL_REQUEST_LIMITS, longestWindow, refuseOverLimits } from "./rate-limits.ts";
import { Channel } from "../conversations/channel.protocol.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { AcceptInvite, CreateInviteLink, CreatedUser, Invite, InviteLinkCreated, InvitesProtocol, InviteTerms, JoinInviteLink, ResendInvite, RevokeInvite, TestWelcomeMessage } from "./realm.protocol.ts";
import { User } from "../users/user.protocol.ts";
import type { Database } from "../../schema.ts";

/** Zulip's default invitation validity, in minutes (ten days). */
export const DEFAULT_INVITE_EXPIRY_MINUTES = 14400;
/** Zulip's settings.INVITES_DEFAULT_REALM_DAILY_MAX. */
export const DAILY_INVITE_LIMIT = 100;
export const MAX_WELCOME_MESSAGE_LENGTH = 8000;
/** How long the e-mail confirming an address given through a link is valid (Zulip's confirmation default: a day). */
const LINK_SIGNUP_VALIDITY_SECONDS = 86400;

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Zulip's InvitationError: a 400 with the per-address failures. */
function invitationFailed(msg: string, failures: [string, string, boolean][], sent: boolean, dailyLimitReached = false): ChorusError {
  return new ChorusError("INVITATION_FAILED", msg, 400, {
    errors: failures,
    sent_invitations: sent,
    license_limit_reached: false,
    daily_limit_reached: dailyLimitReached,
  });
}

/** Why an e-mailed invitation or a link can no longer be used (used, revoked or expired; links are never "accepted"). */
export function unusableReason(invite: { status: string; expires_at: number | null }): string | undefined {
  if (invite.status === "accepted") return "This invitation has already been used";
  if (invite.status === "revoked") return "This invitation has been revoked";
  if (invite.expires_at !== null && Number(invite.expires_at) <= nowSeconds()) return "This invitation has expired";
  return undefined;
}

function refuseUnusable(invite: { status: string; expires_at: number | null }): void {
  const reason = unusableReason(invite);
  if (reason) throw errors.badRequest(reason);
}

/** Zulip's link form: {site}/join/{key}/. */
const inviteLinkUrl = (siteUrl: string, key: string) => `${siteUrl}/join/${key}/`;

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

  /** The invitation operations of realm.protocol.ts (the realm actor forwards them here). */
  static readonly handlers: Handlers<InvitesProtocol, Invitations> = {
    invite: (invitations, msg) => invitations.invite(msg),
    createInviteLink: (invitations, msg) => invitations.createLink(msg),
    revokeInvite: (invitations, msg) => (msg.multiuse ? invitations.revokeLink(msg) : invitations.revoke(msg)),
    resendInvite: (invitations, msg) => invitations.resend(msg),
    joinInviteLink: (invitations, msg) => invitations.joinThroughLink(msg),
    acceptInvite: (invitations, msg) => invitations.accept(msg),
    testWelcomeMessage: (invitations, msg) => invitations.testWelcomeMessage(msg),
  };

  private get db() {
    return this.deps.store.db;
  }

  private async invite(msg: Invite): Promise<Record<string, never>> {
    const db = this.db;
    // A redelivery of a request that committed: it is done (addresses it skipped are not reported again).
    if (await db.selectFrom("invitations").select("id").where("request_key", "=", msg.requestKey).executeTakeFirst()) return {};
    const { acting, welcome } = await this.checkTerms(msg, "realm_can_invite_users_group");
    if (!msg.emails.length) throw errors.badRequest("You must specify at least one email address.");

    // Zulip refuses the whole request when an address does not validate, and skips addresses that have accounts.
    const invalid = msg.emails.filter((e) => !EMAIL.test(e));
    if (invalid.length) {
      throw invitationFailed("Some emails did not validate, so we didn't send any invitations.", invalid.map((e) => [e, "Invalid address.", false]), false);
    }
    const conflicts = await this.accountConflicts(msg.emails);
    const skipped: [string, string, boolean][] = [];
    const toInvite = msg.emails.filter((email) => {
      const conflict = conflicts.get(email.toLowerCase());
      if (conflict) skipped.push([email, conflict.reason, conflict.deactivated]);
      return !conflict;
    });
    if (!toInvite.length) throw invitationFailed("We weren't able to invite anyone.", skipped, false);
    await this.checkDailyLimit(toInvite.length);

    const realmName = await this.realmName();
    const now = nowSeconds();
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      for (const email of toInvite) {
        const key = await insertInvitation(trx, {
          realm_id: this.realmId,
          email,
          referrer_id: acting.id,
          invited_as: msg.inviteAs,
          stream_ids: JSON.stringify(msg.streamIds),
          group_ids: JSON.stringify(msg.groupIds),
          include_realm_default_subscriptions: msg.includeRealmDefaultSubscriptions,
          notify_referrer_on_join: msg.notifyReferrerOnJoin,
          welcome_message_custom_text: welcome,
          created_at: now,
          expires_at: expiresAt(now, msg.expiresInMinutes),
          request_key: msg.requestKey,
        });
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

  /** POST /invites/multiuse: Zulip's generate_multiuse_invite_backend. */
  private async createLink(msg: CreateInviteLink): Promise<InviteLinkCreated> {
    const redelivered = await this.db.selectFrom("invite_links").select("key_enc").where("request_key", "=", msg.requestKey).executeTakeFirst();
    if (redelivered) return { invite_link: inviteLinkUrl(msg.siteUrl, this.deps.keyring.decrypt(redelivered.key_enc)) };
    const { acting, welcome } = await this.checkTerms(msg, "realm_create_multiuse_invite_group");
    const { key, hash } = newEmailKey();
    const now = nowSeconds();
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("invite_links")
        .values({
          realm_id: this.realmId,
          referrer_id: acting.id,
          invited_as: msg.inviteAs,
          stream_ids: JSON.stringify(msg.streamIds),
          group_ids: JSON.stringify(msg.groupIds),
          include_realm_default_subscriptions: msg.includeRealmDefaultSubscriptions,
          welcome_message_custom_text: welcome,
          key_hash: hash,
          key_enc: this.deps.keyring.encrypt(key),
          created_at: now,
          expires_at: expiresAt(now, msg.expiresInMinutes),
          request_key: msg.requestKey,
        })
        .execute(),
    );
    await this.invitesChanged(acting.id);
    return { invite_link: inviteLinkUrl(msg.siteUrl, key) };
  }

  /**
   * What POST /invites and POST /invites/multiuse both check: the caller's permission to invite this way
   * (`permission`: the realm's group setting), the role, the channels, the groups and the welcome text. Returns
   * the caller and the welcome text to keep (administrators' only, as in Zulip).
   */
  private async checkTerms(terms: InviteTerms, permission: "realm_can_invite_users_group" | "realm_create_multiuse_invite_group") {
    const db = this.db;
    const acting = await db.selectFrom("users").selectAll().where("id", "=", terms.actingId).where("realm_id", "=", this.realmId).executeTakeFirstOrThrow();
    const settings = await realmSettings(db, this.realmId);
    if (!(await inGroupSetting(db, settings[permission] as GroupSettingValue, acting.id))) throw errors.badRequest("Insufficient permission");
    if (terms.inviteAs < acting.role) {
      throw errors.badRequest(terms.inviteAs === ROLE.owner ? "Must be an organization owner" : "Must be an organization administrator");
    }
    await this.checkStreams(acting, terms.streamIds, settings);
    await this.checkGroups(acting.id, terms.groupIds, settings);
    const welcome = acting.role <= ROLE.administrator ? terms.welcomeMessageCustomText : null;
    if (welcome && welcome.length > MAX_WELCOME_MESSAGE_LENGTH) {
      throw errors.badRequest(`welcome_message_custom_text is too long (limit: ${MAX_WELCOME_MESSAGE_LENGTH} characters)`);
    }
    return { acting, welcome };
  }

  /** The realm's accounts among these addresses, by lower-cased address, with Zulip's reason for skipping each. */
  private async accountConflicts(emails: string[]): Promise<Map<string, { reason: string; deactivated: boolean }>> {
    const existing = await this.db
      .selectFrom("users")
      .select(["delivery_email", "is_active"])
      .where("realm_id", "=", this.realmId)
      .where(sql`lower(delivery_email)`, "in", emails.map((e) => e.toLowerCase()))
      .execute();
    return new Map(
      existing.map((u) => [u.delivery_email.toLowerCase(), { reason: u.is_active ? "Already has an account." : "Account has been deactivated.", deactivated: !u.is_active }]),
    );
  }

  /**
   * Zulip's daily limit on invitation e-mails (check_invite_limit): invitations sent and re-sent in the last day.
   * E-mails confirming an address given through a link are not invitations, and do not count.
   */
  private async checkDailyLimit(sending: number): Promise<void> {
    const since = nowSeconds() - 86400;
    const [sent, resent] = await Promise.all([
      this.db
        .selectFrom("invitations")
        .select(sql<number>`count(*)`.as("n"))
        .where("realm_id", "=", this.realmId)
        .where("created_at", ">", since)
        .where("link_id", "is", null)
        .executeTakeFirstOrThrow(),
      this.db.selectFrom("invitation_resends").select(sql<number>`count(*)`.as("n")).where("realm_id", "=", this.realmId).where("created_at", ">", since).executeTakeFirstOrThrow(),
    ]);
    if (Number(sent.n) + Number(resent.n) + sending > DAILY_INVITE_LIMIT) {
      throw invitationFailed(
        "To protect users, Zulip limits the number of invitations you can send in one day. Because you have reached the limit, no invitations were sent.",
        [],
        false,
        true,
      );
    }
  }

  private async realmName(): Promise<string> {
    return (await this.db.selectFrom("realms").select("name").where("id", "=", this.realmId).executeTakeFirstOrThrow()).name;
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

  /** DELETE /invites/{id}: Zulip's revoke_user_invite. */
  private async revoke(msg: RevokeInvite): Promise<Record<string, never>> {
    const invite = await this.emailInvitation(msg.inviteId);
    if (!invite || invite.status !== "pending") throw errors.badRequest("No such invitation");
    await this.checkManages(msg.actingId, invite);
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("invitations").set({ status: "revoked" }).where("id", "=", invite.id).execute());
    await this.invitesChanged(invite.referrer_id);
    return {};
  }

  /** DELETE /invites/multiuse/{id}: Zulip's revoke_multiuse_invite. */
  private async revokeLink(msg: RevokeInvite): Promise<Record<string, never>> {
    const link = await this.db
      .selectFrom("invite_links")
      .select(["id", "referrer_id", "invited_as", "status"])
      .where("id", "=", msg.inviteId)
      .where("realm_id", "=", this.realmId)
      .executeTakeFirst();
    if (!link) throw errors.badRequest("No such invitation");
    await this.checkManages(msg.actingId, link);
    if (link.status === "revoked") throw errors.badRequest("Invitation has already been revoked");
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("invite_links").set({ status: "revoked" }).where("id", "=", link.id).execute());
    await this.invitesChanged(link.referrer_id);
    return {};
  }

  /**
   * POST /invites/{id}/resend: Zulip's resend_user_invite_email. The store keeps only the hash of the key it
   * e-mailed, so the new e-mail carries a new key, and the earlier e-mail's key stops working.
   */
  private async resend(msg: ResendInvite): Promise<Record<string, never>> {
    const db = this.db;
    if (await db.selectFrom("invitation_resends").select("id").where("request_key", "=", msg.requestKey).executeTakeFirst()) return {};
    const invite = await this.emailInvitation(msg.inviteId);
    if (!invite || invite.status !== "pending") throw errors.badRequest("No such invitation");
    await this.checkManages(msg.actingId, invite);
    refuseUnusable(invite);
    await this.checkDailyLimit(1);
    const referrer = await db.selectFrom("users").select("full_name").where("id", "=", invite.referrer_id).executeTakeFirstOrThrow();
    const realmName = await this.realmName();
    const { key, hash } = newEmailKey();
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx.updateTable("invitations").set({ key_hash: hash }).where("id", "=", invite.id).execute();
      await trx.insertInto("invitation_resends").values({ realm_id: this.realmId, invitation_id: invite.id, created_at: nowSeconds(), request_key: msg.requestKey }).execute();
      await queueEmail(trx, { to: invite.email, ...invitationEmail(referrer.full_name, realmName, msg.siteUrl, key, invite.welcome_message_custom_text) });
    });
    return {};
  }

  /** An e-mail invitation of this realm (not one confirming an address given through a link: those are not listed). */
  private emailInvitation(id: number) {
    return this.db.selectFrom("invitations").selectAll().where("id", "=", id).where("realm_id", "=", this.realmId).where("link_id", "is", null).executeTakeFirst();
  }

  /**
   * Zulip's access_invite_by_id: whoever created an invitation manages it; otherwise administrators do, and only
   * owners manage invitations to become an owner.
   */
  private async checkManages(actingId: number, invite: { referrer_id: number; invited_as: number }): Promise<void> {
    if (invite.referrer_id === actingId) return;
    const acting = await this.db.selectFrom("users").select("role").where("id", "=", actingId).executeTakeFirstOrThrow();
    if (invite.invited_as === ROLE.owner && acting.role !== ROLE.owner) throw errors.badRequest("Must be an organization owner");
    if (acting.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
  }

  /**
   * POST /invites/join: someone with a link gives their address. They get an e-mail whose key accepts an
   * invitation with the link's terms; the referrer is not told when they join (a link has no such option).
   */
  private async joinThroughLink(msg: JoinInviteLink): Promise<Record<string, never>> {
    const db = this.db;
    if (await db.selectFrom("invitations").select("id").where("request_key", "=", msg.requestKey).executeTakeFirst()) return {};
    const link = await db.selectFrom("invite_links").selectAll().where("key_hash", "=", hashEmailKey(msg.key)).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!link) throw errors.badRequest("Invalid invitation key");
    refuseUnusable(link);
    if (!EMAIL.test(msg.email)) throw errors.badRequest(`Invalid address: ${msg.email}`);
    const conflict = (await this.accountConflicts([msg.email])).get(msg.email.toLowerCase());
    if (conflict) throw errors.badRequest(`${msg.email}: ${conflict.reason}`);
    const now = nowSeconds();
    // Anyone with the link may ask: an address gets these e-mails as often as it would e-mail-change ones.
    const earlier = await db
      .selectFrom("invitations")
      .select("created_at")
      .where("realm_id", "=", this.realmId)
      .where("link_id", "is not", null)
      .where(sql`lower(email)`, "=", msg.email.toLowerCase())
      .where("created_at", ">", now - longestWindow(EMAIL_REQUEST_LIMITS))
      .execute();
    refuseOverLimits(earlier.map((r) => Number(r.created_at)), EMAIL_REQUEST_LIMITS, now);
    const realmName = await this.realmName();
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const key = await insertInvitation(trx, {
        realm_id: this.realmId,
        email: msg.email,
        referrer_id: link.referrer_id,
        invited_as: link.invited_as,
        stream_ids: JSON.stringify(link.stream_ids),
        group_ids: JSON.stringify(link.group_ids),
        include_realm_default_subscriptions: link.include_realm_default_subscriptions,
        notify_referrer_on_join: false,
        welcome_message_custom_text: link.welcome_message_custom_text,
        created_at: now,
        expires_at: now + LINK_SIGNUP_VALIDITY_SECONDS,
        request_key: msg.requestKey,
        link_id: link.id,
      });
      await queueEmail(trx, { to: msg.email, ...linkSignupEmail(realmName, msg.siteUrl, key) });
    });
    return {};
  }

  private async accept(msg: AcceptInvite): Promise<CreatedUser> {
    const invite = await this.db.selectFrom("invitations").selectAll().where("key_hash", "=", hashEmailKey(msg.key)).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!invite) throw errors.badRequest("Invalid invitation key");
    refuseUnusable(invite);
    // Signing up through a link: the link must still be usable too.
    if (invite.link_id !== null) refuseUnusable(await this.db.selectFrom("invite_links").select(["status", "expires_at"]).where("id", "=", invite.link_id).executeTakeFirstOrThrow());
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
    for (const s of streams) await this.deps.system().ref(Channel, s.id).ask({ op: "subscribe", userIds: [userId] });
    await welcomeNewUser(this.deps, this.ctx.fence(), this.realmId, userId);
    if (invite.welcome_message_custom_text) {
      await this.botMessage(WELCOME_BOT, userId, invite.welcome_message_custom_text, `invite-welcome:${invite.id}`);
    }
    if (invite.notify_referrer_on_join) await this.notifyReferrer(invite.id, invite.referrer_id, userId, msg.fullName);
    // A link's sign-ups were never listed: the list changes only when an e-mail invitation is used.
    if (invite.link_id === null) await this.invitesChanged(invite.referrer_id);
    return created.account;
  }

  private async testWelcomeMessage(msg: TestWelcomeMessage): Promise<{ message_id: number }> {
    const acting = await this.db.selectFrom("users").select("role").where("id", "=", msg.actingId).executeTakeFirstOrThrow();
    if (acting.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
    if (!msg.text) throw errors.badRequest("Message must not be empty");
    return { message_id: await this.botMessage(WELCOME_BOT, msg.actingId, msg.text, `welcome-test:${msg.requestKey}`) };
  }

  /** Notification Bot tells the referrer, as Zulip does (zerver/actions/create_user.py). */
  private async notifyReferrer(inviteId: number, referrerId: number, userId: number, fullName: string): Promise<void> {
    const referrer = await this.db.selectFrom("users").select("is_active").where("id", "=", referrerId).executeTakeFirst();
    if (!referrer?.is_active) return;
    await this.botMessage(NOTIFICATION_BOT, referrerId, `@_**${fullName}|${userId}** accepted your invitation to join Zulip!`, `invite-accepted:${inviteId}`);
  }

  /** A direct message from a system bot. `sendKey`: one per invitation, so a redelivered accept sends it once. */
  private botMessage(which: typeof NOTIFICATION_BOT, to: number, content: string, sendKey: string): Promise<number> {
    return sendAsSystemBot(this.deps, this.ctx.fence(), this.realmId, which, to, content, sendKey);
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
    await this.deps.system().broadcast(User, [...ids], { op: "deliverEvent", event: { type: "invites_changed" } });
  }
}

/** An invitation (or link) row's expiry: null never expires. */
function expiresAt(now: number, minutes: number | null): number | null {
  return minutes === null ? null : now + minutes * 60;
}

/** Insert an invitation with a fresh key; returns the key, for its e-mail. */
async function insertInvitation(trx: Transaction<Database>, row: Omit<Insertable<InvitationTable>, "key_hash">): Promise<string> {
  const { key, hash } = newEmailKey();
  await trx.insertInto("invitations").values({ ...row, key_hash: hash }).execute();
  return key;
}

/** The join page (gateway/pages/people) takes the key from its path; scripts may POST it to /api/v1/invites/accept. */
const acceptLine = (siteUrl: string, key: string) => `Accept the invitation: ${siteUrl}/join/${key}/`;

function invitationEmail(referrer: string, realmName: string, siteUrl: string, key: string, welcome: string | null) {
  const lines = [`${referrer} invited you to join ${realmName} on Chorus.`, "", ...(welcome ? [welcome, ""] : []), acceptLine(siteUrl, key)];
  return { subject: `${referrer} invited you to join ${realmName}`, body: lines.join("\n") };
}

function linkSignupEmail(realmName: string, siteUrl: string, key: string) {
  const lines = [`Someone (hopefully you) used an invitation link to join ${realmName} on Chorus with this address.`, "", acceptLine(siteUrl, key)];
  return { subject: `Confirm your address to join ${realmName}`, body: lines.join("\n") };
}

/**
 * GET /invites: the unexpired pending e-mail invitations and live links the caller manages (administrators: all
 * of the realm's; others: their own), with Zulip's fields.
 */
export async function listInvites(db: ActorDeps["store"]["db"], keyring: Keyring, siteUrl: string, realmId: number, viewer: { id: number; role: number }) {
  const now = nowSeconds();
  const own = viewer.role > ROLE.administrator;
  let emailed = db
    .selectFrom("invitations")
    .select(["id", "email", "referrer_id", "invited_as", "created_at", "expires_at", "notify_referrer_on_join"])
    .where("realm_id", "=", realmId)
    .where("status", "=", "pending")
    .where("link_id", "is", null)
    .where((eb) => eb.or([eb("expires_at", "is", null), eb("expires_at", ">", now)]));
  let links = db
    .selectFrom("invite_links")
    .select(["id", "referrer_id", "invited_as", "created_at", "expires_at", "key_enc"])
    .where("realm_id", "=", realmId)
    .where("status", "=", "active")
    .where((eb) => eb.or([eb("expires_at", "is", null), eb("expires_at", ">", now)]));
  if (own) {
    emailed = emailed.where("referrer_id", "=", viewer.id);
    links = links.where("referrer_id", "=", viewer.id);
  }
  const [emailRows, linkRows] = await Promise.all([emailed.orderBy("id").execute(), links.orderBy("id").execute()]);
  const common = (r: { id: number; referrer_id: number; invited_as: number; created_at: number; expires_at: number | null }) => ({
    id: r.id,
    invited_by_user_id: r.referrer_id,
    invited: Number(r.created_at),
    expiry_date: r.expires_at === null ? null : Number(r.expires_at),
    invited_as: r.invited_as,
  });
  return [
    ...emailRows.map((r) => ({ ...common(r), email: r.email, notify_referrer_on_join: r.notify_referrer_on_join, is_multiuse: false })),
    ...linkRows.map((r) => ({ ...common(r), link_url: inviteLinkUrl(siteUrl, keyring.decrypt(r.key_enc)), notify_referrer_on_join: false, is_multiuse: true })),
  ];
}
