/** GET /users/{id}, GET /user_groups and push device tokens, on both engines. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("accounts on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
  });
  afterAll(async () => server?.close());

  it("fetches one user, with the real e-mail only where its owner's setting allows", async () => {
    const res = await api(server, "GET", `/users/${ben.id}`, { as: ann, template: "/users/{user_id}", params: { client_gravatar: false } });
    expect(res.body.user).toMatchObject({ user_id: ben.id, email: ben.email, delivery_email: ben.email, full_name: "Ben", role: 400, is_bot: false });
    // Custom profile values only when asked for (include_custom_profile_fields).
    expect(res.body.user).not.toHaveProperty("profile_data");
    expect(res.body.user.avatar_url).toMatch(/^https:\/\/secure\.gravatar\.com\/avatar\//);
    await api(server, "PATCH", "/settings", { as: ben, params: { email_address_visibility: 3 } });
    const hidden = await api(server, "GET", `/users/${ben.id}`, { as: ann, template: "/users/{user_id}" });
    expect(hidden.body.user.delivery_email).toBeNull();
    expect(hidden.body.user.email).toBe(`user${ben.id}@chorus.invalid`);
    const byAdmin = await api(server, "GET", `/users/${ben.id}`, { as: server.owner, template: "/users/{user_id}" });
    expect(byAdmin.body.user.delivery_email).toBe(ben.email);
    const missing = await api(server, "GET", "/users/987654", { as: ann, template: "/users/{user_id}" });
    expect(missing.status).toBe(400);
    expect(missing.body.msg).toBe("No such user");
    // Not user 16: an id is digits only (Zulip's <int:user_id>), so "0x10" is for GET /users/{email} ("No such user")
    // where that route is served, an unknown endpoint otherwise.
    expect([400, 404]).toContain((await api(server, "GET", "/users/0x10", { as: ann, template: "/users/{user_id}" })).status);
  });

  it("lists the system groups with their members", async () => {
    const res = await api(server, "GET", "/user_groups", { as: ann });
    const byName = new Map(res.body.user_groups.map((g: any) => [g.name, g]));
    for (const name of ["role:internet", "role:everyone", "role:members", "role:fullmembers", "role:moderators", "role:administrators", "role:owners", "role:nobody"]) {
      expect(byName.get(name)).toMatchObject({ is_system_group: true, deactivated: false });
    }
    expect((byName.get("role:members") as any).members).toEqual(expect.arrayContaining([ann.id, ben.id]));
    expect((byName.get("role:administrators") as any).direct_subgroup_ids).toEqual([(byName.get("role:owners") as any).id]);
  });

  it("registers and removes push tokens with Zulip's validation", async () => {
    const apns = "/users/me/apns_device_token";
    const fcm = "/users/me/android_gcm_reg_id";
    expect((await api(server, "POST", apns, { as: ann, params: { token: "c0ffee", appid: "org.zulip.Zulip" } })).status).toBe(200);
    expect((await api(server, "POST", apns, { as: ann, params: { token: "c0ffee", appid: "org.zulip.Zulip" } })).status).toBe(200);
    expect((await api(server, "POST", apns, { as: ann, params: { token: "not hex!", appid: "x" } })).body.msg).toBe("Invalid APNS token");
    expect((await api(server, "POST", apns, { as: ann, params: { token: "", appid: "x" } })).body.msg).toBe("Empty or invalid length token");
    expect((await api(server, "POST", apns, { as: ann, params: { token: "ab" } })).body.code).toBe("REQUEST_VARIABLE_MISSING");
    expect((await api(server, "POST", fcm, { as: ann, params: { token: "android-token-1" } })).status).toBe(200);
    const rows = await server.node.store.db.selectFrom("push_devices").select(["kind", "token"]).where("user_id", "=", ann.id).orderBy("kind").execute();
    expect(rows).toEqual([
      { kind: "apns", token: "c0ffee" },
      { kind: "fcm", token: "android-token-1" },
    ]);
    expect((await api(server, "DELETE", apns, { as: ann, params: { token: "c0ffee" } })).status).toBe(200);
    expect((await api(server, "DELETE", apns, { as: ann, params: { token: "c0ffee" } })).body.msg).toBe("Token does not exist");
  });
});
