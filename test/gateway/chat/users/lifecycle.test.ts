/**
 * Finding, deactivating and reactivating users, and reading presence, on both engines, as the Python bindings call
 * them: get_user_by_email (GET /users/{email}), deactivate_user_by_id (DELETE /users/{id}), reactivate_user_by_id
 * (POST /users/{id}/reactivate), DELETE /users/me, get_user_presence (GET /users/{email}/presence) and
 * get_realm_presence (GET /realm/presence).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { api, createUser, createUserWithRole, ENGINES, eventQueue, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("user lifecycle on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };
  let admin: Credentials & { id: number };
  let ownerId: number;

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
    admin = await createUserWithRole(server, "admin@example.com", ROLE.administrator);
    ownerId = (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id;
  });
  afterAll(async () => server?.close());

  it("finds a user by e-mail, in any case, and refuses an unknown address", async () => {
    const found = await api(server, "GET", "/users/BEN@example.com", { as: ann, template: "/users/{email}" });
    expect(found.status).toBe(200);
    expect(found.body.user).toMatchObject({ user_id: ben.id, full_name: "Ben" });
    const unknown = await api(server, "GET", "/users/nobody@example.com", { as: ann, template: "/users/{email}" });
    expect([unknown.status, unknown.body.msg]).toEqual([400, "No such user"]);
  });

  it("lets administrators deactivate and reactivate; the account stops and starts authenticating; the realm hears it", async () => {
    const refused = await api(server, "DELETE", `/users/${ben.id}`, { as: ann, template: "/users/{user_id}" });
    expect([refused.status, refused.body.msg]).toEqual([400, "Insufficient permission"]);
    const queue = await eventQueue(server, ann, ["realm_user"]);
    expect((await api(server, "DELETE", `/users/${ben.id}`, { as: admin, template: "/users/{user_id}" })).status).toBe(200);
    const denied = await api(server, "GET", "/users/me", { as: ben });
    expect([denied.status, denied.body.code, denied.body.msg]).toEqual([401, "USER_DEACTIVATED", "Account is deactivated"]);
    const twice = await api(server, "DELETE", `/users/${ben.id}`, { as: admin, template: "/users/{user_id}" });
    expect([twice.status, twice.body.msg]).toEqual([400, "User is deactivated"]);
    expect((await api(server, "POST", `/users/${ben.id}/reactivate`, { as: admin, template: "/users/{user_id}/reactivate" })).status).toBe(200);
    expect((await api(server, "GET", "/users/me", { as: ben })).status).toBe(200);
    const changes = (await queue.events()).map((e) => e.person);
    expect(changes).toEqual([{ user_id: ben.id, is_active: false }, { user_id: ben.id, is_active: true }]);
  });

  it("drops a deactivated user's event queues: the parked long-poll hears BAD_EVENT_QUEUE_ID, the next call USER_DEACTIVATED", async () => {
    const carl = await createUser(server, "carl@example.com", "Carl");
    const queueId = (await api(server, "POST", "/register", { as: carl, params: { event_types: ["message"] } })).body.queue_id as string;
    const parked = api(server, "GET", "/events", { as: carl, params: { queue_id: queueId, last_event_id: -1 } });
    await new Promise((r) => setTimeout(r, 300)); // the poll is parked
    expect((await api(server, "DELETE", `/users/${carl.id}`, { as: admin, template: "/users/{user_id}" })).status).toBe(200);
    const answered = await parked;
    expect([answered.status, answered.body.code, answered.body.queue_id]).toEqual([400, "BAD_EVENT_QUEUE_ID", queueId]);
    const again = await api(server, "GET", "/events", { as: carl, params: { queue_id: queueId, last_event_id: -1, dont_block: true } });
    expect([again.status, again.body.code]).toEqual([401, "USER_DEACTIVATED"]);
    // Reactivated, the old queue is still gone.
    expect((await api(server, "POST", `/users/${carl.id}/reactivate`, { as: admin, template: "/users/{user_id}/reactivate" })).status).toBe(200);
    const gone = await api(server, "GET", "/events", { as: carl, params: { queue_id: queueId, last_event_id: -1, dont_block: true } });
    expect([gone.status, gone.body.code]).toEqual([400, "BAD_EVENT_QUEUE_ID"]);
  });

  it("tells those who see a channel's subscribers that a deactivated user left and a reactivated one is back", async () => {
    await api(server, "POST", "/users/me/subscriptions", { as: ann, params: { subscriptions: [{ name: "lobby" }], principals: [ann.id, ben.id] } });
    const queue = await eventQueue(server, ann, ["subscription"]);
    await api(server, "DELETE", `/users/${ben.id}`, { as: admin, template: "/users/{user_id}" });
    await api(server, "POST", `/users/${ben.id}/reactivate`, { as: admin, template: "/users/{user_id}/reactivate" });
    const events = (await queue.events()).map(({ op, user_ids, stream_ids }) => ({ op, user_ids, streams: stream_ids.length }));
    expect(events).toEqual([
      { op: "peer_remove", user_ids: [ben.id], streams: 1 },
      { op: "peer_add", user_ids: [ben.id], streams: 1 },
    ]);
  });

  it("keeps the owner rules: only owners deactivate owners, and the last owner cannot leave", async () => {
    const byAdmin = await api(server, "DELETE", `/users/${ownerId}`, { as: admin, template: "/users/{user_id}" });
    expect([byAdmin.status, byAdmin.body.msg]).toEqual([400, "Must be an organization owner"]);
    const byOwner = await api(server, "DELETE", `/users/${ownerId}`, { as: server.owner, template: "/users/{user_id}" });
    expect([byOwner.status, byOwner.body.msg]).toEqual([400, "Cannot deactivate the only organization owner"]);
    const own = await api(server, "DELETE", "/users/me", { as: server.owner });
    expect(own.status).toBe(400);
    expect(own.body).toMatchObject({ code: "CANNOT_DEACTIVATE_LAST_USER", is_last_owner: true, entity: "organization owner" });
  });

  it("lets a member deactivate their own account", async () => {
    const leaver = await createUser(server, "leaver@example.com", "Leaver");
    expect((await api(server, "DELETE", "/users/me", { as: leaver })).status).toBe(200);
    expect((await api(server, "GET", "/users/me", { as: leaver })).status).toBe(401);
  });

  it("reads one user's presence by e-mail or id, and the realm's in the legacy format", async () => {
    await api(server, "POST", "/users/me/presence", { as: ann, params: { status: "active" } });
    const none = await api(server, "GET", `/users/${ben.email}/presence`, { as: ann, template: "/users/{user_id_or_email}/presence" });
    expect([none.status, none.body.msg]).toEqual([400, `No presence data for ${ben.email}`]);
    for (const ref of [ann.email, String(ann.id)]) {
      const one = await api(server, "GET", `/users/${ref}/presence`, { as: ben, template: "/users/{user_id_or_email}/presence" });
      expect(one.status).toBe(200);
      expect(one.body.presence.aggregated).toEqual({ status: "active", timestamp: expect.any(Number) });
      expect(one.body.presence.website).toEqual(one.body.presence.aggregated);
    }
    const realm = await api(server, "GET", "/realm/presence", { as: ben });
    expect(realm.status).toBe(200);
    expect(realm.body.presences[ann.email].aggregated).toMatchObject({ status: "active" });
    expect(realm.body.server_timestamp).toEqual(expect.any(Number));
  });
});
