/**
 * Who may do what with a channel, as Zulip decides it (zerver/lib/streams.py):
 *
 * - metadata access (see it, its subscribers): web-public channels, subscribers, every non-guest for a public
 *   channel, and for a private one administrators and the members of its can_administer_channel_group,
 *   can_add_subscribers_group and can_subscribe_group;
 * - content access (read it, join it): web-public, subscribers, non-guests for public channels, and for a private
 *   one the members of can_add_subscribers_group or can_subscribe_group (administrators do not get it implicitly);
 * - adding others needs content access and the realm's can_add_subscribers_group, or administering the channel,
 *   or its can_add_subscribers_group;
 * - removing others: administrators always; else channel administrators, or with metadata access the members
 *   of can_remove_subscribers_group.
 *
 * Guests are never in these groups (Zulip's allow_everyone_group=False settings).
 */
import type { Kysely } from "kysely";
import { CONTENT_ACCESS_SETTINGS, groupSettingMembers, inGroupSetting, METADATA_ACCESS_SETTINGS, ROLE, type GroupSettingValue } from "../organization/groups.ts";
import { realmGroupSetting } from "./message-rules.ts";
import type { StreamRow } from "../reads/channels.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database>;

export interface Caller {
  id: number;
  role: number;
  realm_id: number;
}

const isAdmin = (user: Caller) => user.role <= ROLE.administrator;
const isGuest = (user: Caller) => user.role === ROLE.guest;

/** A channel's group-setting value, as stored among its settings. */
export function channelGroupSetting(stream: Pick<StreamRow, "settings">, name: string): GroupSettingValue | undefined {
  return ((stream.settings ?? {}) as Record<string, GroupSettingValue>)[name];
}

/** Whether the user is in one of the channel's group settings (never true for guests). */
async function inChannelGroup(db: DB, user: Caller, stream: StreamRow, ...settings: string[]): Promise<boolean> {
  if (isGuest(user)) return false;
  for (const name of settings) if (await inGroupSetting(db, channelGroupSetting(stream, name), user.id)) return true;
  return false;
}

export async function hasContentAccess(db: DB, user: Caller, stream: StreamRow, subscribed: boolean): Promise<boolean> {
  if (stream.is_web_public || subscribed) return true;
  if (isGuest(user)) return false;
  if (!stream.invite_only) return true;
  return inChannelGroup(db, user, stream, ...CONTENT_ACCESS_SETTINGS);
}

export async function hasMetadataAccess(db: DB, user: Caller, stream: StreamRow, subscribed: boolean): Promise<boolean> {
  if (stream.is_web_public || subscribed) return true;
  if (isGuest(user)) return false;
  if (!stream.invite_only || isAdmin(user)) return true;
  return inChannelGroup(db, user, stream, ...METADATA_ACCESS_SETTINGS);
}

/** Adding others to a channel the caller has content access to. */
export async function canAddSubscribers(db: DB, user: Caller, stream: StreamRow): Promise<boolean> {
  if (isGuest(user)) return false;
  if (isAdmin(user)) return true;
  if (await inGroupSetting(db, await realmGroupSetting(db, user.realm_id, "can_add_subscribers_group"), user.id)) return true;
  return inChannelGroup(db, user, stream, "can_administer_channel_group", "can_add_subscribers_group");
}

/** Removing others (not oneself, nor one's own bots: anyone may). */
export async function canRemoveSubscribers(db: DB, user: Caller, stream: StreamRow, subscribed: boolean): Promise<boolean> {
  if (isAdmin(user)) return true;
  if (isGuest(user)) return false;
  if (await inChannelGroup(db, user, stream, "can_administer_channel_group")) return true;
  if (!(await hasMetadataAccess(db, user, stream, subscribed))) return false;
  return inChannelGroup(db, user, stream, "can_remove_subscribers_group");
}

/**
 * The least privileged role that sees the channel without being subscribed: everyone for web-public, non-guests
 * for public, administrators for private (group-granted metadata access aside). Subscribing or unsubscribing
 * anyone below it makes the channel appear or disappear for them.
 */
export function lowestRoleSeeing(stream: Pick<StreamRow, "invite_only" | "is_web_public">): number {
  return stream.is_web_public ? ROLE.guest : stream.invite_only ? ROLE.administrator : ROLE.member;
}

/**
 * Who has metadata access to a channel (sees it listed, its subscriber list, and so gets its stream and peer_add /
 * peer_remove events), given its subscribers: everyone for a web-public channel, non-guests and subscribed guests
 * for a public one; for a private one its subscribers, administrators, and the non-guest members of its
 * can_administer_channel_group, can_add_subscribers_group and can_subscribe_group (Zulip's
 * bulk_get_subscriber_peer_info with users_with_metadata_access_via_permission_groups).
 */
export async function metadataWatchers(db: DB, stream: Pick<StreamRow, "realm_id" | "invite_only" | "is_web_public" | "settings">, subscribers: Iterable<number>): Promise<Set<number>> {
  const active = db.selectFrom("users").select("id").where("realm_id", "=", stream.realm_id).where("is_active", "=", true);
  const ids = new Set((await active.where("role", "<=", lowestRoleSeeing(stream)).execute()).map((u) => u.id));
  for (const id of subscribers) ids.add(id);
  if (stream.invite_only && !stream.is_web_public) {
    const members = new Set<number>();
    for (const name of METADATA_ACCESS_SETTINGS) for (const id of await groupSettingMembers(db, channelGroupSetting(stream, name))) members.add(id);
    const granted = members.size ? await active.where("id", "in", [...members]).where("role", "<", ROLE.guest).execute() : [];
    for (const u of granted) ids.add(u.id);
  }
  return ids;
}
