/**
 * Reads that need no actor: queries straight to the store, shaped as Zulip's API objects. Nothing here writes.
 */
import { sql, type Kysely, type Selectable } from "kysely";
import { errors } from "../runtime/errors.ts";
import type { Database, StreamTable, UserTable } from "../runtime/store/schema.ts";
import { formatMessage, gravatarUrl, type FormatOptions, type MessageRecord } from "./message-format.ts";
import { ROLE } from "./groups.ts";

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

export function findUserById(db: DB, realmId: number, id: number): Promise<UserRow | undefined> {
  return usersWithRealm(db).where("users.id", "=", id).where("users.realm_id", "=", realmId).executeTakeFirst();
}

/** GET /users/me: the caller, without the bot fields Zulip leaves out there. */
export function ownUserObject(u: Selectable<UserTable>) {
  const { bot_type, bot_owner_id, ...rest } = userObject(u, { clientGravatar: false });
  return rest;
}

/** Zulip's user object (GET /users, GET /users/{id}, realm_users in /register). */
export function userObject(u: Selectable<UserTable>, opts: { clientGravatar: boolean }) {
  return {
    user_id: u.id,
    email: u.email,
    delivery_email: u.delivery_email,
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
    avatar_url: opts.clientGravatar ? null : gravatarUrl(u.delivery_email),
    avatar_version: u.avatar_version,
    ...(u.is_bot ? {} : { profile_data: {} }),
  };
}

export function realmUsers(db: DB, realmId: number) {
  return db.selectFrom("users").selectAll().where("realm_id", "=", realmId).orderBy("id").execute();
}

export function findStream(db: DB, realmId: number, ref: { id?: number; name?: string }): Promise<StreamRow | undefined> {
  let q = db.selectFrom("streams").selectAll().where("realm_id", "=", realmId);
  q = ref.id !== undefined ? q.where("id", "=", ref.id) : q.where(sql`lower(name)`, "=", (ref.name ?? "").toLowerCase());
  return q.executeTakeFirst();
}

/** Channels the user may see: public ones, and private ones they are subscribed to. */
export async function visibleStreams(db: DB, user: UserRow): Promise<StreamRow[]> {
  return db
    .selectFrom("streams")
    .selectAll()
    .where("realm_id", "=", user.realm_id)
    .where((eb) =>
      eb.or([
        eb("invite_only", "=", false),
        eb.exists(
          eb
            .selectFrom("subscriptions")
            .select("user_id")
            .whereRef("subscriptions.stream_id", "=", "streams.id")
            .where("subscriptions.user_id", "=", user.id)
            .where("subscriptions.active", "=", true),
        ),
      ]),
    )
    .orderBy("id")
    .execute();
}

/** Zulip's channel object (`streams` in /register, GET /streams); settings hold topics_policy and the can_*_group values. */
export function streamObject(s: StreamRow, subscriberCount: number, firstMessageId: number | null = null) {
  const settings = (s.settings ?? {}) as Record<string, unknown>;
  return {
    ...settings,
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
  };
}

/** Channel objects for rows, with their subscriber counts. */
export async function streamObjects(db: DB, rows: StreamRow[]) {
  const counts = await subscriberCounts(db, rows.map((r) => r.id));
  return rows.map((r) => streamObject(r, counts.get(r.id) ?? 0));
}

