/**
 * The channel permission matrix: every role × every kind of channel × the everyday actions, against a table
 * written from Zulip's rules (zerver/lib/streams.py: metadata and content access, can_add_subscribers_group,
 * can_remove_subscribers_group, access_stream_for_send_message, can_access_stream_history; guests may not use
 * POST /users/me/subscriptions at all), not from running Chorus. One server per engine, many assertions.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { api, createUserWithRole, ENGINES, eventQueue, setRealmSettings, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

type User = Credentials & { id: number };

const ROLES = { owner: ROLE.owner, administrator: ROLE.administrator, moderator: ROLE.moderator, member: ROLE.member, guest: ROLE.guest } as const;
type Role = keyof typeof ROLES;

/** How each kind of channel is created. */
const KINDS = {
  public: {},
  "private, protected history": { invite_only: true, history_public_to_subscribers: false },
  "private, shared history": { invite_only: true, history_public_to_subscribers: true },
  "web-public": { is_web_public: true },
} as const;
type Kind = keyof typeof KINDS;

/**
 * Expected outcomes per kind and action, for [owner, administrator, moderator, member, guest]. The first six
 * actions are taken while not subscribed; the last two once the channel's creator has added the user.
 */
const Y = true;
const N = false;
/** A private channel with protected history: unsubscribed, only administrators reach it (to unsubscribe others). */
const PRIVATE = {
  "listed in GET /streams": [N, N, N, N, N],
  "reads earlier messages": [N, N, N, N, N],
  "sends a message": [N, N, N, N, N],
  "subscribes another user": [N, N, N, N, N],
  "unsubscribes another user": [Y, Y, N, N, N],
  "subscribes self": [N, N, N, N, N],
  "added: reads earlier messages": [N, N, N, N, N],
  "added: sends a message": [Y, Y, Y, Y, Y],
};
const EXPECTED: Record<Kind, Record<string, boolean[]>> = {
  public: {
    "listed in GET /streams": [Y, Y, Y, Y, N],
    "reads earlier messages": [Y, Y, Y, Y, N],
    "sends a message": [Y, Y, Y, Y, N],
    "subscribes another user": [Y, Y, Y, Y, N],
    "unsubscribes another user": [Y, Y, N, N, N],
    "subscribes self": [Y, Y, Y, Y, N],
    "added: reads earlier messages": [Y, Y, Y, Y, Y],
    "added: sends a message": [Y, Y, Y, Y, Y],
  },
  "private, protected history": PRIVATE,
  // Shared history: the one difference, what a new subscriber finds there.
  "private, shared history": { ...PRIVATE, "added: reads earlier messages": [Y, Y, Y, Y, Y] },
  "web-public": {
    // GET /streams lists web-public channels to guests only with include_web_public.
    "listed in GET /streams": [Y, Y, Y, Y, N],
    "reads earlier messages": [Y, Y, Y, Y, Y],
    "sends a message": [Y, Y, Y, Y, Y],
    "subscribes another user": [Y, Y, Y, Y, N],
    "unsubscribes another user": [Y, Y, N, N, N],
    "subscribes self": [Y, Y, Y, Y, N],
    "added: reads earlier messages": [Y, Y, Y, Y, Y],
    "added: sends a message": [Y, Y, Y, Y, Y],
  },
};

