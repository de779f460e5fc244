/**
 * The calls message tests make again and again, bound to one test server: send, fetch, edit, register a queue
 * and drain it, change realm settings in the store. Every call goes through `api()`, so every response is checked
 * against Zulip's OpenAPI description.
 */
import { expect } from "vitest";
import { api, type Credentials, type TestServer } from "./server.ts";

export type User = Credentials & { id: number };

/** Notification Bot's e-mail: the sender of move, resolve and report notices. */
export const NOTIFICATION_BOT = "notification-bot@zulip.com";

/**
 * Poll until `check` returns something truthy: Notification Bot's notices are posted just after the reply, and
 * scheduled messages on the scheduler's timer.
 */
export async function eventually<T>(check: () => Promise<T>, ms = 8000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Wait until `check` holds (checked every 20 ms); throws after `ms`. */
export async function until(check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("timed out waiting");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The ids of a GET /messages answer, in order. */
export const ids = (res: { body: any }): number[] => res.body.messages.map((m: any) => m.id);

/**
 * What a GET /messages answer says of its window: the ids, the anchor and its found_* flags, and each message's
 * flags. Two ways of reading one narrow (a one-statement page and the general path) must agree on all of it.
 */
export const windowShape = (res: { body: any }) => ({
  ids: ids(res),
  found: [res.body.anchor, res.body.found_anchor, res.body.found_oldest, res.body.found_newest],
  flags: res.body.messages.map((m: { flags: string[] }) => m.flags),
});

export function messageApi(server: () => TestServer) {
  const send = (as: Credentials, params: Record<string, unknown>) => api(server(), "POST", "/messages", { as, params });
  return {
    send,
    /**
     * Subscribe (others too, with `principals` in `params`) to channels, created if new; the ids of every channel
     * the caller can see, by name.
     */
    subscribe: async (as: Credentials, names: string[], params: Record<string, unknown> = {}): Promise<Record<string, number>> => {
      const res = await api(server(), "POST", "/users/me/subscriptions", { as, params: { subscriptions: names.map((name) => ({ name })), ...params } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const streams = (await api(server(), "GET", "/streams", { as })).body.streams as Array<{ name: string; stream_id: number }>;
      return Object.fromEntries(streams.map((s) => [s.name, s.stream_id]));
    },
    /** A channel message that must succeed; its id. */
    toChannel: async (as: Credentials, topic: string, content: string, to = "general") => {
      const res = await send(as, { type: "stream", to, topic, content });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.id as number;
    },
    /** GET /messages, newest 100 in raw markdown unless the params say otherwise. */
    get: (as: Credentials, params: Record<string, unknown>) =>
      api(server(), "GET", "/messages", { as, params: { anchor: "newest", num_before: 100, num_after: 0, apply_markdown: false, ...params } }),
    patch: (as: Credentials, id: number, params: Record<string, unknown>) =>
      api(server(), "PATCH", `/messages/${id}`, { as, params, template: "/messages/{message_id}" }),
    register: async (as: Credentials, types: string[], capabilities: Record<string, boolean> = {}) =>
      (await api(server(), "POST", "/register", { as, params: { event_types: types, client_capabilities: capabilities } })).body.queue_id as string,
    /** Every event in the queue so far, without waiting. */
    events: async (as: Credentials, queue: string) =>
      (await api(server(), "GET", "/events", { as, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events as any[],
    /** Realm settings (`realm_*` keys) written straight to the store, as an administrator's change would leave them. */
    setRealm: async (settings: Record<string, unknown>) => {
      const db = server().node.store.db;
      const realm = await db.selectFrom("realms").select(["id", "settings"]).executeTakeFirstOrThrow();
      await db
        .updateTable("realms")
        .set({ settings: JSON.stringify({ ...(realm.settings as object), ...settings }) })
        .where("id", "=", realm.id)
        .execute();
    },
  };
}
