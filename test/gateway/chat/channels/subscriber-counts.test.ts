/**
 * Channels' subscriber_count on both engines: kept by triggers on `subscriptions` (migration
 * 2026-11-28T0130-channel-subscriber-counts) through subscribing several users at once, unsubscribing, coming back
 * (the row reactivated) and rows written by another process; shown alike by GET /streams and POST /register's
 * streams, subscriptions and never_subscribed; and computed by the migration for a store that already holds
 * subscriptions.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { migrations } from "../../../../actors/migrations/index.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("subscriber counts on %s", (engine) => {
  let server: TestServer;
  let ann: User;
  let ben: User;
  let cid: User;
  let outsider: User;

  const ok = (res: { status: number; body: any }) => {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  };
  const subscribe = async (as: User, names: string[], principals: number[]) =>
    ok(await api(server, "POST", "/users/me/subscriptions", { as, params: { subscriptions: names.map((name) => ({ name })), principals } }));
  /** Every place a channel's count shows, as `outsider` (never subscribed) and `ann` (subscribed) see it. */
  const counts = async (name: string) => {
    const streams = ok(await api(server, "GET", "/streams", { as: ann })).streams as any[];
    const byOutsider = ok(await api(server, "POST", "/register", { as: outsider, params: { fetch_event_types: ["stream", "subscription"] } }));
    const byAnn = ok(await api(server, "POST", "/register", { as: ann, params: { fetch_event_types: ["subscription"] } }));
    const find = (list: any[]) => list.find((s) => s.name === name)?.subscriber_count;
    return {
      streams: find(streams),
      registerStreams: find(byOutsider.streams),
      neverSubscribed: find(byOutsider.never_subscribed),
      subscription: find([...byAnn.subscriptions, ...byAnn.unsubscribed]),
    };
  };
  const everywhere = (n: number) => ({ streams: n, registerStreams: n, neverSubscribed: n, subscription: n });

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
    cid = await createUser(server, "cid@example.com", "Cid");
    outsider = await createUser(server, "outsider@example.com", "Out");
  });
  afterAll(async () => server?.close());

  it("counts subscribing several at once, unsubscribing and coming back", async () => {
    await subscribe(ann, ["kitchen", "garden"], [ann.id, ben.id, cid.id]);
    expect(await counts("kitchen")).toEqual(everywhere(3));
    ok(await api(server, "DELETE", "/users/me/subscriptions", { as: ben, params: { subscriptions: ["kitchen"] } }));
    expect(await counts("kitchen")).toEqual(everywhere(2));
    expect((await counts("garden")).streams).toBe(3);
    // Ben's row comes back (reactivated, not inserted), Cid's is already active: one more, not two.
    await subscribe(ann, ["kitchen"], [ben.id, cid.id]);
    expect(await counts("kitchen")).toEqual(everywhere(3));
  });

  it("counts rows written by another process", async () => {
    const db = server.node.store.db;
    await subscribe(ann, ["attic"], [ann.id]);
    const { id } = await db.selectFrom("streams").select("id").where("name", "=", "attic").executeTakeFirstOrThrow();
    await sql`insert into subscriptions (user_id, stream_id, color) values (${ben.id}, ${id}, '#76ce90'), (${cid.id}, ${id}, '#76ce90')`.execute(db);
    expect((await counts("attic")).streams).toBe(3);
    await sql`update subscriptions set active = false where stream_id = ${id} and user_id <> ${ann.id}`.execute(db);
    expect((await counts("attic")).streams).toBe(1);
    await sql`delete from subscriptions where stream_id = ${id} and user_id = ${ben.id}`.execute(db);
    expect((await counts("attic")).streams).toBe(1);
  });

  it("computes the counts of a store that already holds subscriptions", async () => {
    const db = server.node.store.db;
    // The store as before the migration: no triggers, no counts (kysely runs migrations in name order only: forgetting
    // it and the ones after it, which run again as they are, lets it run again).
    for (const trigger of ["subscriptions_count_insert", "subscriptions_count_delete", "subscriptions_count_update"]) {
      await sql`drop trigger ${sql.id(trigger)} on subscriptions`.execute(db);
    }
    await sql`update streams set subscriber_count = 0`.execute(db);
    await sql`delete from kysely_migration where name >= '2026-11-28T0130-channel-subscriber-counts'`.execute(db);
    await server.node.store.migrate(migrations);
    expect(await counts("kitchen")).toEqual(everywhere(3));
    expect((await counts("garden")).streams).toBe(3);
    await subscribe(ann, ["garden"], [outsider.id]);
    expect((await counts("garden")).streams).toBe(4);
  });
});