describe.each(ENGINES)("channel permissions on %s", (engine) => {
  let server: TestServer;
  const creator = () => server.owner;

  const succeeded = (res: { status: number }) => {
    expect([200, 400]).toContain(res.status); // a refusal is Zulip's error envelope (checked by api()), never a 500
    return res.status === 200;
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    await setRealmSettings(server, { realm_enable_spectator_access: true });
  });
  afterAll(async () => server?.close());

  it("matches Zulip's rules for every role, channel kind and action", async () => {
    const roles = Object.keys(ROLES) as Role[];
    const actors = new Map<Role, { user: User; target: User; victim: User }>();
    for (const role of roles) {
      actors.set(role, {
        user: await createUserWithRole(server, `${role}@example.com`, ROLES[role]),
        target: await createUserWithRole(server, `${role}-target@example.com`, ROLE.member),
        victim: await createUserWithRole(server, `${role}-victim@example.com`, ROLE.member),
      });
    }
    const victims = roles.map((r) => actors.get(r)!.victim.id);
    const earlier = new Map<Kind, number>();
    for (const [kind, settings] of Object.entries(KINDS) as Array<[Kind, object]>) {
      const name = kind;
      const created = await api(server, "POST", "/users/me/subscriptions", { as: creator(), params: { subscriptions: [{ name }], ...settings } });
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      expect((await api(server, "POST", "/users/me/subscriptions", { as: creator(), params: { subscriptions: [{ name }], principals: victims } })).status).toBe(200);
      const sent = await api(server, "POST", "/messages", { as: creator(), params: { type: "stream", to: name, topic: "before", content: "earlier" } });
      earlier.set(kind, sent.body.id);
    }

    const actual: Record<string, Record<string, boolean[]>> = {};
    for (const kind of Object.keys(KINDS) as Kind[]) {
      const outcomes: Record<string, boolean[]> = {};
      const record = (action: string, value: boolean) => (outcomes[action] ??= []).push(value);
      for (const role of roles) {
        const { user, target, victim } = actors.get(role)!;
        const as = user;
        const readsEarlier = async () => {
          const res = await api(server, "GET", "/messages", { as, params: { anchor: "newest", num_before: 50, num_after: 0, narrow: [{ operator: "channel", operand: kind }] } });
          return succeeded(res) && res.body.messages.some((m: any) => m.id === earlier.get(kind));
        };
        const sends = async () => succeeded(await api(server, "POST", "/messages", { as, params: { type: "stream", to: kind, topic: "t", content: `from ${role}` } }));
        const subscribe = async (by: Credentials, principals?: number[]) =>
          succeeded(await api(server, "POST", "/users/me/subscriptions", { as: by, params: { subscriptions: [{ name: kind }], ...(principals ? { principals } : {}) } }));

        const streams = (await api(server, "GET", "/streams", { as })).body.streams;
        record("listed in GET /streams", streams.some((s: any) => s.name === kind));
        record("reads earlier messages", await readsEarlier());
        record("sends a message", await sends());
        record("subscribes another user", await subscribe(as, [target.id]));
        record("unsubscribes another user", succeeded(await api(server, "DELETE", "/users/me/subscriptions", { as, params: { subscriptions: [kind], principals: [victim.id] } })));
        record("subscribes self", await subscribe(as));
        expect(await subscribe(creator(), [user.id])).toBe(true);
        record("added: reads earlier messages", await readsEarlier());
        record("added: sends a message", await sends());
      }
      actual[kind] = outcomes;
    }
    expect(actual).toEqual(EXPECTED);
  });
});

/**
 * Zulip's can_access_all_users_group: set to role:members, a guest sees only themself, the subscribers of their
 * channels, their direct-message partners and bots; everyone else is an "Unknown user" placeholder (or left out
 * for a client with the user_list_incomplete capability), and GET /users/{id} refuses them.
 */
