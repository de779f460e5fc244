/**
 * Alert words on both engines, as zulip-js (users.me.alertWords.retrieve) and the Python bindings
 * (add_alert_words / remove_alert_words send `alert_words` as a JSON list) use them: the list, its events and initial
 * state, and the has_alert_word flag on messages that contain a recipient's word.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, eventQueue, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("alert words on %s", (engine) => {
  let server: TestServer;
  let ann: Credentials & { id: number };
  let ben: Credentials & { id: number };

  beforeAll(async () => {
    server = await startTestServer(engine);
    ann = await createUser(server, "ann@example.com", "Ann");
    ben = await createUser(server, "ben@example.com", "Ben");
  });
  afterAll(async () => server?.close());

  const words = (as: Credentials) => api(server, "GET", "/users/me/alert_words", { as });

  it("adds words once each (case-insensitively, trimmed, empty ones dropped) and removes them ignoring case", async () => {
    expect((await words(ann)).body.alert_words).toEqual([]);
    const queue = await eventQueue(server, ann, ["alert_words"]);
    const added = await api(server, "POST", "/users/me/alert_words", { as: ann, params: { alert_words: ["deploy", " Outage ", "", "DEPLOY"] } });
    expect(added.status).toBe(200);
    expect(added.body.alert_words).toEqual(["deploy", "Outage"]);
    const again = await api(server, "POST", "/users/me/alert_words", { as: ann, params: { alert_words: ["outage", "pager"] } });
    expect(again.body.alert_words).toEqual(["deploy", "Outage", "pager"]);
    const removed = await api(server, "DELETE", "/users/me/alert_words", { as: ann, params: { alert_words: ["OUTAGE", "unknown"] } });
    expect(removed.body.alert_words).toEqual(["deploy", "pager"]);
    expect((await words(ann)).body.alert_words).toEqual(["deploy", "pager"]);
    expect((await queue.events()).map((e) => e.alert_words)).toEqual([["deploy", "Outage"], ["deploy", "Outage", "pager"], ["deploy", "pager"]]);
    const registered = await api(server, "POST", "/register", { as: ann, params: { fetch_event_types: ["alert_words"] } });
    expect(registered.body.alert_words).toEqual(["deploy", "pager"]);
    expect((await words(ben)).body.alert_words).toEqual([]);
  });

  it("refuses a word over 100 characters and a missing list, as Zulip does", async () => {
    const long = await api(server, "POST", "/users/me/alert_words", { as: ann, params: { alert_words: ["x".repeat(101)] } });
    expect(long.status).toBe(400);
    expect(long.body.msg).toBe("alert_words[0] is too long (limit: 100 characters)");
    const missing = await api(server, "POST", "/users/me/alert_words", { as: ann, params: {} });
    expect(missing.body).toMatchObject({ code: "REQUEST_VARIABLE_MISSING", msg: "Missing 'alert_words' argument" });
  });

  it("flags has_alert_word for recipients whose word stands on its own in a new or edited message", async () => {
    await api(server, "POST", "/users/me/subscriptions", { as: ann, params: { subscriptions: [{ name: "ops" }], principals: [ann.id, ben.id] } });
    const send = (content: string) => api(server, "POST", "/messages", { as: ben, params: { type: "stream", to: "ops", topic: "t", content } });
    const flagsOf = async (id: number) => {
      const res = await api(server, "GET", "/messages", { as: ann, params: { anchor: id, num_before: 0, num_after: 0 } });
      return res.body.messages[0].flags as string[];
    };
    const hit = await send("We DEPLOY at noon.");
    const inside = await send("redeployment started");
    const punctuated = await send("(pager) went off!");
    expect(await flagsOf(hit.body.id)).toContain("has_alert_word");
    expect(await flagsOf(inside.body.id)).not.toContain("has_alert_word");
    expect(await flagsOf(punctuated.body.id)).toContain("has_alert_word");
    // The sender has no alert words: no flag for them.
    const own = await api(server, "GET", "/messages", { as: ben, params: { anchor: hit.body.id, num_before: 0, num_after: 0 } });
    expect(own.body.messages[0].flags).not.toContain("has_alert_word");
    // An edit recomputes the flag from the new content.
    const edited = await api(server, "PATCH", `/messages/${hit.body.id}`, { as: ben, params: { content: "all quiet" }, template: "/messages/{message_id}" });
    expect(edited.status).toBe(200);
    expect(await flagsOf(hit.body.id)).not.toContain("has_alert_word");
  });

  it("does not look for alert words in code, but does in quotes", async () => {
    const send = (content: string) => api(server, "POST", "/messages", { as: ben, params: { type: "stream", to: "ops", topic: "t", content } });
    const flagsOf = async (id: number) =>
      (await api(server, "GET", "/messages", { as: ann, params: { anchor: id, num_before: 0, num_after: 0 } })).body.messages[0].flags as string[];
    const fenced = await send("Run this:\n```bash\nmake deploy\n```\nthanks");
    const tildes = await send("~~~\ndeploy\n~~~");
    const inline = await send("type `deploy now` to start");
    const quoted = await send("```quote\nwe deploy today\n```");
    const after = await send("```\ncode\n```\nthen deploy");
    for (const m of [fenced, tildes, inline]) expect(await flagsOf(m.body.id)).not.toContain("has_alert_word");
    for (const m of [quoted, after]) expect(await flagsOf(m.body.id)).toContain("has_alert_word");
  });
});
