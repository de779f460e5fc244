/**
 * Reads that need no actor: queries straight to the store, shaped as Zulip's API objects. Nothing here writes.
 */
import { sql, type Kysely, type RawBuilder, type Selectable, type SqlBool } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import { chatErrors } from "../errors.ts";
import type { StreamTable, SubscriptionTable, UserTable } from "../schema.ts";
import { formatMessage, gravatarUrl, type FormatOptions, type MessageRecord } from "../rendering/message-format.ts";
import { CONTENT_ACCESS_SETTINGS, inGroupSettingOf, METADATA_ACCESS_SETTINGS, ROLE, userGroupIds, type GroupSettingValue } from "../organization/groups.ts";
import { dmKey, RECIPIENT_DM } from "../conversations/dm.ts";
import { FLAG_BITS, flagList, HISTORICAL_FLAGS, MENTION_FLAGS } from "../conversations/flags.ts";
import { VISIBILITY } from "../users/user-topics.ts";
import { badNarrow, HAS_CONTENT, operandUsers, RESOLVED_TOPIC_PREFIX } from "./narrow.ts";
import { accessibleUsers, deliveryEmailVisibleTo, EMAIL_VISIBILITY, inaccessibleUserObject } from "../organization/accounts.ts";
import { profileDataOf, type ProfileValue } from "../organization/profile-fields.ts";
import { USER_SETTINGS, USER_SETTINGS_DEFAULTS } from "../users/settings.ts";
import type { Narrow } from "../../protocol.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database>;

export type UserRow = Selectable<UserTable> & { realm_str: string; realm_deactivated: boolean };
export type StreamRow = Selectable<StreamTable>;

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

