/**
 * POST /register's channel lists (`streams`, `subscriptions`, `unsubscribed`, `never_subscribed`) from a per-realm
 * cache of the realm's channels, each one's channel object serialized once: in a 1,000-channel realm the lists are
 * 850 KB, and building them (the rows read, 1,000 objects made and serialized for `streams` and again for
 * `never_subscribed`) was a third of a register (issue 28, docs/reads.md). What is the viewer's own is read per
 * register: their subscriptions (with their settings for each), and their groups when a private channel might open
 * to them through one. The cache is current by channel_versions (migration 2026-11-28T0150), which triggers on
 * `streams` bump in every writer's transaction: channel created, renamed, archived, its settings and permission
 * groups changed, its subscriber count (kept on the row) moved.
 */
import type { Kysely } from "kysely";
import type { Database } from "../../schema.ts";
import { inGroupSettingOf, METADATA_ACCESS_SETTINGS, ROLE, userGroupIds, type GroupSettingValue } from "../organization/groups.ts";
import { streamObject, type StreamRow } from "./channels.ts";
import { SUBSCRIPTION_COLUMNS, subscribersOf, subscriptionProperties, type SubscriptionColumns } from "./subscriptions.ts";
import type { UserRow } from "./users.ts";
import { RealmVersionedCache } from "./versioned-cache.ts";

type DB = Kysely<Database>;

/** The realm's channels in id order, and each one's channel object as UTF-8 JSON. */
interface RealmChannels {
  rows: StreamRow[];
  objects: Buffer[];
}

const realmChannels = new RealmVersionedCache("channel_versions", async (db, realmId): Promise<RealmChannels> => {
  const rows = await db.selectFrom("streams").selectAll().where("realm_id", "=", realmId).orderBy("id").execute();
  return { rows, objects: rows.map((r) => Buffer.from(JSON.stringify(streamObject(r, r.subscriber_count)))) };
});

export interface RegisterChannelOptions {
  includeSubscribers: boolean;
  /** Archived channels listed too (the archived_channels client capability). */
  archived: boolean;
}

/** Each list as a JSON array in UTF-8. */
export interface RegisterChannelLists {
  streams: Buffer;
  subscriptions: Buffer;
  unsubscribed: Buffer;
  neverSubscribed: Buffer;
}

type SubscriptionRow = SubscriptionColumns & { stream_id: number; active: boolean };

const OPEN = Buffer.from("[");
const COMMA = Buffer.from(",");
const CLOSE = Buffer.from("]");

/** A JSON array of the pieces' values. */
function jsonArray(items: Buffer[][]): Buffer {
  const pieces: Buffer[] = [OPEN];
  for (let i = 0; i < items.length; i++) {
    if (i) pieces.push(COMMA);
    pieces.push(...items[i]!);
  }
  pieces.push(CLOSE);
  return Buffer.concat(pieces);
}

/**
 * The channels whose metadata the user sees, as reads/channels.ts's visibleStreams with `all` (the same rule, on
 * the cached rows): every channel for administrators; else public ones (not to guests), web-public ones, those
 * subscribed to, and private ones a metadata permission group of theirs opens (never to guests).
 */
async function seenChannels(db: DB, user: Pick<UserRow, "id" | "role">, rows: StreamRow[], subscribed: Set<number>, archived: boolean): Promise<boolean[]> {
  const guest = user.role === ROLE.guest;
  const seen = rows.map((s) => (archived || !s.deactivated) && (user.role <= ROLE.administrator || (!s.invite_only && !guest) || s.is_web_public || subscribed.has(s.id)));
  if (guest || user.role <= ROLE.administrator) return seen;
  const candidates = rows.map((s, i) => i).filter((i) => !seen[i] && rows[i]!.invite_only && (archived || !rows[i]!.deactivated));
  if (!candidates.length) return seen;
  const groups = await userGroupIds(db, user.id);
  for (const i of candidates) {
    const settings = rows[i]!.settings as Record<string, GroupSettingValue>;
    seen[i] = METADATA_ACCESS_SETTINGS.some((name) => inGroupSettingOf(settings[name], user.id, groups));
  }
  return seen;
}

/**
 * The user's channel lists for POST /register, Zulip's gather_subscriptions_helper: their subscriptions; former ones
 * to channels they still see (`unsubscribed`); channels they see and never joined, archived ones left out
 * (`never_subscribed`); every channel they see (`streams`). Archived channels only if `archived`.
 */
export async function registerChannelLists(db: DB, user: Pick<UserRow, "id" | "role" | "realm_id">, opts: RegisterChannelOptions): Promise<RegisterChannelLists> {
  const [channels, subscriptionRows] = await Promise.all([
    realmChannels.get(db, user.realm_id),
    db
      .selectFrom("subscriptions")
      .select(["stream_id", "active", ...SUBSCRIPTION_COLUMNS])
      .where("user_id", "=", user.id)
      .execute() as Promise<SubscriptionRow[]>,
  ]);
  const { rows, objects } = channels;
  const subscriptionOf = new Map(subscriptionRows.map((s) => [s.stream_id, s]));
  const seen = await seenChannels(db, user, rows, new Set(subscriptionRows.filter((s) => s.active).map((s) => s.stream_id)), opts.archived);
  const joined = rows.map((s, i) => i).filter((i) => subscriptionOf.has(rows[i]!.id) && (opts.archived || !rows[i]!.deactivated));
  const members = opts.includeSubscribers ? await subscribersOf(db, joined.map((i) => rows[i]!.id)) : undefined;
  // A subscription object: the user's settings, then the channel object's members as cached, then the subscribers.
  const subscriptionJson = (i: number): Buffer[] => {
    const props = JSON.stringify(subscriptionProperties(subscriptionOf.get(rows[i]!.id)!));
    const subscribers = members ? `,"subscribers":${JSON.stringify(members.get(rows[i]!.id) ?? [])}` : "";
    return [Buffer.from(props.slice(0, -1) + ","), objects[i]!.subarray(1, -1), Buffer.from(subscribers + "}")];
  };
  const indexes = rows.map((s, i) => i);
  return {
    streams: jsonArray(indexes.filter((i) => seen[i]).map((i) => [objects[i]!])),
    subscriptions: jsonArray(joined.filter((i) => subscriptionOf.get(rows[i]!.id)!.active).map(subscriptionJson)),
    unsubscribed: jsonArray(joined.filter((i) => !subscriptionOf.get(rows[i]!.id)!.active && seen[i]).map(subscriptionJson)),
    neverSubscribed: jsonArray(indexes.filter((i) => seen[i] && !subscriptionOf.has(rows[i]!.id) && !rows[i]!.deactivated).map((i) => [objects[i]!])),
  };
}
