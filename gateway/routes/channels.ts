/** Channels and subscriptions: POST and GET /users/me/subscriptions, GET /streams. */
import { sql } from "kysely";
import { actorId } from "../../runtime/actor.ts";
import { errors } from "../../runtime/errors.ts";
import { CHANNEL, REALM, type EnsuredChannel, type SubscribeResult } from "../../actors/protocol.ts";
import { ROLE } from "../../actors/realm.ts";
import { findStream, isSubscribed, streamObjects, subscriptionsOf, visibleStreams, type UserRow } from "../../actors/reads.ts";
import type { RouteSpec, Services } from "../app.ts";
import { Bool, Id, Str } from "../params.ts";
import { LIMITS } from "../zulip.ts";

/** Users named by id or e-mail, all active members of the caller's realm. */
async function resolvePrincipals(services: Services, caller: UserRow, principals: Array<number | string> | undefined): Promise<number[]> {
  if (!principals) return [caller.id];
  if (!principals.length) throw errors.badRequest("principals cannot be empty");
  const byId = principals.filter((p): p is number => typeof p === "number");
  const byEmail = principals.filter((p): p is string => typeof p === "string").map((e) => e.toLowerCase());
  const db = services.store.db;
  const rows = await db
    .selectFrom("users")
    .select(["id", "delivery_email", "is_active"])
    .where("realm_id", "=", caller.realm_id)
    .where((eb) =>
      eb.or([
        ...(byId.length ? [eb("id", "in", byId)] : []),
        ...(byEmail.length ? [eb(sql`lower(delivery_email)`, "in", byEmail)] : []),
      ]),
    )
    .execute();
  const ids: number[] = [];
  for (const p of principals) {
    const row = rows.find((r) => (typeof p === "number" ? r.id === p : r.delivery_email.toLowerCase() === p.toLowerCase()));
    if (!row || !row.is_active) throw errors.badRequest(`No such user: ${p}`);
    if (!ids.includes(row.id)) ids.push(row.id);
  }
  return ids;
}

export const channelRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/users/me/subscriptions",
    params: {
      type: "object",
      properties: {
        subscriptions: {
          type: "array",
          minItems: 1,
          items: {
            type: "object",
            properties: {
              name: { type: "string", maxLength: LIMITS.max_stream_name_length },
              description: { type: "string", maxLength: LIMITS.max_stream_description_length },
            },
            required: ["name"],
          },
        },
        principals: { oneOf: [{ type: "array", items: Id }, { type: "array", items: Str }] },
        authorization_errors_fatal: { ...Bool, default: true },
        announce: { ...Bool, default: false },
        invite_only: { ...Bool, default: false },
        is_web_public: { ...Bool, default: false },
        history_public_to_subscribers: Bool,
      },
      required: ["subscriptions"],
    },
    async handle({ params, user, services }) {
      if (user.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
      const specs: Array<{ name: string; description: string }> = [];
      for (const s of params.subscriptions as Array<{ name: string; description?: string }>) {
        const name = s.name.trim();
        if (!name) throw errors.badRequest("Channel name can't be empty.");
        if (/[\u0000-\u001f\u007f]/.test(name)) throw errors.badRequest(`Invalid character in channel name, at position ${name.search(/[\u0000-\u001f\u007f]/) + 1}.`);
        if (!specs.some((x) => x.name.toLowerCase() === name.toLowerCase())) specs.push({ name, description: s.description ?? "" });
      }
      const userIds = await resolvePrincipals(services, user, params.principals);
      if (userIds.some((id) => id !== user.id) && user.role > ROLE.member) {
        throw errors.badRequest("Insufficient permission");
      }
      const db = services.store.db;
      // Existing private channels are only for those who can already see them.
      const unauthorized: string[] = [];
      const wanted: typeof specs = [];
      for (const spec of specs) {
        const existing = await findStream(db, user.realm_id, { name: spec.name });
        if (existing?.invite_only && user.role > ROLE.administrator && !(await isSubscribed(db, user.id, existing.id))) {
          unauthorized.push(existing.name);
          continue;
        }
        wanted.push(spec);
      }
      if (unauthorized.length && params.authorization_errors_fatal) {
        throw errors.badRequest(`Unable to access channel (${unauthorized[0]}).`);
      }
      const channels = wanted.length
        ? await services.system.ask<EnsuredChannel[]>(actorId(REALM, user.realm_id), {
            op: "ensureChannels",
            creatorId: user.id,
            channels: wanted,
            inviteOnly: params.invite_only,
            isWebPublic: params.is_web_public,
            historyPublicToSubscribers: params.history_public_to_subscribers ?? null,
          })
        : [];
      const subscribed: Record<string, string[]> = {};
      const already: Record<string, string[]> = {};
      const results = await Promise.all(
        channels.map((c) => services.system.ask<SubscribeResult>(actorId(CHANNEL, c.id), { op: "subscribe", userIds })),
      );
      channels.forEach((c, i) => {
        for (const id of results[i]!.added) (subscribed[id] ??= []).push(c.name);
        for (const id of results[i]!.already) (already[id] ??= []).push(c.name);
      });
      return { subscribed, already_subscribed: already, ...(unauthorized.length ? { unauthorized } : {}) };
    },
  },
  {
    method: "GET",
    path: "/users/me/subscriptions",
    params: { type: "object", properties: { include_subscribers: { ...Bool, default: false } } },
    async handle({ params, user, services }) {
      return { subscriptions: await subscriptionsOf(services.store.db, user.id, params.include_subscribers) };
    },
  },
  {
    method: "GET",
    path: "/streams",
    params: { type: "object", properties: { include_public: Bool, include_subscribed: Bool, include_all: Bool } },
    async handle({ user, services }) {
      return { streams: await streamObjects(services.store.db, await visibleStreams(services.store.db, user)) };
    },
  },
];
