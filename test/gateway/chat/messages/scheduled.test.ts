/**
 * Scheduled messages on both engines: the CRUD surface with Zulip's errors and events, delivery at the time, and
 * delivery after a restart (the schedule lives in the store, not in a timer).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startRestartableServer, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { eventually } from "../../../support/messages.ts";

const now = () => Math.floor(Date.now() / 1000);

describe.each(ENGINES)("scheduled messages on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;
  let bob: Credentials & { id: number };
  let general: number;

  const schedule = (params: Record<string, unknown>, as: Credentials = owner) => api(server, "POST", "/scheduled_messages", { as, params });
  const list = async (as: Credentials = owner) => (await api(server, "GET", "/scheduled_messages", { as })).body.scheduled_messages as any[];
  const contents = async (as: Credentials, narrow: unknown[]) =>
    (await api(server, "GET", "/messages", { as, params: { anchor: "newest", num_before: 50, num_after: 0, narrow, apply_markdown: false } })).body.messages.map(
      (m: any) => m.content,
    );

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = server.owner;
    bob = await createUser(server, "bob@example.com", "Bob");
    await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "general" }] } });
    general = (await api(server, "GET", "/streams", { as: owner })).body.streams.find((s: any) => s.name === "general").stream_id;
  });
  afterAll(async () => server?.close());

  it("creates, lists, edits and deletes, with scheduled_messages events", async () => {
    const queue = (await api(server, "POST", "/register", { as: owner, params: { event_types: ["scheduled_messages"] } })).body.queue_id;
    const at = now() + 3600;
    const created = await schedule({ type: "stream", to: general, topic: "later", content: "draft", scheduled_delivery_timestamp: at });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const id = created.body.scheduled_message_id;
    const dm = await schedule({ type: "direct", to: JSON.stringify([bob.id]), content: "psst", scheduled_delivery_timestamp: at + 60 });
    expect((await list()).map((m) => [m.scheduled_message_id, m.type, m.to, m.failed])).toEqual([
      [id, "stream", general, false],
      [dm.body.scheduled_message_id, "private", [bob.id], false],
    ]);
    const edited = await api(server, "PATCH", `/scheduled_messages/${id}`, { as: owner, params: { content: "**final**" }, template: "/scheduled_messages/{scheduled_message_id}" });
    expect(edited.status).toBe(200);
    expect((await list())[0]).toMatchObject({ content: "**final**", rendered_content: "<p><strong>final</strong></p>", topic: "later" });
    const del = await api(server, "DELETE", `/scheduled_messages/${dm.body.scheduled_message_id}`, { as: owner, template: "/scheduled_messages/{scheduled_message_id}" });
    expect(del.status).toBe(200);
    expect((await list()).map((m) => m.scheduled_message_id)).toEqual([id]);
    // Another user neither sees nor touches it.
    expect(await list(bob)).toEqual([]);
    const foreign = await api(server, "DELETE", `/scheduled_messages/${id}`, { as: bob, template: "/scheduled_messages/{scheduled_message_id}" });
    expect(foreign.status).toBe(404);
    expect(foreign.body.msg).toBe("Scheduled message does not exist");
    const evs = (await api(server, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events;
    expect(evs.map((e: any) => e.op)).toEqual(["add", "add", "update", "remove"]);
  });

  it("refuses past times, unknown channels and users", async () => {
    const past = await schedule({ type: "stream", to: general, topic: "t", content: "x", scheduled_delivery_timestamp: now() - 10 });
    expect(past.body.msg).toBe("Scheduled delivery time must be in the future.");
    const noChannel = await schedule({ type: "stream", to: 987654, topic: "t", content: "x", scheduled_delivery_timestamp: now() + 60 });
    expect(noChannel.body).toMatchObject({ code: "STREAM_DOES_NOT_EXIST", stream_id: 987654 });
    const noUser = await schedule({ type: "direct", to: "[987654]", content: "x", scheduled_delivery_timestamp: now() + 60 });
    expect(noUser.body.msg).toBe("Invalid user ID 987654");
    expect((await schedule({ type: "stream", to: general, topic: "t", scheduled_delivery_timestamp: now() + 60 })).body.code).toBe("REQUEST_VARIABLE_MISSING");
  });

  it("delivers at the scheduled time, once, and drops it from the list", async () => {
    // Each two seconds ahead of its own request: on a loaded machine a shared timestamp could be past already.
    const channel = await schedule({ type: "stream", to: general, topic: "timed", content: "on time", scheduled_delivery_timestamp: now() + 2 });
    const direct = await schedule({ type: "direct", to: JSON.stringify([bob.id]), content: "dm on time", scheduled_delivery_timestamp: now() + 2 });
    expect([channel.status, direct.status]).toEqual([200, 200]);
    const narrow = [{ operator: "topic", operand: "timed" }];
    expect(await eventually(async () => (await contents(owner, narrow)).length === 1)).toBe(true);
    expect(await eventually(async () => (await contents(bob, [{ operator: "is", operand: "dm" }])).includes("dm on time"))).toBe(true);
    expect(await contents(owner, narrow)).toEqual(["on time"]);
    expect(await eventually(async () => !(await list()).some((m) => m.content === "on time"))).toBe(true);
  });
});

describe.each(ENGINES)("scheduled messages across a restart on %s", (engine) => {
  it("delivers a message that came due while the server was down, exactly once", async () => {
    const server = await startRestartableServer(engine);
    try {
      const { owner } = server;
      const created = await api(server, "POST", "/scheduled_messages", {
        as: owner,
        params: { type: "stream", to: "general", topic: "restart", content: "survived", scheduled_delivery_timestamp: now() + 2 },
      });
      // "general" by name is not an id: the scheduled endpoint takes channel ids only.
      expect(created.status).toBe(400);
      const general = (await api(server, "GET", "/streams", { as: owner })).body.streams[0].stream_id;
      const ok = await api(server, "POST", "/scheduled_messages", {
        as: owner,
        params: { type: "stream", to: general, topic: "restart", content: "survived", scheduled_delivery_timestamp: now() + 2 },
      });
      expect(ok.status).toBe(200);
      await server.restart(() => new Promise((r) => setTimeout(r, 2500)));
      const narrow = [{ operator: "topic", operand: "restart" }];
      const fetch = async () =>
        (await api(server, "GET", "/messages", { as: owner, params: { anchor: "newest", num_before: 10, num_after: 0, narrow, apply_markdown: false } })).body.messages;
      expect(await eventually(async () => (await fetch()).length > 0, 10_000)).toBe(true);
      await new Promise((r) => setTimeout(r, 500));
      expect((await fetch()).map((m: any) => m.content)).toEqual(["survived"]);
      expect((await api(server, "GET", "/scheduled_messages", { as: owner })).body.scheduled_messages).toEqual([]);
    } finally {
      await server.close();
    }
  });
});
