/**
 * E-mail address visibility on both engines: which viewer sees which user's real address (delivery_email) and API
 * e-mail on GET /users, GET /users/{id} and POST /register, and what changing the setting does (the API e-mail
 * becomes a placeholder or the address again; realm_user events to those who gain or lose sight of the address).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";

type User = Credentials & { id: number };

/** Zulip's email_address_visibility values, and which roles see the address under each (besides its owner). */
const SEEN_BY: Record<number, number[]> = {
  1: [ROLE.owner, ROLE.administrator, ROLE.moderator, ROLE.member, ROLE.guest], // everyone
  2: [ROLE.owner, ROLE.administrator, ROLE.moderator, ROLE.member], // members
  3: [ROLE.owner, ROLE.administrator], // administrators
  4: [], // nobody
  5: [ROLE.owner, ROLE.administrator, ROLE.moderator], // moderators
};

/** The API e-mail of a user hiding their address; the test server's host (127.0.0.1) is no e-mail domain. */
const placeholder = (id: number) => `user${id}@chorus.invalid`;

describe.each(ENGINES)("e-mail visibility on %s", (engine) => {
  let server: TestServer;
  /** One viewer per role. */
  const viewers = new Map<number, User>();
  /** One user per visibility setting. */
  const owners = new Map<number, User>();

  const setVisibility = (as: Credentials, value: number) => api(server, "PATCH", "/settings", { as, params: { email_address_visibility: value } });

  beforeAll(async () => {
    server = await startTestServer(engine);
    const me = await api(server, "GET", "/users/me", { as: server.owner });
    viewers.set(ROLE.owner, { ...server.owner, id: me.body.user_id });
    for (const [name, role] of [["admin", ROLE.administrator], ["mod", ROLE.moderator], ["member", ROLE.member], ["guest", ROLE.guest]] as const) {
      viewers.set(role, await createUserWithRole(server, `${name}@example.com`, role));
    }
    for (const setting of Object.keys(SEEN_BY).map(Number)) {
      const user = await createUserWithRole(server, `setting${setting}@example.com`, ROLE.member);
      expect((await setVisibility(user, setting)).status).toBe(200);
      owners.set(setting, user);
    }
  });
  afterAll(async () => server?.close());

  /** Every (viewer role, setting) pair, with what the viewer should get for that user. */
  function* matrix() {
    for (const [role, viewer] of viewers) {
      for (const [setting, user] of owners) {
        const sees = SEEN_BY[setting]!.includes(role);
        yield { role, viewer, setting, user, delivery_email: sees ? user.email : null, email: setting === 1 ? user.email : placeholder(user.id) };
      }
    }
  }

  it("GET /users/{id} shows the real address only where the owner's setting lets the viewer see it", async () => {
    for (const c of matrix()) {
      const res = await api(server, "GET", `/users/${c.user.id}`, { as: c.viewer, template: "/users/{user_id}" });
      const { delivery_email, email } = res.body.user;
      expect({ viewer: c.role, setting: c.setting, delivery_email, email }).toEqual({ viewer: c.role, setting: c.setting, delivery_email: c.delivery_email, email: c.email });
    }
  });

  it("GET /users and POST /register's realm_users follow the same rule; everyone sees their own address and bots'", async () => {
    for (const [role, viewer] of viewers) {
      const members = (await api(server, "GET", "/users", { as: viewer })).body.members as any[];
      const registered = (await api(server, "POST", "/register", { as: viewer, params: { fetch_event_types: ["realm_user"] } })).body.realm_users as any[];
      for (const list of [members, registered]) {
        for (const [setting, user] of owners) {
          const person = list.find((m) => m.user_id === user.id);
          expect({ role, setting, delivery_email: person.delivery_email }).toEqual({ role, setting, delivery_email: SEEN_BY[setting]!.includes(role) ? user.email : null });
        }
      }
      for (const [setting, user] of owners) {
        const self = (await api(server, "GET", "/users", { as: user })).body.members.find((m: any) => m.user_id === user.id);
        expect({ setting, delivery_email: self.delivery_email }).toEqual({ setting, delivery_email: user.email });
      }
      for (const bot of members.filter((m) => m.is_bot)) expect(bot.delivery_email).toEqual(expect.stringContaining("@"));
    }
  });

  it("leaves Gravatar URLs to the client only for addresses everyone sees", async () => {
    const members = (await api(server, "GET", "/users", { as: viewers.get(ROLE.owner)!, params: { client_gravatar: true } })).body.members as any[];
    expect(members.find((m) => m.user_id === owners.get(1)!.id).avatar_url).toBeNull();
    expect(members.find((m) => m.user_id === owners.get(3)!.id).avatar_url).toMatch(/^https:\/\/secure\.gravatar\.com\/avatar\//);
  });

  it("changing the setting rewrites the API e-mail and tells who gains or loses sight of the address", async () => {
    const cat = await createUserWithRole(server, "cat@example.com", ROLE.member, "Cat");
    const member = viewers.get(ROLE.member)!;
    const guest = viewers.get(ROLE.guest)!;
    const admin = viewers.get(ROLE.administrator)!;
    // A conversation running before the change shows the new address too (its cached names are refreshed).
    const dm = (content: string) => api(server, "POST", "/messages", { as: cat, params: { type: "direct", to: [member.id], content } });
    expect((await dm("before")).status).toBe(200);
    const queues = new Map<Credentials, Awaited<ReturnType<typeof openQueue>>>();
    for (const u of [cat, member, guest, admin]) queues.set(u, await openQueue(server, u, ["realm_user", "message"]));
    const updates = async (u: Credentials) => (await queues.get(u)!.events()).filter((e) => e.type === "realm_user").map((e) => e.person);
    const avatar = expect.objectContaining({ user_id: cat.id, avatar_source: "G", avatar_url: expect.stringContaining("gravatar") });

    // Everyone → administrators: members and guests lose the address; the API e-mail becomes the placeholder.
    expect((await setVisibility(cat, 3)).status).toBe(200);
    expect((await api(server, "GET", "/users/me", { as: cat })).body).toMatchObject({ email: placeholder(cat.id), delivery_email: cat.email });
    expect(await updates(member)).toEqual([{ user_id: cat.id, delivery_email: null }, { user_id: cat.id, new_email: placeholder(cat.id) }, avatar]);
    expect(await updates(guest)).toEqual([{ user_id: cat.id, delivery_email: null }, { user_id: cat.id, new_email: placeholder(cat.id) }, avatar]);
    expect(await updates(admin)).toEqual([{ user_id: cat.id, new_email: placeholder(cat.id) }, avatar]);
    expect(await updates(cat)).toEqual([{ user_id: cat.id, new_email: placeholder(cat.id) }, avatar]);

    // Administrators → members: members see it again, guests still do not; the placeholder stays.
    expect((await setVisibility(cat, 2)).status).toBe(200);
    expect((await updates(member)).slice(3)).toEqual([{ user_id: cat.id, delivery_email: cat.email }]);
    expect((await updates(guest)).slice(3)).toEqual([]);

    // Members → everyone: guests gain it; the real address is the API e-mail again.
    expect((await setVisibility(cat, 1)).status).toBe(200);
    expect((await updates(guest)).slice(3)).toEqual([{ user_id: cat.id, delivery_email: cat.email }, { user_id: cat.id, new_email: cat.email }, avatar]);
    expect((await updates(member)).slice(4)).toEqual([{ user_id: cat.id, new_email: cat.email }, avatar]);
    expect((await api(server, "GET", `/users/${cat.id}`, { as: guest, template: "/users/{user_id}" })).body.user).toMatchObject({ email: cat.email, delivery_email: cat.email });

    // Hidden again: messages name the sender and the conversation by the placeholder, once the 2-second caches pass.
    expect((await setVisibility(cat, 4)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 2100));
    expect((await dm("after")).status).toBe(200);
    const sent = (await queues.get(member)!.events()).filter((e) => e.type === "message").at(-1)!.message;
    expect(sent.sender_email).toBe(placeholder(cat.id));
    expect(sent.display_recipient.find((p: any) => p.id === cat.id).email).toBe(placeholder(cat.id));

    // Others name the user by the placeholder; the hidden address names nobody (it would tell who owns it).
    const toCat = (to: string) => api(server, "POST", "/messages", { as: member, params: { type: "direct", to: JSON.stringify([to]), content: "hi" } });
    expect((await toCat(placeholder(cat.id))).status).toBe(200);
    const refused = await toCat(cat.email);
    expect(refused.status).toBe(400);
    expect(refused.body.msg).toBe(`Invalid email '${cat.email}'`);
  });
});
