/**
 * POST /register's channel lists come from a per-realm cache of serialized channel objects
 * (actors/chat/reads/channel-lists.ts, channel_versions): on both engines, the lists equal what the rows say for
 * every kind of viewer (administrator, member, guest, member of a group a private channel opens to; archived
 * channels with and without the capability; with subscribers), and every change the channel objects are made of
 * shows in the next register, whether it went through the API or was written to the store by another process (the
 * triggers, not this worker, tell the cache). Responses are validated against Zulip's schema (test/support).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { streamObjects, visibleStreams } from "../../../../actors/chat/reads/channels.ts";
import { subscriptionsOf } from "../../../../actors/chat/reads/subscriptions.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("channel lists cache on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let ann: User;
  let gus: User;
  let steward: User;
  let keeper: User;
  let stewards: number;

  const ok = (res: { status: number; body: any }) => {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  };
  const subscribe = (as: User, params: Record<string, unknown>) => api(server, "POST", "/users/me/subscriptions", { as, params });
  const streamId = async (name: string) => (await server.node.store.db.selectFrom("streams").select("id").where("name", "=", name).executeTakeFirstOrThrow()).id;
  const patch = (id: number, params: Record<string, unknown>) => api(server, "PATCH", `/streams/${id}`, { as: owner, params, template: "/streams/{stream_id}" });
  const register = async (as: User, params: Record<string, unknown> = {}) =>
    ok(await api(server, "POST", "/register", { as, params: { fetch_event_types: ["stream", "subscription"], ...params } }));
  const names = (list: any[]) => list.map((s) => s.name);

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await server.node.store.db.selectFrom("users").select("id").where("email", "=", server.owner.email).executeTakeFirstOrThrow()).id };
    ann = await createUser(server, "ann@example.com", "Ann");
    gus = await createUserWithRole(server, "gus@example.com", ROLE.guest, "Gus");
    steward = await createUser(server, "steward@example.com", "Steward");
    keeper = await createUser(server, "keeper@example.com", "Keeper");
    stewards = ok(await api(server, "POST", "/user_groups/create", { as: owner, params: { name: "stewards", description: "", members: [steward.id] } })).group_id;
    ok(await subscribe(ann, { subscriptions: [{ name: "kitchen" }, { name: "garden" }], principals: [ann.id, gus.id] }));
    ok(await subscribe(ann, { subscriptions: [{ name: "secret" }], invite_only: true }));
    ok(await subscribe(owner, { subscriptions: [{ name: "vault" }], invite_only: true, can_subscribe_group: stewards }));
    ok(await subscribe(ann, { subscriptions: [{ name: "attic" }, { name: "left" }] }));
    ok(await api(server, "DELETE", "/users/me/subscriptions", { as: ann, params: { subscriptions: ["left"] } }));
    const attic = await streamId("attic");
    ok(await api(server, "DELETE", `/streams/${attic}`, { as: owner, params: { stream_id: attic }, template: "/streams/{stream_id}" }));
  });
  afterAll(async () => server?.close());

  it("lists what the rows say, for every kind of viewer", async () => {
    const db = server.node.store.db;
    for (const who of [owner, ann, gus, steward, keeper]) {
      const user = await db.selectFrom("users").select(["id", "role", "realm_id"]).where("id", "=", who.id).executeTakeFirstOrThrow();
      for (const archived of [false, true]) {
        for (const includeSubscribers of [false, true]) {
          const state = await register(who, { include_subscribers: includeSubscribers, client_capabilities: { archived_channels: archived } });
          // What the lists were made of before the cache, per register from the rows (the oracle).
          const visible = await visibleStreams(db, user, { all: true, archived });
          const subscriptions = await subscriptionsOf(db, user.id, includeSubscribers, true, archived);
          const former = await subscriptionsOf(db, user.id, includeSubscribers, false, archived);
          const joined = new Set([...subscriptions, ...former].map((s) => s.stream_id));
          const seen = new Set(visible.map((s) => s.id));
          const what = `${who.email}, archived ${archived}, subscribers ${includeSubscribers}`;
          expect(state.streams, what).toEqual(streamObjects(visible));
          expect(state.subscriptions, what).toEqual(subscriptions);
          expect(state.unsubscribed, what).toEqual(former.filter((s) => seen.has(s.stream_id)));
          expect(state.never_subscribed, what).toEqual(streamObjects(visible.filter((s) => !joined.has(s.id) && !s.deactivated)));
        }
      }
    }
    // The cases the oracle must have covered: each kind of channel seen by someone and hidden from someone.
    const byAnn = await register(ann, { client_capabilities: { archived_channels: true } });
    expect(names(byAnn.subscriptions)).toEqual(expect.arrayContaining(["kitchen", "secret", "attic"]));
    expect(names(byAnn.unsubscribed)).toEqual(["left"]);
    expect(names(byAnn.streams)).not.toContain("vault");
    expect(names((await register(steward)).never_subscribed)).toContain("vault");
    expect(names((await register(gus)).streams).sort()).toEqual(["garden", "kitchen"]);
    expect(names((await register(owner)).streams)).toEqual(expect.arrayContaining(["secret", "vault"]));
  });

  it("shows a change made through the API in the next register", async () => {
    const kitchen = await streamId("kitchen");
    await register(keeper);
    ok(await patch(kitchen, { new_name: "scullery", description: "Where the **dishes** go" }));
    let state = await register(keeper);
    expect(state.streams.find((s: any) => s.stream_id === kitchen)).toMatchObject({ name: "scullery", rendered_description: expect.stringContaining("<strong>dishes</strong>") });
    ok(await subscribe(ann, { subscriptions: [{ name: "pantry" }] }));
    expect(names((await register(keeper)).never_subscribed)).toContain("pantry");
    // A subscriber more: the count in the channel object.
    const before = (await register(keeper)).streams.find((s: any) => s.name === "pantry").subscriber_count;
    ok(await subscribe(keeper, { subscriptions: [{ name: "pantry" }] }));
    state = await register(keeper);
    expect(state.subscriptions.find((s: any) => s.name === "pantry").subscriber_count).toBe(before + 1);
    const pantry = await streamId("pantry");
    ok(await api(server, "DELETE", `/streams/${pantry}`, { as: owner, params: { stream_id: pantry }, template: "/streams/{stream_id}" }));
    expect(names((await register(keeper)).subscriptions)).not.toContain("pantry");
    expect((await register(keeper, { client_capabilities: { archived_channels: true } })).subscriptions.find((s: any) => s.name === "pantry")).toMatchObject({ is_archived: true });
    // A permission group setting opens the private channel to the keeper; his joining the group opens another.
    const vault = await streamId("vault");
    expect(names((await register(keeper)).streams)).not.toContain("vault");
    ok(await patch(vault, { can_administer_channel_group: { new: { direct_members: [owner.id, keeper.id], direct_subgroups: [] } } }));
    expect((await register(keeper)).streams.find((s: any) => s.stream_id === vault)).toMatchObject({ can_administer_channel_group: { direct_members: [owner.id, keeper.id] } });
    ok(await subscribe(owner, { subscriptions: [{ name: "strongroom" }], invite_only: true, can_subscribe_group: stewards }));
    expect(names((await register(keeper)).never_subscribed)).not.toContain("strongroom");
    ok(await api(server, "POST", `/user_groups/${stewards}/members`, { as: owner, params: { add: [keeper.id] }, template: "/user_groups/{user_group_id}/members" }));
    expect(names((await register(keeper)).never_subscribed)).toContain("strongroom");
  });

  it("shows rows written by another process (the store's triggers tell the cache, not this worker)", async () => {
    const db = server.node.store.db;
    const garden = await streamId("garden");
    await register(ann);
    await sql`update streams set description = 'Written elsewhere', rendered_description = '<p>Written elsewhere</p>' where id = ${garden}`.execute(db);
    expect((await register(ann)).subscriptions.find((s: any) => s.stream_id === garden)).toMatchObject({ description: "Written elsewhere" });
    const realm = (await db.selectFrom("streams").select("realm_id").where("id", "=", garden).executeTakeFirstOrThrow()).realm_id;
    // Its settings (the permission groups every channel object holds) as another channel's.
    await sql`insert into streams (realm_id, name, date_created, settings) select realm_id, 'cellar', 0, settings from streams where id = ${garden}`.execute(db);
    expect(names((await register(ann)).never_subscribed)).toContain("cellar");
    await sql`update streams set deactivated = true where name = 'cellar' and realm_id = ${realm}`.execute(db);
    expect(names((await register(ann)).streams)).not.toContain("cellar");
    // Another worker subscribing: the count (kept on the row by its own trigger) moves the version too.
    const count = (await register(ann)).streams.find((s: any) => s.stream_id === garden).subscriber_count;
    await sql`insert into subscriptions (user_id, stream_id, color) values (${keeper.id}, ${garden}, '#76ce90')`.execute(db);
    expect((await register(ann)).streams.find((s: any) => s.stream_id === garden).subscriber_count).toBe(count + 1);
  });
});
