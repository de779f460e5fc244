/**
 * presence:<realm id>: who is online. Pings are answered from memory and written behind, in batches, about once a
 * second: presence is soft state (a crash loses at most the last second of pings, which the next ping restores).
 * A user who comes back online (no ping within the offline threshold) is announced to the realm's users, in
 * realms of up to 100 users, as Zulip does.
 */
import type { Actor, ActorContext } from "../../../runtime/actor.ts";
import type { ActorDeps } from "../../deps.ts";
import { dispatch, type Handlers, type MessageOf, type Op } from "../../../runtime/protocol.ts";
import type { Ping, PresenceProtocol, PresenceReply } from "./presence.protocol.ts";
import { User } from "./user.protocol.ts";

export const OFFLINE_THRESHOLD_SECONDS = 200;
const ANNOUNCE_MAX_REALM_USERS = 100;
const WRITE_BEHIND_MS = 1000;

interface Entry {
  userId: number;
  email: string;
  activeTime: number | null;
  connectedTime: number;
  client: string;
  updateId: number;
}

/** What the write-behind timer tells the actor (private to it). */
type PresenceTimer = { flush: Op<{ op: "flush" }, void> };

/** Zulip's modern format: when the user was last active, and last connected at all. */
export function modernPresence(e: Entry) {
  return { active_timestamp: e.activeTime ?? 0, idle_timestamp: e.connectedTime };
}

/** Zulip's legacy format: per client, plus an aggregate. */
export function legacyPresence(e: Entry) {
  const status: "active" | "idle" = e.activeTime !== null && e.activeTime >= e.connectedTime - OFFLINE_THRESHOLD_SECONDS ? "active" : "idle";
  const timestamp = e.connectedTime;
  return { aggregated: { client: e.client, status, timestamp }, [e.client]: { client: e.client, status, timestamp, pushable: false } };
}

export class PresenceActor implements Actor {
  private readonly realmId: number;
  private readonly entries = new Map<number, Entry>();
  private readonly dirty = new Set<number>();
  private lastUpdateId = 0;
  private flushScheduled = false;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.realmId = Number(ctx.key);
  }

  async activate(): Promise<void> {
    const rows = await this.deps.store.db
      .selectFrom("presence")
      .innerJoin("users", "users.id", "presence.user_id")
      .select(["presence.user_id", "users.email", "presence.last_active_time", "presence.last_connected_time", "presence.client", "presence.last_update_id"])
      .where("presence.realm_id", "=", this.realmId)
      .execute();
    for (const r of rows) {
      this.entries.set(r.user_id, {
        userId: r.user_id,
        email: r.email,
        activeTime: r.last_active_time === null ? null : Number(r.last_active_time),
        connectedTime: Number(r.last_connected_time),
        client: r.client,
        updateId: Number(r.last_update_id),
      });
      this.lastUpdateId = Math.max(this.lastUpdateId, Number(r.last_update_id));
    }
  }

  canPassivate(): boolean {
    return this.dirty.size === 0;
  }

  async deactivate(): Promise<void> {
    await this.flush().catch(() => {}); // best effort: soft state
  }

  /** The implementation of presence.protocol.ts, and of the timer's own message. */
  private static readonly handlers: Handlers<PresenceProtocol & PresenceTimer, PresenceActor> = {
    ping: (presence, msg) => presence.ping(msg),
    state: (presence, msg) => presence.state(msg.modern, null, msg.historyLimitDays),
    userPresence: (presence, msg) => {
      const e = presence.entries.get(msg.userId);
      return e ? { status: legacyPresence(e).aggregated.status, timestamp: e.connectedTime } : null;
    },
    flush: (presence) => {
      presence.flushScheduled = false;
      return presence.flush();
    },
  };

  receive(msg: MessageOf<PresenceProtocol & PresenceTimer>): unknown {
    return dispatch(PresenceActor.handlers, this, msg);
  }

  private async ping(msg: Ping): Promise<PresenceReply> {
    const now = Math.floor(Date.now() / 1000);
    const previous = this.entries.get(msg.userId);
    const cameOnline = !previous || previous.connectedTime < now - OFFLINE_THRESHOLD_SECONDS;
    const entry: Entry = {
      userId: msg.userId,
      email: msg.email,
      activeTime: msg.status === "active" ? now : (previous?.activeTime ?? null),
      connectedTime: now,
      client: msg.client,
      updateId: ++this.lastUpdateId,
    };
    this.entries.set(msg.userId, entry);
    this.dirty.add(msg.userId);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      this.ctx.schedule(WRITE_BEHIND_MS, { op: "flush" } satisfies MessageOf<PresenceTimer>);
    }
    if (cameOnline) await this.announce(entry);
    if (!msg.fetch) return { presence_last_update_id: this.lastUpdateId };
    return this.state(msg.modern, msg.lastUpdateId, msg.historyLimitDays);
  }

  private state(modern: boolean, lastUpdateId: number | null, historyLimitDays: number): PresenceReply {
    const since = Math.floor(Date.now() / 1000) - historyLimitDays * 86400;
    const incremental = lastUpdateId !== null && lastUpdateId > 0;
    const presences: Record<string, unknown> = {};
    for (const e of this.entries.values()) {
      if (incremental ? e.updateId <= lastUpdateId! : e.connectedTime < since) continue;
      if (modern) presences[e.userId] = modernPresence(e);
      else presences[e.email] = legacyPresence(e);
    }
    return { presence_last_update_id: Math.max(this.lastUpdateId, lastUpdateId ?? -1), server_timestamp: Date.now() / 1000, presences };
  }

  private async announce(e: Entry): Promise<void> {
    const users = await this.deps.store.db
      .selectFrom("users")
      .select("id")
      .where("realm_id", "=", this.realmId)
      .where("is_active", "=", true)
      .limit(ANNOUNCE_MAX_REALM_USERS + 1)
      .execute();
    if (users.length > ANNOUNCE_MAX_REALM_USERS) return;
    const event = {
      type: "presence",
      user_id: e.userId,
      email: e.email,
      server_timestamp: Date.now() / 1000,
      // Each queue picks its format (user actor): modern for clients with simplified_presence_events.
      modern: modernPresence(e),
      legacy: legacyPresence(e),
    };
    await this.deps.system().broadcast(User, users.filter((u) => u.id !== e.userId).map((u) => u.id), { op: "deliverEvent", event });
  }

  private async flush(): Promise<void> {
    if (!this.dirty.size) return;
    const rows = [...this.dirty].map((id) => this.entries.get(id)!);
    this.dirty.clear();
    try {
      await this.deps.store.write(this.ctx.fence(), async (trx) => {
        await trx
          .insertInto("presence")
          .values(
            rows.map((e) => ({
              user_id: e.userId,
              realm_id: this.realmId,
              last_active_time: e.activeTime,
              last_connected_time: e.connectedTime,
              client: e.client,
              last_update_id: e.updateId,
            })),
          )
          .onConflict((c) =>
            c.column("user_id").doUpdateSet((eb) => ({
              last_active_time: eb.ref("excluded.last_active_time"),
              last_connected_time: eb.ref("excluded.last_connected_time"),
              client: eb.ref("excluded.client"),
              last_update_id: eb.ref("excluded.last_update_id"),
            })),
          )
          .execute();
      });
    } catch (err) {
      for (const e of rows) this.dirty.add(e.userId); // try again with the next batch
      throw err;
    }
  }
}
