/**
 * Password reset by e-mail, on both engines: POST /password_reset (the same answer whether or not an account has
 * the address, an e-mail only to an active account, silently limited), POST /password_reset/confirm (once,
 * within a day, the latest key only, the old password stops working at once). The page over it is tested in
 * test/gateway/pages/people.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { emailKeyFor, lastEmailTo } from "../../../support/mail.ts";

describe.each(ENGINES)("password reset on %s", (engine) => {
  let server: TestServer;

  const request = (email: string) => api(server, "POST", "/password_reset", { params: { email }, validate: false });
  const confirm = (params: Record<string, unknown>) => api(server, "POST", "/password_reset/confirm", { params, validate: false });
  const fetchApiKey = (username: string, password: string) => api(server, "POST", "/fetch_api_key", { params: { username, password } });
  const mailsTo = async (address: string) => (await server.node.store.db.selectFrom("email_outbox").select("id").where("to_address", "=", address).execute()).length;

  beforeAll(async () => {
    server = await startTestServer(engine);
  });
  afterAll(async () => server?.close());

  it("e-mails a link whose key sets a new password once; the old password stops working", async () => {
    const pat = await createUser(server, "pat@example.com", "Pat");
    // The address in any case, with spaces around: the account's own address gets the e-mail.
    expect((await request("  PAT@example.com ")).body).toEqual({ result: "success", msg: "" });
    const mail = await lastEmailTo(server, "pat@example.com");
    expect(mail.subject).toBe("Reset your password for Chorus");
    expect(mail.body).toContain(`${server.url}/accounts/password/reset/`);
    const key = await emailKeyFor(server, "pat@example.com");

    expect((await confirm({ key, new_password: "a-brand-new-one" })).status).toBe(200);
    expect((await fetchApiKey("pat@example.com", "pw-pat@example.com")).status).toBe(401);
    expect((await fetchApiKey("pat@example.com", "a-brand-new-one")).body.api_key).toBe(pat.key);
    // The API key was not changed, and a cached credential check sees the new password at once.
    expect((await api(server, "GET", "/users/me", { as: pat })).status).toBe(200);

    const reused = await confirm({ key, new_password: "third-password" });
    expect(reused.status).toBe(400);
    expect(reused.body).toMatchObject({ result: "error", code: "BAD_REQUEST", msg: "This password reset link has already been used." });
  });

  it("answers the same for unknown and deactivated addresses, and e-mails neither", async () => {
    const gone = await createUser(server, "gone@example.com", "Gone");
    expect((await api(server, "DELETE", `/users/${gone.id}`, { as: server.owner })).status).toBe(200);
    for (const email of ["nobody@example.com", "gone@example.com"]) {
      expect((await request(email)).body).toEqual({ result: "success", msg: "" });
      expect(await mailsTo(email)).toBe(0);
    }
  });

  it("keeps only the latest key, refuses unknown and expired keys and bad input, and limits requests silently", async () => {
    await createUser(server, "kim@example.com", "Kim");
    await request("kim@example.com");
    const first = await emailKeyFor(server, "kim@example.com");
    await request("kim@example.com");
    const second = await emailKeyFor(server, "kim@example.com");
    expect(second).not.toBe(first);
    expect((await confirm({ key: first, new_password: "x-password" })).body.msg).toBe("A newer password reset link replaced this one: use the latest e-mail.");
    // Zulip's limit of two e-mails an hour to one address: the third request answers the same and sends nothing.
    expect((await request("kim@example.com")).status).toBe(200);
    expect(await mailsTo("kim@example.com")).toBe(2);

    await server.node.store.db.updateTable("password_resets").set({ expires_at: Math.floor(Date.now() / 1000) - 1 }).where("status", "=", "pending").execute();
    expect((await confirm({ key: second, new_password: "x-password" })).body.msg).toBe("This password reset link has expired.");
    expect((await confirm({ key: "no-such-key", new_password: "x-password" })).body.msg).toBe("This password reset link is not valid.");
    const missing = await confirm({ key: second });
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ code: "REQUEST_VARIABLE_MISSING" });
    expect((await confirm({ key: second, new_password: "" })).status).toBe(400);
  });
});
