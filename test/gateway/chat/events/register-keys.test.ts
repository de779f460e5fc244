/**
 * POST /register returns, for each `fetch_event_types` type Chorus serves, every initial-state key Zulip's OpenAPI
 * description documents for that type ("Present if `X` is present in `fetch_event_types`"), each valid. Real
 * clients index these keys without checking (zulip-terminal: `KeyError: 'user_id'`, then `'muted_topics'`).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { HAVE_ZULIP_OPENAPI, zulipOpenApi } from "../../../support/openapi.ts";

/** The event types whose initial state Chorus computes. */
const SERVED_TYPES = [
  "message",
  "subscription",
  "stream",
  "realm",
  "realm_user",
  "realm_user_groups",
  "realm_user_settings_defaults",
  "realm_emoji",
  "realm_linkifiers",
  "realm_filters",
  "realm_playgrounds",
  "channel_folders",
  "saved_snippets",
  "user_settings",
  "update_message_flags",
  "presence",
  "drafts",
  "user_topic",
  "muted_topics",
  "starred_messages",
  "navigation_views",
  "scheduled_messages",
  "reminders",
  "recent_private_conversations",
  "custom_profile_fields",
  "default_streams",
  "default_stream_groups",
  "alert_words",
  "user_status",
  "muted_users",
];

type Schema = { $ref?: string; allOf?: Schema[]; properties?: Record<string, Schema>; description?: string };

/** The documented keys of POST /register's answer, by the fetch_event_types type that brings them. */
function documentedKeysByType(): Map<string, string[]> {
  const doc = zulipOpenApi() as unknown as { paths: any; components: { schemas: Record<string, Schema> } };
  const resolve = (s: Schema): Schema => (s.$ref ? resolve(doc.components.schemas[s.$ref.split("/").at(-1)!]!) : s);
  const root = resolve(doc.paths["/register"].post.responses["200"].content["application/json"].schema);
  const byType = new Map<string, string[]>();
  for (const part of root.allOf ?? [root]) {
    for (const [key, schema] of Object.entries(resolve(part).properties ?? {})) {
      const description = schema.description ?? resolve(schema).description ?? "";
      const present = description.match(/Present if `(\w+)` is present in `fetch_event_types`(,\s*and)?/);
      // "..., and the realm is a demo organization": present only under a further condition.
      if (present && !present[2]) byType.set(present[1]!, [...(byType.get(present[1]!) ?? []), key]);
    }
  }
  return byType;
}

// The documented keys come from Zulip's yaml: without it (a fresh clone) skipped, as global-setup.ts says once.
describe.skipIf(!HAVE_ZULIP_OPENAPI).each(ENGINES)("POST /register initial state keys on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine);
  });
  afterAll(async () => server?.close());

  const byType = HAVE_ZULIP_OPENAPI ? documentedKeysByType() : new Map<string, string[]>();
  it("finds documented keys for every served type", () => {
    for (const type of SERVED_TYPES.filter((t) => !["update_message_flags", "drafts"].includes(t))) expect(byType.get(type), type).toBeDefined();
  });

  it.each(SERVED_TYPES)("has every documented key of %s, valid", async (type) => {
    const res = await api(server, "POST", "/register", { as: server.owner, params: { fetch_event_types: [type], event_types: ["message"] } });
    expect(res.status).toBe(200);
    const missing = (byType.get(type) ?? []).filter((k) => !(k in res.body));
    expect(missing).toEqual([]);
  });

  it("lists muted topics (legacy form), starred messages and deactivated users", async () => {
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "keys" }] } });
    const subscriptions = (await api(server, "GET", "/users/me/subscriptions", { as: server.owner })).body.subscriptions;
    const channel = subscriptions.find((x: { name: string }) => x.name === "keys").stream_id;
    const sent = await api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: channel, topic: "t", content: "star me" } });
    await api(server, "POST", "/messages/flags", { as: server.owner, params: { messages: [sent.body.id], op: "add", flag: "starred" } });
    expect((await api(server, "POST", "/user_topics", { as: server.owner, params: { stream_id: channel, topic: "noise", visibility_policy: 1 } })).status).toBe(200);
    const gone = await createUser(server, "gone@example.com");
    expect((await api(server, "DELETE", `/users/${gone.id}`, { as: server.owner, template: "/users/{user_id}" })).status).toBe(200);
    const res = await api(server, "POST", "/register", { as: server.owner, params: { fetch_event_types: ["muted_topics", "starred_messages", "realm_user"] } });
    expect(res.body.muted_topics).toEqual([["keys", "noise", expect.any(Number)]]);
    expect(res.body.starred_messages).toEqual([sent.body.id]);
    expect(res.body.realm_non_active_users.map((u: { user_id: number }) => u.user_id)).toEqual([gone.id]);
    expect(res.body.realm_users.map((u: { user_id: number }) => u.user_id)).not.toContain(gone.id);
  });

  it("answers zulip-terminal's register in full", async () => {
    const fetch = ["realm", "presence", "subscription", "message", "starred_messages", "update_message_flags", "muted_topics", "realm_user", "realm_user_groups", "user_settings", "realm_emoji", "custom_profile_fields", "zulip_version"];
    const res = await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message", "update_message", "reaction", "subscription", "typing", "update_message_flags", "user_settings", "realm_emoji", "realm_user"], fetch_event_types: fetch, apply_markdown: true, client_gravatar: true, include_subscribers: true } });
    expect(res.status).toBe(200);
    const me = res.body.realm_users.find((u: { user_id: number }) => u.user_id === res.body.user_id);
    expect(me).toMatchObject({ email: res.body.email, full_name: res.body.full_name, is_owner: true });
    expect(res.body).toMatchObject({ is_owner: true, is_admin: true, is_guest: false, muted_topics: expect.any(Array), starred_messages: expect.any(Array), cross_realm_bots: expect.any(Array) });
  });
});