describe.each(ENGINES)("user access for guests on %s", (engine) => {
  let server: TestServer;
  afterAll(async () => server?.close());

  it("hides users a guest shares nothing with, until the guest shares a channel or a conversation with them", async () => {
    server = await startTestServer(engine);
    const owner = server.owner;
    const guest = await createUserWithRole(server, "visitor@example.com", ROLE.guest, "Visitor");
    const host = await createUserWithRole(server, "host@example.com", ROLE.member, "Host");
    const stranger = await createUserWithRole(server, "stranger@example.com", ROLE.member, "Stranger");
    const groups = new Map((await server.node.store.db.selectFrom("user_groups").select(["id", "name"]).where("is_system_group", "=", true).execute()).map((g) => [g.name, g.id]));
    expect((await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "lobby" }], principals: [guest.id, host.id] } })).status).toBe(200);

    const members = async (as: Credentials) => (await api(server, "GET", "/users", { as })).body.members as any[];
    const nameOf = async (as: Credentials, id: number) => (await members(as)).find((m) => m.user_id === id)?.full_name;
    // By default (role:everyone) the guest sees everybody.
    expect(await nameOf(guest, stranger.id)).toBe("Stranger");

    const changed = await api(server, "PATCH", "/realm", { as: owner, params: { can_access_all_users_group: { new: groups.get("role:members") } }, validate: false });
    expect(changed.status, JSON.stringify(changed.body)).toBe(200);
    expect(await nameOf(guest, host.id)).toBe("Host");
    const hidden = (await members(guest)).find((m) => m.user_id === stranger.id);
    expect(hidden).toMatchObject({ full_name: "Unknown user", delivery_email: null, is_bot: false, role: ROLE.member });
    expect(hidden.email).not.toContain("stranger");
    expect(await nameOf(host, stranger.id)).toBe("Stranger");
    const refused = await api(server, "GET", `/users/${stranger.id}`, { as: guest, template: "/users/{user_id}" });
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ result: "error", msg: "Insufficient permission" });

    const register = async (capabilities: Record<string, boolean>) =>
      (await api(server, "POST", "/register", { as: guest, params: { event_types: ["realm_user"], client_capabilities: capabilities } })).body.realm_users as any[];
    expect((await register({})).find((u) => u.user_id === stranger.id)?.full_name).toBe("Unknown user");
    const incomplete = await register({ user_list_incomplete: true });
    expect(incomplete.map((u) => u.user_id)).toEqual(expect.arrayContaining([guest.id, host.id]));
    expect(incomplete.some((u) => u.user_id === stranger.id)).toBe(false);

    // Nor their presence: not in a presence fetch, not in register, not as events.
    const queue = await eventQueue(server, guest, ["realm_user", "presence"]);
    for (const who of [stranger, host]) expect((await api(server, "POST", "/users/me/presence", { as: who, params: { status: "active" } })).status).toBe(200);
    const seen = (await api(server, "POST", "/users/me/presence", { as: guest, params: { status: "active", slim_presence: true } })).body.presences;
    expect(Object.keys(seen)).toContain(String(host.id));
    expect(Object.keys(seen)).not.toContain(String(stranger.id));
    const registered = (await api(server, "POST", "/register", { as: guest, params: { event_types: ["presence"], slim_presence: true } })).body.presences;
    expect(Object.keys(registered)).toContain(String(host.id));
    expect(Object.keys(registered)).not.toContain(String(stranger.id));
    const legacy = (await api(server, "POST", "/users/me/presence", { as: guest, params: { status: "active" } })).body.presences;
    expect(Object.keys(legacy)).toContain("host@example.com");
    expect(Object.keys(legacy)).not.toContain("stranger@example.com");
    const pinged = (await queue.events()).filter((e) => e.type === "presence").map((e) => e.user_id);
    expect(pinged).toContain(host.id);
    expect(pinged).not.toContain(stranger.id);

    // realm_user events about someone the guest may not see are not the guest's.
    for (const [who, name] of [[stranger, "Stranger Renamed"], [host, "Host Renamed"]] as const) {
      expect((await api(server, "PATCH", "/settings", { as: who, params: { full_name: name } })).status).toBe(200);
    }
    const renamed = (await queue.events()).filter((e) => e.type === "realm_user").map((e) => e.person.user_id);
    expect(renamed).toContain(host.id);
    expect(renamed).not.toContain(stranger.id);

    // A direct message makes the two visible to each other.
    const dm = await api(server, "POST", "/messages", { as: stranger, params: { type: "direct", to: JSON.stringify([guest.id]), content: "hello" } });
    expect(dm.status, JSON.stringify(dm.body)).toBe(200);
    expect((await api(server, "GET", `/users/${stranger.id}`, { as: guest, template: "/users/{user_id}" })).body.user.full_name).toBe("Stranger Renamed");
  });
});
