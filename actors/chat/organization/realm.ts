/**
 * realm:<id>: the organization. It serialises what must be unique across the realm (e-mail addresses, channel
 * names) and owns account and channel creation.
 */
import { sql } from "kysely";
import { type Actor, type ActorContext } from "../../../runtime/actor.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { Keyring } from "../../../runtime/secrets.ts";
import type { Store } from "../../../runtime/store/store.ts";
import type { ActorDeps } from "../../deps.ts";
import { defaultChannelIds, streamObject, streamObjects, visibleStreams, type StreamRow } from "../reads/channels.ts";
import { userObject } from "../reads/users.ts";
import { metadataWatchers } from "../conversations/channel-access.ts";
import { channelPermissionDefaults, createSystemGroups, moveRoleGroups, ROLE, systemGroups, userGroupObjects } from "./groups.ts";
import { planRealmSettings } from "./realm-settings.ts";
import { realmSettings, realmUserSettingsDefaults } from "../users/settings.ts";
import { restemRealm, SearchDocumentFill } from "../search-fill.ts";
import { checkNewGroup, insertGroup } from "./user-groups.ts";
import { Invitations } from "./invites.ts";
import { EmailChanges } from "./email-changes.ts";
import { PasswordResets } from "./password-resets.ts";
import { ProfileFields } from "./profile-fields.ts";
import { RealmEmojiChanges } from "./realm-emoji.ts";
import { RealmAttachments } from "./attachments.ts";
import { RealmLinkifiers, type RealmAdministration } from "./linkifiers.ts";
import { RealmPlaygrounds } from "./realm-playgrounds.ts";
import { ChannelFolders } from "./channel-folders.ts";
import { GroupChanges } from "./group-changes.ts";
import { renderMarkdown } from "../rendering/message-format.ts";
import { EMAIL_VISIBILITY, insertAccount, MAX_FULL_NAME_LENGTH } from "./accounts.ts";
import { dispatch, forward, type Handlers, type MessageOf } from "../../../runtime/protocol.ts";
import type { ChannelArchived, CreateGroup, CreateUser, CreatedUser, EnsureChannels, EnsuredChannel, GroupCreated, RealmProtocol, RealmUpdated, SetDefaultChannel, UpdateRealm, UpdateUser, UpdateUserSettingsDefaults, SetUserActive } from "./realm.protocol.ts";
import { realmAlertWords } from "../users/alert-words.ts";
import { welcomeNewUser } from "./onboarding.ts";
import { User, type CapabilityFilter } from "../users/user.protocol.ts";
import type { Database } from "../../schema.ts";


export { ROLE };

/** The realm settings that name a channel (Zulip's maybe_set_moderation_or_announcement_channels_none). */
const REALM_CHANNEL_SETTINGS = ["moderation_request_channel_id", "new_stream_announcements_stream_id", "signup_announcements_stream_id", "zulip_update_announcements_stream_id"];
export { EMAIL, insertAccount, type NewAccount } from "./accounts.ts";