/** The server's organization for unauthenticated links (one per server: the first realm, as /server_settings reports it). */
export async function serverRealmId(db: DB): Promise<number> {
  return (await db.selectFrom("realms").select("id").orderBy("id").executeTakeFirstOrThrow()).id;
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

/** Each user's email_address_visibility (kept with their settings; Zulip's default, everyone, when never set). */
export async function emailVisibilities(db: DB, userIds: number[]): Promise<Map<number, number>> {
  const out = new Map(userIds.map((id) => [id, USER_SETTINGS_DEFAULTS.email_address_visibility as number]));
  if (!userIds.length) return out;
  const rows = await db
    .selectFrom("actor_snapshots")
    .select(["key", sql<number | null>`(state->>'email_address_visibility')::int`.as("visibility")])
    .where("kind", "=", USER_SETTINGS)
    // One array, not one bind parameter per user: the whole realm's list is one query.
    .where(sql<SqlBool>`key = any(${sql.val(userIds.map(String))}::text[])`)
    .execute();
  for (const r of rows) if (r.visibility !== null) out.set(Number(r.key), Number(r.visibility));
  return out;
}

/**
 * Users as `viewer` may see them: the real address only where its owner's setting lets the viewer see it, and
 * (`includeProfileData`) the custom profile values. A few queries whatever the number of users.
 */
export async function userObjectsFor(db: DB, viewer: { id: number; role: number }, rows: Selectable<UserTable>[], opts: { clientGravatar: boolean; includeProfileData: boolean }) {
  const ids = rows.map((u) => u.id);
  const [visibility, profiles] = await Promise.all([emailVisibilities(db, ids), opts.includeProfileData ? profileDataOf(db, ids) : undefined]);
  return rows.map((u) => {
    const emailVisibility = visibility.get(u.id)!;
    return userObject(u, {
      clientGravatar: opts.clientGravatar,
      emailVisibility,
      deliveryEmailVisible: deliveryEmailVisibleTo(viewer, u, emailVisibility),
      profileData: profiles ? (profiles.get(u.id) ?? {}) : undefined,
    });
  });
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

export function realmUsers(db: DB, realmId: number) {
  return db.selectFrom("users").selectAll().where("realm_id", "=", realmId).orderBy("id").execute();
}

export function findStream(db: DB, realmId: number, ref: { id?: number; name?: string }): Promise<StreamRow | undefined> {
  let q = db.selectFrom("streams").selectAll().where("realm_id", "=", realmId);
  q = ref.id !== undefined ? q.where("id", "=", ref.id) : q.where(sql`lower(name)`, "=", (ref.name ?? "").toLowerCase());
  return q.executeTakeFirst();
}

/** Which channels GET /streams lists (Zulip's do_get_streams); `all` is every channel the user sees the metadata of. */
export interface StreamListing {
  public?: boolean;
  webPublic?: boolean;
  subscribed?: boolean;
  defaults?: boolean;
  all?: boolean;
  /** Every channel the user may read (include_can_access_content). */
  canAccessContent?: boolean;
}

/**
 * Channels listed to the user: by default the ones they are subscribed to and, unless they are a guest, the public
 * ones. `all` adds web-public channels and the private ones the user sees the metadata of (every channel of the
 * realm for administrators); `canAccessContent`, the private ones a permission group lets them read or join.
 */
export async function visibleStreams(db: DB, user: Pick<UserRow, "id" | "role" | "realm_id">, listing: StreamListing = {}): Promise<StreamRow[]> {
  const { public: pub = true, subscribed = true, defaults = false, all = false, canAccessContent = false } = listing;
  const webPublic = listing.webPublic || all || canAccessContent;
  const everything = all && user.role <= ROLE.administrator;
  const rows = await db
    .selectFrom("streams")
    .selectAll()
    .where("realm_id", "=", user.realm_id)
    .where((eb) =>
      everything
        ? eb.lit(true)
        : eb.or([
            eb.lit(false),
            ...((pub || all || canAccessContent) && user.role !== ROLE.guest ? [eb("invite_only", "=", false)] : []),
            ...(webPublic ? [eb("is_web_public", "=", true)] : []),
            ...(defaults ? [eb("is_default", "=", true)] : []),
            ...(subscribed || all || canAccessContent
              ? [
                  eb.exists(
                    eb
                      .selectFrom("subscriptions")
                      .select("user_id")
                      .whereRef("subscriptions.stream_id", "=", "streams.id")
                      .where("subscriptions.user_id", "=", user.id)
                      .where("subscriptions.active", "=", true),
                  ),
                ]
              : []),
          ]),
    )
    .orderBy("id")
    .execute();
  const grantedBy = all ? METADATA_ACCESS_SETTINGS : canAccessContent ? CONTENT_ACCESS_SETTINGS : [];
  if (everything || !grantedBy.length || user.role === ROLE.guest) return rows;
  // Private channels a permission group opens to the user; guests are never granted access this way.
  const listed = new Set(rows.map((r) => r.id));
  const groups = await userGroupIds(db, user.id);
  const privates = await db.selectFrom("streams").selectAll().where("realm_id", "=", user.realm_id).where("invite_only", "=", true).execute();
  const granted = privates.filter((s) => !listed.has(s.id) && grantedBy.some((name) => inGroupSettingOf((s.settings as Record<string, GroupSettingValue>)[name], user.id, groups)));
  return granted.length ? [...rows, ...granted].sort((a, b) => a.id - b.id) : rows;
}

/** Zulip's channel object (`streams` in /register, GET /streams); settings hold topics_policy and the can_*_group values. */
export function streamObject(s: StreamRow, subscriberCount: number, firstMessageId: number | null = null) {
  const settings = (s.settings ?? {}) as Record<string, unknown>;
  // Object.assign, not `{ ...settings, … }` (see the README's "Benchmark it" on spreads); the columns win.
  return Object.assign({}, settings, {
    stream_id: s.id,
    name: s.name,
    description: s.description,
    rendered_description: s.rendered_description,
    date_created: s.date_created,
    creator_id: s.creator_id,
    invite_only: s.invite_only,
    is_web_public: s.is_web_public,
    is_archived: false,
    is_announcement_only: false,
    stream_post_policy: 1,
    message_retention_days: s.message_retention_days,
    history_public_to_subscribers: s.history_public_to_subscribers,
    first_message_id: firstMessageId,
    folder_id: null,
    is_recently_active: true,
    subscriber_count: subscriberCount,
    stream_weekly_traffic: null,
  });
}

/** Channel objects for rows, with their subscriber counts. */
export async function streamObjects(db: DB, rows: StreamRow[]) {
  const counts = await subscriberCounts(db, rows.map((r) => r.id));
  return rows.map((r) => streamObject(r, counts.get(r.id) ?? 0));
}

export async function subscriberCounts(db: DB, streamIds: number[]): Promise<Map<number, number>> {
  if (!streamIds.length) return new Map();
  const rows = await db
    .selectFrom("subscriptions")
    .select(["stream_id", sql<number>`count(*)`.as("n")])
    .where("stream_id", "in", streamIds)
    .where("active", "=", true)
    .groupBy("stream_id")
    .execute();
  return new Map(rows.map((r) => [r.stream_id, Number(r.n)]));
}

/** A subscription's own columns, beside its channel's. */
export const SUBSCRIPTION_COLUMNS = [
  "color",
  "is_muted",
  "pin_to_top",
  "desktop_notifications",
  "audible_notifications",
  "push_notifications",
  "email_notifications",
  "wildcard_mentions_notify",
] as const;
export type SubscriptionColumns = Pick<Selectable<SubscriptionTable>, (typeof SUBSCRIPTION_COLUMNS)[number]>;

/** Zulip's subscription object: the channel object and the user's settings for it. */
export function subscriptionObject(stream: ReturnType<typeof streamObject>, sub: SubscriptionColumns, subscribers?: number[]) {
  // The channel's fields after the user's (they share none): no `{ ...stream, … }` (see streamObject).
  return {
    color: sub.color,
    is_muted: sub.is_muted,
    in_home_view: !sub.is_muted,
    pin_to_top: sub.pin_to_top,
    desktop_notifications: sub.desktop_notifications,
    email_notifications: sub.email_notifications,
    push_notifications: sub.push_notifications,
    audible_notifications: sub.audible_notifications,
    wildcard_mentions_notify: sub.wildcard_mentions_notify,
    ...stream,
    ...(subscribers ? { subscribers } : {}),
  };
}

/** The user's subscriptions (or, `active` false, former ones), as Zulip's subscription objects. */
export async function subscriptionsOf(db: DB, userId: number, includeSubscribers = false, active = true) {
  const rows = await db
    .selectFrom("subscriptions")
    .innerJoin("streams", "streams.id", "subscriptions.stream_id")
    .selectAll("streams")
    .select(SUBSCRIPTION_COLUMNS.map((c) => `subscriptions.${c}` as const))
    .where("subscriptions.user_id", "=", userId)
    .where("subscriptions.active", "=", active)
    .orderBy("streams.id")
    .execute();
  const members = includeSubscribers ? await subscribersOf(db, rows.map((r) => r.id)) : undefined;
  const counts = await subscriberCounts(db, rows.map((r) => r.id));
  return rows.map((r) => subscriptionObject(streamObject(r, counts.get(r.id) ?? 0), r, members ? (members.get(r.id) ?? []) : undefined));
}

export async function subscribersOf(db: DB, streamIds: number[]): Promise<Map<number, number[]>> {
  const out = new Map<number, number[]>();
  if (!streamIds.length) return out;
  const rows = await db
    .selectFrom("subscriptions")
    .select(["stream_id", "user_id"])
    .where("stream_id", "in", streamIds)
    .where("active", "=", true)
    .orderBy("user_id")
    .execute();
  for (const r of rows) {
    const list = out.get(r.stream_id) ?? [];
    list.push(r.user_id);
    out.set(r.stream_id, list);
  }
  return out;
}

// ---- GET /messages --------------------------------------------------------------------------------------------

export interface MessageQuery {
  anchor: number | "newest" | "oldest" | "first_unread";
  numBefore: number;
  numAfter: number;
  includeAnchor: boolean;
  narrow: Narrow;
  /** Fetch exactly these (those that exist, are readable and match the narrow) instead of a range. */
  messageIds?: number[];
  format: FormatOptions;
  allowEmptyTopicName: boolean;
}

/** Zulip's anchor for "newest": above any message id (and returned as such). */
export const LARGER_THAN_MAX_MESSAGE_ID = 10_000_000_000_000_000;

/** Zulip's default `realm_empty_topic_display_name`: what clients without empty-topic support see. */
export const EMPTY_TOPIC_DISPLAY_NAME = "general chat";

type Cond = RawBuilder<SqlBool>;
const FALSE: Cond = sql<SqlBool>`false`;

/**
 * Users of a realm named by id or API e-mail (case-insensitive), in the order named; undefined where none. As in
 * Zulip, a hidden address does not name its user (that would tell who owns it); the placeholder does. One query
 * whatever the length of the list: the names go as two arrays, not one bind parameter each.
 */
export async function usersByRef(db: DB, realmId: number, refs: Array<number | string>) {
  const ids = [...new Set(refs.filter((r): r is number => typeof r === "number"))];
  const emails = [...new Set(refs.filter((r): r is string => typeof r === "string").map((e) => e.toLowerCase()))];
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

/** Users named in a narrow, resolved in the caller's realm; an unknown one is Zulip's BAD_NARROW. */
async function narrowUsers(db: DB, user: UserRow, refs: Array<number | string>): Promise<number[]> {
  return (await usersByRef(db, user.realm_id, refs)).map((row) => {
    if (!row) throw badNarrow("Invalid narrow operator: unknown user");
    return row.id;
  });
}

/**
 * The narrow as SQL over `messages m` left-joined to the reader's `user_messages um`, with the access rule:
 * channel messages of the channels the user may read (with a channel operator: that channel if readable; with
 * `channels:public`: every public channel; otherwise the channels they are subscribed to), only what they
 * received in channels with protected history, and the direct-message conversations they take part in.
 */
async function compileNarrow(db: DB, user: UserRow, narrow: Narrow): Promise<{ conds: Cond[]; names: Map<number, string> }> {
  const conds: Cond[] = [];
  /** Names of the channels the access rule reaches: display_recipient without another query. */
  const names = new Map<number, string>();
  const positive = (op: string) => narrow.find((t) => t.operator === op && !t.negated);
  const channelTerm = positive("channel");
  const publicTerm = narrow.find((t) => t.operator === "channels");
  if (publicTerm?.negated) throw badNarrow("Invalid narrow operator: negated channels:public is not supported");
  const isGuest = user.role === ROLE.guest;
  // One round trip for both halves of the access rule: subscribed channels, and the user's conversations.
  const reachable = await db
    .selectFrom("subscriptions")
    .innerJoin("streams", "streams.id", "subscriptions.stream_id")
    .select([sql<number | null>`streams.id`.as("id"), "streams.name", "streams.invite_only", "streams.history_public_to_subscribers", sql<number | null>`null::int`.as("dm")])
    .where("subscriptions.user_id", "=", user.id)
    .where("subscriptions.active", "=", true)
    .unionAll(
      db
        .selectFrom("recipient_members")
        .select([sql<number | null>`null::int`.as("id"), sql<string>`''`.as("name"), sql<boolean>`false`.as("invite_only"), sql<boolean>`true`.as("history_public_to_subscribers"), sql<number | null>`recipient_id`.as("dm")])
        .where("user_id", "=", user.id),
    )
    .execute();
  const subscribed = reachable.filter((r) => r.id !== null).map((r) => ({ ...r, id: r.id! }));
  const dms = reachable.filter((r) => r.dm !== null).map((r) => r.dm!);
  for (const s of subscribed) names.set(s.id, s.name);
  const dmAccess = dms.length ? sql<SqlBool>`(m.stream_id is null and m.recipient_id in (${sql.join(dms)}))` : undefined;
  let open: number[] = [];
  let received: number[] = [];
  let withDms = !channelTerm && !publicTerm;
  if (channelTerm) {
    const ref = typeof channelTerm.operand === "number" ? { id: channelTerm.operand } : { name: String(channelTerm.operand) };
    const stream = await findStream(db, user.realm_id, ref);
    const sub = stream && subscribed.find((s) => s.id === stream.id);
    if (!stream) throw badNarrow("Invalid narrow operator: unknown channel");
    names.set(stream.id, stream.name);
    // Without access to its history (Zulip's can_access_stream_history), a channel still shows what the user
    // received in it, like Zulip's search of the user's own messages.
    const history = stream.is_web_public || (!stream.invite_only && !isGuest) || (sub && stream.history_public_to_subscribers);
    if (history) open = [stream.id];
    else received = [stream.id];
  } else if (publicTerm) {
    if (isGuest) throw badNarrow("Invalid narrow operator: guests cannot search all public channels");
    const rows = await db.selectFrom("streams").select(["id", "name"]).where("realm_id", "=", user.realm_id).where("invite_only", "=", false).execute();
    open = rows.map((r) => r.id);
    for (const r of rows) names.set(r.id, r.name);
  } else {
    open = subscribed.filter((s) => s.history_public_to_subscribers).map((s) => s.id);
    received = subscribed.filter((s) => !s.history_public_to_subscribers).map((s) => s.id);
  }
  const access: Cond[] = [];
  if (open.length) access.push(sql<SqlBool>`m.stream_id in (${sql.join(open)})`);
  if (received.length) access.push(sql<SqlBool>`(m.stream_id in (${sql.join(received)}) and um.flags is not null)`);
  if (withDms && dmAccess) access.push(dmAccess);
  conds.push(access.length ? sql<SqlBool>`(${sql.join(access, sql` or `)})` : FALSE);

  for (const term of narrow) {
    let cond: Cond | undefined;
    switch (term.operator) {
      case "channel": {
        if (term === channelTerm) break;
        const ref = typeof term.operand === "number" ? { id: term.operand } : { name: String(term.operand) };
        const stream = await findStream(db, user.realm_id, ref);
        if (!stream) throw badNarrow("Invalid narrow operator: unknown channel");
        cond = sql<SqlBool>`m.stream_id = ${stream.id}`;
        break;
      }
      case "topic":
        cond = sql<SqlBool>`(m.stream_id is not null and lower(m.topic) = ${String(term.operand).toLowerCase()})`;
        break;
      case "dm": {
        const ids = await narrowUsers(db, user, operandUsers(term.operand));
        const key = dmKey([...ids, user.id]);
        cond = sql<SqlBool>`m.recipient_id = (select id from recipients where type = ${RECIPIENT_DM} and realm_id = ${user.realm_id} and dm_key = ${key})`;
        if (!term.negated) withDms = true;
        break;
      }
      case "dm-including": {
        const [id] = await narrowUsers(db, user, operandUsers(term.operand));
        cond = sql<SqlBool>`m.recipient_id in (select recipient_id from recipient_members where user_id = ${id!})`;
        break;
      }
      case "sender": {
        const ids = await narrowUsers(db, user, operandUsers(term.operand));
        cond = sql<SqlBool>`m.sender_id in (${sql.join(ids)})`;
        break;
      }
      case "id":
        cond = sql<SqlBool>`m.id = ${term.operand as number}`;
        break;
      case "is":
        cond = {
          dm: sql<SqlBool>`m.stream_id is null`,
          starred: sql<SqlBool>`coalesce(um.flags & ${FLAG_BITS.starred}, 0) <> 0`,
          unread: sql<SqlBool>`(um.flags is not null and (um.flags & ${FLAG_BITS.read}) = 0)`,
          mentioned: sql<SqlBool>`coalesce(um.flags & ${MENTION_FLAGS}, 0) <> 0`,
          alerted: sql<SqlBool>`coalesce(um.flags & ${FLAG_BITS.has_alert_word}, 0) <> 0`,
          resolved: sql<SqlBool>`m.topic like ${RESOLVED_TOPIC_PREFIX + "%"}`,
          followed: sql<SqlBool>`${topicPolicy(user.id, VISIBILITY.followed)}`,
          // Zulip's is:muted: a muted topic, or a muted channel's topic the user has not unmuted or followed.
          muted: sql<SqlBool>`(${topicPolicy(user.id, VISIBILITY.muted)} or (m.stream_id in (select stream_id from subscriptions where user_id = ${user.id} and is_muted) and not ${topicPolicy(user.id, VISIBILITY.unmuted)} and not ${topicPolicy(user.id, VISIBILITY.followed)}))`,
        }[String(term.operand)];
        break;
      case "search":
        // Postgres full-text search over topic and content; an operand with no searchable word matches nothing.
        cond = sql<SqlBool>`${SEARCH_VECTOR} @@ plainto_tsquery(${SEARCH_CONFIG}::regconfig, ${String(term.operand)})`;
        break;
      case "has":
        cond = {
          reaction: sql<SqlBool>`exists (select 1 from reactions r where r.message_id = m.id)`,
          link: sql<SqlBool>`m.rendered_content ~* ${HAS_CONTENT.link}`,
          image: sql<SqlBool>`m.rendered_content ~* ${HAS_CONTENT.image}`,
          attachment: sql<SqlBool>`m.rendered_content ~* ${HAS_CONTENT.attachment}`,
        }[String(term.operand)];
        break;
    }
    if (cond) conds.push(term.negated ? sql<SqlBool>`not (${cond})` : cond);
  }
  // A dm operator reaches the conversation even with a channel operator beside it (which then matches nothing).
  if (withDms && dmAccess && (channelTerm || publicTerm)) conds[0] = sql<SqlBool>`(${conds[0]} or ${dmAccess})`;
  return { conds, names };
}

/** The text search configuration and document of a message (Zulip searches topic and content together). */
const SEARCH_CONFIG = "english";
const SEARCH_VECTOR = sql`to_tsvector(${SEARCH_CONFIG}::regconfig, m.topic || ' ' || m.content)`;
const HIGHLIGHT = 'StartSel="<span class=""highlight"">", StopSel=</span>, HighlightAll=TRUE';

/**
 * Zulip's `match_content` / `match_subject` for a search: the rendered content and the topic with the matched
 * words wrapped in `<span class="highlight">`.
 */
async function searchHighlights(db: DB, ids: number[], search: string): Promise<Map<number, { match_content: string; match_subject: string }>> {
  const { rows } = await sql<{ id: number; match_content: string; match_subject: string }>`
    select m.id,
      ts_headline(${SEARCH_CONFIG}::regconfig, m.rendered_content, plainto_tsquery(${SEARCH_CONFIG}::regconfig, ${search}), ${HIGHLIGHT}) as match_content,
      ts_headline(${SEARCH_CONFIG}::regconfig, replace(replace(replace(m.topic, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), plainto_tsquery(${SEARCH_CONFIG}::regconfig, ${search}), ${HIGHLIGHT}) as match_subject
    from messages m where m.id in (${sql.join(ids)})`.execute(db);
  return new Map(rows.map((r) => [Number(r.id), r]));
}

/** Whether the message's topic has this visibility policy for the user (Zulip's UserTopic). */
function topicPolicy(userId: number, policy: number): Cond {
  return sql<SqlBool>`exists (select 1 from user_topics ut where ut.user_id = ${userId} and ut.stream_id = m.stream_id and ut.topic_key = lower(m.topic) and ut.visibility_policy = ${policy})`;
}

function messagesWhere(db: DB, user: UserRow, conds: Cond[]) {
  return db
    .selectFrom("messages as m")
    .leftJoin("user_messages as um", (j) => j.onRef("um.message_id", "=", "m.id").on("um.user_id", "=", user.id))
    .where(sql<SqlBool>`${sql.join(conds, sql` and `)}`);
}

/**
 * Messages the user can read around an anchor, with Zulip's found_* flags, or the ones named by `messageIds`.
 * Each side is one index range scan limited to what was asked for; senders, conversations and reactions are
 * looked up for the page only.
 */
export async function fetchMessages(db: DB, user: UserRow, q: MessageQuery) {
  const { conds, names } = await compileNarrow(db, user, q.narrow);
  const columns = [
    "m.id",
    "m.sender_id",
    "m.recipient_id",
    "m.stream_id",
    "m.topic",
    "m.content",
    "m.rendered_content",
    "m.date_sent",
    "m.sending_client",
    "m.edit_history",
    "m.last_edit_time",
    "m.last_moved_time",
    "um.flags",
  ] as const;
  if (q.messageIds) {
    const rows = q.messageIds.length
      ? await messagesWhere(db, user, conds).select(columns).where("m.id", "in", q.messageIds).orderBy("m.id").execute()
      : [];
    return { messages: await buildMessages(db, user, rows, q, names), history_limited: false };
  }
  let anchor: number;
  if (q.anchor === "first_unread") {
    const first = await messagesWhere(db, user, [...conds, sql<SqlBool>`(um.flags is not null and (um.flags & ${FLAG_BITS.read}) = 0)`])
      .select((eb) => eb.fn.min("m.id").as("id"))
      .executeTakeFirst();
    anchor = first?.id ?? LARGER_THAN_MAX_MESSAGE_ID;
  } else anchor = q.anchor === "newest" ? LARGER_THAN_MAX_MESSAGE_ID : q.anchor === "oldest" ? 0 : q.anchor;
  // Nothing is at or above "newest", nothing below "oldest": those sides need no query.
  const side = (op: "<" | ">=", order: "asc" | "desc", limit: number) =>
    limit <= 0 || (op === ">=" && anchor === LARGER_THAN_MAX_MESSAGE_ID) || (op === "<" && anchor === 0) ? Promise.resolve([]) : messagesWhere(db, user, conds).select(columns).where("m.id", op, anchor).orderBy("m.id", order).limit(limit).execute();
  // One extra row on each side tells whether the oldest / newest match was reached.
  const [before, atAndAfter] = await Promise.all([side("<", "desc", q.numBefore + 1), side(">=", "asc", q.numAfter + 2)]);
  const anchorRow = atAndAfter[0]?.id === anchor ? atAndAfter[0] : undefined;
  const after = atAndAfter.filter((r) => r.id > anchor);
  const rows = [...before.slice(0, q.numBefore).reverse(), ...(anchorRow && q.includeAnchor ? [anchorRow] : []), ...after.slice(0, q.numAfter)];
  return {
    anchor,
    found_anchor: !!anchorRow,
    found_oldest: before.length <= q.numBefore,
    found_newest: after.length <= q.numAfter,
    history_limited: false,
    messages: await buildMessages(db, user, rows, q, names),
  };
}

interface MessageRow {
  id: number;
  sender_id: number;
  recipient_id: number;
  stream_id: number | null;
  topic: string;
  content: string;
  rendered_content: string;
  date_sent: number;
  sending_client: string;
  edit_history: unknown[] | null;
  last_edit_time: number | null;
  last_moved_time: number | null;
  flags: number | null;
}

/**
 * The reader-independent part of messages (sender, conversation, raw topic), for a page of rows: one query per
 * kind of thing looked up. `known`: channel names the caller already has.
 */
async function messageRecordsOf(db: DB, rows: Omit<MessageRow, "flags" | "edit_history" | "last_edit_time" | "last_moved_time">[], realmStr: string, known = new Map<number, string>()): Promise<MessageRecord[]> {
  if (!rows.length) return [];
  const streamIds = [...new Set(rows.map((r) => r.stream_id).filter((s): s is number => s !== null && !known.has(s)))];
  const dmRecipients = [...new Set(rows.filter((r) => r.stream_id === null).map((r) => r.recipient_id))];
  const [streams, members] = await Promise.all([
    streamIds.length ? db.selectFrom("streams").select(["id", "name"]).where("id", "in", streamIds).execute() : [],
    dmRecipients.length
      ? db.selectFrom("recipient_members").select(["recipient_id", "user_id"]).where("recipient_id", "in", dmRecipients).orderBy("user_id").execute()
      : [],
  ]);
  const userIds = [...new Set([...rows.map((r) => r.sender_id), ...members.map((m) => m.user_id)])];
  const users = new Map(
    (await db.selectFrom("users").select(["id", "email", "full_name"]).where("id", "in", userIds).execute()).map((u) => [u.id, u]),
  );
  const streamNames = new Map([...known, ...streams.map((s): [number, string] => [s.id, s.name])]);
  const people = new Map<number, Array<{ id: number; email: string; full_name: string; is_mirror_dummy: boolean }>>();
  for (const m of members) {
    const u = users.get(m.user_id);
    if (u) people.set(m.recipient_id, [...(people.get(m.recipient_id) ?? []), { id: u.id, email: u.email, full_name: u.full_name, is_mirror_dummy: false }]);
  }
  return rows.map((r) => {
    const sender = users.get(r.sender_id);
    const isStream = r.stream_id !== null;
    return {
      id: r.id,
      type: isStream ? "stream" : "private",
      sender_id: r.sender_id,
      sender_email: sender?.email ?? "",
      sender_full_name: sender?.full_name ?? "",
      sender_realm_str: realmStr,
      recipient_id: r.recipient_id,
      stream_id: r.stream_id,
      display_recipient: isStream ? (streamNames.get(r.stream_id!) ?? "") : (people.get(r.recipient_id) ?? []),
      subject: r.topic,
      content: r.content,
      rendered_content: r.rendered_content,
      timestamp: r.date_sent,
      client: r.sending_client,
    };
  });
}

/**
 * Message records by id, as message events carry them (raw topic), for rebuilding event queues from the stream of
 * message references. Ids with no message (deleted since) are left out.
 */
export async function messageRecords(db: DB, ids: number[]): Promise<Map<number, MessageRecord>> {
  if (!ids.length) return new Map();
  const rows = await db
    .selectFrom("messages as m")
    .innerJoin("realms as r", "r.id", "m.realm_id")
    .select(["m.id", "m.sender_id", "m.recipient_id", "m.stream_id", "m.topic", "m.content", "m.rendered_content", "m.date_sent", "m.sending_client", "r.string_id"])
    .where("m.id", "in", ids)
    .execute();
  const byRealm = new Map<string, typeof rows>();
  for (const r of rows) byRealm.set(r.string_id, [...(byRealm.get(r.string_id) ?? []), r]);
  const records = await Promise.all([...byRealm].map(([realmStr, realmRows]) => messageRecordsOf(db, realmRows, realmStr)));
  return new Map(records.flat().map((r) => [r.id, r]));
}

/** Zulip's message objects for a page of rows, with the reader's flags. */
async function buildMessages(db: DB, user: UserRow, rows: MessageRow[], q: Pick<MessageQuery, "format" | "allowEmptyTopicName" | "narrow">, known: Map<number, string>) {
  if (!rows.length) return [];
  const ids = rows.map((r) => r.id);
  const search = q.narrow
    .filter((t) => t.operator === "search" && !t.negated)
    .map((t) => String(t.operand))
    .join(" ");
  const [records, highlights, reactions] = await Promise.all([
    messageRecordsOf(db, rows, user.realm_str, known),
    search ? searchHighlights(db, ids, search) : undefined,
    db.selectFrom("reactions").select(["message_id", "user_id", "emoji_name", "emoji_code", "reaction_type"]).where("message_id", "in", ids).orderBy("created").execute(),
  ]);
  const reactionsOf = new Map<number, unknown[]>();
  for (const r of reactions) {
    const reaction = { emoji_name: r.emoji_name, emoji_code: r.emoji_code, reaction_type: r.reaction_type, user_id: r.user_id };
    reactionsOf.set(Number(r.message_id), [...(reactionsOf.get(Number(r.message_id)) ?? []), reaction]);
  }
  return rows.map((r, i) => {
    const record = records[i]!;
    if (record.type === "stream" && r.topic === "" && !q.allowEmptyTopicName) record.subject = EMPTY_TOPIC_DISPLAY_NAME;
    const message: Record<string, unknown> = {
      ...formatMessage(record, q.format),
      reactions: reactionsOf.get(r.id) ?? [],
      flags: r.flags === null ? HISTORICAL_FLAGS : flagList(r.flags),
    };
    const match = highlights?.get(r.id);
    if (match) Object.assign(message, match);
    if (r.edit_history) message.edit_history = r.edit_history;
    if (r.last_edit_time !== null) message.last_edit_timestamp = r.last_edit_time;
    if (r.last_moved_time !== null) message.last_moved_timestamp = r.last_moved_time;
    return message;
  });
}

/**
 * One message the user may read, for the routes that act on a message (edit, delete, react, flags): the row and
 * the actor owning it. An unreadable message is Zulip's "Invalid message(s)", indistinguishable from a missing one.
 */
export async function readableMessage(db: DB, user: UserRow, id: number) {
  const [row] = await readableMessages(db, user, [id]);
  if (!row) throw errors.badRequest("Invalid message(s)");
  return row;
}

export async function readableMessages(db: DB, user: UserRow, ids: number[]) {
  if (!ids.length) return [];
  const { conds } = await compileNarrow(db, user, []);
  // Public channels the user is not subscribed to are readable too (their history is public to members).
  const open = user.role === ROLE.guest ? [] : [sql<SqlBool>`m.stream_id in (select id from streams where realm_id = ${user.realm_id} and not invite_only)`];
  return messagesWhere(db, user, [sql<SqlBool>`(${sql.join([conds[0]!, ...open], sql` or `)})`])
    .leftJoin("recipients as r", "r.id", "m.recipient_id")
    .select(["m.id", "m.sender_id", "m.stream_id", "m.topic", "m.recipient_id", "m.content", "r.dm_key", "um.flags"])
    .where("m.id", "in", ids)
    .orderBy("m.id")
    .execute();
}

/** Whether a channel's topic has messages besides `except` (say, the ones just moved into it). */
export async function topicHasOtherMessages(db: DB, streamId: number, topic: string, except: number[]): Promise<boolean> {
  const { rows } = await sql`
    select 1 from messages
    where stream_id = ${streamId} and lower(topic) = ${topic.toLowerCase()} and id <> all(${sql.val(except)}::bigint[])
    limit 1`.execute(db);
  return rows.length > 0;
}

/** Whether the user has an active subscription to the channel. */
export async function isSubscribed(db: DB, userId: number, streamId: number): Promise<boolean> {
  const row = await db
    .selectFrom("subscriptions")
    .select("user_id")
    .where("stream_id", "=", streamId)
    .where("user_id", "=", userId)
    .where("active", "=", true)
    .executeTakeFirst();
  return !!row;
}

/**
 * A channel the user may read (subscribed, or public to a non-guest), by id or name; anything else, missing
 * included, is Zulip's "Invalid channel ID" so a private channel's existence does not leak.
 */
export async function readableStream(db: DB, user: UserRow, ref: { id?: number; name?: string }): Promise<StreamRow & { subscribed: boolean }> {
  const stream = await findStream(db, user.realm_id, ref);
  const subscribed = stream ? await isSubscribed(db, user.id, stream.id) : false;
  if (!stream || (!subscribed && (stream.invite_only || user.role === ROLE.guest))) throw errors.badRequest("Invalid channel ID");
  return { ...stream, subscribed };
}

/**
 * Channel lookups on the send path, cached for a moment per process: a send names its channel on every request,
 * and names change rarely. Only hits are cached, so a channel created a moment ago is found at once.
 */
const STREAM_CACHE_MS = 2000;
const streamCache = new Map<string, { row: StreamRow; until: number }>();

export async function requireStream(db: DB, realmId: number, ref: { id?: number; name?: string }): Promise<StreamRow> {
  const key = ref.id !== undefined ? `${realmId}#${ref.id}` : `${realmId}:${(ref.name ?? "").toLowerCase()}`;
  const hit = streamCache.get(key);
  if (hit && hit.until > Date.now()) return hit.row;
  const stream = await findStream(db, realmId, ref);
  if (stream) {
    if (streamCache.size > 10_000) streamCache.clear();
    streamCache.set(key, { row: stream, until: Date.now() + STREAM_CACHE_MS });
  }
  if (!stream) throw chatErrors.streamNotFound(ref.id !== undefined ? { stream_id: ref.id } : { stream: ref.name });
  return stream;
}

// ---- unread_msgs (POST /register) -----------------------------------------------------------------------------

/** Zulip's MAX_UNREAD_MESSAGES: the most recent unreads considered; older ones set old_unreads_missing. */
export const MAX_UNREAD_MESSAGES = 50_000;

interface UnreadRow {
  id: number;
  flags: number;
  stream_id: number | null;
  topic: string;
  dm_key: string | null;
  muted: boolean;
}

/**
 * Zulip's `unread_msgs` (zerver/lib/message.py, get_raw_unread_data and aggregate_unread_data) from the user's
 * flag rows, in one query: the newest MAX_UNREAD_MESSAGES unread rows, leaving out channels the user unsubscribed
 * from, each with whether it is muted (a muted topic, or a muted channel's topic not unmuted or followed).
 * Muted messages stay listed under `streams` but count neither in `count` nor, for wildcard mentions, in `mentions`.
 */
export async function unreadMessages(db: DB, userId: number, opts: { emptyTopicName: boolean }) {
  const { rows } = await sql<UnreadRow>`
    select um.message_id as id, um.flags, m.stream_id, m.topic, r.dm_key,
      case
        when m.stream_id is null then false
        when ut.visibility_policy in (${VISIBILITY.unmuted}, ${VISIBILITY.followed}) then false
        when coalesce(s.is_muted, false) then true
        else coalesce(ut.visibility_policy = ${VISIBILITY.muted}, false)
      end as muted
    from user_messages um
    join messages m on m.id = um.message_id
    left join recipients r on r.id = m.recipient_id and m.stream_id is null
    left join subscriptions s on s.user_id = um.user_id and s.stream_id = m.stream_id
    left join user_topics ut on ut.user_id = um.user_id and ut.stream_id = m.stream_id and ut.topic_key = lower(m.topic)
    where um.user_id = ${userId} and (um.flags & ${FLAG_BITS.read}) = 0 and coalesce(s.active, true)
    order by um.message_id desc
    limit ${MAX_UNREAD_MESSAGES + 1}`.execute(db);
  const kept = rows.slice(0, MAX_UNREAD_MESSAGES).reverse();
  const pms = new Map<number, number[]>();
  const huddles = new Map<string, number[]>();
  const streams = new Map<string, { stream_id: number; topic: string; unread_message_ids: number[] }>();
  const mentions: number[] = [];
  let count = 0;
  const push = <K>(map: Map<K, number[]>, key: K, id: number) => {
    const list = map.get(key);
    if (list) list.push(id);
    else map.set(key, [id]);
  };
  for (const row of kept) {
    const id = Number(row.id);
    if (row.stream_id === null) {
      const people = row.dm_key!.split(",").map(Number);
      // A conversation of one or two people is Zulip's one-on-one (with oneself: other_user_id is oneself).
      if (people.length <= 2) push(pms, people.find((u) => u !== userId) ?? userId, id);
      else push(huddles, row.dm_key!, id);
      count++;
    } else {
      const topic = row.topic === "" && !opts.emptyTopicName ? EMPTY_TOPIC_DISPLAY_NAME : row.topic;
      const key = `${row.stream_id}\u0000${row.topic.toLowerCase()}`;
      const entry = streams.get(key) ?? { stream_id: row.stream_id, topic, unread_message_ids: [] };
      entry.unread_message_ids.push(id);
      streams.set(key, entry);
      if (!row.muted) count++;
    }
    const wildcard = row.flags & (FLAG_BITS.stream_wildcard_mentioned | FLAG_BITS.topic_wildcard_mentioned);
    if (row.flags & FLAG_BITS.mentioned || (wildcard && !row.muted)) mentions.push(id);
  }
  return {
    pms: [...pms].sort(([a], [b]) => a - b).map(([other, ids]) => ({ other_user_id: other, sender_id: other, unread_message_ids: ids })),
    streams: [...streams.values()].sort((a, b) => a.stream_id - b.stream_id || a.topic.toLowerCase().localeCompare(b.topic.toLowerCase())),
    huddles: [...huddles].sort(([a], [b]) => a.localeCompare(b)).map(([key, ids]) => ({ user_ids_string: key, unread_message_ids: ids })),
    mentions,
    count,
    old_unreads_missing: rows.length > MAX_UNREAD_MESSAGES,
  };
}
