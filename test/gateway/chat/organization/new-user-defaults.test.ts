/**
 * What an organization prepares for its new users: the defaults of their settings (PATCH
 * /realm/user_settings_defaults, realm_user_settings_defaults in register and its event) and Welcome Bot's custom
 * message, which an administrator can send to themselves first (POST /realm/test_welcome_bot_custom_message).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";

describe.each(ENGINES)("new users' defaults on %s", (engine) => {
  let server: TestServer;
  let admin: Credentials & { id: number };
  let member: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine);
    admin = await createUserWithRole(server, "admin@example.com", 200, "Ada");
    member = await createUser(server, "member@example.com", "Mo");
  });
  afterAll(async () => server?.close());

  const defaultsIn = async (as: Credentials) =>
    (await api(server, "POST", "/register", { as, params: { fetch_event_types: ["realm_user_settings_defaults"] } })).body.realm_user_settings_defaults;
  const settingsOf = async (as: Credentials) => (await api(server, "POST", "/register", { as, params: { fetch_event_types: ["user_settings"] } })).body.user_settings;
  const patchDefaults = (as: Credentials, params: Record<string, unknown>) => api(server, "PATCH", "/realm/user_settings_defaults", { as, params });

  it("changes the defaults, tells everyone once per changed setting, and register shows them", async () => {
    expect((await defaultsIn(member)).enter_sends).toBe(false);
    const queue = await openQueue(server, member, ["realm_user_settings_defaults"]);
    expect((await patchDefaults(admin, { enter_sends: true, emojiset: "text", left_side_userlist: false })).status).toBe(200);
    // In the order of Zulip's settings, not of the request.
    expect(await queue.events()).toEqual([
      { type: "realm_user_settings_defaults", op: "update", property: "emojiset", value: "text" },
      { type: "realm_user_settings_defaults", op: "update", property: "enter_sends", value: true },
    ]);
    const defaults = await defaultsIn(member);
    expect([defaults.enter_sends, defaults.emojiset, defaults.left_side_userlist]).toEqual([true, "text", false]);
    expect(defaults).not.toHaveProperty("timezone");
  });

  it("gives new users the defaults, and leaves existing users' settings alone", async () => {
    const newcomer = await createUser(server, "newcomer@example.com", "Nel");
    const theirs = await settingsOf(newcomer);
    expect([theirs.enter_sends, theirs.emojiset]).toEqual([true, "text"]);
    const existing = await settingsOf(member);
    expect([existing.enter_sends, existing.emojiset]).toEqual([false, "google"]);
    // The newcomer's settings are now their own.
    expect((await patchDefaults(admin, { enter_sends: false })).status).toBe(200);
    expect((await settingsOf(newcomer)).enter_sends).toBe(true);
  });

  it("refuses members and values Zulip does not allow", async () => {
    const byMember = await patchDefaults(member, { enter_sends: true });
    expect([byMember.status, byMember.body.msg]).toEqual([400, "Must be an organization administrator"]);
    expect((await patchDefaults(admin, { emojiset: "comic" })).status).toBe(400);
    expect((await patchDefaults(admin, { web_font_size_px: 99 })).status).toBe(400);
    const ignored = await patchDefaults(admin, { timezone: "Europe/Paris" });
    expect(ignored.body.ignored_parameters_unsupported).toEqual(["timezone"]);
  });

  it("sends an administrator Welcome Bot's custom message", async () => {
    const res = await api(server, "POST", "/realm/test_welcome_bot_custom_message", { as: admin, params: { welcome_message_custom_text: "Welcome to **our** team!" } });
    expect(res.status).toBe(200);
    const message = await api(server, "GET", `/messages/${res.body.message_id}`, { as: admin, template: "/messages/{message_id}" });
    expect(message.body.message.sender_email).toBe("welcome-bot@zulip.com");
    expect(message.body.raw_content).toBe("Welcome to **our** team!");
    expect(message.body.message.display_recipient.map((r: { id: number }) => r.id)).toContain(admin.id);
  });

  it("refuses the test message to members, and an empty or over-long text", async () => {
    const send = (as: Credentials, text: string) => api(server, "POST", "/realm/test_welcome_bot_custom_message", { as, params: { welcome_message_custom_text: text } });
    expect((await send(member, "hi")).body.msg).toBe("Must be an organization administrator");
    expect((await send(admin, "")).body.msg).toBe("Message must not be empty");
    expect((await send(admin, "x".repeat(8001))).status).toBe(400);
  });
});
