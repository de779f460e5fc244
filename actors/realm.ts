/**
 * realm:<id>: the organization. It serialises what must be unique across the realm (e-mail addresses, channel
 * names) and owns account and channel creation.
 */
import { sql } from "kysely";
import type { Actor, ActorContext } from "../runtime/actor.ts";
import { errors } from "../runtime/errors.ts";
import { Keyring } from "../runtime/secrets.ts";
import type { Store } from "../runtime/store/store.ts";
import type { ActorDeps } from "./deps.ts";
import { addToRoleGroups, channelPermissionDefaults, createSystemGroups, systemGroups } from "./groups.ts";
import { renderMarkdown } from "./message-format.ts";
import type { CreatedUser, CreateUser, EnsureChannels, EnsuredChannel, RealmMessage } from "./protocol.ts";

export const ROLE = { owner: 100, administrator: 200, moderator: 300, member: 400, guest: 600 } as const;

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
    const { store, keyring } = this.deps;
    const taken = await store.db
      .selectFrom("users")
      .select("id")
      .where("realm_id", "=", this.realmId)
      .where(sql`lower(delivery_email)`, "=", msg.email.toLowerCase())
      .executeTakeFirst();
    if (taken) throw errors.badRequest(`Email '${msg.email}' already in use`);
    const apiKey = Keyring.newApiKey();
    const user = await store.write(this.ctx.fence(), async (trx) => {
      const row = await trx.insertInto("users").values(newUserRow(this.realmId, msg, keyring, apiKey)).returning("id").executeTakeFirstOrThrow();
      await addToRoleGroups(trx, this.realmId, row.id, msg.role);
      return row;
    });
    return { user_id: user.id, api_key: apiKey };
  }

  private async ensureChannels(msg: EnsureChannels): Promise<EnsuredChannel[]> {
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
            history_public_to_subscribers: msg.historyPublicToSubscribers ?? !msg.inviteOnly,
            creator_id: msg.creatorId,
            date_created: now,
            message_retention_days: null,
            settings: JSON.stringify({ topics_policy: "inherit", ...channelPermissionDefaults(groups, msg.creatorId) }),
          })
          .returning(["id", "name"])
          .executeTakeFirstOrThrow();
        out.push({ ...created, created: true });
      }
      return out;
    });
  }
}

function newUserRow(realmId: number, msg: CreateUser, keyring: Keyring, apiKey: string) {
  return {
    realm_id: realmId,
    email: msg.email,
    delivery_email: msg.email,
    full_name: msg.fullName,
    role: msg.role,
    is_active: true,
    is_bot: false,
    bot_type: null,
    bot_owner_id: null,
    api_key_hash: keyring.hashApiKey(apiKey),
    api_key_enc: keyring.encrypt(apiKey),
    password_hash: msg.passwordHash,
    date_joined: Math.floor(Date.now() / 1000),
    timezone: "",
    avatar_version: 1,
  };
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
    const apiKey = Keyring.newApiKey();
    const user = await trx
      .insertInto("users")
      .values(newUserRow(realm.id, { op: "createUser", ...owner, role: ROLE.owner }, keyring, apiKey))
      .returning("id")
      .executeTakeFirstOrThrow();
    await addToRoleGroups(trx, realm.id, user.id, ROLE.owner);
    return { realmId: realm.id, email: owner.email, apiKey };
  });
}
