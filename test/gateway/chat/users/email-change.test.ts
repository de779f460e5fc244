/** Changing one's e-mail address by confirmation, on both engines: PATCH /settings, the e-mail, confirming, events. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";
import { emailKeyFor, lastEmailTo } from "../../../support/mail.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("e-mail changes on %s", (engine) => {
  let server: TestServer;
  let owner: User;

  const changeEmail = (as: Credentials, email: string) => api(server, "PATCH", "/settings", { as, params: { email } });
  const confirm = (params: Record<string, unknown>) => api(server, "POST", "/settings/email/confirm", { params, validate: false });
  const setEmailChangesDisabled = (disabled: boolean) => api(server, "PATCH", "/realm", { as: owner, params: { email_changes_disabled: disabled }, validate: false });
  /** The `person` of each realm_user update in the queue, read as `as` (the owner may have a new address by then). */
  const realmUserUpdates = async (as: Credentials, queue: { queueId: string }) => {
    const polled = await api(server, "GET", "/events", { as, params: { queue_id: queue.queueId, last_event_id: -1, dont_block: true } });
    return polled.body.events.filter((e: any) => e.type === "realm_user" && e.op === "update").map((e: any) => e.person);
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
  });
  afterAll(async () => server?.close());

  it("changes the address once the key e-mailed to it is confirmed, and tells everyone", async () => {
    const ann = await createUser(server, "ann@example.com", "Ann");
    const ben = await createUser(server, "ben@example.com", "Ben");
    const res = await changeEmail(ann, " ann.lee@example.com ");
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ result: "success", msg: "" });
    const mail = await lastEmailTo(server, "ann.lee@example.com");
    expect(mail.subject).toBe("Verify your new email address for Chorus");
    expect(mail.body).toContain("/api/v1/settings/email/confirm");
    // Nothing changes before the confirmation.
    expect((await api(server, "GET", "/users/me", { as: ann })).body).toMatchObject({ email: "ann@example.com", delivery_email: "ann@example.com" });

    const annQueue = await openQueue(server, ann, ["realm_user"]);
    const benQueue = await openQueue(server, ben, ["realm_user"]);
    const key = await emailKeyFor(server, "ann.lee@example.com");
    const confirmed = await confirm({ key });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body).toMatchObject({ result: "success", user_id: ann.id, old_email: "ann@example.com", new_email: "ann.lee@example.com" });

    const moved = { ...ann, email: "ann.lee@example.com" };
    expect((await api(server, "GET", "/users/me", { as: moved })).body).toMatchObject({ email: "ann.lee@example.com", delivery_email: "ann.lee@example.com" });
    expect((await api(server, "GET", "/users/me", { as: ann })).status).toBe(401);
    expect((await lastEmailTo(server, "ann@example.com")).subject).toBe("Email address changed for Chorus");
    for (const [as, queue] of [[moved, annQueue], [ben, benQueue]] as const) {
      expect(await realmUserUpdates(as, queue)).toEqual([
        { user_id: ann.id, delivery_email: "ann.lee@example.com" },
        { user_id: ann.id, new_email: "ann.lee@example.com" },
        expect.objectContaining({ user_id: ann.id, avatar_source: "G", avatar_url: expect.stringContaining("gravatar") }),
      ]);
    }
    const again = await confirm({ key });
    expect(again.status).toBe(400);
    expect(again.body.msg).toBe("This e-mail change has already been confirmed");
  });

  it("keeps a hidden address from those who may not see it", async () => {
    const cat = await createUser(server, "cat@example.com", "Cat");
    const dan = await createUser(server, "dan@example.com", "Dan");
    // Administrators only.
    expect((await api(server, "PATCH", "/settings", { as: cat, params: { email_address_visibility: 3 } })).status).toBe(200);
    expect((await changeEmail(cat, "cat.new@example.com")).status).toBe(200);
    const ownerQueue = await openQueue(server, owner, ["realm_user"]);
    const danQueue = await openQueue(server, dan, ["realm_user"]);
    expect((await confirm({ key: await emailKeyFor(server, "cat.new@example.com") })).status).toBe(200);

    expect(await realmUserUpdates(owner, ownerQueue)).toEqual([{ user_id: cat.id, delivery_email: "cat.new@example.com" }, expect.objectContaining({ avatar_source: "G" })]);
    expect(await realmUserUpdates(dan, danQueue)).toEqual([expect.objectContaining({ avatar_source: "G" })]);
    // The API e-mail stays the placeholder, as Zulip keeps it when the real address is not public; login uses the new one.
    const me = await api(server, "GET", "/users/me", { as: { ...cat, email: "cat.new@example.com" } });
    expect(me.body).toMatchObject({ email: `user${cat.id}@chorus.invalid`, delivery_email: "cat.new@example.com" });
  });

  it("refuses bad, taken, too frequent and disabled changes, and unknown, replaced or expired keys", async () => {
    const eve = await createUser(server, "eve@example.com", "Eve");
    const refused = async (email: string) => (await changeEmail(eve, email)).body.msg;
    expect(await refused("not-an-address")).toBe("Invalid address.");
    expect(await refused("BEN@example.com")).toBe("Already has an account.");
    // The same address (or none) is no change at all.
    expect((await changeEmail(eve, "eve@example.com")).status).toBe(200);

    expect((await confirm({ key: "no-such-key" })).body).toMatchObject({ code: "BAD_REQUEST", msg: "Invalid e-mail change key" });
    expect((await confirm({})).body.code).toBe("REQUEST_VARIABLE_MISSING");

    await changeEmail(eve, "eve.one@example.com");
    const first = await emailKeyFor(server, "eve.one@example.com");
    await changeEmail(eve, "eve.two@example.com");
    expect((await confirm({ key: first })).body.msg).toBe("This e-mail change was replaced by a later request");
    await server.node.store.db.updateTable("email_changes").set({ expires_at: 0 }).where("new_email", "=", "eve.two@example.com").execute();
    expect((await confirm({ key: await emailKeyFor(server, "eve.two@example.com") })).body.msg).toBe("This e-mail change link has expired");

    // Two requests an hour, as Zulip allows.
    const limited = await changeEmail(eve, "eve.three@example.com");
    expect(limited.status).toBe(429);
    expect(limited.body).toMatchObject({ code: "RATE_LIMIT_HIT", "retry-after": expect.any(Number) });

    // An address taken between the request and the confirmation.
    const fay = await createUser(server, "fay@example.com", "Fay");
    await changeEmail(fay, "fay.new@example.com");
    await createUser(server, "fay.new@example.com", "Other Fay");
    expect((await confirm({ key: await emailKeyFor(server, "fay.new@example.com") })).body.msg).toBe("Already has an account.");

    // Organizations may disable changes; administrators may still change theirs.
    expect((await setEmailChangesDisabled(true)).status).toBe(200);
    expect((await changeEmail(fay, "fay.two@example.com")).body.msg).toBe("Email address changes are disabled in this organization.");
    expect((await changeEmail(owner, "boss@example.com")).status).toBe(200);
    await setEmailChangesDisabled(false);
  });
});
