/**
 * realm:<id>: the organization. It serialises what must be unique across the realm (e-mail addresses, channel
 * names) and owns account and channel creation.
 */
import { sql, type Transaction } from "kysely";
import { actorId, type Actor, type ActorContext } from "../runtime/actor.ts";
import { errors } from "../runtime/errors.ts";
import { Keyring } from "../runtime/secrets.ts";
import type { Store } from "../runtime/store/store.ts";
import type { Database } from "../runtime/store/schema.ts";
import type { ActorDeps } from "./deps.ts";
import { streamObject, userObject } from "./reads.ts";
import { addToRoleGroups, channelPermissionDefaults, createSystemGroups, ROLE, systemGroups } from "./groups.ts";
import { renderMarkdown } from "./message-format.ts";
import { USER, type CreatedUser, type CreateUser, type EnsureChannels, type EnsuredChannel, type RealmMessage } from "./protocol.ts";

export { ROLE };


export class RealmActor implements Actor {
  private readonly realmId: number;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.realmId = Number(ctx.key);
  }

  receive(msg: RealmMessage): Promise<unknown> {
    switch (msg.op) {
      case "createUser":
        return this.createUser(msg);
      case "ensureChannels":
        return this.ensureChannels(msg);
    }
  }

  private async createUser(msg: CreateUser): Promise<CreatedUser> {
    const created = await this.deps.store.write(this.ctx.fence(), (trx) => insertAccount(trx, this.realmId, msg, this.deps.keyring));
    const db = this.deps.store.db;
    const person = await db.selectFrom("users").selectAll().where("id", "=", created.user_id).executeTakeFirstOrThrow();
    await this.tellRealm({ type: "realm_user", op: "add", person: userObject(person, { clientGravatar: false }) });
    return created;
  }

  /**
   * An event for every active user of the realm whose role is at least `lowestRole` (their user actors drop it if
   * they have no queue).
   */
  private async tellRealm(event: Record<string, unknown>, lowestRole: number = ROLE.guest): Promise<void> {
    const query = this.deps.store.db.selectFrom("users").select("id").where("realm_id", "=", this.realmId).where("is_active", "=", true).where("role", "<=", lowestRole);
    const users = await query.execute();
    await this.deps.system().broadcast(users.map((u) => actorId(USER, u.id)), { op: "deliverEvent", event });
  }

  private async ensureChannels(msg: EnsureChannels): Promise<EnsuredChannel[]> {
    const channels = await this.createChannels(msg);
    // New channels are announced to those who may see them (Zulip's create_stream_if_needed): everyone for a
    // web-public channel, non-guests for a public one, administrators for a private one (its subscribers learn of
    // it through their subscription events).
    const created = channels.filter((c) => c.created).map((c) => c.id);
    if (created.length) {
      const rows = await this.deps.store.db.selectFrom("streams").selectAll().where("id", "in", created).execute();
      const event = { type: "stream", op: "create", streams: rows.map((r) => streamObject(r, 0)) };
      await this.tellRealm(event, msg.isWebPublic ? ROLE.guest : msg.inviteOnly ? ROLE.administrator : ROLE.member);
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
          out.push({ ...existing, created: false });
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
        out.push({ ...created, created: true });
      }
      return out;
    });
  }
}

export interface NewAccount {
  email: string;
  fullName: string;
  passwordHash: string | null;
  role: number;
}

/**
 * Create an account with a fresh API key, inside the caller's transaction: the realm actor's, the first-start
 * bootstrap's, or the management CLI's. E-mail addresses are unique per realm, compared case-insensitively.
 */
export async function insertAccount(trx: Transaction<Database>, realmId: number, account: NewAccount, keyring: Keyring): Promise<CreatedUser> {
  const taken = await trx
    .selectFrom("users")
    .select("id")
    .where("realm_id", "=", realmId)
    .where(sql`lower(delivery_email)`, "=", account.email.toLowerCase())
    .executeTakeFirst();
  if (taken) throw errors.badRequest(`Email '${account.email}' already in use`);
  const apiKey = Keyring.newApiKey();
  const row = await trx
    .insertInto("users")
    .values({
      realm_id: realmId,
      email: account.email,
      delivery_email: account.email,
      full_name: account.fullName,
      role: account.role,
      is_active: true,
      is_bot: false,
      bot_type: null,
      bot_owner_id: null,
      api_key_hash: keyring.hashApiKey(apiKey),
      api_key_enc: keyring.encrypt(apiKey),
      password_hash: account.passwordHash,
      date_joined: Math.floor(Date.now() / 1000),
      timezone: "",
      avatar_version: 1,
    })
    .returning("id")
    .executeTakeFirstOrThrow();
  await addToRoleGroups(trx, realmId, row.id, account.role);
  return { user_id: row.id, api_key: apiKey };
}

/**
 * First start: an empty store gets an organization and its owner. Runs before any actor (nothing else exists to
 * race with), in one transaction. Returns the owner's credentials, or undefined when the realm existed.
 */
export async function bootstrapOrganization(
  store: Store,
  keyring: Keyring,
  owner: { email: string; fullName: string; passwordHash: string | null },
): Promise<{ realmId: number; email: string; apiKey: string } | undefined> {
  return store.db.transaction().execute(async (trx) => {
    const existing = await trx.selectFrom("realms").select("id").executeTakeFirst();
    if (existing) return undefined;
    const realm = await trx
      .insertInto("realms")
      .values({ string_id: "", name: "Chorus", date_created: Math.floor(Date.now() / 1000), settings: "{}" })
      .returning("id")
      .executeTakeFirstOrThrow();
    await createSystemGroups(trx, realm.id);
    const created = await insertAccount(trx, realm.id, { ...owner, role: ROLE.owner }, keyring);
    return { realmId: realm.id, email: owner.email, apiKey: created.api_key };
  });
}
