/**
 * Reads of the `users` table (with their realm, their e-mail visibility and custom profile values): accounts by
 * e-mail, id or reference, and Zulip's user objects as a given viewer may see them. Nothing here writes.
 */
import { sql, type Kysely, type Selectable, type SqlBool } from "kysely";
import type { Database } from "../../schema.ts";
import type { UserTable } from "../schema.ts";
import { gravatarUrl } from "../rendering/message-format.ts";
import { ROLE } from "../organization/groups.ts";
import { accessibleUsers, deliveryEmailVisibleTo, EMAIL_VISIBILITY, inaccessibleUserObject } from "../organization/accounts.ts";
import { profileDataOf, type ProfileValue } from "../organization/profile-fields.ts";
import { emailVisibilities, userSetting } from "../users/settings.ts";
import { RealmVersionedCache } from "./versioned-cache.ts";

type DB = Kysely<Database>;

export type UserRow = Selectable<UserTable> & { realm_str: string; realm_deactivated: boolean };

function usersWithRealm(db: DB) {
  return db
    .selectFrom("users")
    .innerJoin("realms", "realms.id", "users.realm_id")
    .selectAll("users")
    .select(["realms.string_id as realm_str", "realms.deactivated as realm_deactivated"]);
}

export function findUserByEmail(db: DB, email: string): Promise<UserRow | undefined> {
  return usersWithRealm(db).where(sql`lower(users.delivery_email)`, "=", email.toLowerCase()).executeTakeFirst();
}


export function findUserById(db: DB, realmId: number, id: number): Promise<UserRow | undefined> {
  return usersWithRealm(db).where("users.id", "=", id).where("users.realm_id", "=", realmId).executeTakeFirst();
}

/** GET /users/me: the caller (their own address and custom profile values), without the bot fields Zulip leaves out there. */
export async function ownUserObject(db: DB, u: Selectable<UserTable>) {
  const [me] = await userObjectsFor(db, u, [u], { clientGravatar: false, includeProfileData: true });
  const { bot_type, bot_owner_id, ...rest } = me!;
  return rest;
}

export interface UserObjectOptions {
  clientGravatar: boolean;
  /** The user's email_address_visibility setting. */
  emailVisibility: number;
  /** Whether the viewer may see the real address (delivery_email is null otherwise). */
  deliveryEmailVisible: boolean;
  /** The user's custom profile values; absent when not asked for. Bots never have any. */
  profileData?: Record<string, ProfileValue>;
}

/** Zulip's user object (format_user_row): GET /users, GET /users/{id}, realm_users in /register, realm_user events. */
export function userObject(u: Selectable<UserTable>, opts: UserObjectOptions) {
  // Zulip: a client computes the Gravatar itself only from an address everyone sees.
  const clientGravatar = opts.clientGravatar && opts.emailVisibility === EMAIL_VISIBILITY.everyone;
  return {
    user_id: u.id,
    email: u.email,
    delivery_email: opts.deliveryEmailVisible ? u.delivery_email : null,
    full_name: u.full_name,
    date_joined: new Date(u.date_joined * 1000).toISOString(),
    is_active: u.is_active,
    is_owner: u.role === ROLE.owner,
    is_admin: u.role <= ROLE.administrator,
    is_guest: u.role === ROLE.guest,
    is_bot: u.is_bot,
    bot_type: u.bot_type,
    bot_owner_id: u.bot_owner_id,
    role: u.role,
    timezone: u.timezone,
    avatar_url: clientGravatar ? null : gravatarUrl(u.delivery_email),
    avatar_version: u.avatar_version,
    ...(u.is_bot || !opts.profileData ? {} : { profile_data: opts.profileData }),
  };
}

/**
 * Users as `viewer` may see them: the real address only where its owner's setting lets the viewer see it, and
 * (`includeProfileData`) the custom profile values. A few queries whatever the number of users.
 */
export async function userObjectsFor(db: DB, viewer: { id: number; role: number }, rows: Selectable<UserTable>[], opts: { clientGravatar: boolean; includeProfileData: boolean }) {
  const ids = rows.map((u) => u.id);
  const [visibility, profiles] = await Promise.all([emailVisibilities(db, ids), opts.includeProfileData ? profileDataOf(db, ids) : undefined]);
  const source = { rows, visibility, profiles };
  return rows.map((u) => userObjectFrom(source, viewer, u, opts.clientGravatar));
}

/**
 * The realm's users as `viewer` may see them (GET /users, register's realm_users). Those the realm's
 * can_access_all_users_group hides from the viewer are Zulip's "Unknown user" placeholders, or left out for a
 * client that handles an incomplete list (the user_list_incomplete capability).
 */
