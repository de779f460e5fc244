/**
 * Saved snippets through a real server on both engines: create, list, edit and delete with Zulip's messages, the
 * saved_snippets events (to the owner's queues only) and register state.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";

describe.each(ENGINES)("saved snippets on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;

  const { register, events } = messageApi(() => server);
  const list = async (as: Credentials) => (await api(server, "GET", "/saved_snippets", { as })).body.saved_snippets;
  const edit = (as: Credentials, id: number, params: Record<string, unknown>) =>
    api(server, "PATCH", `/saved_snippets/${id}`, { as, params, template: "/saved_snippets/{saved_snippet_id}" });
  const remove = (as: Credentials, id: number) => api(server, "DELETE", `/saved_snippets/${id}`, { as, template: "/saved_snippets/{saved_snippet_id}" });

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
  });
  afterAll(async () => server?.close());

  it("creates, edits and deletes a snippet, telling only its owner", async () => {
    const mine = await register(alice, ["saved_snippets"]);
    const theirs = await register(bob, ["saved_snippets"]);
    const created = await api(server, "POST", "/saved_snippets", { as: alice, params: { title: "  Welcome ", content: "**Welcome** to the organization." } });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const id = created.body.saved_snippet_id as number;
    const snippet = { id, title: "Welcome", content: "**Welcome** to the organization.", date_created: expect.any(Number) };
    expect(await list(alice)).toEqual([snippet]);
    expect(await list(bob)).toEqual([]);
    expect((await edit(alice, id, { content: "Hello" })).status).toBe(200);
    expect((await edit(alice, id, {})).status).toBe(200);
    expect((await remove(alice, id)).status).toBe(200);
    const seen = (await events(alice, mine)).filter((e) => e.type === "saved_snippets").map(({ id: _, ...e }) => e);
    expect(seen).toEqual([
      { type: "saved_snippets", op: "add", saved_snippet: snippet },
      { type: "saved_snippets", op: "update", saved_snippet: { ...snippet, content: "Hello" } },
      { type: "saved_snippets", op: "remove", saved_snippet_id: id },
    ]);
    expect((await events(bob, theirs)).filter((e) => e.type === "saved_snippets")).toEqual([]);
  });

  it("refuses empty texts and others' snippets with Zulip's messages, and registers the list", async () => {
    const create = (params: Record<string, unknown>) => api(server, "POST", "/saved_snippets", { as: alice, params });
    expect((await create({ title: " ", content: "x" })).body.msg).toBe("Title cannot be empty.");
    expect((await create({ title: "x", content: "" })).body.msg).toBe("Content cannot be empty.");
    expect((await create({ title: "x".repeat(61), content: "x" })).body.msg).toBe("title is too long (limit: 60 characters)");
    const id = (await create({ title: "Mine", content: "Text" })).body.saved_snippet_id as number;
    const gone = await remove(bob, id);
    expect(gone.status).toBe(404);
    expect(gone.body.msg).toBe("Saved snippet does not exist.");
    expect((await edit(bob, id, { title: "Theirs" })).status).toBe(404);
    const state = await api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["saved_snippets"] } });
    expect(state.body.saved_snippets).toEqual([{ id, title: "Mine", content: "Text", date_created: expect.any(Number) }]);
  });
});
