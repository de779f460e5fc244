/**
 * Channel lookups and creation through a real server on both engines, as real clients send them: GET
 * /get_stream_id (zulip-js `streams.getStreamId`, the python bindings' `get_stream_id`), GET
 * /users/{user_id}/subscriptions/{stream_id} (`get_subscription_status`), POST /channels/create, and PATCH
 * /users/me/subscriptions (`add` and `delete` in one request).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";

describe.each(ENGINES)("channel requests on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let alice: User;
  let bob: User;
  let guest: User;
  const { subscribe, register, events } = messageApi(() => server);

  const expectError = (res: { status: number; body: any }, msg: string, code = "BAD_REQUEST", status = 400) => {
    expect(res.status, JSON.stringify(res.body)).toBe(status);
    expect(res.body).toMatchObject({ result: "error", code, msg });
  };
  const ok = (res: { status: number; body: any }) => {
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body;
  };
  /** The python bindings' get_stream_id: the name percent-encoded into the URL by hand. */
  const streamIdOf = (as: Credentials, name: string) => api(server, "GET", `/get_stream_id?stream=${encodeURIComponent(name)}`, { as, template: "/get_stream_id" });
  const subscriptionStatus = (as: Credentials, userId: number, streamId: number) =>
    api(server, "GET", `/users/${userId}/subscriptions/${streamId}`, { as, template: "/users/{user_id}/subscriptions/{stream_id}" });
  const createChannel = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/channels/create", { as, params });
  const updateSubscriptions = (as: Credentials, params: Record<string, unknown>) => api(server, "PATCH", "/users/me/subscriptions", { as, params });
  const subscribedNames = async (as: Credentials) => (await api(server, "GET", "/users/me/subscriptions", { as })).body.subscriptions.map((s: any) => s.name).sort();

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    guest = await createUserWithRole(server, "guest@example.com", ROLE.guest);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
  });
  afterAll(async () => server?.close());

  describe("GET /streams/{stream_id} and GET /streams/{stream_id}/members", () => {
    // The python bindings' get_stream_by_id and get_subscribers (Zulip's python_examples.py get_subscribers).
    const channelById = (as: Credentials, id: number) => api(server, "GET", `/streams/${id}`, { as, template: "/streams/{stream_id}" });
    const membersOf = (as: Credentials, id: number) => api(server, "GET", `/streams/${id}/members`, { as, template: "/streams/{stream_id}/members" });

    it("answer a channel as GET /streams lists it, and its subscribers, to whoever may see them", async () => {
      const { Gardening: id } = await subscribe(alice, ["Gardening"]);
      await subscribe(bob, ["Gardening"]);
      const listed = ok(await api(server, "GET", "/streams", { as: bob })).streams.find((c: any) => c.stream_id === id);
      expect(ok(await channelById(bob, id)).stream).toEqual(listed);
      expect(ok(await membersOf(owner, id)).subscribers.sort()).toEqual([alice.id, bob.id].sort());
    });

    it("answer a private channel only to those who may see it, and alike for one that does not exist", async () => {
      ok(await api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name: "hidden garden" }], invite_only: true } }));
      const id = ok(await streamIdOf(alice, "hidden garden")).stream_id;
      expect(ok(await membersOf(alice, id)).subscribers).toEqual([alice.id]);
      expect(ok(await channelById(owner, id)).stream.invite_only).toBe(true); // administrators see every channel's metadata
      expectError(await channelById(bob, id), "Invalid channel ID");
      expectError(await membersOf(bob, id), "Invalid channel ID");
      expectError(await membersOf(bob, 999_999), "Invalid channel ID");
    });
  });

  describe("GET /get_stream_id", () => {
    it("finds a channel the caller can read by its name, whatever its case", async () => {
      const channels = await subscribe(alice, ["Design Team"]);
      expect(ok(await streamIdOf(alice, "Design Team"))).toEqual({ result: "success", msg: "", stream_id: channels["Design Team"] });
      // zulip-js: the name as a query parameter built by URLSearchParams.
      expect(ok(await api(server, "GET", "/get_stream_id", { as: bob, params: { stream: "design team" } })).stream_id).toBe(channels["Design Team"]);
    });

    it("answers alike for a missing channel and one the caller cannot read", async () => {
      ok(await api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name: "secret plans" }], invite_only: true } }));
      expect(ok(await streamIdOf(alice, "secret plans")).stream_id).toEqual(expect.any(Number));
      expectError(await streamIdOf(bob, "secret plans"), "Invalid channel name 'secret plans'");
      expectError(await streamIdOf(bob, "nowhere"), "Invalid channel name 'nowhere'");
      expectError(await api(server, "GET", "/get_stream_id", { as: bob }), "Missing 'stream' argument", "REQUEST_VARIABLE_MISSING");
    });
  });

  describe("GET /users/{user_id}/subscriptions/{stream_id}", () => {
    it("says whether a user is subscribed to a channel the caller can see", async () => {
      const channels = await subscribe(alice, ["status"]);
      expect(ok(await subscriptionStatus(bob, alice.id, channels["status"]!))).toEqual({ result: "success", msg: "", is_subscribed: true });
      expect(ok(await subscriptionStatus(alice, bob.id, channels["status"]!)).is_subscribed).toBe(false);
    });

    it("refuses unknown users and channels the caller cannot see", async () => {
      const channels = await subscribe(alice, ["status-2"]);
      ok(await api(server, "POST", "/users/me/subscriptions", { as: alice, params: { subscriptions: [{ name: "status-private" }], invite_only: true } }));
      const hidden = (await api(server, "GET", "/streams", { as: alice })).body.streams.find((s: any) => s.name === "status-private").stream_id;
      expectError(await subscriptionStatus(bob, 999_999, channels["status-2"]!), "No such user");
      expectError(await subscriptionStatus(bob, alice.id, hidden), "Invalid channel ID");
      expectError(await subscriptionStatus(bob, alice.id, 999_999), "Invalid channel ID");
      // Organization administrators see every channel's subscribers.
      expect(ok(await subscriptionStatus(owner, alice.id, hidden)).is_subscribed).toBe(true);
    });
  });

  describe("POST /channels/create", () => {
    it("creates the channel with its settings and subscribes exactly the users named", async () => {
      const aliceQueue = await register(alice, ["subscription", "stream"]);
      const bobQueue = await register(bob, ["subscription", "stream"]);
      const body = ok(
        await createChannel(owner, {
          name: " launch ",
          description: "rockets\nand more",
          subscribers: [alice.id],
          history_public_to_subscribers: true,
          invite_only: true,
          topics_policy: "disable_empty_topic",
        }),
      );
      expect(body).toEqual({ result: "success", msg: "", id: expect.any(Number) });
      const subscription = (await api(server, "GET", "/users/me/subscriptions", { as: alice, params: { include_subscribers: true } })).body.subscriptions.find(
        (s: any) => s.stream_id === body.id,
      );
      expect(subscription).toMatchObject({
        name: "launch",
        description: "rockets and more",
        invite_only: true,
        history_public_to_subscribers: true,
        topics_policy: "disable_empty_topic",
        creator_id: owner.id,
        subscribers: [alice.id],
      });
      // The creator named nobody but alice.
      expect(await subscribedNames(owner)).not.toContain("launch");
      expect((await events(alice, aliceQueue)).filter((e) => e.type === "subscription" && e.op === "add").map((e) => e.subscriptions[0].stream_id)).toEqual([body.id]);
      // A private channel bob is not in: nothing for him.
      expect(await events(bob, bobQueue)).toEqual([]);
    });

    it("tells everyone who sees a public channel that it exists, even with no subscribers", async () => {
      const bobQueue = await register(bob, ["stream"]);
      const { id } = ok(await createChannel(alice, { name: "open floor", subscribers: [] }));
      expect((await events(bob, bobQueue)).map((e) => [e.op, e.streams[0].stream_id])).toEqual([["create", id]]);
      expect(await subscribedNames(alice)).not.toContain("open floor");
    });

    it("refuses a taken name with CHANNEL_ALREADY_EXISTS, and what creating a channel refuses", async () => {
      await subscribe(alice, ["taken"]);
      expectError(await createChannel(bob, { name: "TAKEN", subscribers: [bob.id] }), "Channel 'TAKEN' already exists", "CHANNEL_ALREADY_EXISTS", 409);
      expectError(await createChannel(guest, { name: "by a guest", subscribers: [guest.id] }), "Not allowed for guest users");
      expectError(await createChannel(alice, { name: "  ", subscribers: [alice.id] }), "Channel name can't be empty.");
      expectError(await createChannel(alice, { name: "default", subscribers: [alice.id], is_default_stream: true }), "Must be an organization administrator");
      expectError(await createChannel(alice, { name: "ghosts", subscribers: [999_999] }), "No such user: 999999");
      expectError(await createChannel(alice, { name: "nobody" }), "Missing 'subscribers' argument", "REQUEST_VARIABLE_MISSING");
      expect((await api(server, "GET", "/streams", { as: owner, params: { include_all: true } })).body.streams.map((s: any) => s.name)).not.toContain("ghosts");
    });
  });

  describe("PATCH /users/me/subscriptions", () => {
    it("adds and removes the caller's subscriptions in one request, answering for both", async () => {
      await subscribe(bob, ["leaving", "staying"]);
      const body = ok(await updateSubscriptions(bob, { add: [{ name: "arriving", description: "new here" }, { name: "staying" }], delete: ["leaving"] }));
      expect(body).toEqual({
        result: "success",
        msg: "",
        subscribed: { [bob.id]: ["arriving"] },
        already_subscribed: { [bob.id]: ["staying"] },
        removed: ["leaving"],
        not_removed: [],
      });
      expect(await subscribedNames(bob)).toEqual(expect.arrayContaining(["arriving", "staying"]));
      expect(await subscribedNames(bob)).not.toContain("leaving");
      expect(ok(await updateSubscriptions(bob, { delete: ["leaving"] }))).toMatchObject({ removed: [], not_removed: ["leaving"], subscribed: {}, already_subscribed: {} });
    });

    it("does nothing when a channel to leave does not exist, and needs something to do", async () => {
      const res = await updateSubscriptions(alice, { add: [{ name: "half-done" }], delete: ["no-such-channel"] });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: "STREAM_DOES_NOT_EXIST", msg: "Channel(s) (no-such-channel) do not exist", stream: "no-such-channel" });
      expect(await subscribedNames(alice)).not.toContain("half-done");
      expectError(await updateSubscriptions(alice, {}), 'Nothing to do. Specify at least one of "add" or "delete".');
    });
  });
});
