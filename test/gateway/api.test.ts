/**
 * The first slice of the Zulip API through a real listening server, on both engines: accounts, channels, send,
 * fetch, and the long-poll event queue. Every response is checked against Zulip's OpenAPI description.
 */
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../support/server.ts";

const narrow = (channel: string, topic?: string) => [
  { operator: "channel", operand: channel },
  ...(topic === undefined ? [] : [{ operator: "topic", operand: topic }]),
];

describe.each(ENGINES)("Zulip API on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;
  let alice: Credentials & { id: number };
  let bob: Credentials & { id: number };

  beforeAll(async () => {
    // A short credentials cache (AUTH_CACHE_SECONDS is 30 by default), so that a test can outwait it.
    server = await startTestServer(engine, { heartbeatSeconds: 2, maxBodyBytes: 64 * 1024, authCacheMs: 1000 });
    owner = server.owner;
    alice = await createUser(server, `alice-${engine.length}@example.com`, "Alice");
    bob = await createUser(server, `bob-${engine.length}@example.com`, "Bob");
    const channels = [{ name: "general" }, { name: "random", description: "**Anything**" }];
    const mine = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: channels } });
    expect(mine.status).toBe(200);
    const hers = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: channels, principals: [alice.email] } });
    expect(hers.body.subscribed).toEqual({ [alice.id]: ["general", "random"] });
  });
  afterAll(async () => server?.close());

  describe("accounts and authentication", () => {
    it("serves server_settings without authentication", async () => {
      const res = await api(server, "GET", "/server_settings");
      expect(res.status).toBe(200);
      expect(res.body.zulip_feature_level).toBeGreaterThanOrEqual(400);
      expect(res.body.authentication_methods.password).toBe(true);
      // The organization's icon, as register's realm_icon_url says it: an image URL, never empty (the mobile app
      // resolves "" to the organization's own page and shows a broken image).
      expect(res.body.realm_icon).toMatch(/^https:\/\/secure\.gravatar\.com\/avatar\/[0-9a-f]{32}\?d=identicon$/);
      const state = await api(server, "POST", "/register", { as: server.owner, params: { fetch_event_types: ["realm"] } });
      expect(state.body.realm_icon_url).toBe(res.body.realm_icon);
      expect(state.body.realm_icon_source).toBe("G");
    });

    it("refuses a request without credentials with 401 and the Basic challenge", async () => {
      const res = await api(server, "GET", "/users/me");
      expect(res.status).toBe(401);
      expect(res.body).toMatchObject({ code: "UNAUTHORIZED", msg: "Not logged in: API authentication or user session required" });
      expect(res.headers.get("www-authenticate")).toBe('Basic realm="zulip"');
    });

    it("refuses a wrong key, an unknown user and a malformed header with 401", async () => {
      for (const as of [{ email: owner.email, key: "x".repeat(32) }, { email: "nobody@example.com", key: owner.key }]) {
        const res = await api(server, "GET", "/users/me", { as });
        expect(res.status).toBe(401);
        expect(res.body.msg).toBe("Invalid API key");
      }
      const bad = await fetch(`${server.url}/api/v1/users/me`, { headers: { authorization: "Basic !!!" } });
      expect(bad.status).toBe(401);
      const bearer = await fetch(`${server.url}/api/v1/users/me`, { headers: { authorization: "Bearer abc" } });
      expect(bearer.status).toBe(400);
    });

    it("checks the key again once a cached account's entry expires, when its key changed without a notice", async () => {
      expect((await api(server, "GET", "/users/me", { as: bob })).status).toBe(200); // cached now
      const db = server.node.store.db;
      const { api_key_hash } = await db.selectFrom("users").select("api_key_hash").where("id", "=", bob.id).executeTakeFirstOrThrow();
      // Changed in the store behind this worker's back (as for a worker that missed the credentials notice).
      await db.updateTable("users").set({ api_key_hash: "changed elsewhere" }).where("id", "=", bob.id).execute();
      try {
        await new Promise((r) => setTimeout(r, 1100)); // past the cache's moment (authCacheMs above)
        const res = await api(server, "GET", "/users/me", { as: bob });
        expect(res.status).toBe(401);
        expect(res.body.msg).toBe("Invalid API key");
      } finally {
        await db.updateTable("users").set({ api_key_hash }).where("id", "=", bob.id).execute();
      }
      expect((await api(server, "GET", "/users/me", { as: bob })).status).toBe(200);
    });

    it("refuses a deactivated account", async () => {
      const carol = await createUser(server, `carol-${engine.length}@example.com`);
      await server.node.store.db.updateTable("users").set({ is_active: false }).where("id", "=", carol.id).execute();
      const res = await api(server, "GET", "/users/me", { as: carol });
      expect(res.status).toBe(401);
      expect(res.body.msg).toBe("Account is deactivated");
    });

    it("returns the caller from GET /users/me", async () => {
      const res = await api(server, "GET", "/users/me", { as: alice });
      expect(res.body).toMatchObject({ user_id: alice.id, email: alice.email, full_name: "Alice", role: 400, is_admin: false });
    });

    it("lets only administrators create users, with unique e-mails", async () => {
      const byMember = await api(server, "POST", "/users", { as: alice, params: { email: "x@example.com", password: "p", full_name: "X" } });
      expect(byMember.status).toBe(400);
      const dup = await api(server, "POST", "/users", { as: owner, params: { email: alice.email.toUpperCase(), password: "p", full_name: "A" } });
      expect(dup.status).toBe(400);
      expect(dup.body.msg).toContain("already in use");
      const badEmail = await api(server, "POST", "/users", { as: owner, params: { email: "not-an-email", password: "p", full_name: "A" } });
      expect(badEmail.status).toBe(400);
      const missing = await api(server, "POST", "/users", { as: owner, params: { email: "y@example.com", password: "p" } });
      expect(missing.body).toMatchObject({ code: "REQUEST_VARIABLE_MISSING", msg: "Missing 'full_name' argument" });
    });

    it("gives the existing API key for the right password only", async () => {
      const ok = await api(server, "POST", "/fetch_api_key", { params: { username: alice.email, password: "pw-" + alice.email } });
      expect(ok.body).toMatchObject({ api_key: alice.key, email: alice.email, user_id: alice.id });
      const wrong = await api(server, "POST", "/fetch_api_key", { params: { username: alice.email, password: "nope" } });
      expect(wrong.status).toBe(401);
    });
  });

  describe("channels", () => {
    it("creates channels and reports subscribed and already subscribed per user", async () => {
      const again = await api(server, "POST", "/users/me/subscriptions", {
        as: alice,
        params: { subscriptions: [{ name: "General" }, { name: "alice-new" }] },
      });
      expect(again.body.subscribed).toEqual({ [alice.id]: ["alice-new"] });
      expect(again.body.already_subscribed).toEqual({ [alice.id]: ["general"] });
      const subs = await api(server, "GET", "/users/me/subscriptions", { as: alice });
      expect(subs.body.subscriptions.map((s: any) => s.name).sort()).toEqual(["alice-new", "general", "random"]);
      const random = subs.body.subscriptions.find((s: any) => s.name === "random");
      expect(random.rendered_description).toBe("<p><strong>Anything</strong></p>");
    });

    it("refuses unknown principals and bad channel names", async () => {
      const unknown = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "x" }], principals: [999999] } });
      expect(unknown.status).toBe(400);
      const blank = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "  " }] } });
      expect(blank.status).toBe(400);
      const long = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "n".repeat(61) }] } });
      expect(long.status).toBe(400);
      const notJson = await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: '[{"name":' } });
      expect(notJson.body.code).toBe("INVALID_JSON");
    });

    it("keeps private channels private", async () => {
      await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "secret" }], invite_only: true } });
      const res = await api(server, "POST", "/users/me/subscriptions", { as: bob, params: { subscriptions: [{ name: "secret" }] } });
      expect(res.status).toBe(400);
      const send = await api(server, "POST", "/messages", { as: bob, params: { type: "stream", to: "secret", topic: "t", content: "hi" } });
      expect(send.status).toBe(400);
    });
  });

  describe("sending and fetching", () => {
    it("sends by name, by id and by JSON list, and fetches back in order", async () => {
      const streams = await api(server, "GET", "/streams", { as: owner });
      const general = streams.body.streams.find((s: any) => s.name === "general");
      const ids: number[] = [];
      for (const to of ["general", general.stream_id, JSON.stringify(["general"])]) {
        const res = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to, topic: "order", content: `m${ids.length}` } });
        expect(res.status).toBe(200);
        ids.push(res.body.id);
      }
      expect([...ids].sort((a, b) => a - b)).toEqual(ids);
      const fetched = await api(server, "GET", "/messages", {
        as: alice,
        params: { anchor: "newest", num_before: 10, num_after: 0, narrow: narrow("general", "order"), apply_markdown: false },
      });
      expect(fetched.body.messages.map((m: any) => m.content)).toEqual(["m0", "m1", "m2"]);
      expect(fetched.body.found_newest).toBe(true);
      expect(fetched.body.found_oldest).toBe(true);
      expect(fetched.body.messages[0]).toMatchObject({ sender_id: expect.any(Number), display_recipient: "general", subject: "order", type: "stream" });
    });

    it("renders markdown unless apply_markdown is false", async () => {
      const sent = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "general", topic: "md", content: "**bold**" } });
      const html = await api(server, "GET", "/messages", { as: owner, params: { anchor: sent.body.id, num_before: 0, num_after: 0 } });
      expect(html.body.messages[0]).toMatchObject({ content: "<p><strong>bold</strong></p>", content_type: "text/html", flags: ["read"] });
      expect(html.body.found_anchor).toBe(true);
    });

    it("pages around a numeric anchor with include_anchor and the found flags", async () => {
      const ids: number[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "random", topic: "pages", content: `p${i}` } });
        ids.push(r.body.id);
      }
      const n = narrow("random", "pages");
      const mid = await api(server, "GET", "/messages", { as: owner, params: { anchor: String(ids[2]), num_before: 1, num_after: 1, narrow: n } });
      expect(mid.body.messages.map((m: any) => m.id)).toEqual([ids[1], ids[2], ids[3]]);
      expect(mid.body).toMatchObject({ anchor: ids[2], found_anchor: true, found_oldest: false, found_newest: false });
      const excl = await api(server, "GET", "/messages", { as: owner, params: { anchor: ids[2], num_before: 1, num_after: 1, narrow: n, include_anchor: false } });
      expect(excl.body.messages.map((m: any) => m.id)).toEqual([ids[1], ids[3]]);
      const oldest = await api(server, "GET", "/messages", { as: owner, params: { anchor: "oldest", num_before: 0, num_after: 2, narrow: n } });
      expect(oldest.body.messages.map((m: any) => m.id)).toEqual([ids[0], ids[1]]);
      expect(oldest.body).toMatchObject({ found_oldest: true, found_newest: false });
      const legacy = await api(server, "GET", "/messages", { as: owner, params: { anchor: "newest", num_before: 1, num_after: 0, narrow: [["stream", "random"], ["topic", "pages"]] } });
      expect(legacy.body.messages.map((m: any) => m.id)).toEqual([ids[4]]);
    });

    it("accepts zulip-js style multipart bodies", async () => {
      const res = await api(server, "POST", "/messages", { as: owner, multipart: true, params: { type: "stream", to: "general", topic: "mp", content: "multi part" } });
      expect(res.status).toBe(200);
      const back = await api(server, "GET", "/messages", { as: owner, params: { anchor: res.body.id, num_before: 0, num_after: 0, apply_markdown: false } });
      expect(back.body.messages[0].content).toBe("multi part");
    });

    it("answers bad input with Zulip's errors", async () => {
      const send = (params: Record<string, unknown>) => api(server, "POST", "/messages", { as: owner, params });
      const unknown = await send({ type: "stream", to: "no-such-channel", topic: "t", content: "x" });
      expect(unknown.body).toMatchObject({ code: "STREAM_DOES_NOT_EXIST", stream: "no-such-channel" });
      const unknownId = await send({ type: "stream", to: 987654, topic: "t", content: "x" });
      expect(unknownId.body).toMatchObject({ code: "STREAM_DOES_NOT_EXIST", stream_id: 987654 });
      expect((await send({ type: "stream", to: "general", topic: "t" })).body).toMatchObject({ code: "REQUEST_VARIABLE_MISSING", var_name: "content" });
      expect((await send({ type: "stream", to: "general", topic: "t", content: "  \n " })).body.msg).toBe("Message must not be empty");
      expect((await send({ type: "stream", to: "general", topic: "t", content: "a\u0000b" })).status).toBe(400);
      expect((await send({ type: "bogus", to: "general", topic: "t", content: "x" })).status).toBe(400);
      expect((await send({ type: "stream", to: "9007199254740993", topic: "t", content: "x" })).status).toBe(400);
      const get = (params: Record<string, unknown>) => api(server, "GET", "/messages", { as: owner, params });
      expect((await get({ anchor: "0x10", num_before: 1, num_after: 1 })).body.msg).toBe("Invalid anchor");
      expect((await get({ anchor: "newest", num_before: " 1", num_after: 1 })).body.msg).toBe("num_before is not an integer");
      expect((await get({ anchor: "newest", num_before: -1, num_after: 1 })).status).toBe(400);
      expect((await get({ anchor: "newest", num_before: 4000, num_after: 1001 })).body.msg).toContain("maximum 5000");
      expect((await get({ anchor: "newest", num_before: 1, num_after: 0, narrow: [{ operator: "nope", operand: "x" }] })).body.code).toBe("BAD_NARROW");
      expect((await get({ anchor: "newest", num_before: 1, num_after: 0, narrow: narrow("missing") })).body.code).toBe("BAD_NARROW");
      expect((await get({ anchor: "newest", num_before: 1, num_after: 0, narrow: "[" })).body.code).toBe("INVALID_JSON");
    });

    it("truncates over-long content and topics as Zulip does", async () => {
      const res = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "general", topic: "t".repeat(80), content: "c".repeat(10050) } });
      const back = await api(server, "GET", "/messages", { as: owner, params: { anchor: res.body.id, num_before: 0, num_after: 0, apply_markdown: false } });
      expect(back.body.messages[0].content.length).toBe(10000);
      expect(back.body.messages[0].content.endsWith("[message truncated]")).toBe(true);
      expect(back.body.messages[0].subject).toBe("t".repeat(57) + "...");
    });

    it("lists unknown parameters in ignored_parameters_unsupported, sorted", async () => {
      const res = await api(server, "GET", "/users/me", { as: owner, params: { zeta: 1, alpha: 2 } });
      expect(res.body.ignored_parameters_unsupported).toEqual(["alpha", "zeta"]);
    });

    it("answers 405 with the allowed methods and 404 for unknown endpoints", async () => {
      const res = await fetch(`${server.url}/api/v1/messages`, { method: "PUT", headers: { authorization: "Basic x" } });
      expect(res.status).toBe(405);
      const body = (await res.json()) as { allowed_methods: string[] };
      expect(body.allowed_methods.sort()).toEqual(["GET", "HEAD", "POST"]); // HEAD with GET, as rest_dispatch lists it
      expect((await fetch(`${server.url}/api/v1/nothing-here`)).status).toBe(404);
    });

    it("survives a client that disconnects in the middle of its request body", async () => {
      const { port } = new URL(server.url);
      await new Promise<void>((resolve, reject) => {
        const socket = net.connect(Number(port), "127.0.0.1", () => {
          socket.write(
            "POST /api/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n" +
              `Authorization: Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}\r\nContent-Length: 1000\r\n\r\ntype=stream&to=gen`,
          );
          setTimeout(() => (socket.destroy(), resolve()), 50);
        });
        socket.on("error", reject);
      });
      const res = await api(server, "GET", "/messages", { as: owner, params: { anchor: "newest", num_before: 1, num_after: 0 } });
      expect(res.status).toBe(200);
    });

    it("refuses a body over the cap with 413 and keeps serving", async () => {
      const res = await fetch(`${server.url}/api/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", authorization: `Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}` },
        body: "content=" + "x".repeat(100 * 1024),
      });
      expect(res.status).toBe(413);
      expect((await api(server, "GET", "/users/me", { as: owner })).status).toBe(200);
    });
  });

  describe("event queues", () => {
    const register = (as: Credentials, params: Record<string, unknown> = {}) =>
      api(server, "POST", "/register", { as, params: { event_types: ["message"], ...params } });
    const poll = (as: Credentials, queue_id: string, last_event_id: number, extra: Record<string, unknown> = {}) =>
      api(server, "GET", "/events", { as, params: { queue_id, last_event_id, ...extra } });

    it("registers with the limits, the feature level and the requested state", async () => {
      const res = await api(server, "POST", "/register", { as: alice, params: { event_types: ["message", "subscription"], apply_markdown: true } });
      expect(res.body).toMatchObject({
        last_event_id: -1,
        max_message_length: 10000,
        max_topic_length: 60,
        max_stream_name_length: 60,
        max_stream_description_length: 1024,
        zulip_feature_level: expect.any(Number),
        zulip_version: expect.any(String),
      });
      expect(typeof res.body.queue_id).toBe("string");
      expect(res.body.subscriptions.map((s: any) => s.name)).toContain("general");
      expect(res.body.max_message_id).toBeGreaterThanOrEqual(-1);
    });

    it("gives the whole initial state when no event types are named", async () => {
      const res = await api(server, "POST", "/register", { as: alice });
      expect(res.status).toBe(200);
      for (const key of ["realm_users", "subscriptions", "never_subscribed", "streams", "realm_user_groups", "user_settings", "unread_msgs", "drafts", "presences"]) {
        expect(res.body).toHaveProperty(key);
      }
      expect(res.body.realm_users.map((u: any) => u.user_id)).toContain(alice.id);
      const groups = new Map(res.body.realm_user_groups.map((g: any) => [g.name, g]));
      expect((groups.get("role:members") as any).members).toContain(alice.id);
      expect(res.body.user_settings.receives_typing_notifications).toBe(true);
      expect(res.body.realm_empty_topic_display_name).toBe("general chat");
    });

    it("wakes a parked poll with the message, local id only on the sender's queue", async () => {
      const mine = (await register(owner)).body.queue_id;
      const hers = (await register(alice, { narrow: narrow("general") })).body.queue_id;
      const ownerPoll = poll(owner, mine, -1);
      const alicePoll = poll(alice, hers, -1);
      await new Promise((r) => setTimeout(r, 100));
      const sent = await api(server, "POST", "/messages", {
        as: owner,
        params: { type: "stream", to: "general", topic: "live", content: "now", queue_id: mine, local_id: "loc-1" },
      });
      const [o, a] = await Promise.all([ownerPoll, alicePoll]);
      expect(o.body.events).toHaveLength(1);
      expect(o.body.events[0]).toMatchObject({ type: "message", local_message_id: "loc-1", flags: ["read"], message: { id: sent.body.id, content: "now" } });
      expect(a.body.events[0]).toMatchObject({ type: "message", flags: [], message: { id: sent.body.id } });
      expect(a.body.events[0].local_message_id).toBeUndefined();
    });

    it("filters by narrow and keeps events until acknowledged", async () => {
      const q = (await register(alice, { narrow: narrow("random") })).body.queue_id;
      await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "general", topic: "x", content: "not for q" } });
      const m1 = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "random", topic: "x", content: "one" } });
      const m2 = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "random", topic: "x", content: "two" } });
      const first = await poll(alice, q, -1, { dont_block: true });
      expect(first.body.events.map((e: any) => e.message.id)).toEqual([m1.body.id, m2.body.id]);
      const again = await poll(alice, q, -1, { dont_block: true });
      expect(again.body.events).toHaveLength(2);
      const acked = await poll(alice, q, first.body.events[0].id, { dont_block: true });
      expect(acked.body.events.map((e: any) => e.message.id)).toEqual([m2.body.id]);
      const empty = await poll(alice, q, first.body.events[1].id, { dont_block: true });
      expect(empty.body.events).toEqual([]);
    });

    it("sends a heartbeat after the interval, and it is an event to acknowledge", async () => {
      const q = (await register(bob)).body.queue_id;
      const res = await poll(bob, q, -1);
      expect(res.body.events).toEqual([{ type: "heartbeat", id: expect.any(Number) }]);
      const again = await poll(bob, q, -1, { dont_block: true });
      expect(again.body.events).toEqual(res.body.events); // not acknowledged yet
      const next = await poll(bob, q, res.body.events[0].id, { dont_block: true });
      expect(next.body.events).toEqual([]);
    });

    it("counts a heartbeat from when the poll waiting now parked, not from an earlier poll of the queue", async () => {
      const q = (await register(bob)).body.queue_id;
      // A poll parks (and the queue's heartbeat timer starts); a newer poll finishes it halfway through the interval.
      const first = poll(bob, q, -1);
      await new Promise((r) => setTimeout(r, 1000));
      const parked = Date.now();
      const second = poll(bob, q, -1);
      expect((await first).body.events).toEqual([]); // finished by the newer poll
      const res = await second;
      expect(res.body.events).toEqual([{ type: "heartbeat", id: expect.any(Number) }]);
      // The timer set for the first poll fired about 1 s into this one, and waited for the rest of the interval.
      expect(Date.now() - parked).toBeGreaterThanOrEqual(2000 - 50);
    });

    it("answers BAD_EVENT_QUEUE_ID for unknown, foreign and deleted queues", async () => {
      const unknown = await poll(alice, "no-such-queue", -1);
      expect(unknown.status).toBe(400);
      expect(unknown.body).toMatchObject({ code: "BAD_EVENT_QUEUE_ID", queue_id: "no-such-queue", msg: "Bad event queue ID: no-such-queue" });
      const ownerQueue = (await register(owner)).body.queue_id;
      expect((await poll(alice, ownerQueue, -1)).body.code).toBe("BAD_EVENT_QUEUE_ID");
      const del = await api(server, "DELETE", "/events", { as: owner, params: { queue_id: ownerQueue } });
      expect(del.status).toBe(200);
      expect((await poll(owner, ownerQueue, -1, { dont_block: true })).body.code).toBe("BAD_EVENT_QUEUE_ID");
    });

    it("expires a queue nobody polls for the idle timeout, but not one that is polled", async () => {
      // Expiry runs every timeout (2 s): by 5.5 s the idle queue has missed two checks, while polls 300 ms apart
      // keep the other one alive with a wide margin, even on a loaded machine.
      const short = await startTestServer(engine, { queueTimeoutSeconds: 2 });
      try {
        const reg = () => api(short, "POST", "/register", { as: short.owner, params: { event_types: ["message"] } }).then((r) => r.body.queue_id);
        const [idle, busy] = [await reg(), await reg()];
        const pollShort = (q: string) => api(short, "GET", "/events", { as: short.owner, params: { queue_id: q, last_event_id: -1, dont_block: true } });
        for (const until = Date.now() + 5500; Date.now() < until; ) {
          expect((await pollShort(busy)).status).toBe(200);
          await new Promise((r) => setTimeout(r, 300));
        }
        expect((await pollShort(idle)).body.code).toBe("BAD_EVENT_QUEUE_ID");
        expect((await pollShort(busy)).status).toBe(200);
      } finally {
        await short.close();
      }
    });

    it("announces new users and new public channels", async () => {
      const q = (await register(alice, { event_types: ["realm_user", "stream"] })).body.queue_id;
      const dave = await createUser(server, `dave-${engine.length}@example.com`, "Dave");
      await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "announced" }] } });
      await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "hidden" }], invite_only: true } });
      const events = (await poll(alice, q, -1, { dont_block: true })).body.events;
      expect(events.map((e: any) => [e.type, e.op])).toEqual([
        ["realm_user", "add"],
        ["stream", "create"],
      ]);
      expect(events[0].person).toMatchObject({ user_id: dave.id, email: dave.email, full_name: "Dave", role: 400 });
      expect(events[1].streams.map((s: any) => s.name)).toEqual(["announced"]);
    });

    it("sends subscription add to new subscribers and peer_add to the others", async () => {
      const qb = (await register(bob, { event_types: ["subscription"] })).body.queue_id;
      const qa = (await register(alice, { event_types: ["subscription"] })).body.queue_id;
      await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "joined" }], principals: [bob.id] } });
      const [eb] = (await poll(bob, qb, -1, { dont_block: true })).body.events;
      expect(eb).toMatchObject({ type: "subscription", op: "add", subscriptions: [{ name: "joined", subscribers: [bob.id] }] });
      const [ea] = (await poll(alice, qa, -1, { dont_block: true })).body.events;
      expect(ea).toMatchObject({ type: "subscription", op: "peer_add", stream_ids: [eb.subscriptions[0].stream_id], user_ids: [bob.id] });
    });

    it("requires last_event_id with queue_id", async () => {
      const q = (await register(alice)).body.queue_id;
      const res = await api(server, "GET", "/events", { as: alice, params: { queue_id: q } });
      expect(res.body).toMatchObject({ code: "REQUEST_VARIABLE_MISSING", msg: "Missing 'last_event_id' argument" });
    });

    it("loses nothing when a client disconnects mid-poll", async () => {
      const q = (await register(alice)).body.queue_id;
      const abort = new AbortController();
      const gone = api(server, "GET", "/events", { as: alice, params: { queue_id: q, last_event_id: -1 }, signal: abort.signal }).catch((e) => e);
      await new Promise((r) => setTimeout(r, 100));
      abort.abort();
      expect(await gone).toBeInstanceOf(Error);
      const sent = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "general", topic: "gone", content: "kept" } });
      const next = await poll(alice, q, -1, { dont_block: true });
      expect(next.body.events.map((e: any) => e.message?.id)).toContain(sent.body.id);
    });

    it("delivers one message to many parked polls at once (uWS deferred writes)", async () => {
      const queues = await Promise.all(Array.from({ length: 200 }, () => register(alice).then((r) => r.body.queue_id as string)));
      // Each queue is polled until the message arrives (a slow machine may see a heartbeat first); a response lost
      // by uWS would leave its fetch failing or hanging instead.
      const receive = async (q: string) => {
        let last = -1;
        for (;;) {
          const res = await poll(alice, q, last);
          const message = res.body.events.find((e: any) => e.type === "message" && e.message.subject === "fan");
          if (message) return message.message.id as number;
          last = Math.max(last, ...res.body.events.map((e: any) => e.id));
        }
      };
      const polls = queues.map((q) => receive(q));
      await new Promise((r) => setTimeout(r, 300));
      const sent = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "general", topic: "fan", content: "all" } });
      expect(await Promise.all(polls)).toEqual(queues.map(() => sent.body.id));
    });
  });
});
