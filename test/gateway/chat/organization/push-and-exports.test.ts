/**
 * The services Chorus does not run, answered as a Zulip server without them answers: mobile push (no bouncer, no
 * FCM/APNs credentials) and organization exports (none made through the web); export consents are real.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("push and exports on %s", (engine) => {
  let server: TestServer;
  let admin: Credentials & { id: number };
  let member: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine, { administratorEmail: "operator@example.com" });
    admin = await createUserWithRole(server, "admin@example.com", 200, "Ada");
    member = await createUser(server, "member@example.com", "Mo");
  });
  afterAll(async () => server?.close());

  it("refuses an E2EE push registration as not configured, and has no E2EE device to test", async () => {
    const register = await api(server, "POST", "/mobile_push/register", {
      as: member,
      params: { token_kind: "fcm", push_account_id: 7, push_public_key: "k", bouncer_public_key: "b", encrypted_push_registration: "e" },
    });
    expect([register.status, register.body.code, register.body.msg]).toEqual([400, "PUSH_SERVICE_NOT_CONFIGURED", "Server is not configured to use push notification service."]);
    const e2ee = await api(server, "POST", "/mobile_push/e2ee/test_notification", { as: member, params: {} });
    expect([e2ee.status, e2ee.body.code]).toEqual([400, "NO_ACTIVE_PUSH_DEVICE"]);
  });

  it("accepts a test notification to a known token (nothing to send it through), refuses an unknown one", async () => {
    expect((await api(server, "POST", "/users/me/android_gcm_reg_id", { as: member, params: { token: "fcm-token-1" } })).status).toBe(200);
    expect((await api(server, "POST", "/mobile_push/test_notification", { as: member, params: { token: "fcm-token-1" } })).status).toBe(200);
    expect((await api(server, "POST", "/mobile_push/test_notification", { as: member, params: {} })).status).toBe(200);
    const unknown = await api(server, "POST", "/mobile_push/test_notification", { as: member, params: { token: "never-registered" } });
    expect([unknown.status, unknown.body.code, unknown.body.msg]).toEqual([400, "INVALID_PUSH_DEVICE_TOKEN", "Device not recognized"]);
  });

  it("lists no exports and sends an export request to the server's administrator", async () => {
    expect((await api(server, "GET", "/export/realm", { as: admin })).body.exports).toEqual([]);
    const create = await api(server, "POST", "/export/realm", { as: admin, params: { export_type: 2 } });
    expect([create.status, create.body.msg]).toEqual([400, "Please request a manual export from operator@example.com."]);
    expect((await api(server, "POST", "/export/realm", { as: admin, params: { export_type: 3 } })).status).toBe(400);
  });

  it("lists each active human's consent to a private data export, which PATCH /settings changes", async () => {
    expect((await api(server, "PATCH", "/settings", { as: member, params: { allow_private_data_export: true } })).status).toBe(200);
    const consents = (await api(server, "GET", "/export/realm/consents", { as: admin })).body.export_consents as Array<{ user_id: number; consented: boolean }>;
    expect(consents).toContainEqual({ user_id: member.id, consented: true });
    expect(consents).toContainEqual({ user_id: admin.id, consented: false });
    expect(consents.length).toBe(3); // the owner too; no bots
  });

  it("keeps exports to administrators", async () => {
    for (const [method, path] of [["GET", "/export/realm"], ["POST", "/export/realm"], ["GET", "/export/realm/consents"]] as const) {
      const res = await api(server, method, path, { as: member });
      expect([res.status, res.body.msg]).toEqual([400, "Must be an organization administrator"]);
    }
  });
});
