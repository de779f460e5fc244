/**
 * User status on both engines: POST /users/me/status as the Python bindings send it (status_text, away, emoji_name,
 * emoji_code, reaction_type), GET /users/{user_id}/status, an administrator's POST /users/{user_id}/status,
 * user_status events to the realm and the initial state.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { api, createUser, createUserWithRole, ENGINES, eventQueue, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("user status on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
  });
  afterAll(async () => server?.close());

  const setStatus = (params: Record<string, unknown>) => api(server, "POST", "/users/me/status", { as: ann, params });
  const statusOf = (id: number) => api(server, "GET", `/users/${id}/status`, { as: ben, template: "/users/{user_id}/status" });

  it("sets text and emoji (the code and type looked up from the name), tells the realm, and lists it in register", async () => {
    const queue = await eventQueue(server, ben, ["user_status"]);
    expect((await statusOf(ann.id)).body.status).toEqual({});
    expect((await setStatus({ status_text: "  on vacation ", emoji_name: "car" })).status).toBe(200);
    const expected = { status_text: "on vacation", emoji_name: "car", emoji_code: "1f697", reaction_type: "unicode_emoji" };
    expect((await statusOf(ann.id)).body.status).toEqual(expected);
    expect(await queue.events()).toEqual([{ type: "user_status", user_id: ann.id, ...expected, id: expect.any(Number) }]);
    const registered = await api(server, "POST", "/register", { as: ben, params: { fetch_event_types: ["user_status"] } });
    expect(registered.body.user_status).toEqual({ [ann.id]: expected });
  });

  it("changes only the parts given; an empty name clears the emoji; away follows presence_enabled", async () => {
    await setStatus({ status_text: "lunch" });
    expect((await statusOf(ann.id)).body.status).toMatchObject({ status_text: "lunch", emoji_name: "car" });
    await setStatus({ emoji_name: "", away: true });
    expect((await statusOf(ann.id)).body.status).toEqual({ status_text: "lunch", away: true });
    const settings = await api(server, "POST", "/register", { as: ann, params: { fetch_event_types: ["user_settings"] } });
    expect(settings.body.user_settings.presence_enabled).toBe(false);
    await setStatus({ status_text: "", away: false });
    expect((await statusOf(ann.id)).body.status).toEqual({});
  });

  it("refuses what Zulip refuses", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{}, "Client did not pass any new values."],
      [{ status_text: "x".repeat(61) }, "status_text is too long (limit: 60 characters)"],
      [{ status_text: "In a meeting", emoji_code: "1f4bb" }, "Client must pass emoji_name if they pass either emoji_code or reaction_type."],
      [{ status_text: "In a meeting", emoji_code: "1f4bb", emoji_name: "invalid" }, "Emoji 'invalid' does not exist"],
      [{ status_text: "In a meeting", emoji_code: "1f4bb", emoji_name: "car", reaction_type: "unicode_emoji" }, "Invalid emoji name."],
    ];
    for (const [params, msg] of cases) {
      const res = await setStatus(params);
      expect([res.status, res.body.msg]).toEqual([400, msg]);
    }
    const nobody = await statusOf(999_999);
    expect([nobody.status, nobody.body.msg]).toEqual([400, "No such user"]);
  });

  it("lets an administrator set another user's status, and no one else", async () => {
    const admin = await createUserWithRole(server, "admin@example.com", ROLE.administrator);
    const setFor = (as: Credentials, params: Record<string, unknown>) =>
      api(server, "POST", `/users/${ann.id}/status`, { as, params, template: "/users/{user_id}/status" });
    const byMember = await setFor(ben, { status_text: "hijacked" });
    expect([byMember.status, byMember.body.msg]).toEqual([400, "Insufficient permission"]);
    expect((await setFor(admin, { status_text: "set by admin" })).status).toBe(200);
    expect((await statusOf(ann.id)).body.status).toEqual({ status_text: "set by admin" });
  });
});
