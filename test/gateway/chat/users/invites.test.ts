/** Invitations on both engines: sending, listing, revoking, accepting, the e-mail outbox and its SMTP sender. */
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";
import { emailKeyFor } from "../../../support/mail.ts";
import { invitationRealm } from "../../../support/invites.ts";
import { MailSender } from "../../../../actors/chat/organization/mail.ts";
import { Realm, type Invite } from "../../../../actors/chat/organization/realm.protocol.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("invitations on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let member: User;
  let channelId: number;
  let privateId: number;
  let groupId: number;

  const invite = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/invites", { as, params: { stream_ids: [], ...params } });
  const accept = (params: Record<string, unknown>) => api(server, "POST", "/invites/accept", { params, validate: false });
  const keyFor = (email: string) => emailKeyFor(server, email);
  const inviteIdFor = async (email: string) => (await api(server, "GET", "/invites", { as: owner })).body.invites.find((i: any) => i.email === email)?.id;

  beforeAll(async () => {
    server = await startTestServer(engine);
    ({ owner, member, channelId, privateId, groupId } = await invitationRealm(server));
  });
  afterAll(async () => server?.close());

  it("invites, queues the e-mail, tells administrators and lists the invitation", async () => {
    const queue = await openQueue(server, owner, ["invites_changed"]);
    const res = await invite(member, { invitee_emails: "new1@example.com,\n new2@example.com, new1@example.com", stream_ids: [channelId] });
    expect(res.status).toBe(200);
    expect(await queue.events()).toEqual([{ type: "invites_changed" }]);
    const mails = await server.node.store.db.selectFrom("email_outbox").selectAll().where("to_address", "like", "new_@example.com").execute();
    expect(mails.map((m) => m.to_address).sort()).toEqual(["new1@example.com", "new2@example.com"]);
    expect(mails[0]!.subject).toBe("Mo invited you to join Chorus");
    expect(mails[0]!.sent_at).toBeNull(); // no SMTP configured: the outbox keeps them
    const listed = (await api(server, "GET", "/invites", { as: owner })).body.invites.filter((i: any) => i.email.startsWith("new"));
    expect(listed).toEqual([
      expect.objectContaining({ email: "new1@example.com", invited_by_user_id: member.id, invited_as: 400, is_multiuse: false, notify_referrer_on_join: true }),
      expect.objectContaining({ email: "new2@example.com" }),
    ]);
    expect(listed[0].expiry_date - listed[0].invited).toBe(14400 * 60);
    // A member sees only their own invitations.
    const others = await invite(owner, { invitee_emails: "by-owner@example.com", invite_expires_in_minutes: null });
    expect(others.status).toBe(200);
    const own = (await api(server, "GET", "/invites", { as: member })).body.invites;
    expect(own.map((i: any) => i.email)).not.toContain("by-owner@example.com");
    expect((await api(server, "GET", "/invites", { as: owner })).body.invites.find((i: any) => i.email === "by-owner@example.com").expiry_date).toBeNull();
  });

  it("reports addresses it could not invite, with Zulip's partial failure", async () => {
    const partial = await invite(member, { invitee_emails: "member@example.com, fresh@example.com" });
    expect(partial.status).toBe(400);
    expect(partial.body).toMatchObject({
      code: "INVITATION_FAILED",
      errors: [["member@example.com", "Already has an account.", false]],
      sent_invitations: true,
      daily_limit_reached: false,
      license_limit_reached: false,
    });
    expect(await inviteIdFor("fresh@example.com")).toEqual(expect.any(Number));
    const none = await invite(member, { invitee_emails: "member@example.com" });
    expect(none.body).toMatchObject({ code: "INVITATION_FAILED", msg: "We weren't able to invite anyone.", sent_invitations: false });
    const invalid = await invite(member, { invitee_emails: "not-an-address, ok@example.com" });
    expect(invalid.body).toMatchObject({ code: "INVITATION_FAILED", errors: [["not-an-address", "Invalid address.", false]], sent_invitations: false });
    expect(await inviteIdFor("ok@example.com")).toBeUndefined();
  });

  it("checks roles, channels, groups, expiry and the welcome text", async () => {
    const cases: Array<[Credentials, Record<string, unknown>, string]> = [
      [member, { invitee_emails: "a@example.com", invite_as: 200 }, "Must be an organization administrator"],
      [member, { invitee_emails: "a@example.com", invite_as: 100 }, "Must be an organization owner"],
      [owner, { invitee_emails: "a@example.com", invite_as: 250 }, "Invalid invite_as"],
      [owner, { invitee_emails: " , " }, "You must specify at least one email address."],
      [member, { invitee_emails: "a@example.com", stream_ids: [privateId] }, `Invalid channel ID ${privateId}. No invites were sent.`],
      [member, { invitee_emails: "a@example.com", stream_ids: [424242] }, "Invalid channel ID 424242. No invites were sent."],
      [member, { invitee_emails: "a@example.com", group_ids: [groupId] }, "Insufficient permission"],
      [owner, { invitee_emails: "a@example.com", group_ids: [424242] }, "Invalid user group ID: 424242"],
      [owner, { invitee_emails: "a@example.com", invite_expires_in_minutes: 0 }, "invite_expires_in_minutes is too small"],
      [owner, { invitee_emails: "a@example.com", welcome_message_custom_text: "x".repeat(8001) }, "welcome_message_custom_text is too long (limit: 8000 characters)"],
    ];
    for (const [as, params, msg] of cases) {
      const res = await invite(as, params);
      expect(res.status, JSON.stringify(params)).toBe(400);
      expect(res.body.msg, JSON.stringify(params)).toBe(msg);
    }
    expect((await api(server, "POST", "/invites", { as: owner, params: { invitee_emails: "a@example.com" } })).body.code).toBe("REQUEST_VARIABLE_MISSING");
    // Without permission to subscribe others, naming a channel is refused.
    const patch = (value: number) => api(server, "PATCH", "/realm", { as: owner, params: { can_add_subscribers_group: { new: value } }, validate: false });
    const groups = (await api(server, "GET", "/user_groups", { as: owner })).body.user_groups;
    await patch(groups.find((g: any) => g.name === "role:administrators").id);
    expect((await invite(member, { invitee_emails: "a@example.com", stream_ids: [channelId] })).body.msg).toBe("You do not have permission to subscribe other users to channels.");
    await patch(groups.find((g: any) => g.name === "role:members").id);
  });

  it("accepts an invitation: the account, its role, channels and groups, and a note to the referrer", async () => {
    const res = await invite(owner, { invitee_emails: "joiner@example.com", invite_as: 300, stream_ids: [channelId], group_ids: [groupId], welcome_message_custom_text: "Hello!" });
    expect(res.status).toBe(200);
    const key = await keyFor("joiner@example.com");
    const ownerQueue = await openQueue(server, owner, ["message", "realm_user", "user_group", "invites_changed"]);
    const joined = await accept({ key, full_name: "Jo Iner", password: "s3cret-pass" });
    expect(joined.status).toBe(200);
    const joiner: Credentials = { email: "joiner@example.com", key: joined.body.api_key };
    const me = await api(server, "GET", "/users/me", { as: joiner });
    expect(me.body).toMatchObject({ user_id: joined.body.user_id, full_name: "Jo Iner", role: 300 });
    expect((await api(server, "POST", "/fetch_api_key", { params: { username: "joiner@example.com", password: "s3cret-pass" } })).body.api_key).toBe(joiner.key);
    const subs = (await api(server, "GET", "/users/me/subscriptions", { as: joiner })).body.subscriptions;
    expect(subs.map((s: any) => s.stream_id)).toEqual([channelId]);
    const group = (await api(server, "GET", "/user_groups", { as: joiner })).body.user_groups.find((g: any) => g.id === groupId);
    expect(group.members).toEqual([joined.body.user_id]);
    const events = await ownerQueue.events();
    expect(events).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ type: "realm_user", op: "add", person: expect.objectContaining({ user_id: joined.body.user_id, role: 300 }) }),
        { type: "user_group", op: "add_members", group_id: groupId, user_ids: [joined.body.user_id] },
        { type: "invites_changed" },
        expect.objectContaining({
          type: "message",
          message: expect.objectContaining({
            sender_email: "notification-bot@zulip.com",
            type: "private",
            content: `@_**Jo Iner|${joined.body.user_id}** accepted your invitation to join Zulip!`,
          }),
        }),
      ]),
    );
    expect(await inviteIdFor("joiner@example.com")).toBeUndefined();
    // The administrator's welcome text reaches the new user from Welcome Bot.
    const inbox = await api(server, "GET", "/messages", { as: joiner, params: { anchor: "newest", num_before: 10, num_after: 0, apply_markdown: false } });
    expect(inbox.body.messages).toEqual([expect.objectContaining({ sender_email: "welcome-bot@zulip.com", content: "Hello!" })]);
    // A used key is refused.
    expect((await accept({ key, full_name: "Again", password: "x" })).body.msg).toBe("This invitation has already been used");
  });

  it("joins the realm's default channels when the invitation asks for them", async () => {
    await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "lobby" }], is_default_stream: true } });
    const lobby = (await api(server, "GET", "/users/me/subscriptions", { as: owner })).body.subscriptions.find((s: any) => s.name === "lobby").stream_id;
    await invite(owner, { invitee_emails: "with-defaults@example.com", stream_ids: [channelId], include_realm_default_subscriptions: true });
    await invite(owner, { invitee_emails: "without-defaults@example.com", stream_ids: [channelId] });
    const channelsOf = async (email: string) => {
      const joined = await accept({ key: await keyFor(email), full_name: "New Person", password: "s3cret-pass" });
      const subs = (await api(server, "GET", "/users/me/subscriptions", { as: { email, key: joined.body.api_key } })).body.subscriptions;
      return subs.map((s: any) => s.stream_id).sort();
    };
    expect(await channelsOf("with-defaults@example.com")).toEqual([channelId, lobby].sort());
    expect(await channelsOf("without-defaults@example.com")).toEqual([channelId]);
  });

  it("refuses revoked, expired and unknown keys", async () => {
    await invite(owner, { invitee_emails: "revoked@example.com", notify_referrer_on_join: false });
    const revokedKey = await keyFor("revoked@example.com");
    const id = await inviteIdFor("revoked@example.com");
    expect((await api(server, "DELETE", `/invites/${id}`, { as: member, template: "/invites/{invite_id}" })).body.msg).toBe("Must be an organization administrator");
    const queue = await openQueue(server, owner, ["invites_changed"]);
    expect((await api(server, "DELETE", `/invites/${id}`, { as: owner, template: "/invites/{invite_id}" })).status).toBe(200);
    expect(await queue.events()).toEqual([{ type: "invites_changed" }]);
    expect((await api(server, "DELETE", `/invites/${id}`, { as: owner, template: "/invites/{invite_id}" })).body.msg).toBe("No such invitation");
    expect((await accept({ key: revokedKey, full_name: "R", password: "x" })).body.msg).toBe("This invitation has been revoked");

    await invite(owner, { invitee_emails: "late@example.com", invite_expires_in_minutes: 1 });
    const lateKey = await keyFor("late@example.com");
    await server.node.store.db.updateTable("invitations").set({ expires_at: Math.floor(Date.now() / 1000) - 1 }).where("email", "=", "late@example.com").execute();
    expect((await accept({ key: lateKey, full_name: "L", password: "x" })).body.msg).toBe("This invitation has expired");
    expect(await inviteIdFor("late@example.com")).toBeUndefined();

    const unknown = await accept({ key: "not-a-key", full_name: "U", password: "x" });
    expect(unknown.status).toBe(400);
    expect(unknown.body).toMatchObject({ result: "error", code: "BAD_REQUEST", msg: "Invalid invitation key" });
    expect((await accept({ key: lateKey, full_name: "L" })).body.code).toBe("REQUEST_VARIABLE_MISSING");
  });

  it("invites once when the transport delivers a request twice", async () => {
    const db = server.node.store.db;
    const realm = await db.selectFrom("realms").select("id").executeTakeFirstOrThrow();
    const request: Invite = {
      op: "invite",
      actingId: owner.id,
      emails: ["twice@example.com"],
      inviteAs: 400,
      streamIds: [],
      groupIds: [],
      expiresInMinutes: 60,
      includeRealmDefaultSubscriptions: false,
      notifyReferrerOnJoin: true,
      welcomeMessageCustomText: null,
      siteUrl: server.url,
      requestKey: "one-request",
    };
    await server.node.system.ref(Realm, realm.id).ask(request);
    await server.node.system.ref(Realm, realm.id).ask(request);
    expect(await db.selectFrom("invitations").select("id").where("email", "=", "twice@example.com").execute()).toHaveLength(1);
    expect(await db.selectFrom("email_outbox").select("id").where("to_address", "=", "twice@example.com").execute()).toHaveLength(1);
  });

  it("stops at Zulip's daily limit of invitations", async () => {
    const db = server.node.store.db;
    const realm = await db.selectFrom("realms").select("id").executeTakeFirstOrThrow();
    const sent = await db.selectFrom("invitations").select("id").execute();
    const now = Math.floor(Date.now() / 1000);
    const filler = Array.from({ length: 100 - sent.length }, (_, i) => ({
      realm_id: realm.id,
      email: `filler${i}@example.com`,
      referrer_id: owner.id,
      invited_as: 400,
      stream_ids: "[]",
      group_ids: "[]",
      include_realm_default_subscriptions: false,
      notify_referrer_on_join: false,
      welcome_message_custom_text: null,
      key_hash: `filler-${i}`,
      created_at: now,
      expires_at: null,
      request_key: "filler",
    }));
    await db.insertInto("invitations").values(filler).execute();
    try {
      const res = await invite(owner, { invitee_emails: "one-too-many@example.com" });
      expect(res.body).toMatchObject({ code: "INVITATION_FAILED", errors: [], sent_invitations: false, daily_limit_reached: true });
      expect(await inviteIdFor("one-too-many@example.com")).toBeUndefined();
    } finally {
      await db.deleteFrom("invitations").where("request_key", "=", "filler").execute();
    }
  });

  it("sends the outbox over SMTP when configured", async () => {
    const smtp = await startSmtpServer();
    const sender = new MailSender(server.node.store, { smtpUrl: `smtp://127.0.0.1:${smtp.port}`, from: "Chorus <noreply@chorus.example>" });
    try {
      await invite(owner, { invitee_emails: "mailed@example.com" });
      sender.start();
      const deadline = Date.now() + 10_000;
      const mailed = () => smtp.messages.find((m) => m.to.some((rcpt) => rcpt.includes("<mailed@example.com>")));
      while (!mailed() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      const mail = mailed()!;
      expect(mail.data).toContain("invited you to join Chorus");
      let row;
      while (Date.now() < deadline) {
        row = await server.node.store.db.selectFrom("email_outbox").selectAll().where("to_address", "=", "mailed@example.com").executeTakeFirstOrThrow();
        if (row.sent_at !== null) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      expect(row!.sent_at).not.toBeNull();
    } finally {
      await sender.close();
      await smtp.close();
    }
  });
});

/** Just enough of an SMTP server to receive messages (no TLS, no auth). */
async function startSmtpServer() {
  const messages: Array<{ to: string[]; data: string }> = [];
  const server = net.createServer((socket) => {
    let to: string[] = [];
    let data: string | undefined;
    let buffer = "";
    socket.write("220 test ESMTP\r\n");
    socket.on("data", (chunk) => {
      buffer += chunk.toString("utf8");
      let end;
      while ((end = buffer.indexOf("\r\n")) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (data !== undefined) {
          if (line === ".") {
            messages.push({ to, data });
            data = undefined;
            to = [];
            socket.write("250 queued\r\n");
          } else data += line + "\n";
          continue;
        }
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === "EHLO" || verb === "HELO") socket.write("250 test\r\n");
        else if (verb === "RCPT") {
          to.push(line);
          socket.write("250 ok\r\n");
        } else if (verb === "DATA") {
          data = "";
          socket.write("354 go ahead\r\n");
        } else if (verb === "QUIT") socket.end("221 bye\r\n");
        else socket.write("250 ok\r\n");
      }
    });
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    messages,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
