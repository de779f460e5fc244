/**
 * Reads of the `streams` table: channels by id or name (cached on the send path), the channels a user may list,
 * and Zulip's channel objects with their subscriber counts. Nothing here writes.
 */
import { sql, type Kysely, type Selectable } from "kysely";
import { chatErrors } from "../errors.ts";
import type { Database } from "../../schema.ts";
import type { StreamTable } from "../schema.ts";
import { CONTENT_ACCESS_SETTINGS, inGroupSettingOf, METADATA_ACCESS_SETTINGS, ROLE, userGroupIds, type GroupSettingValue } from "../organization/groups.ts";
import type { UserRow } from "./users.ts";

type DB = Kysely<Database>;

export type StreamRow = Selectable<StreamTable>;

export function findStream(db: DB, realmId: number, ref: { id?: number; name?: string }): Promise<StreamRow | undefined> {
  let q = db.selectFrom("streams").selectAll().where("realm_id", "=", realmId);
  q = ref.id !== undefined ? q.where("id", "=", ref.id) : q.where(sql`lower(name)`, "=", (ref.name ?? "").toLowerCase());
  return q.executeTakeFirst();
}

/** The realm's channels named (case-insensitively), by lower-cased name. */
export async function channelsByName(db: DB, realmId: number, names: string[]): Promise<Map<string, StreamRow>> {
  if (!names.length) return new Map();
  const rows = await db.selectFrom("streams").selectAll().where("realm_id", "=", realmId).where(sql`lower(name)`, "in", names.map((n) => n.toLowerCase())).execute();
  return new Map(rows.map((r) => [r.name.toLowerCase(), r]));
}

/** The realm's default channels (Zulip's get_default_stream_ids_for_realm), which new users join. */
export async function defaultChannelIds(db: DB, realmId: number): Promise<number[]> {
  const rows = await db.selectFrom("streams").select("id").where("realm_id", "=", realmId).where("is_default", "=", true).where("deactivated", "=", false).orderBy("id").execute();
  return rows.map((r) => r.id);
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
  /** Archived channels too (GET /streams's exclude_archived false, clients with the archived_channels capability). */
  archived?: boolean;
}

/**
 * Channels listed to the user: by default the ones they are subscribed to and, unless they are a guest, the public
 * ones. `all` adds web-public channels and the private ones the user sees the metadata of (every channel of the
 * realm for administrators); `canAccessContent`, the private ones a permission group lets them read or join.
 */
export async function visibleStreams(db: DB, user: Pick<UserRow, "id" | "role" | "realm_id">, listing: StreamListing = {}): Promise<StreamRow[]> {
  const { public: pub = true, subscribed = true, defaults = false, all = false, canAccessContent = false, archived = false } = listing;
  const webPublic = listing.webPublic || all || canAccessContent;
  const everything = all && user.role <= ROLE.administrator;
  const rows = await db
    .selectFrom("streams")
    .selectAll()
    .where("realm_id", "=", user.realm_id)
    .where((eb) => (archived ? eb.lit(true) : eb("deactivated", "=", false)))
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
  let privateQuery = db.selectFrom("streams").selectAll().where("realm_id", "=", user.realm_id).where("invite_only", "=", true);
  if (!archived) privateQuery = privateQuery.where("deactivated", "=", false);
  const privates = await privateQuery.execute();
  const granted = privates.filter((s) => !listed.has(s.id) && grantedBy.some((name) => inGroupSettingOf((s.settings as Record<string, GroupSettingValue>)[name], user.id, groups)));
  return granted.length ? [...rows, ...granted].sort((a, b) => a.id - b.id) : rows;
}

/**
 * Zulip's channel object (`streams` in /register, GET /streams); settings hold topics_policy, the can_*_group
 * values and folder_id.
 */
export function streamObject(s: StreamRow, subscriberCount: number, firstMessageId: number | null = null) {
  const settings = (s.settings ?? {}) as Record<string, unknown>;
  // Object.assign, not `{ ...settings, … }` (see docs/performance.md on spreads); the columns win.
  return Object.assign({}, settings, {
    stream_id: s.id,
    name: s.name,
    description: s.description,
    rendered_description: s.rendered_description,
    date_created: s.date_created,
    creator_id: s.creator_id,
    invite_only: s.invite_only,
    is_web_public: s.is_web_public,
    is_archived: s.deactivated,
    is_announcement_only: false,
    stream_post_policy: 1,
    message_retention_days: s.message_retention_days,
    history_public_to_subscribers: s.history_public_to_subscribers,
    first_message_id: firstMessageId,
    // Kept with the settings (PATCH /streams/{id} folder_id); null when in no folder.
    folder_id: (settings.folder_id as number | null | undefined) ?? null,
    is_recently_active: true,
    subscriber_count: subscriberCount,
    stream_weekly_traffic: null,
  });
}

/** Channel objects for rows, with their subscriber counts (the rows' own column, kept by triggers). */
export function streamObjects(rows: StreamRow[]) {
  return rows.map((r) => streamObject(r, r.subscriber_count));
}


/**
 * Channel lookups on the send path, cached for a moment per process and store (tests run several stores in one
 * process): a send names its channel on every request, and names change rarely. Only hits are cached, so a channel
 * created a moment ago is found at once. Sends that name a channel while its lookup runs wait for that one lookup
 * (when an entry expired under 50 concurrent senders, each used to query the store).
 */
const STREAM_CACHE_MS = 2000;
const streamCaches = new WeakMap<DB, { rows: Map<string, { row: StreamRow; until: number }>; lookups: Map<string, Promise<StreamRow | undefined>> }>();

export async function requireStream(db: DB, realmId: number, ref: { id?: number; name?: string }): Promise<StreamRow> {
  const key = ref.id !== undefined ? `${realmId}#${ref.id}` : `${realmId}:${(ref.name ?? "").toLowerCase()}`;
  let cache = streamCaches.get(db);
  if (!cache) streamCaches.set(db, (cache = { rows: new Map(), lookups: new Map() }));
  const hit = cache.rows.get(key);
  if (hit && hit.until > Date.now()) return hit.row;
  const { rows, lookups } = cache;
  let lookup = lookups.get(key);
  if (!lookup) {
    lookup = findStream(db, realmId, ref).finally(() => lookups.delete(key));
    lookups.set(key, lookup);
  }
  const stream = await lookup;
  if (stream) {
    if (rows.size > 10_000) rows.clear();
    rows.set(key, { row: stream, until: Date.now() + STREAM_CACHE_MS });
  }
  if (!stream) throw chatErrors.streamNotFound(ref.id !== undefined ? { stream_id: ref.id } : { stream: ref.name });
  return stream;
}