async function subscriberCounts(db: DB, streamIds: number[]): Promise<Map<number, number>> {
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

/** The user's subscriptions, as Zulip's subscription objects. */
export async function subscriptionsOf(db: DB, userId: number, includeSubscribers = false) {
  const rows = await db
    .selectFrom("subscriptions")
    .innerJoin("streams", "streams.id", "subscriptions.stream_id")
    .selectAll("streams")
    .select(["subscriptions.color", "subscriptions.is_muted", "subscriptions.pin_to_top"])
    .where("subscriptions.user_id", "=", userId)
    .where("subscriptions.active", "=", true)
    .orderBy("streams.id")
    .execute();
  const members = includeSubscribers ? await subscribersOf(db, rows.map((r) => r.id)) : undefined;
  const counts = await subscriberCounts(db, rows.map((r) => r.id));
  return rows.map((r) => ({
    ...streamObject(r, counts.get(r.id) ?? 0),
    color: r.color,
    is_muted: r.is_muted,
    in_home_view: !r.is_muted,
    pin_to_top: r.pin_to_top,
    desktop_notifications: null,
    email_notifications: null,
    push_notifications: null,
    audible_notifications: null,
    wildcard_mentions_notify: null,
    ...(members ? { subscribers: members.get(r.id) ?? [] } : {}),
  }));
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
  /** Channel and topic terms only, for now; the channel is resolved by the caller. */
  stream?: StreamRow;
  topic?: string;
  format: FormatOptions;
}

/** Zulip's anchor for "newest": above any message id (and returned as such). */
export const LARGER_THAN_MAX_MESSAGE_ID = 10_000_000_000_000_000;

/**
 * The channels whose messages a search covers. With a channel operator: that channel, if the user may read it
 * (public to non-guests, else subscribed). Without: the user's own history, the channels they are subscribed to.
 */
async function searchableStreams(db: DB, user: UserRow, stream: StreamRow | undefined): Promise<Map<number, string>> {
  const subscribed = await db
    .selectFrom("subscriptions")
    .innerJoin("streams", "streams.id", "subscriptions.stream_id")
    .select(["streams.id", "streams.name"])
    .where("subscriptions.user_id", "=", user.id)
    .where("subscriptions.active", "=", true)
    .execute();
  if (!stream) return new Map(subscribed.map((r) => [r.id, r.name]));
  const readable = subscribed.some((r) => r.id === stream.id) || (!stream.invite_only && user.role !== ROLE.guest);
  return readable ? new Map([[stream.id, stream.name]]) : new Map();
}

/**
 * Messages the user can read around an anchor, with Zulip's found_* flags. Each side is one index range scan
 * over (stream_id, id) limited to what was asked for; senders are looked up for the page only.
 */
export async function fetchMessages(db: DB, user: UserRow, q: MessageQuery) {
  // Unread tracking comes with message flags; until then nothing is unread and first_unread means newest.
  const anchor = q.anchor === "newest" || q.anchor === "first_unread" ? LARGER_THAN_MAX_MESSAGE_ID : q.anchor === "oldest" ? 0 : q.anchor;
  const streams = await searchableStreams(db, user, q.stream);
  const streamIds = [...streams.keys()];
  const side = (op: "<" | ">=", order: "asc" | "desc", limit: number) => {
    if (!streamIds.length || limit <= 0) return Promise.resolve([]);
    let query = db
      .selectFrom("messages")
      .select(["id", "sender_id", "recipient_id", "stream_id", "topic", "content", "rendered_content", "date_sent", "sending_client"])
      .where("stream_id", "in", streamIds)
      .where("id", op, anchor);
    if (q.topic !== undefined) query = query.where(sql`lower(topic)`, "=", q.topic.toLowerCase());
    return query.orderBy("id", order).limit(limit).execute();
  };
  // One extra row on each side tells whether the oldest / newest match was reached.
  const [before, atAndAfter] = await Promise.all([side("<", "desc", q.numBefore + 1), side(">=", "asc", q.numAfter + 2)]);
  const anchorRow = atAndAfter[0]?.id === anchor ? atAndAfter[0] : undefined;
  const after = atAndAfter.filter((r) => r.id > anchor);
  const rows = [
    ...before.slice(0, q.numBefore).reverse(),
    ...(anchorRow && q.includeAnchor ? [anchorRow] : []),
    ...after.slice(0, q.numAfter),
  ];
  const senderIds = [...new Set(rows.map((r) => r.sender_id))];
  const senders = senderIds.length
    ? new Map((await db.selectFrom("users").select(["id", "email", "full_name"]).where("id", "in", senderIds).execute()).map((u) => [u.id, u]))
    : new Map<number, { email: string; full_name: string }>();
  const messages = rows.map((r) => {
    const sender = senders.get(r.sender_id);
    const record: MessageRecord = {
      id: r.id,
      type: "stream",
      sender_id: r.sender_id,
      sender_email: sender?.email ?? "",
      sender_full_name: sender?.full_name ?? "",
      sender_realm_str: user.realm_str,
      recipient_id: r.recipient_id,
      stream_id: r.stream_id,
      display_recipient: streams.get(r.stream_id!) ?? "",
      subject: r.topic,
      content: r.content,
      rendered_content: r.rendered_content,
      timestamp: r.date_sent,
      client: r.sending_client,
    };
    return { ...formatMessage(record, q.format), flags: r.sender_id === user.id ? ["read"] : [] };
  });
  return {
    anchor,
    found_anchor: !!anchorRow,
    found_oldest: before.length <= q.numBefore,
    found_newest: after.length <= q.numAfter,
    history_limited: false,
    messages,
  };
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
  if (!stream) throw errors.streamNotFound(ref.id !== undefined ? { stream_id: ref.id } : { stream: ref.name });
  return stream;
}
