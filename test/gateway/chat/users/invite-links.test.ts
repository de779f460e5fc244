/**
 * Reusable invitation links (create, sign up through, revoke, expire), re-sending invitation e-mails, and
 * GET /invites over both kinds, on both engines.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";
import { emailKeyFor } from "../../../support/mail.ts";
import { invitationRealm } from "../../../support/invites.ts";

type User = Credentials & { id: number };

describe.each(ENGINES)("invitation links and resending on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let admin: User;
  let member: User;
  let otherMember: User;
  let channelId: number;
  let privateId: number;
  let groupId: number;
  let systemGroups: Record<string, number>;

  const createLink = (as: Credentials, params: Record<string, unknown> = {}) => api(server, "POST", "/invites/multiuse", { as, params });
  const revokeLink = (as: Credentials, id: number) => api(server, "DELETE", `/invites/multiuse/${id}`, { as, template: "/invites/multiuse/{invite_id}" });
  const resend = (as: Credentials, id: number, validate = true) => api(server, "POST", `/invites/${id}/resend`, { as, template: "/invites/{invite_id}/resend", validate });
  const invites = async (as: Credentials) => (await api(server, "GET", "/invites", { as })).body.invites as any[];
  const linkKey = (link: string) => /\/join\/([\w-]+)\/$/.exec(link)![1]!;
  // Chorus's own endpoints (Zulip does these through its web forms): no OpenAPI description to check against.
  const join = (key: string, email: string) => api(server, "POST", "/invites/join", { params: { key, email }, validate: false });
  const accept = (params: Record<string, unknown>) => api(server, "POST", "/invites/accept", { params, validate: false });
  const outboxTo = (email: string) => server.node.store.db.selectFrom("email_outbox").selectAll().where("to_address", "=", email).orderBy("id").execute();
  const allowMembersToCreateLinks = async (allowed: boolean) => {
    const value = systemGroups[allowed ? "role:members" : "role:administrators"];
    const res = await api(server, "PATCH", "/realm", { as: owner, params: { create_multiuse_invite_group: { new: value } }, validate: false });
    expect(res.status).toBe(200);
  };

  /** Sign up through a link: give the address, then accept the key e-mailed to it. */
  async function signUp(link: string, email: string): Promise<Credentials & { id: number }> {
    const joined = await join(linkKey(link), email);
    expect(joined.status, JSON.stringify(joined.body)).toBe(200);
    const accepted = await accept({ key: await emailKeyFor(server, email), full_name: email.split("@")[0], password: "s3cret-pass" });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(200);
    return { email, key: accepted.body.api_key, id: accepted.body.user_id };
  }

  beforeAll(async () => {
    server = await startTestServer(engine);
    ({ owner, member, channelId, privateId, groupId } = await invitationRealm(server));
    admin = await createUserWithRole(server, "admin@example.com", 200, "Ada");
    otherMember = await createUser(server, "other@example.com", "Oz");
    const groups = (await api(server, "GET", "/user_groups", { as: owner })).body.user_groups;
    systemGroups = Object.fromEntries(groups.filter((g: any) => g.is_system_group).map((g: any) => [g.name, g.id]));
  });
  afterAll(async () => server?.close());

  it("creates a link that several people sign up through, each with its role, channels, groups and welcome", async () => {
    const ownerQueue = await openQueue(server, owner, ["invites_changed"]);
    const created = await createLink(admin, {
      invite_as: 300,
      stream_ids: [channelId],
      group_ids: [groupId],
      invite_expires_in_minutes: 60,
      welcome_message_custom_text: "Welcome aboard!",
    });
    expect(created.status).toBe(200);
    expect(created.body.invite_link).toMatch(new RegExp(`^${server.url}/join/[\\w-]+/$`));
    expect(await ownerQueue.events()).toEqual([{ type: "invites_changed" }]);

    const listed = (await invites(owner)).find((i) => i.is_multiuse && i.link_url === created.body.invite_link);
    expect(listed).toEqual({
      id: expect.any(Number),
      invited_by_user_id: admin.id,
      invited: expect.any(Number),
      expiry_date: expect.any(Number),
      invited_as: 300,
      link_url: created.body.invite_link,
      notify_referrer_on_join: false,
      is_multiuse: true,
    });
    expect(listed.expiry_date - listed.invited).toBe(3600);

    const first = await signUp(created.body.invite_link, "first@example.com");
    const second = await signUp(created.body.invite_link, "second@example.com");
    expect(first.id).not.toBe(second.id);
    for (const joiner of [first, second]) {
      expect((await api(server, "GET", "/users/me", { as: joiner })).body).toMatchObject({ user_id: joiner.id, role: 300 });
      const subs = (await api(server, "GET", "/users/me/subscriptions", { as: joiner })).body.subscriptions;
      expect(subs.map((s: any) => s.stream_id)).toEqual([channelId]);
      const inbox = await api(server, "GET", "/messages", { as: joiner, params: { anchor: "newest", num_before: 10, num_after: 0, apply_markdown: false } });
      expect(inbox.body.messages).toEqual([expect.objectContaining({ sender_email: "welcome-bot@zulip.com", content: "Welcome aboard!" })]);
    }
    const group = (await api(server, "GET", "/user_groups", { as: owner })).body.user_groups.find((g: any) => g.id === groupId);
    expect(group.members).toEqual(expect.arrayContaining([first.id, second.id]));
    // Signing up confirmed each address by e-mail; those confirmations are not invitations of their own.
    expect((await outboxTo("first@example.com"))[0]!.subject).toBe("Confirm your address to join Chorus");
    expect((await invites(owner)).map((i) => i.email)).not.toContain("first@example.com");
    // The link is still there for the next person.
    expect((await invites(owner)).some((i) => i.link_url === created.body.invite_link)).toBe(true);
  });

  it("refuses sign-ups with a bad key, a bad address or one that has an account", async () => {
    const link = (await createLink(owner)).body.invite_link;
    const cases: Array<[string, string, string]> = [
      ["not-a-key", "fresh@example.com", "Invalid invitation key"],
      [linkKey(link), "not-an-address", "Invalid address: not-an-address"],
      [linkKey(link), "MEMBER@example.com", "MEMBER@example.com: Already has an account."],
    ];
    for (const [key, email, msg] of cases) {
      const res = await join(key, email);
      expect(res.status, email).toBe(400);
      expect(res.body).toMatchObject({ result: "error", code: "BAD_REQUEST", msg });
    }
    expect((await api(server, "POST", "/invites/join", { params: { key: linkKey(link) }, validate: false })).body.code).toBe("REQUEST_VARIABLE_MISSING");
    expect((await join(linkKey(link), "")).body).toMatchObject({ code: "BAD_REQUEST", msg: "email cannot be blank" });
    expect(await outboxTo("fresh@example.com")).toEqual([]);
    // An address gets at most two such e-mails an hour, whoever asks.
    expect((await join(linkKey(link), "often@example.com")).status).toBe(200);
    expect((await join(linkKey(link), "Often@example.com")).status).toBe(200);
    const third = await join(linkKey(link), "often@example.com");
    expect(third.status).toBe(429);
    expect(third.body).toMatchObject({ result: "error", code: "RATE_LIMIT_HIT" });
    expect(third.body["retry-after"]).toBeGreaterThan(3500);
    expect(await outboxTo("often@example.com")).toHaveLength(1);
  });

  it("checks who may create links, and the role, channels, groups and expiry asked for", async () => {
    expect((await createLink(member)).body).toMatchObject({ code: "BAD_REQUEST", msg: "Insufficient permission" });
    // Only owners decide who may create links.
    const byAdmin = await api(server, "PATCH", "/realm", { as: admin, params: { create_multiuse_invite_group: { new: systemGroups["role:members"] } }, validate: false });
    expect(byAdmin.body.msg).toBe("Must be an organization owner");
    const realmQueue = await openQueue(server, member, ["realm"]);
    await allowMembersToCreateLinks(true);
    expect(await realmQueue.events()).toEqual([
      { type: "realm", op: "update_dict", property: "default", data: { create_multiuse_invite_group: systemGroups["role:members"] } },
    ]);
    expect((await api(server, "POST", "/register", { as: member })).body.realm_create_multiuse_invite_group).toBe(systemGroups["role:members"]);
    try {
      const cases: Array<[Credentials, Record<string, unknown>, string]> = [
        [member, { invite_as: 200 }, "Must be an organization administrator"],
        [admin, { invite_as: 100 }, "Must be an organization owner"],
        [owner, { invite_as: 250 }, "Invalid invite_as"],
        [member, { stream_ids: [privateId] }, `Invalid channel ID ${privateId}. No invites were sent.`],
        [member, { stream_ids: [424242] }, "Invalid channel ID 424242. No invites were sent."],
        [member, { group_ids: [groupId] }, "Insufficient permission"],
        [owner, { group_ids: [424242] }, "Invalid user group ID: 424242"],
        [owner, { invite_expires_in_minutes: 0 }, "invite_expires_in_minutes is too small"],
        [owner, { welcome_message_custom_text: "x".repeat(8001) }, "welcome_message_custom_text is too long (limit: 8000 characters)"],
      ];
      for (const [as, params, msg] of cases) {
        const res = await createLink(as, params);
        expect(res.status, JSON.stringify(params)).toBe(400);
        expect(res.body.msg, JSON.stringify(params)).toBe(msg);
      }
      const byMember = await createLink(member, { stream_ids: [channelId], welcome_message_custom_text: "ignored for members", invite_expires_in_minutes: null });
      expect(byMember.status).toBe(200);
      const listed = (await invites(member)).find((i) => i.link_url === byMember.body.invite_link);
      expect(listed).toMatchObject({ invited_by_user_id: member.id, invited_as: 400, expiry_date: null });
      const joiner = await signUp(byMember.body.invite_link, "via-member@example.com");
      const inbox = await api(server, "GET", "/messages", { as: joiner, params: { anchor: "newest", num_before: 10, num_after: 0 } });
      expect(inbox.body.messages).toEqual([]);
    } finally {
      await allowMembersToCreateLinks(false);
    }
  });

  it("revokes a link: its creator or an administrator, once; then nobody signs up through it", async () => {
    await allowMembersToCreateLinks(true);
    let link: string;
    try {
      link = (await createLink(member, { stream_ids: [channelId] })).body.invite_link;
    } finally {
      await allowMembersToCreateLinks(false);
    }
    const id = (await invites(member)).find((i) => i.link_url === link).id;
    // Someone asked to sign up before the link was revoked: their e-mail stops working too.
    expect((await join(linkKey(link), "too-late@example.com")).status).toBe(200);

    expect((await revokeLink(otherMember, id)).body.msg).toBe("Must be an organization administrator");
    const memberQueue = await openQueue(server, member, ["invites_changed"]);
    const otherQueue = await openQueue(server, otherMember, ["invites_changed"]);
    expect((await revokeLink(admin, id)).status).toBe(200);
    expect(await memberQueue.events()).toEqual([{ type: "invites_changed" }]);
    expect(await otherQueue.events()).toEqual([]);
    expect((await revokeLink(member, id)).body.msg).toBe("Invitation has already been revoked");
    expect((await revokeLink(owner, 424242)).body.msg).toBe("No such invitation");
    expect((await invites(owner)).some((i) => i.link_url === link)).toBe(false);

    expect((await join(linkKey(link), "after@example.com")).body.msg).toBe("This invitation has been revoked");
    const late = await accept({ key: await emailKeyFor(server, "too-late@example.com"), full_name: "Late", password: "s3cret-pass" });
    expect(late.body).toMatchObject({ code: "BAD_REQUEST", msg: "This invitation has been revoked" });

    // A link to become an owner is the owners' to revoke.
    const ownersLink = (await createLink(owner, { invite_as: 100 })).body.invite_link;
    const ownersId = (await invites(owner)).find((i) => i.link_url === ownersLink).id;
    expect((await revokeLink(admin, ownersId)).body.msg).toBe("Must be an organization owner");
    expect((await revokeLink(owner, ownersId)).status).toBe(200);
  });

  it("stops listing and accepting an expired link", async () => {
    const link = (await createLink(owner, { invite_expires_in_minutes: 5 })).body.invite_link;
    expect((await join(linkKey(link), "before-expiry@example.com")).status).toBe(200);
    const id = (await invites(owner)).find((i) => i.link_url === link).id;
    await server.node.store.db.updateTable("invite_links").set({ expires_at: Math.floor(Date.now() / 1000) - 1 }).where("id", "=", id).execute();
    expect((await invites(owner)).some((i) => i.link_url === link)).toBe(false);
    expect((await join(linkKey(link), "after-expiry@example.com")).body.msg).toBe("This invitation has expired");
    const pending = await accept({ key: await emailKeyFor(server, "before-expiry@example.com"), full_name: "B", password: "s3cret-pass" });
    expect(pending.body.msg).toBe("This invitation has expired");
  });

  it("lists to administrators every invitation, to others their own", async () => {
    await api(server, "POST", "/invites", { as: member, params: { invitee_emails: "from-member@example.com", stream_ids: [] } });
    await api(server, "POST", "/invites", { as: owner, params: { invitee_emails: "from-owner@example.com", stream_ids: [], notify_referrer_on_join: false } });
    const ownersLink = (await createLink(owner)).body.invite_link;

    const seenByAdmin = await invites(admin);
    expect(seenByAdmin.find((i) => i.email === "from-member@example.com")).toEqual({
      id: expect.any(Number),
      email: "from-member@example.com",
      invited_by_user_id: member.id,
      invited: expect.any(Number),
      expiry_date: expect.any(Number),
      invited_as: 400,
      notify_referrer_on_join: true,
      is_multiuse: false,
    });
    expect(seenByAdmin.find((i) => i.email === "from-owner@example.com")).toMatchObject({ invited_by_user_id: owner.id, notify_referrer_on_join: false });
    expect(seenByAdmin.some((i) => i.link_url === ownersLink)).toBe(true);

    const seenByMember = await invites(member);
    expect(seenByMember.length).toBeGreaterThan(0);
    expect(seenByMember.every((i) => i.invited_by_user_id === member.id)).toBe(true);
    expect(seenByMember.map((i) => i.email)).toContain("from-member@example.com");
    expect(await invites(otherMember)).toEqual([]);
  });

  it("re-sends an invitation e-mail with a working key, to those who manage the invitation", async () => {
    await api(server, "POST", "/invites", { as: member, params: { invitee_emails: "resent@example.com", stream_ids: [channelId] } });
    const id = (await invites(member)).find((i) => i.email === "resent@example.com").id;
    const firstKey = await emailKeyFor(server, "resent@example.com");

    expect((await resend(otherMember, id)).body).toMatchObject({ code: "BAD_REQUEST", msg: "Must be an organization administrator" });
    expect((await resend(member, id)).status).toBe(200);
    expect((await resend(admin, id)).status).toBe(200);
    const mails = await outboxTo("resent@example.com");
    expect(mails).toHaveLength(3);
    expect(mails.every((m) => m.subject === "Mo invited you to join Chorus" && m.sent_at === null)).toBe(true);
    // Each e-mail carries a new key; the latest one is the one that works.
    const latestKey = await emailKeyFor(server, "resent@example.com");
    expect(latestKey).not.toBe(firstKey);
    expect((await accept({ key: firstKey, full_name: "Re Sent", password: "s3cret-pass" })).body.msg).toBe("Invalid invitation key");
    const joined = await accept({ key: latestKey, full_name: "Re Sent", password: "s3cret-pass" });
    expect(joined.status).toBe(200);
    const subs = (await api(server, "GET", "/users/me/subscriptions", { as: { email: "resent@example.com", key: joined.body.api_key } })).body.subscriptions;
    expect(subs.map((s: any) => s.stream_id)).toEqual([channelId]);
    // Used: nothing left to re-send.
    expect((await resend(member, id)).body.msg).toBe("No such invitation");
  });

  it("refuses to re-send revoked, expired, unknown and owners' invitations", async () => {
    const db = server.node.store.db;
    await api(server, "POST", "/invites", { as: owner, params: { invitee_emails: "revoked-resend@example.com, expired-resend@example.com", stream_ids: [] } });
    await api(server, "POST", "/invites", { as: owner, params: { invitee_emails: "future-owner@example.com", stream_ids: [], invite_as: 100 } });
    const idOf = async (email: string) => (await invites(owner)).find((i) => i.email === email).id;
    const revokedId = await idOf("revoked-resend@example.com");
    const expiredId = await idOf("expired-resend@example.com");
    const ownerInviteId = await idOf("future-owner@example.com");
    await api(server, "DELETE", `/invites/${revokedId}`, { as: owner, template: "/invites/{invite_id}" });
    await db.updateTable("invitations").set({ expires_at: Math.floor(Date.now() / 1000) - 1 }).where("id", "=", expiredId).execute();

    expect((await resend(owner, revokedId)).body.msg).toBe("No such invitation");
    expect((await resend(owner, expiredId)).body.msg).toBe("This invitation has expired");
    expect((await resend(owner, 424242)).body.msg).toBe("No such invitation");
    expect((await resend(admin, ownerInviteId)).body.msg).toBe("Must be an organization owner");
    // Revoking follows the same rule.
    expect((await api(server, "DELETE", `/invites/${ownerInviteId}`, { as: admin, template: "/invites/{invite_id}" })).body.msg).toBe("Must be an organization owner");
    for (const email of ["revoked-resend@example.com", "expired-resend@example.com", "future-owner@example.com"]) expect(await outboxTo(email)).toHaveLength(1);
  });

  it("counts re-sent e-mails towards the daily invitation limit", async () => {
    const db = server.node.store.db;
    await api(server, "POST", "/invites", { as: owner, params: { invitee_emails: "limited@example.com", stream_ids: [] } });
    const id = (await invites(owner)).find((i) => i.email === "limited@example.com").id;
    const realm = await db.selectFrom("realms").select("id").executeTakeFirstOrThrow();
    const since = Math.floor(Date.now() / 1000) - 86400;
    const sent = await db.selectFrom("invitations").select("id").where("created_at", ">", since).where("link_id", "is", null).execute();
    const resent = await db.selectFrom("invitation_resends").select("id").where("created_at", ">", since).execute();
    const now = Math.floor(Date.now() / 1000);
    const filler = Array.from({ length: 100 - sent.length - resent.length }, (_, i) => ({ realm_id: realm.id, invitation_id: id, created_at: now, request_key: `filler-${i}` }));
    await db.insertInto("invitation_resends").values(filler).execute();
    try {
      const res = await resend(owner, id, false);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ result: "error", code: "INVITATION_FAILED", daily_limit_reached: true, sent_invitations: false });
      expect(await outboxTo("limited@example.com")).toHaveLength(1);
    } finally {
      await db.deleteFrom("invitation_resends").where("request_key", "like", "filler-%").execute();
    }
    expect((await resend(owner, id)).status).toBe(200);
  });
});
