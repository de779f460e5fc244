/**
 * Linkifiers and code playgrounds through a real server on both engines: the administrator-only changes with
 * Zulip's validation messages, the lists (GET /realm/linkifiers, register state, zulip-js's legacy GET
 * /realm/filters), the realm_linkifiers and realm_playgrounds events (linkifiers only to queues with the
 * `linkifier_url_template` capability), and messages rendered with the realm's linkifiers in their order.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";

const TRAC = { pattern: "#(?P<id>[0-9]{2,8})", url_template: "https://trac.example.com/ticket/{id}" };

describe.each(ENGINES)("linkifiers and playgrounds on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let alice: User;

  const { toChannel, subscribe, register, events } = messageApi(() => server);
  const addLinkifier = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/realm/filters", { as, params });
  const linkifiers = async () => (await api(server, "GET", "/realm/linkifiers", { as: alice })).body.linkifiers as Array<{ id: number; pattern: string; url_template: string }>;
  const rendered = async (content: string) => {
    const id = await toChannel(alice, "links", content);
    const res = await api(server, "GET", `/messages/${id}`, { as: alice, template: "/messages/{message_id}" });
    return res.body.message.content as string;
  };
  const removeAll = async () => {
    for (const l of await linkifiers()) {
      expect((await api(server, "DELETE", `/realm/filters/${l.id}`, { as: owner, template: "/realm/filters/{filter_id}" })).status).toBe(200);
    }
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    alice = await createUser(server, "alice@example.com", "Alice");
    await subscribe(owner, ["general"], { principals: [owner.id, alice.id] });
  });
  afterAll(async () => server?.close());

  it("adds a linkifier that messages use as Zulip renders them, and tells only queues that understand templates", async () => {
    const modern = await register(alice, ["realm_linkifiers"], { linkifier_url_template: true });
    const legacy = await register(alice, ["realm_linkifiers"]);
    const added = await addLinkifier(owner, TRAC);
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    expect(await linkifiers()).toEqual([{ id: added.body.id, ...TRAC }]);
    expect((await events(alice, modern)).filter((e) => e.type === "realm_linkifiers")).toEqual([
      { type: "realm_linkifiers", realm_linkifiers: [{ id: added.body.id, ...TRAC }], id: expect.any(Number) },
    ]);
    expect((await events(alice, legacy)).filter((e) => e.type === "realm_linkifiers")).toEqual([]);
    // Zulip's test_realm_patterns.
    expect(await rendered("We should fix #224 and #115, but not issue#124 or #1124z or [trac #15](https://trac.example.com/ticket/16) today.")).toBe(
      '<p>We should fix <a href="https://trac.example.com/ticket/224">#224</a> and <a href="https://trac.example.com/ticket/115">#115</a>, but not issue#124 or #1124z or <a href="https://trac.example.com/ticket/16">trac #15</a> today.</p>',
    );
    expect(await rendered("`#224` and **#225**")).toBe('<p><code>#224</code> and <strong><a href="https://trac.example.com/ticket/225">#225</a></strong></p>');
    await removeAll();
  });

  it("links a match in a plain line of words (the renderer's shortcut)", async () => {
    expect(await rendered("Look at ticket42 please")).toBe("<p>Look at ticket42 please</p>");
    const added = await addLinkifier(owner, { pattern: "ticket(?P<id>[0-9]+)", url_template: "https://tickets.example.com/{id}" });
    expect(added.status).toBe(200);
    expect(await rendered("Look at ticket42 please")).toBe('<p>Look at <a href="https://tickets.example.com/42">ticket42</a> please</p>');
    await removeAll();
  });

  it("links a topic's linkifier matches and bare URLs in topic_links, on fetch, in the message event and on a topic move", async () => {
    expect((await addLinkifier(owner, TRAC)).status).toBe(200);
    const queue = await register(alice, ["message", "update_message"]);
    const sent = await api(server, "POST", "/messages", { as: alice, params: { type: "stream", to: "general", topic: "#224 see https://example.com/x, #1x", content: "hi" } });
    const expected = [
      { text: "#224", url: "https://trac.example.com/ticket/224" },
      { text: "https://example.com/x", url: "https://example.com/x" },
    ];
    const fetched = await api(server, "GET", `/messages/${sent.body.id}`, { as: alice, template: "/messages/{message_id}" });
    expect(fetched.body.message.topic_links).toEqual(expected);
    const [event] = (await events(alice, queue)).filter((e) => e.type === "message");
    expect(event.message.topic_links).toEqual(expected);
    const moved = await api(server, "PATCH", `/messages/${sent.body.id}`, { as: alice, params: { topic: "now #225" }, template: "/messages/{message_id}" });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    const [update] = (await events(alice, queue)).filter((e) => e.type === "update_message");
    expect(update.topic_links).toEqual([{ text: "#225", url: "https://trac.example.com/ticket/225" }]);
    const dm = await api(server, "POST", "/messages", { as: alice, params: { type: "direct", to: [owner.id], content: "#224" } });
    expect((await api(server, "GET", `/messages/${dm.body.id}`, { as: alice, template: "/messages/{message_id}" })).body.message.topic_links).toEqual([]);
    await removeAll();
  });

  it("registers the linkifiers for clients with the capability, an empty list otherwise, and realm_filters empty", async () => {
    const added = await addLinkifier(owner, TRAC);
    const fetch = (capabilities: Record<string, boolean>) =>
      api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["realm_linkifiers", "realm_filters"], client_capabilities: capabilities } });
    expect((await fetch({ linkifier_url_template: true })).body).toMatchObject({ realm_linkifiers: [{ id: added.body.id, ...TRAC }], realm_filters: [] });
    expect((await fetch({})).body).toMatchObject({ realm_linkifiers: [], realm_filters: [] });
    // python-zulip-api's add_realm_filter sends the pre-7.0 format string.
    const legacyAdd = await addLinkifier(owner, { pattern: "PR (?P<id>[0-9]+)", url_format_string: "https://git.example.com/pulls/%(id)s" });
    expect(legacyAdd.status, JSON.stringify(legacyAdd.body)).toBe(200);
    expect((await linkifiers()).at(-1)).toEqual({ id: legacyAdd.body.id, pattern: "PR (?P<id>[0-9]+)", url_template: "https://git.example.com/pulls/{id}" });
    expect((await addLinkifier(owner, { pattern: "x(?P<id>[0-9]+)" })).body.msg).toBe("Missing 'url_template' argument");
    await api(server, "DELETE", `/realm/filters/${legacyAdd.body.id}`, { as: owner, template: "/realm/filters/{filter_id}" });
    // zulip-js's filters.retrieve: the pre-4.0 tuples (not in Zulip's current description).
    const legacy = await api(server, "GET", "/realm/filters", { as: alice, validate: false });
    expect(legacy.body.filters).toEqual([[TRAC.pattern, "https://trac.example.com/ticket/%(id)s", added.body.id]]);
    await removeAll();
  });

  it("refuses non-administrators and bad linkifiers with Zulip's messages", async () => {
    const refused = await addLinkifier(alice, TRAC);
    expect(refused.status).toBe(400);
    expect(refused.body.msg).toBe("Must be an organization administrator");
    const cases: Array<[Record<string, string>, string]> = [
      [{ pattern: "#(?P<id>[0-9]+", url_template: "https://x.example.com/{id}" }, "Bad regular expression: "],
      [{ pattern: "#(?P<id>[0-9]+)", url_template: "https://x.example.com/{id" }, "Invalid URL template."],
      [{ pattern: "#(?P<id>[0-9]+)", url_template: "https://x.example.com/{num}" }, "Group 'num' in URL template is not present in linkifier pattern."],
      [{ pattern: "#(?P<id>[0-9]+)-(?P<n>[0-9]+)", url_template: "https://x.example.com/{id}" }, "Group 'n' in linkifier pattern is not present in URL template."],
    ];
    for (const [params, msg] of cases) {
      const res = await addLinkifier(owner, params);
      expect(res.status, JSON.stringify(params)).toBe(400);
      expect(res.body.msg.startsWith(msg), res.body.msg).toBe(true);
    }
    expect((await addLinkifier(owner, TRAC)).status).toBe(200);
    const twice = await addLinkifier(owner, { ...TRAC, url_template: "https://other.example.com/{id}" });
    expect(twice.body).toMatchObject({ result: "error", msg: "Realm filter with this Realm and Pattern already exists." });
    expect(await linkifiers()).toHaveLength(1);
    await removeAll();
  });

  it("updates, reorders (the first in order wins an overlap) and removes linkifiers", async () => {
    const wide = (await addLinkifier(owner, { pattern: "#(?P<id>[0-9]+)", url_template: "https://wide.example.com/{id}" })).body.id as number;
    const narrow = (await addLinkifier(owner, { pattern: "#(?P<id>[0-9]{3})", url_template: "https://narrow.example.com/{id}" })).body.id as number;
    expect(await rendered("see #123")).toBe('<p>see <a href="https://wide.example.com/123">#123</a></p>');
    const queue = await register(alice, ["realm_linkifiers"], { linkifier_url_template: true });
    const reorder = (ids: number[]) => api(server, "PATCH", "/realm/linkifiers", { as: owner, params: { ordered_linkifier_ids: ids } });
    expect((await reorder([narrow, wide])).status).toBe(200);
    expect((await linkifiers()).map((l) => l.id)).toEqual([narrow, wide]);
    expect((await events(alice, queue)).at(-1).realm_linkifiers.map((l: { id: number }) => l.id)).toEqual([narrow, wide]);
    expect(await rendered("see #123")).toBe('<p>see <a href="https://narrow.example.com/123">#123</a></p>');
    expect((await reorder([narrow])).body.msg).toBe("The ordered list must enumerate all existing linkifiers exactly once");
    expect((await reorder([narrow, narrow, wide])).body.msg).toBe("The ordered list must not contain duplicated linkifiers");

    const update = (id: number, params: Record<string, unknown>, as: Credentials = owner) =>
      api(server, "PATCH", `/realm/filters/${id}`, { as, params, template: "/realm/filters/{filter_id}" });
    expect((await update(narrow, { pattern: "#(?P<id>[0-9]{3})", url_template: "https://changed.example.com/{id}" })).status).toBe(200);
    expect(await rendered("see #123")).toBe('<p>see <a href="https://changed.example.com/123">#123</a></p>');
    expect((await update(narrow, TRAC, alice)).body.msg).toBe("Must be an organization administrator");
    expect((await update(999999, TRAC)).body.msg).toBe("Linkifier not found.");
    const gone = await api(server, "DELETE", "/realm/filters/999999", { as: owner, template: "/realm/filters/{filter_id}" });
    expect(gone.body.msg).toBe("Linkifier not found.");
    await removeAll();
    expect(await rendered("see #123")).toBe("<p>see #123</p>");
  });

  it("adds and removes code playgrounds, with their events and register state", async () => {
    const queue = await register(alice, ["realm_playgrounds"]);
    const playground = { name: "Python playground", pygments_language: "Python", url_template: "https://python.example.com?code={code}" };
    const added = await api(server, "POST", "/realm/playgrounds", { as: owner, params: playground });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    const listed = [{ id: added.body.id, ...playground }];
    expect((await events(alice, queue)).filter((e) => e.type === "realm_playgrounds")).toEqual([
      { type: "realm_playgrounds", realm_playgrounds: listed, id: expect.any(Number) },
    ]);
    const state = await api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["realm_playgrounds"] } });
    expect(state.body.realm_playgrounds).toEqual(listed);

    const add = (params: Record<string, unknown>, as: Credentials = owner) => api(server, "POST", "/realm/playgrounds", { as, params });
    expect((await add(playground, alice)).body.msg).toBe("Must be an organization administrator");
    expect((await add(playground)).body.msg).toBe("Realm playground with this Realm, Pygments language and Name already exists.");
    expect((await add({ ...playground, pygments_language: "Py$thon" })).body.msg).toBe("Invalid characters in pygments language");
    expect((await add({ ...playground, name: "Other", url_template: "https://python.example.com" })).body.msg).toBe('Missing the required variable "code" in the URL template');
    expect((await add({ ...playground, name: "Other", url_template: "https://p.example.com?code={code}&v={v}" })).body.msg).toBe(
      '"code" should be the only variable present in the URL template',
    );

    const remove = (id: number) => api(server, "DELETE", `/realm/playgrounds/${id}`, { as: owner, template: "/realm/playgrounds/{playground_id}" });
    expect((await remove(added.body.id)).status).toBe(200);
    expect((await events(alice, queue)).at(-1)).toMatchObject({ type: "realm_playgrounds", realm_playgrounds: [] });
    expect((await remove(added.body.id)).body.msg).toBe("Invalid playground");
  });
});
