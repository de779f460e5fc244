/**
 * Reminders on both engines: create, list and delete with Zulip's errors and reminders events; delivery at the time
 * as a direct message from Notification Bot quoting the message; reminders kept apart from scheduled messages.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { eventually, NOTIFICATION_BOT } from "../../../support/messages.ts";

const now = () => Math.floor(Date.now() / 1000);

describe.each(ENGINES)("reminders on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials & { id: number };
  let bob: Credentials & { id: number };
  let carol: Credentials & { id: number };
  let general: number;
  let channelMessage: number;

  const remind = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/reminders", { as, params });
  const list = async (as: Credentials) => (await api(server, "GET", "/reminders", { as })).body.reminders as any[];
  const remove = (as: Credentials, id: number) => api(server, "DELETE", `/reminders/${id}`, { as, template: "/reminders/{reminder_id}" });

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "general" }], principals: [owner.id, bob.id] } });
    general = (await api(server, "GET", "/streams", { as: owner })).body.streams.find((s: any) => s.name === "general").stream_id;
    channelMessage = (await api(server, "POST", "/messages", { as: bob, params: { type: "stream", to: general, topic: "plans", content: "Lunch at noon?" } })).body.id;
  });
  afterAll(async () => server?.close());

  it("creates, lists and deletes, with reminders events, apart from scheduled messages", async () => {
    const queue = (await api(server, "POST", "/register", { as: owner, params: { event_types: ["reminders", "scheduled_messages"] } })).body.queue_id;
    const at = now() + 3600;
    const created = await remind(owner, { message_id: channelMessage, scheduled_delivery_timestamp: at, note: "bring snacks" });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const id = created.body.reminder_id;
    const [reminder] = await list(owner);
    expect(reminder).toMatchObject({ reminder_id: id, type: "private", to: [owner.id], scheduled_delivery_timestamp: at, failed: false, reminder_target_message_id: channelMessage });
    expect(reminder.content).toBe(
      `You requested a reminder for #**general>plans@${channelMessage}**. Note:\n > bring snacks\n\n` +
        `@_**Bob|${bob.id}** [said](${server.url.replace(/\/$/, "")}/#narrow/channel/${general}-general/topic/plans/near/${channelMessage}):\n` +
        "```quote\nLunch at noon?\n```",
    );
    expect((await api(server, "GET", "/scheduled_messages", { as: owner })).body.scheduled_messages).toEqual([]);
    expect((await api(server, "POST", "/register", { as: owner, params: { fetch_event_types: ["reminders"] } })).body.reminders).toEqual([reminder]);
    // A reminder is not a scheduled message, nor the other way round.
    expect((await api(server, "DELETE", `/scheduled_messages/${id}`, { as: owner, template: "/scheduled_messages/{scheduled_message_id}" })).status).toBe(404);
    const notTheirs = await remove(bob, id);
    expect([notTheirs.status, notTheirs.body.msg]).toEqual([404, "Reminder does not exist"]);
    expect((await remove(owner, id)).status).toBe(200);
    expect(await list(owner)).toEqual([]);
    const events = (await api(server, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events;
    expect(events).toEqual([
      { type: "reminders", op: "add", reminders: [reminder], id: expect.any(Number) },
      { type: "reminders", op: "remove", reminder_id: id, id: expect.any(Number) },
    ]);
    expect((await remove(owner, id)).status).toBe(404);
  });

  it("refuses messages one cannot read, times past, and over-long notes", async () => {
    const dm = (await api(server, "POST", "/messages", { as: bob, params: { type: "direct", to: [owner.id], content: "secret" } })).body.id;
    const unreadable = await remind(carol, { message_id: dm, scheduled_delivery_timestamp: now() + 60 });
    expect([unreadable.status, unreadable.body.msg]).toEqual([400, "Invalid message(s)"]);
    const past = await remind(owner, { message_id: dm, scheduled_delivery_timestamp: now() - 60 });
    expect(past.body.msg).toBe("Scheduled delivery time must be in the future.");
    const long = await remind(owner, { message_id: dm, scheduled_delivery_timestamp: now() + 60, note: "x".repeat(1001) });
    expect(long.body.msg).toBe("Maximum reminder note length: 1000 characters");
    expect((await remind(owner, { scheduled_delivery_timestamp: now() + 60 })).body.code).toBe("REQUEST_VARIABLE_MISSING");
  });

  it("counts the note and the quoted message in characters, as Zulip does, and never cuts one in two", async () => {
    const emoji = "\u{1F642}";
    const dm = (await api(server, "POST", "/messages", { as: bob, params: { type: "direct", to: [owner.id], content: emoji.repeat(9_990) } })).body.id;
    const created = await remind(owner, { message_id: dm, scheduled_delivery_timestamp: now() + 600, note: emoji.repeat(1_000) });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const reminder = (await list(owner)).find((r: any) => r.reminder_id === created.body.reminder_id);
    // The whole reminder is the longest message Zulip stores, its quote cut to fit, in characters.
    expect(Array.from(reminder.content)).toHaveLength(10_000);
    expect(reminder.content).toMatch(/\n\[message truncated\]\n```$/);
    expect(reminder.content).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/);
    const long = await remind(owner, { message_id: dm, scheduled_delivery_timestamp: now() + 60, note: emoji.repeat(1_001) });
    expect(long.body.msg).toBe("Maximum reminder note length: 1000 characters");
    expect((await remove(owner, created.body.reminder_id)).status).toBe(200);
  });

  it("is delivered at the time by Notification Bot, as a direct message to its owner", async () => {
    const dm = (await api(server, "POST", "/messages", { as: bob, params: { type: "direct", to: [owner.id], content: "call me" } })).body.id;
    const queue = (await api(server, "POST", "/register", { as: owner, params: { event_types: ["reminders"] } })).body.queue_id;
    const created = await remind(owner, { message_id: dm, scheduled_delivery_timestamp: now() + 1 });
    const fromBot = async () => {
      const res = await api(server, "GET", "/messages", {
        as: owner,
        params: { anchor: "newest", num_before: 5, num_after: 0, narrow: [{ operator: "is", operand: "dm" }], apply_markdown: false },
      });
      return res.body.messages.find((m: any) => m.sender_email === NOTIFICATION_BOT && m.content.startsWith("You requested a reminder for the following direct message."));
    };
    const delivered = await eventually(fromBot, 10_000);
    expect(delivered?.sender_email).toBe(NOTIFICATION_BOT);
    expect(delivered.content).toContain(`@_**Bob|${bob.id}** [said](`);
    expect(delivered.content).toContain("```quote\ncall me\n```");
    expect(await eventually(async () => (await list(owner)).length === 0)).toBe(true);
    const events = (await api(server, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events;
    expect(events.map((e: any) => e.op)).toEqual(["add", "remove"]);
    expect(events[1].reminder_id).toBe(created.body.reminder_id);
  });
});