export async function realmUsersFor(
  db: DB,
  viewer: { id: number; role: number; realm_id: number },
  opts: { clientGravatar: boolean; includeProfileData: boolean; siteUrl: string; omitInaccessible?: boolean; withBots?: boolean },
) {
  const rows = (await realmUsers(db, viewer.realm_id)).filter((u) => opts.withBots !== false || !u.is_bot);
  const access = await accessibleUsers(db, viewer);
  const seen = access ? rows.filter((u) => access.has(u.id)) : rows;
  const objects = await userObjectsFor(db, viewer, seen, opts);
  if (!access || opts.omitInaccessible) return objects;
  const placeholders = rows.filter((u) => !access.has(u.id)).map((u) => inaccessibleUserObject(u.id, opts.siteUrl));
  return [...objects, ...placeholders].sort((a, b) => a.user_id - b.user_id);
}

/** The realm's users' rows, e-mail visibilities and profile values: what its user objects are made of. */
interface RealmUserSource {
  rows: Selectable<UserTable>[];
  visibility: Map<number, number>;
  /** Absent when the objects go without profile_data. */
  profiles?: Map<number, Record<string, ProfileValue>>;
}

/** The realm's active human users as one JSON array (UTF-8), and where each user's object stands in it (bytes). */
interface SerializedUsers {
  json: Buffer;
  spans: Map<number, [number, number]>;
}

/** Per realm: the source at one version of realm_user_versions, and its JSON per viewer role and client_gravatar. */
const realmUserJsonCache = new RealmVersionedCache(
  "realm_user_versions",
  async (db, realmId) => ({ source: await realmUserSource(db, realmId), serialized: new Map<string, SerializedUsers>() }),
);

async function realmUserSource(db: DB, realmId: number): Promise<RealmUserSource> {
  const rows = (await realmUsers(db, realmId)).filter((u) => u.is_active && !u.is_bot);
  const ids = rows.map((u) => u.id);
  const [visibility, profiles] = await Promise.all([emailVisibilities(db, ids), profileDataOf(db, ids)]);
  return { rows, visibility, profiles };
}

function serializeUsers(source: RealmUserSource, viewer: { id: number; role: number }, clientGravatar: boolean): SerializedUsers {
  const spans = new Map<number, [number, number]>();
  const parts: string[] = [];
  let at = 1;
  for (const u of source.rows) {
    const part = JSON.stringify(userObjectFrom(source, viewer, u, clientGravatar));
    const bytes = Buffer.byteLength(part);
    spans.set(u.id, [at, at + bytes]);
    parts.push(part);
    at += bytes + 1;
  }
  return { json: Buffer.from(`[${parts.join(",")}]`), spans };
}

function userObjectFrom(source: RealmUserSource, viewer: { id: number; role: number }, u: Selectable<UserTable>, clientGravatar: boolean) {
  const emailVisibility = source.visibility.get(u.id)!;
  return userObject(u, { clientGravatar, emailVisibility, deliveryEmailVisible: deliveryEmailVisibleTo(viewer, u, emailVisibility), profileData: source.profiles ? (source.profiles.get(u.id) ?? {}) : undefined });
}

/**
 * POST /register's `realm_users` (the realm's active humans, with their profile values) as UTF-8 JSON pieces, from a
 * per-realm cache: the list is the same for every viewer of a role but for the viewer's own entry (their real
 * address), and building it for 10,000 users cost 120-140 ms a register (docs/reads.md). One single-row read tells
 * whether the cached copy is current (realm_user_versions, bumped by triggers in the writers' transactions, whichever
 * worker). The pieces are views of the cached bytes around the viewer's own entry: nothing of the 3.6 MB is copied
 * or encoded again before the socket (gateway/http.ts writes them as they are).
 * Undefined for a viewer who may not see every user (a guest): their list is their own (realmUsersFor).
 */
export async function realmUsersJson(db: DB, viewer: { id: number; role: number; realm_id: number }, clientGravatar: boolean): Promise<Buffer[] | undefined> {
  if (await accessibleUsers(db, viewer)) return undefined;
  const { source, serialized: byKey } = await realmUserJsonCache.get(db, viewer.realm_id);
  const key = `${viewer.role}:${clientGravatar}`;
  let serialized = byKey.get(key);
  if (!serialized) byKey.set(key, (serialized = serializeUsers(source, { id: 0, role: viewer.role }, clientGravatar)));
  const own = serialized.spans.get(viewer.id);
  const self = own && source.rows.find((u) => u.id === viewer.id);
  if (!own || !self) return [serialized.json];
  const ownJson = Buffer.from(JSON.stringify(userObjectFrom(source, viewer, self, clientGravatar)));
  return [serialized.json.subarray(0, own[0]), ownJson, serialized.json.subarray(own[1])];
}

