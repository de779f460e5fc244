/**
 * Muted users on both engines: POST and DELETE /users/me/muted_users/{id} (as zulip-js and the Python bindings call
 * them), events, initial state, and the muted user's messages marked read (earlier ones at once, new ones as sent).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, eventQueue, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("muted users on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
  });
  afterAll(async () => server?.close());

  const mute = (method: string, id: number) => api(server, method, `/users/me/muted_users/${id}`, { as: ann, template: "/users/me/muted_users/{muted_user_id}" });

  it("mutes and unmutes, with the whole list in each muted_users event and in register", async () => {
    const queue = await eventQueue(server, ann, ["muted_users"]);
    expect((await mute("POST", ben.id)).status).toBe(200);
    const registered = await api(server, "POST", "/register", { as: ann, params: { fetch_event_types: ["muted_users"] } });
    expect(registered.body.muted_users).toEqual([{ id: ben.id, timestamp: expect.any(Number) }]);
    expect((await mute("DELETE", ben.id)).status).toBe(200);
    expect((await queue.events()).map((e) => e.muted_users)).toEqual([[{ id: ben.id, timestamp: expect.any(Number) }], []]);
  });

  it("refuses muting oneself, twice, unknown users, and unmuting who is not muted", async () => {
    const cases: Array<[string, number, string]> = [
      ["POST", -1, "Cannot mute self"],
      ["POST", 999_999, "No such user"],
      ["DELETE", ben.id, "User is not muted"],
    ];
    for (const [method, id, msg] of cases) {
      const res = await mute(method, id === -1 ? ann.id : id);
      expect([res.status, res.body.msg]).toEqual([400, msg]);
    }
    await mute("POST", ben.id);
    const twice = await mute("POST", ben.id);
    expect([twice.status, twice.body.msg]).toEqual([400, "User already muted"]);
  });

  it("marks the muted user's unread messages read, with an update_message_flags event", async () => {
    const cat = await createUser(server, "cat@example.com", "Cat");
    const sent = await api(server, "POST", "/messages", { as: cat, params: { type: "direct", to: [ann.id], content: "hello" } });
    const queue = await eventQueue(server, ann, ["update_message_flags"]);
    expect((await mute("POST", cat.id)).status).toBe(200);
    const fetched = await api(server, "GET", "/messages", { as: ann, params: { anchor: sent.body.id, num_before: 0, num_after: 0 } });
    expect(fetched.body.messages[0].flags).toContain("read");
    expect(await queue.events()).toEqual([
      { type: "update_message_flags", op: "add", operation: "add", flag: "read", messages: [sent.body.id], all: false, id: expect.any(Number) },
    ]);
  });

  it("delivers a muted user's new messages already read to those who muted them", async () => {
    const dan = await createUser(server, "dan@example.com", "Dan");
    expect((await mute("POST", dan.id)).status).toBe(200);
    const queue = await eventQueue(server, ann, ["message"]);
    const sent = await api(server, "POST", "/messages", { as: dan, params: { type: "direct", to: [ann.id], content: "still here" } });
    expect((await queue.events()).map((e) => e.flags)).toEqual([["read"]]);
    const fetched = await api(server, "GET", "/messages", { as: ann, params: { anchor: sent.body.id, num_before: 0, num_after: 0 } });
    expect(fetched.body.messages[0].flags).toContain("read");
    expect((await mute("DELETE", dan.id)).status).toBe(200);
    const after = await api(server, "POST", "/messages", { as: dan, params: { type: "direct", to: [ann.id], content: "again" } });
    const unread = await api(server, "GET", "/messages", { as: ann, params: { anchor: after.body.id, num_before: 0, num_after: 0 } });
    expect(unread.body.messages[0].flags).not.toContain("read");
  });
});