export class RealmActor implements Actor {
  private readonly realmId: number;
  private readonly invitations: Invitations;
  private readonly emailChanges: EmailChanges;
  private readonly passwordResets: PasswordResets;
  private readonly profileFields: ProfileFields;
  private readonly emoji: RealmEmojiChanges;
  private readonly attachments: RealmAttachments;
  private readonly linkifiers: RealmLinkifiers;
  private readonly playgrounds: RealmPlaygrounds;
  private readonly channelFolders: ChannelFolders;
  private readonly groups: GroupChanges;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.realmId = Number(ctx.key);
    this.invitations = new Invitations(ctx, deps, this.realmId, { tellRealm: (event) => this.tellRealm(event), announceUser: (id) => this.announceUser(id) });
    this.emailChanges = new EmailChanges(ctx, deps, this.realmId);
    this.passwordResets = new PasswordResets(ctx, deps, this.realmId);
    this.profileFields = new ProfileFields(ctx, deps, this.realmId, { tellRealm: (event) => this.tellRealm(event) });
    this.emoji = new RealmEmojiChanges(ctx, deps, this.realmId, { actingUser: (id) => this.actingUser(id), tellRealm: (event) => this.tellRealm(event) });
    this.attachments = new RealmAttachments(ctx, deps, this.realmId, { actingUser: (id) => this.actingUser(id) });
    const administration: RealmAdministration = {
      actingAdministrator: (id) => this.actingAdministrator(id),
      tellRealm: (event, capability) => this.tellRealm(event, "everyone", capability),
    };
    this.linkifiers = new RealmLinkifiers(ctx, deps, this.realmId, administration);
    this.playgrounds = new RealmPlaygrounds(ctx, deps, this.realmId, administration);
    this.channelFolders = new ChannelFolders(ctx, deps, this.realmId, administration);
    this.groups = new GroupChanges(ctx, deps, this.realmId, { actingUser: (id) => this.actingUser(id), tellRealm: (event) => this.tellRealm(event) });
  }

  /** The implementation of realm.protocol.ts; the parts' operations go to the parts' own tables. */
  private static readonly handlers: Handlers<RealmProtocol, RealmActor> = {
    createUser: (realm, msg) => realm.createUser(msg),
    welcomeUser: async (realm, msg) => (await welcomeNewUser(realm.deps, realm.ctx.fence(), realm.realmId, msg.userId), {}),
    ensureChannels: (realm, msg) => realm.ensureChannels(msg),
    setDefaultChannel: (realm, msg) => realm.setDefaultChannel(msg),
    channelArchived: (realm, msg) => realm.channelArchived(msg),
    updateRealm: (realm, msg) => realm.updateRealm(msg),
    updateUserSettingsDefaults: (realm, msg) => realm.updateUserSettingsDefaults(msg),
    updateUser: (realm, msg) => realm.updateUser(msg),
    createGroup: (realm, msg) => realm.createGroup(msg),
    setUserActive: (realm, msg) => realm.setUserActive(msg),
    ...forward(Invitations.handlers, (realm: RealmActor) => realm.invitations),
    ...forward(EmailChanges.handlers, (realm: RealmActor) => realm.emailChanges),
    ...forward(PasswordResets.handlers, (realm: RealmActor) => realm.passwordResets),
    ...forward(ProfileFields.handlers, (realm: RealmActor) => realm.profileFields),
    ...forward(RealmEmojiChanges.handlers, (realm: RealmActor) => realm.emoji),
    ...forward(RealmAttachments.handlers, (realm: RealmActor) => realm.attachments),
    ...forward(RealmLinkifiers.handlers, (realm: RealmActor) => realm.linkifiers),
    ...forward(RealmPlaygrounds.handlers, (realm: RealmActor) => realm.playgrounds),
    ...forward(ChannelFolders.handlers, (realm: RealmActor) => realm.channelFolders),
    ...forward(GroupChanges.handlers, (realm: RealmActor) => realm.groups),
  };

  receive(msg: MessageOf<RealmProtocol>): unknown {
    return dispatch(RealmActor.handlers, this, msg);
  }

  /** The acting user as the store has them now: roles are checked against the current one, not a cached one. */
  private async actingUser(id: number) {
    const user = await this.deps.store.db.selectFrom("users").selectAll().where("id", "=", id).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!user?.is_active) throw errors.badRequest("Account is deactivated");
    return user;
  }

  /** Zulip's require_realm_admin. */
  private async actingAdministrator(id: number) {
    const acting = await this.actingUser(id);
    if (acting.role > ROLE.administrator) throw errors.badRequest("Must be an organization administrator");
    return acting;
  }

  private async updateRealm(msg: UpdateRealm): Promise<RealmUpdated> {
    const acting = await this.actingUser(msg.actingId);
    const db = this.deps.store.db;
    const plan = await planRealmSettings(db, this.realmId, acting.role, await realmSettings(db, this.realmId), msg.settings);
    if (!plan.events.length) return plan.data;
    const language = plan.stored.realm_default_language as string | undefined;
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const row = await trx.selectFrom("realms").select("settings").where("id", "=", this.realmId).executeTakeFirstOrThrow();
      const before = row.settings as Record<string, unknown>;
      const settings = { ...before, ...plan.stored };
      await trx.updateTable("realms").set({ settings: JSON.stringify(settings) }).where("id", "=", this.realmId).execute();
      // The realm's messages are searched in its language: those parsed in the old one are parsed again.
      if (language !== undefined) await restemRealm(trx, this.realmId, before.realm_default_language as string | undefined, language);
    });
    if (language !== undefined) SearchDocumentFill.wake(this.deps.store);
    for (const event of plan.events) await this.tellRealm(event);
    return plan.data;
  }

  /** Zulip's update_realm_user_settings_defaults: one event per setting whose value changes, to everyone. */
  private async updateUserSettingsDefaults(msg: UpdateUserSettingsDefaults): Promise<Record<string, never>> {
    await this.actingAdministrator(msg.actingId);
    const current = await realmUserSettingsDefaults(this.deps.store.db, this.realmId);
    const changed = Object.entries(msg.settings).filter(([k, v]) => current[k] !== v);
    if (!changed.length) return {};
    const patch = JSON.stringify(Object.fromEntries(changed));
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .updateTable("realms")
        .set({ user_settings_defaults: sql`user_settings_defaults || ${patch}::jsonb` })
        .where("id", "=", this.realmId)
        .execute(),
    );
    for (const [property, value] of changed) await this.tellRealm({ type: "realm_user_settings_defaults", op: "update", property, value });
    return {};
  }

  /**
   * Zulip's update_user_backend for role, name and custom profile values: administrators only; owners alone touch
   * the owner role.
   */
  private async updateUser(msg: UpdateUser): Promise<Record<string, never>> {
    const acting = await this.actingUser(msg.actingId);
    if (acting.role > ROLE.administrator) throw errors.badRequest("Insufficient permission");
    const db = this.deps.store.db;
    const target = await db.selectFrom("users").selectAll().where("id", "=", msg.userId).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!target) throw errors.badRequest("No such user");
    const fullName = msg.fullName?.trim();
    if (fullName !== undefined) {
      if (!fullName) throw errors.badRequest("Name too short!");
      if (fullName.length > MAX_FULL_NAME_LENGTH) throw errors.badRequest("Name too long!");
    }
    const role = msg.role;
    const roleChanges = role !== undefined && role !== target.role;
    if (roleChanges) {
      if (!(Object.values(ROLE) as number[]).includes(role)) throw errors.badRequest("Invalid role");
      if ((role === ROLE.owner || target.role === ROLE.owner) && acting.role !== ROLE.owner) throw errors.badRequest("Must be an organization owner");
      if (target.role === ROLE.owner) {
        const owners = await db.selectFrom("users").select("id").where("realm_id", "=", this.realmId).where("role", "=", ROLE.owner).where("is_active", "=", true).where("is_bot", "=", false).execute();
        if (owners.length <= 1) throw errors.badRequest("The owner permission cannot be removed from the only organization owner.");
      }
    }
    const nameChanges = fullName !== undefined && fullName !== target.full_name;
    // After the role and name are checked, before they are written: a bad value changes nothing of those.
    if (msg.profileData?.length) await this.profileFields.setProfileData(acting.id, target.id, msg.profileData);
    if (!roleChanges && !nameChanges) return {};
    const sawBefore = roleChanges ? await visibleStreams(db, target, { all: true }) : [];
    const groups = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx
        .updateTable("users")
        .set({ ...(roleChanges ? { role } : {}), ...(nameChanges ? { full_name: fullName } : {}) })
        .where("id", "=", target.id)
        .execute();
      return roleChanges ? moveRoleGroups(trx, this.realmId, target.id, target.role, role!) : { left: [], joined: [] };
    });
    if (nameChanges) await this.tellRealm({ type: "realm_user", op: "update", person: { user_id: target.id, full_name: fullName } });
    if (roleChanges) {
      await this.tellRealm({ type: "realm_user", op: "update", person: { user_id: target.id, role } });
      for (const group_id of groups.left) await this.tellRealm({ type: "user_group", op: "remove_members", group_id, user_ids: [target.id] });
      for (const group_id of groups.joined) await this.tellRealm({ type: "user_group", op: "add_members", group_id, user_ids: [target.id] });
      await this.tellChannelsSeen(target.id, sawBefore, await visibleStreams(db, Object.assign({}, target, { role: role! }), { all: true }));
    }
    return {};
  }

  /**
   * Zulip's deactivate_user_backend, deactivate_user_own_backend and reactivate_user_backend. Administrators act on
   * other humans (owners alone on owners); anyone may leave, except the realm's last user or last owner. The user's
   * bots go with them. Everyone who can see them hears `realm_user` update `is_active` (Zulip's form since feature
   * level 222, which replaced remove/add); the route makes every worker forget the cached credentials.
   */
  private async setUserActive(msg: SetUserActive): Promise<Record<string, never>> {
    const acting = await this.actingUser(msg.actingId);
    const db = this.deps.store.db;
    const target = await db.selectFrom("users").selectAll().where("id", "=", msg.userId).where("realm_id", "=", this.realmId).executeTakeFirst();
    if (!target || (target.is_bot && !msg.active)) throw errors.badRequest("No such user");
    // Zulip's access_user_by_id: a deactivated target is refused before the permission check, unless reactivating.
    if (!msg.active && !target.is_active) throw errors.badRequest("User is deactivated");
    if (!msg.own && target.bot_owner_id !== acting.id && acting.role > ROLE.administrator) throw errors.badRequest("Insufficient permission");
    if (msg.active && target.is_active) throw errors.badRequest("User is already active.");
    if (!msg.active) await this.checkCanLeave(acting, target, msg.own);
    const bots = msg.active
      ? []
      : await db.selectFrom("users").select("id").where("bot_owner_id", "=", target.id).where("is_active", "=", true).where("realm_id", "=", this.realmId).execute();
    const ids = [target.id, ...bots.map((b) => b.id)];
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("users").set({ is_active: msg.active }).where("id", "in", ids).execute());
    await realmAlertWords.changed(this.deps.system(), this.realmId);
    await this.tellSubscriptionPeers(ids, msg.active);
    for (const user_id of ids) await this.tellRealm({ type: "realm_user", op: "update", person: { user_id, is_active: msg.active } });
    if (!msg.active) await this.deps.system().broadcast(User, ids, { op: "dropQueues" });
    return {};
  }

  /**
   * Those who see a channel's subscribers learn that deactivated users left the list (peer_remove, before the
   * realm_user event, as Zulip does since feature level 377) or that reactivated ones are back on it (peer_add).
   */
  private async tellSubscriptionPeers(userIds: number[], active: boolean): Promise<void> {
    const db = this.deps.store.db;
    const changed = await db.selectFrom("subscriptions").select(["stream_id", "user_id"]).where("user_id", "in", userIds).where("active", "=", true).execute();
    const streamIds = [...new Set(changed.map((s) => s.stream_id))];
    if (!streamIds.length) return;
    const [rows, subscriptions] = await Promise.all([
      db.selectFrom("streams").selectAll().where("id", "in", streamIds).execute(),
      db.selectFrom("subscriptions").select(["stream_id", "user_id"]).where("stream_id", "in", streamIds).where("active", "=", true).execute(),
    ]);
    for (const row of rows) {
      const users = changed.filter((s) => s.stream_id === row.id).map((s) => s.user_id);
      const subscribers = subscriptions.filter((s) => s.stream_id === row.id).map((s) => s.user_id);
      const watchers = [...(await metadataWatchers(db, row, subscribers))].filter((id) => !users.includes(id));
      const event = { type: "subscription", op: active ? "peer_add" : "peer_remove", stream_ids: [row.id], user_ids: users };
      await this.deps.system().broadcast(User, watchers, { op: "deliverEvent", event });
    }
  }

  /** Zulip's last-owner and last-user rules for a deactivation. */
  private async checkCanLeave(acting: { role: number }, target: { id: number; role: number }, own: boolean): Promise<void> {
    const db = this.deps.store.db;
    const humans = await db.selectFrom("users").select(["id", "role"]).where("realm_id", "=", this.realmId).where("is_active", "=", true).where("is_bot", "=", false).execute();
    const lastOwner = target.role === ROLE.owner && humans.filter((u) => u.role === ROLE.owner).length <= 1;
    if (own) {
      if (humans.length <= 1) throw new ChorusError("CANNOT_DEACTIVATE_LAST_USER", "Cannot deactivate the only user", 400, { is_last_owner: false, entity: "user" });
      if (lastOwner) throw new ChorusError("CANNOT_DEACTIVATE_LAST_USER", "Cannot deactivate the only organization owner", 400, { is_last_owner: true, entity: "organization owner" });
      return;
    }
    if (target.role === ROLE.owner && acting.role !== ROLE.owner) throw errors.badRequest("Must be an organization owner");
    if (lastOwner) throw errors.badRequest("Cannot deactivate the only organization owner");
  }

  /**
   * A role change can show or hide channels (a guest becoming a member sees the public ones, an administrator
   * every private one): stream create for those the user now sees, stream delete for those they no longer do.
   */
  private async tellChannelsSeen(userId: number, before: StreamRow[], after: StreamRow[]): Promise<void> {
    const beforeIds = new Set(before.map((s) => s.id));
    const afterIds = new Set(after.map((s) => s.id));
    const gained = after.filter((s) => !beforeIds.has(s.id));
    const lost = before.filter((s) => !afterIds.has(s.id)).map((s) => s.id);
    if (gained.length) await this.deps.system().broadcast(User, [userId], { op: "deliverEvent", event: { type: "stream", op: "create", streams: streamObjects(gained) } });
    if (lost.length) await this.deps.system().broadcast(User, [userId], { op: "deliverEvent", event: { type: "stream", op: "delete", streams: lost.map((stream_id) => ({ stream_id })), stream_ids: lost } });
  }

  private async createGroup(msg: CreateGroup): Promise<GroupCreated> {
    await this.actingUser(msg.actingId);
    const db = this.deps.store.db;
    const group = await checkNewGroup(db, this.realmId, msg.actingId, msg);
    const id = await this.deps.store.write(this.ctx.fence(), (trx) => insertGroup(trx, this.realmId, msg.actingId, group));
    const [created] = await userGroupObjects(db, this.realmId, [id]);
    await this.tellRealm({ type: "user_group", op: "add", group: created });
    return { group_id: id };
  }

  private async createUser(msg: CreateUser): Promise<CreatedUser> {
    const created = await this.deps.store.write(this.ctx.fence(), (trx) => insertAccount(trx, this.realmId, msg, this.deps.keyring));
    await this.announceUser(created.user_id);
    await welcomeNewUser(this.deps, this.ctx.fence(), this.realmId, created.user_id);
    return created;
  }

  private async announceUser(userId: number): Promise<void> {
    const person = await this.deps.store.db.selectFrom("users").selectAll().where("id", "=", userId).executeTakeFirstOrThrow();
    // A new account shows its address to everyone (the default email_address_visibility) and has no values yet.
    const visible = { emailVisibility: EMAIL_VISIBILITY.everyone, deliveryEmailVisible: true, profileData: {} };
    await this.tellRealm({ type: "realm_user", op: "add", person: userObject(person, { clientGravatar: false, ...visible }) });
  }

  /**
   * An event for every active user of the realm, or (`members`) every one but guests (their user actors drop it if
   * they have no queue); with `capability`, only to the queues it selects.
   */
  private async tellRealm(event: Record<string, unknown>, audience: "everyone" | "members" = "everyone", capability?: CapabilityFilter): Promise<void> {
    let query = this.deps.store.db.selectFrom("users").select("id").where("realm_id", "=", this.realmId).where("is_active", "=", true);
    if (audience === "members") query = query.where("role", "<", ROLE.guest);
    const users = await query.execute();
    await this.deps.system().broadcast(User, users.map((u) => u.id), capability ? { op: "deliverEvent", event, capability } : { op: "deliverEvent", event });
  }

  /**
   * Zulip's do_add_default_stream and do_remove_default_stream: the change, then the realm's default channels to
   * everyone but guests (notify_default_streams). Making a channel default that already is changes nothing and
   * tells nobody; one that became private or archived meanwhile is left as it is.
   */
  private async setDefaultChannel(msg: SetDefaultChannel): Promise<Record<string, never>> {
    const updated = await this.deps.store.write(this.ctx.fence(), (trx) => {
      let change = trx.updateTable("streams").set({ is_default: msg.isDefault }).where("id", "=", msg.streamId).where("realm_id", "=", this.realmId);
      if (msg.isDefault) change = change.where("is_default", "=", false).where("invite_only", "=", false).where("deactivated", "=", false);
      return change.executeTakeFirst();
    });
    if (msg.isDefault && !Number(updated.numUpdatedRows)) return {};
    await this.tellDefaultChannels();
    return {};
  }

  /**
   * Zulip's do_deactivate_stream, for the realm: an archived channel stops being a default channel, and the realm's
   * announcement and moderation-request channels that were it are unset (-1, told as Zulip's update_dict).
   */
  private async channelArchived({ streamId }: ChannelArchived): Promise<Record<string, never>> {
    const { wasDefault, unset } = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const defaults = await trx.updateTable("streams").set({ is_default: false }).where("id", "=", streamId).where("realm_id", "=", this.realmId).where("is_default", "=", true).executeTakeFirst();
      const row = await trx.selectFrom("realms").select("settings").where("id", "=", this.realmId).executeTakeFirstOrThrow();
      const settings = row.settings as Record<string, unknown>;
      const unset = REALM_CHANNEL_SETTINGS.filter((name) => settings[`realm_${name}`] === streamId);
      if (unset.length) {
        const cleared = Object.fromEntries(unset.map((name) => [`realm_${name}`, -1]));
        await trx.updateTable("realms").set({ settings: JSON.stringify({ ...settings, ...cleared }) }).where("id", "=", this.realmId).execute();
      }
      return { wasDefault: Number(defaults.numUpdatedRows) > 0, unset };
    });
    if (wasDefault) await this.tellDefaultChannels();
    if (unset.length) await this.tellRealm({ type: "realm", op: "update_dict", property: "default", data: Object.fromEntries(unset.map((name) => [name, -1])) });
    return {};
  }

  private async tellDefaultChannels(): Promise<void> {
    await this.tellRealm({ type: "default_streams", default_streams: await defaultChannelIds(this.deps.store.db, this.realmId) }, "members");
  }

  private async ensureChannels(msg: EnsureChannels): Promise<EnsuredChannel[]> {
    const channels = await this.createChannels(msg);
    // New channels are announced to those who may see them (Zulip's create_stream_if_needed): everyone for a
    // web-public channel, non-guests for a public one, administrators and the channel's permission groups for a
    // private one (its subscribers learn of it through their subscription events).
    const created = channels.filter((c) => c.created).map((c) => c.id);
    if (created.length) {
      const rows = await this.deps.store.db.selectFrom("streams").selectAll().where("id", "in", created).execute();
      const system = this.deps.system();
      for (const row of rows) {
        const seeing = await metadataWatchers(this.deps.store.db, row, []);
        await system.broadcast(User, [...seeing], { op: "deliverEvent", event: { type: "stream", op: "create", streams: [streamObject(row, 0)] } });
      }
      if (msg.isDefault) await this.tellDefaultChannels();
    }
    return channels;
  }

  private createChannels(msg: EnsureChannels): Promise<EnsuredChannel[]> {
    const now = Math.floor(Date.now() / 1000);
    return this.deps.store.write(this.ctx.fence(), async (trx) => {
      const groups = await systemGroups(trx, this.realmId);
      const out: EnsuredChannel[] = [];
      for (const spec of msg.channels) {
        const existing = await trx
          .selectFrom("streams")
          .select(["id", "name"])
          .where("realm_id", "=", this.realmId)
          .where(sql`lower(name)`, "=", spec.name.toLowerCase())
          .executeTakeFirst();
        if (existing) {
          out.push(Object.assign({}, existing, { created: false }));
          continue;
        }
        const created = await trx
          .insertInto("streams")
          .values({
            realm_id: this.realmId,
            name: spec.name,
            description: spec.description,
            rendered_description: spec.description ? renderMarkdown(spec.description) : "",
            invite_only: msg.inviteOnly,
            is_web_public: msg.isWebPublic,
            is_default: msg.isDefault,
            // Public channels always share their history (Zulip's get_default_value_for_history_public_to_subscribers).
            history_public_to_subscribers: msg.inviteOnly ? (msg.historyPublicToSubscribers ?? false) : true,
            creator_id: msg.creatorId,
            date_created: now,
            message_retention_days: msg.messageRetentionDays,
            settings: JSON.stringify({ topics_policy: "inherit", ...channelPermissionDefaults(groups, msg.creatorId), ...msg.settings }),
          })
          .returning(["id", "name"])
          .executeTakeFirstOrThrow();
        out.push(Object.assign({}, created, { created: true }));
      }
      return out;
    });
  }
}

/**
 * First start: an empty store gets an organization and its owner. Runs before any actor (nothing else exists to
 * race with), in one transaction. Returns the owner's credentials, or undefined when the realm existed.
 */
export async function bootstrapOrganization(
  store: Store<Database>,
  keyring: Keyring,
  owner: { email: string; fullName: string; passwordHash: string | null },
): Promise<{ realmId: number; userId: number; email: string; apiKey: string } | undefined> {
  return store.db.transaction().execute(async (trx) => {
    const existing = await trx.selectFrom("realms").select("id").executeTakeFirst();
    if (existing) return undefined;
    const realm = await trx
      .insertInto("realms")
      .values({ string_id: "", name: "Chorus", date_created: Math.floor(Date.now() / 1000), settings: "{}" })
      .returning("id")
      .executeTakeFirstOrThrow();
    await createSystemGroups(trx, realm.id);
    const created = await insertAccount(trx, realm.id, Object.assign({}, owner, { role: ROLE.owner }), keyring);
    return { realmId: realm.id, userId: created.user_id, email: owner.email, apiKey: created.api_key };
  });
}