/** A user of the realm by id (GET /users/{user_id}), without their realm's columns. */
export function userInRealm(db: DB, realmId: number, id: number) {
  return db.selectFrom("users").selectAll().where("id", "=", id).where("realm_id", "=", realmId).executeTakeFirst();
}

/** The realm's active users among `ids`, with their addresses (the recipients of a typing notification). */
export function activeUsersAmong(db: DB, realmId: number, ids: number[]) {
  return db.selectFrom("users").select(["id", "email"]).where("realm_id", "=", realmId).where("is_active", "=", true).where("id", "in", ids).execute();
}

/** The active users among `ids` who receive typing notifications (receives_typing_notifications, default on). */
export async function typingReceiversAmong(db: DB, realmId: number, ids: number[]): Promise<number[]> {
  if (!ids.length) return [];
  const rows = await db
    .selectFrom("users")
    .select("id")
    .where("realm_id", "=", realmId)
    .where("is_active", "=", true)
    .where("id", "in", ids)
    .where(sql<SqlBool>`coalesce(${userSetting(sql.ref("users.id"), "receives_typing_notifications")}, 'true') = 'true'`)
    .orderBy("id")
    .execute();
  return rows.map((r) => r.id);
}

/**
 * Users of the realm named by id or by API e-mail (lower-cased by the caller), bots included, active or not:
 * the principals of a subscription change. At least one of the two lists is not empty.
 */
export function usersByIdOrEmail(db: DB, realmId: number, ids: number[], lowerEmails: string[]) {
  return db
    .selectFrom("users")
    .select(["id", "email", "is_active", "is_bot", "bot_owner_id"])
    .where("realm_id", "=", realmId)
    .where((eb) =>
      eb.or([...(ids.length ? [eb("id", "in", ids)] : []), ...(lowerEmails.length ? [eb(sql`lower(email)`, "in", lowerEmails)] : [])]),
    )
    .execute();
}

export function realmUsers(db: DB, realmId: number) {
  return db.selectFrom("users").selectAll().where("realm_id", "=", realmId).orderBy("id").execute();
}


/** Users named by id or e-mail, as usersByRef and the statements that find them take them: [distinct ids, distinct lower-cased e-mails]. */
export function splitUserRefs(refs: Array<number | string>): [number[], string[]] {
  return [[...new Set(refs.filter((r): r is number => typeof r === "number"))], [...new Set(refs.filter((r): r is string => typeof r === "string").map((e) => e.toLowerCase()))]];
}

/**
 * Users of a realm named by id or API e-mail (case-insensitive), in the order named; undefined where none. As in
 * Zulip, a hidden address does not name its user (that would tell who owns it); the placeholder does. One query
 * whatever the length of the list: the names go as two arrays, not one bind parameter each.
 */
export async function usersByRef(db: DB, realmId: number, refs: Array<number | string>) {
  const [ids, emails] = splitUserRefs(refs);
  const rows = await db
    .selectFrom("users")
    .select(["id", "email", "is_active"])
    .where("realm_id", "=", realmId)
    .where(sql<SqlBool>`(id = any(${sql.val(ids)}::int[]) or lower(email) = any(${sql.val(emails)}::text[]))`)
    .execute();
  const byId = new Map(rows.map((u) => [u.id, u]));
  const byEmail = new Map(rows.map((u) => [u.email.toLowerCase(), u]));
  return refs.map((r) => (typeof r === "number" ? byId.get(r) : byEmail.get(r.toLowerCase())));
}

/**
 * The user an address names for this viewer: their API e-mail, or their real address where the viewer may see it
 * (Zulip's access_user_by_email: a hidden address does not name its owner).
 */
export async function userByEmailFor(db: DB, viewer: { id: number; realm_id: number; role: number }, email: string) {
  const lower = email.toLowerCase();
  const rows = await db
    .selectFrom("users")
    .selectAll()
    .where("realm_id", "=", viewer.realm_id)
    .where((eb) => eb.or([eb(sql`lower(email)`, "=", lower), eb(sql`lower(delivery_email)`, "=", lower)]))
    .execute();
  const byApiEmail = rows.find((u) => u.email.toLowerCase() === lower);
  if (byApiEmail) return byApiEmail;
  const visibility = await emailVisibilities(db, rows.map((u) => u.id));
  return rows.find((u) => deliveryEmailVisibleTo(viewer, u, visibility.get(u.id)!));
}

/** An active user of the realm named by id (digits) or API e-mail (Zulip's get_active_user / ..._by_id_in_realm). */
export function activeUserByIdOrApiEmail(db: DB, realmId: number, ref: string) {
  const query = db.selectFrom("users").selectAll().where("realm_id", "=", realmId).where("is_active", "=", true);
  return (/^\d+$/.test(ref) ? query.where("id", "=", Number(ref)) : query.where(sql`lower(email)`, "=", ref.toLowerCase())).executeTakeFirst();
}
