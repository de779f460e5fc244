/** POST /users/me/presence on both engines: modern and legacy formats, incremental fetches, events, write-behind. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("presence on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };
  let cat: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
    cat = await createUser(server, "cat@example.com", "Cat");
  });
  afterAll(async () => server?.close());

  const ping = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/users/me/presence", { as, params });

  it("answers in the legacy format by e-mail, and the modern one by user id", async () => {
    const legacy = await ping(ann, { status: "active" });
    expect(legacy.status).toBe(200);
    expect(legacy.body.presences[ann.email].aggregated).toMatchObject({ status: "active", timestamp: expect.any(Number) });
    expect(legacy.body.presence_last_update_id).toBeGreaterThan(0);
    const modern = await ping(ann, { status: "idle", last_update_id: -1 });
    const mine = modern.body.presences[String(ann.id)];
    expect(mine).toEqual({ active_timestamp: expect.any(Number), idle_timestamp: expect.any(Number) });
    expect(mine.idle_timestamp).toBeGreaterThanOrEqual(mine.active_timestamp);
    expect(modern.body.zephyr_mirror_active).toBe(false);
  });

  it("returns only what changed after last_update_id", async () => {
    const first = await ping(ann, { status: "active", last_update_id: -1 });
    await ping(ben, { status: "active", ping_only: true });
    const next = await ping(ann, { status: "active", last_update_id: first.body.presence_last_update_id });
    expect(Object.keys(next.body.presences).sort()).toEqual([String(ann.id), String(ben.id)].sort());
    const again = await ping(ann, { status: "active", last_update_id: next.body.presence_last_update_id });
    expect(Object.keys(again.body.presences)).toEqual([String(ann.id)]);
  });

  it("answers ping_only with the update id alone (-1 when none was passed and no data returned)", async () => {
    const res = await ping(ben, { status: "idle", ping_only: true });
    expect(res.body.presences).toBeUndefined();
    expect(res.body.server_timestamp).toBeUndefined();
    expect(res.body.presence_last_update_id).toBe(-1);
    const withId = await ping(ben, { status: "idle", ping_only: true, last_update_id: 1 });
    expect(withId.body.presence_last_update_id).toBeGreaterThan(1);
  });

  it("tells the realm when a user comes online, in each queue's format", async () => {
    const modernQ = (await api(server, "POST", "/register", { as: ann, params: { event_types: ["presence"], client_capabilities: { simplified_presence_events: true } } })).body.queue_id;
    const legacyQ = (await api(server, "POST", "/register", { as: ann, params: { event_types: ["presence"] } })).body.queue_id;
    await ping(cat, { status: "active" });
    await ping(cat, { status: "active" }); // still online: no second event
    const poll = (q: string) => api(server, "GET", "/events", { as: ann, params: { queue_id: q, last_event_id: -1, dont_block: true } });
    const modern = (await poll(modernQ)).body.events;
    const legacy = (await poll(legacyQ)).body.events;
    expect(modern).toEqual([{ type: "presence", presences: { [cat.id]: { active_timestamp: expect.any(Number), idle_timestamp: expect.any(Number) } }, id: expect.any(Number) }]);
    expect(legacy).toHaveLength(1);
    expect(legacy[0]).toMatchObject({ type: "presence", user_id: cat.id, email: cat.email, presence: { [Object.keys(legacy[0].presence)[0]!]: { status: "active" } } });
  });

  it("is in the initial state and is written behind to the store", async () => {
    const state = await api(server, "POST", "/register", { as: ben, params: { fetch_event_types: ["presence"], event_types: ["message"], slim_presence: true } });
    expect(Object.keys(state.body.presences)).toEqual(expect.arrayContaining([String(ann.id), String(ben.id), String(cat.id)]));
    await new Promise((r) => setTimeout(r, 1500));
    const rows = await server.node.store.db.selectFrom("presence").select("user_id").execute();
    expect(rows.map((r) => r.user_id).sort()).toEqual([ann.id, ben.id, cat.id].sort());
  });

  it("refuses bots and bad input", async () => {
    const bot = await createUser(server, "bot@example.com", "Bot");
    await server.node.store.db.updateTable("users").set({ is_bot: true, bot_type: 1 }).where("id", "=", bot.id).execute();
    expect((await ping(bot, { status: "active" })).body.msg).toBe("This endpoint does not accept bot requests.");
    expect((await ping(ann, { status: "away" })).status).toBe(400);
    expect((await ping(ann, {})).body.code).toBe("REQUEST_VARIABLE_MISSING");
    expect((await ping(ann, { status: "active", last_update_id: -2 })).status).toBe(400);
  });
});
