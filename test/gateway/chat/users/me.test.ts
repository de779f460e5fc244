/** The caller's own data on both engines: settings, drafts and navigation views, with their events. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("own data on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };
  let channelId: number;

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
    await api(server, "POST", "/users/me/subscriptions", { as: ann, params: { subscriptions: [{ name: "drafting" }] } });
    channelId = (await api(server, "GET", "/users/me/subscriptions", { as: ann })).body.subscriptions[0].stream_id;
  });
  afterAll(async () => server?.close());

  const register = (as: Credentials, types: string[]) =>
    api(server, "POST", "/register", { as, params: { event_types: types, fetch_event_types: [...types, "user_settings", "drafts", "navigation_views"] } });
  const events = async (as: Credentials, queue: string) =>
    (await api(server, "GET", "/events", { as, params: { queue_id: queue, last_event_id: -1, dont_block: true } })).body.events.map(({ id, ...e }: any) => e);

  describe("PATCH /settings", () => {
    it("changes settings, reports them in register and in user_settings events", async () => {
      const q = (await register(ann, ["user_settings", "realm_user"])).body.queue_id;
      const res = await api(server, "PATCH", "/settings", { as: ann, params: { high_contrast_mode: true, color_scheme: 2, timezone: "Europe/Paris", full_name: "Ann Lee", unknown_thing: 1 } });
      expect(res.status).toBe(200);
      expect(res.body.ignored_parameters_unsupported).toEqual(["unknown_thing"]);
      const got = await events(ann, q);
      expect(got).toEqual(
        expect.arrayContaining([
          { type: "user_settings", op: "update", property: "high_contrast_mode", value: true },
          { type: "user_settings", op: "update", property: "color_scheme", value: 2 },
          { type: "user_settings", op: "update", property: "timezone", value: "Europe/Paris" },
          { type: "realm_user", op: "update", person: { user_id: ann.id, full_name: "Ann Lee" } },
          { type: "realm_user", op: "update", person: { user_id: ann.id, timezone: "Europe/Paris" } },
        ]),
      );
      const state = await register(ann, ["message"]);
      expect(state.body.user_settings).toMatchObject({ high_contrast_mode: true, color_scheme: 2, timezone: "Europe/Paris" });
      expect((await api(server, "GET", "/users/me", { as: ann })).body).toMatchObject({ full_name: "Ann Lee", timezone: "Europe/Paris" });
      // The same values again change nothing and send nothing.
      const q2 = (await register(ann, ["user_settings"])).body.queue_id;
      await api(server, "PATCH", "/settings", { as: ann, params: { high_contrast_mode: true } });
      expect(await events(ann, q2)).toEqual([]);
    });

    it("refuses values Zulip does not allow", async () => {
      const patch = (params: Record<string, unknown>) => api(server, "PATCH", "/settings", { as: ann, params });
      expect((await patch({ color_scheme: 7 })).body.msg).toBe("Invalid color_scheme");
      expect((await patch({ web_home_view: "nowhere" })).status).toBe(400);
      expect((await patch({ timezone: "Mars/Olympus" })).body.msg).toBe("Invalid timezone");
      expect((await patch({ emojiset: "apple" })).status).toBe(400);
      expect((await patch({ enable_sounds: "yes" })).body.msg).toBe("enable_sounds is not a boolean");
      expect((await patch({ full_name: "   " })).body.msg).toBe("Name too short!");
      expect((await patch({ new_password: "x" })).body.code).toBe("REQUEST_VARIABLE_MISSING");
      expect((await patch({ old_password: "wrong", new_password: "x" })).body.msg).toBe("Wrong password!");
    });

    it("changes the password with the old one, and the new one then logs in", async () => {
      const res = await api(server, "PATCH", "/settings", { as: ben, params: { old_password: "pw-" + ben.email, new_password: "n3w-secret" } });
      expect(res.status).toBe(200);
      expect((await api(server, "POST", "/fetch_api_key", { params: { username: ben.email, password: "n3w-secret" } })).body.api_key).toBe(ben.key);
      expect((await api(server, "POST", "/fetch_api_key", { params: { username: ben.email, password: "pw-" + ben.email } })).status).toBe(401);
    });
  });

  describe("drafts", () => {
    it("creates, lists, edits and deletes drafts, with events", async () => {
      const q = (await register(ann, ["drafts"])).body.queue_id;
      const created = await api(server, "POST", "/drafts", {
        as: ann,
        params: {
          drafts: [
            { type: "stream", to: [channelId], topic: "plans", content: "half a thought" },
            { type: "private", to: [ben.id], topic: "ignored", content: "psst", timestamp: 1700000000 },
            { type: "", to: [], topic: "", content: "somewhere" },
          ],
        },
      });
      expect(created.status).toBe(200);
      expect(created.body.ids).toHaveLength(3);
      const [a, b, c] = created.body.ids;
      const listed = await api(server, "GET", "/drafts", { as: ann });
      expect(listed.body.count).toBe(3);
      expect(listed.body.drafts[1]).toEqual({ id: b, type: "private", to: [ben.id], topic: "", content: "psst", timestamp: 1700000000 });
      expect((await api(server, "PATCH", `/drafts/${a}`, { as: ann, template: "/drafts/{draft_id}", params: { draft: { type: "stream", to: [channelId], topic: "plans", content: "a whole thought" } } })).status).toBe(200);
      expect((await api(server, "DELETE", `/drafts/${c}`, { as: ann, template: "/drafts/{draft_id}" })).status).toBe(200);
      const got = await events(ann, q);
      expect(got.map((e: any) => `${e.type}:${e.op}`)).toEqual(["drafts:add", "drafts:update", "drafts:remove"]);
      expect(got[1].draft).toMatchObject({ id: a, content: "a whole thought" });
      expect(got[2].draft_id).toBe(c);
      expect((await register(ann, ["message"])).body.drafts.map((d: any) => d.id)).toEqual([a, b]);
      // Another user's draft does not exist for this one.
      expect((await api(server, "DELETE", `/drafts/${a}`, { as: ben, template: "/drafts/{draft_id}" })).status).toBe(404);
    });

    it("applies Zulip's addressing rules", async () => {
      const post = (draft: Record<string, unknown>) => api(server, "POST", "/drafts", { as: ann, params: { drafts: [draft] } });
      expect((await post({ type: "stream", to: [], topic: "t", content: "x" })).body.msg).toBe("Must specify exactly 1 channel ID for channel messages");
      expect((await post({ type: "stream", to: [987654], topic: "t", content: "x" })).body.msg).toBe("Invalid channel ID");
      expect((await post({ type: "private", to: [987654], topic: "", content: "x" })).body.msg).toBe("Invalid user ID");
      expect((await post({ type: "", to: [ben.id], topic: "", content: "x" })).status).toBe(400);
      expect((await post({ type: "", to: [], topic: "", content: "a\u0000b" })).body.msg).toBe("Content must not contain null bytes");
      expect((await post({ type: "email", to: [], topic: "", content: "x" })).status).toBe(400);
      expect((await post({ id: 5, type: "", to: [], topic: "", content: "x" })).status).toBe(400);
      const missing = await api(server, "PATCH", "/drafts/999999", { as: ann, template: "/drafts/{draft_id}", params: { draft: { type: "", to: [], topic: "", content: "x" } } });
      expect(missing.status).toBe(404);
      expect(missing.body.msg).toBe("Draft does not exist");
    });

    it("deletes server drafts when synchronization is turned off, and refuses new ones", async () => {
      await api(server, "POST", "/drafts", { as: ben, params: { drafts: [{ type: "", to: [], topic: "", content: "mine" }] } });
      const q = (await register(ben, ["drafts"])).body.queue_id;
      await api(server, "PATCH", "/settings", { as: ben, params: { enable_drafts_synchronization: false } });
      expect((await api(server, "GET", "/drafts", { as: ben })).body.count).toBe(0);
      expect((await events(ben, q)).map((e: any) => `${e.type}:${e.op}`)).toEqual(["drafts:remove"]);
      const refused = await api(server, "POST", "/drafts", { as: ben, params: { drafts: [{ type: "", to: [], topic: "", content: "x" }] } });
      expect(refused.body.msg).toBe("User has disabled synchronizing drafts.");
    });
  });

  describe("navigation views", () => {
    const path = (fragment: string) => `/navigation_views/${encodeURIComponent(fragment)}`;
    const T = "/navigation_views/{fragment}";

    it("adds, updates and removes built-in and custom views, with events", async () => {
      const q = (await register(ann, ["navigation_view"])).body.queue_id;
      expect((await api(server, "POST", "/navigation_views", { as: ann, params: { fragment: "narrow/is/starred", is_pinned: true } })).status).toBe(200);
      expect((await api(server, "POST", "/navigation_views", { as: ann, params: { fragment: "narrow/channel/9-design", is_pinned: false, name: "Design" } })).status).toBe(200);
      expect((await api(server, "PATCH", path("narrow/channel/9-design"), { as: ann, template: T, params: { is_pinned: true, name: "Design team" } })).status).toBe(200);
      expect((await api(server, "DELETE", path("narrow/is/starred"), { as: ann, template: T })).status).toBe(200);
      const listed = await api(server, "GET", "/navigation_views", { as: ann });
      expect(listed.body.navigation_views).toEqual([{ fragment: "narrow/channel/9-design", is_pinned: true, name: "Design team" }]);
      expect(await events(ann, q)).toEqual([
        { type: "navigation_view", op: "add", navigation_view: { fragment: "narrow/is/starred", is_pinned: true, name: null } },
        { type: "navigation_view", op: "add", navigation_view: { fragment: "narrow/channel/9-design", is_pinned: false, name: "Design" } },
        { type: "navigation_view", op: "update", fragment: "narrow/channel/9-design", data: { is_pinned: true, name: "Design team" } },
        { type: "navigation_view", op: "remove", fragment: "narrow/is/starred" },
      ]);
    });

    it("applies the built-in versus custom rules", async () => {
      const post = (params: Record<string, unknown>) => api(server, "POST", "/navigation_views", { as: ben, params });
      expect((await post({ fragment: "   ", is_pinned: true })).status).toBe(400);
      expect((await post({ fragment: "inbox", is_pinned: true, name: "My inbox" })).body.msg).toBe("Built-in views cannot have a custom name.");
      expect((await post({ fragment: "narrow/topic/x", is_pinned: true })).body.msg).toBe("Custom views must have a valid name.");
      expect((await post({ fragment: "inbox", is_pinned: true })).status).toBe(200);
      expect((await post({ fragment: "inbox", is_pinned: false })).body.msg).toBe("Navigation view already exists.");
      const rename = await api(server, "PATCH", path("inbox"), { as: ben, template: T, params: { name: "Named" } });
      expect(rename.body.msg).toBe("Built-in views cannot have a custom name.");
      const missing = await api(server, "PATCH", path("narrow/nothing"), { as: ben, template: T, params: { is_pinned: true } });
      expect(missing.status).toBe(404);
      expect(missing.body.code).toBe("NOT_FOUND");
    });
  });
});
