/**
 * Welcome Bot's direct message to every new human account, as Zulip sends one (send_initial_direct_message): the
 * first owner's at first start, and each account made afterwards. zulip-terminal cannot start for a user whose feed
 * is empty, which every fresh server's owner's was. Both engines; WELCOME_MESSAGES=off (the suite's default, see
 * global-setup.ts) sends none.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { Realm } from "../../../../actors/chat/organization/realm.protocol.ts";

/** Everything the user can read, newest last, as zulip-terminal's first fetch asks it. */
async function feed(server: TestServer, as: Credentials) {
  const res = await api(server, "GET", "/messages", { as, params: { anchor: "newest", num_before: 50, num_after: 0, narrow: [], apply_markdown: false } });
  expect(res.status).toBe(200);
  return res.body.messages as any[];
}

describe.each(ENGINES)("Welcome Bot on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine, { welcomeMessages: true });
  });
  afterAll(async () => server?.close());

  it("greets the first owner at first start, once, unread, in a conversation with Welcome Bot", async () => {
    const messages = await feed(server, server.owner);
    expect(messages).toHaveLength(1);
    const [welcome] = messages;
    expect(welcome).toMatchObject({ type: "private", sender_email: "welcome-bot@zulip.com", sender_full_name: "Welcome Bot", client: "Internal" });
    expect(welcome.content).toContain("welcome to Chorus");
    expect(welcome.content).toContain("As an administrator");
    expect(welcome.flags).not.toContain("read");
    expect(welcome.display_recipient.map((p: any) => p.email).sort()).toEqual([server.owner.email, "welcome-bot@zulip.com"].sort());
    // Asked again (a worker restarted with the primary's word to greet the owner): still the one message.
    const me = (await api(server, "GET", "/users/me", { as: server.owner })).body;
    await server.node.system.ref(Realm, 1).ask({ op: "welcomeUser", userId: me.user_id });
    expect((await feed(server, server.owner)).map((m) => m.id)).toEqual([welcome.id]);
  });

  it("greets each account created afterwards, without the administrators' part for a member", async () => {
    const ann = await createUser(server, "ann@example.com", "Ann");
    const [welcome, ...more] = await feed(server, ann);
    expect(more).toHaveLength(0);
    expect(welcome).toMatchObject({ type: "private", sender_email: "welcome-bot@zulip.com" });
    expect(welcome.content).not.toContain("As an administrator");
    const register = await api(server, "POST", "/register", { as: ann, params: { event_types: ["message"], fetch_event_types: ["message", "update_message_flags"] } });
    expect(register.body.unread_msgs.count).toBe(1);
  });
});

describe("Welcome Bot turned off", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer("embedded", { welcomeMessages: false });
  });
  afterAll(async () => server?.close());

  it("sends nothing to the owner or to new accounts", async () => {
    expect(await feed(server, server.owner)).toHaveLength(0);
    const ann = await createUser(server, "ann@example.com", "Ann");
    expect(await feed(server, ann)).toHaveLength(0);
  });
});
