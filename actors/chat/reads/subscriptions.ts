/**
 * Reads of the `subscriptions` table: a user's subscriptions as Zulip's subscription objects, a channel's
 * subscribers, and the channels a user may read through them. Nothing here writes.
 */
import type { Kysely, Selectable } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import type { Database } from "../../schema.ts";
import type { SubscriptionTable } from "../schema.ts";
import { ROLE } from "../organization/groups.ts";
import { findStream, streamObject, type StreamRow } from "./channels.ts";
import type { UserRow } from "./users.ts";

type DB = Kysely<Database>;

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

/** The user's own settings for a channel, the part of Zulip's subscription object that is not the channel's. */
export function subscriptionProperties(sub: SubscriptionColumns) {
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
  };
}

/** Zulip's subscription object: the channel object and the user's settings for it. */
export function subscriptionObject(stream: ReturnType<typeof streamObject>, sub: SubscriptionColumns, subscribers?: number[]) {
  // The channel's fields after the user's (they share none): no `{ ...stream, … }` (see streamObject).
  return Object.assign(subscriptionProperties(sub), stream, subscribers ? { subscribers } : {});
}

/**
 * The user's subscriptions (or, `active` false, former ones), as Zulip's subscription objects; those of archived
 * channels only if asked for (Zulip's include_archived_channels: clients with the archived_channels capability).
 */
export async function subscriptionsOf(db: DB, userId: number, includeSubscribers = false, active = true, archived = false) {
  const rows = await db
    .selectFrom("subscriptions")
    .innerJoin("streams", "streams.id", "subscriptions.stream_id")
    .selectAll("streams")
    .select(SUBSCRIPTION_COLUMNS.map((c) => `subscriptions.${c}` as const))
    .where("subscriptions.user_id", "=", userId)
    .where("subscriptions.active", "=", active)
    .where((eb) => (archived ? eb.lit(true) : eb("streams.deactivated", "=", false)))
    .orderBy("streams.id")
    .execute();
  const members = includeSubscribers ? await subscribersOf(db, rows.map((r) => r.id)) : undefined;
  return rows.map((r) => subscriptionObject(streamObject(r, r.subscriber_count), r, members ? (members.get(r.id) ?? []) : undefined));
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
