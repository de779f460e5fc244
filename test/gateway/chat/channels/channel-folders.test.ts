/**
 * Channel folders on both engines: create, list, rename, describe, archive and reorder, by administrators only,
 * with Zulip's channel_folder events and register's channel_folders.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { openQueue } from "../../../support/queues.ts";

describe.each(ENGINES)("channel folders on %s", (engine) => {
  let server: TestServer;
  let admin: Credentials & { id: number };
  let member: Credentials & { id: number };

  const create = (as: Credentials, params: Record<string, unknown>) => api(server, "POST", "/channel_folders/create", { as, params });
  const update = (as: Credentials, id: number, params: Record<string, unknown>) =>
    api(server, "PATCH", `/channel_folders/${id}`, { as, params, template: "/channel_folders/{channel_folder_id}" });
  const list = async (as: Credentials, includeArchived = false) =>
    (await api(server, "GET", "/channel_folders", { as, params: { include_archived: includeArchived } })).body.channel_folders as any[];

  beforeAll(async () => {
    server = await startTestServer(engine);
    admin = await createUserWithRole(server, "admin@example.com", 200, "Ada");
    member = await createUser(server, "member@example.com", "Mo");
  });
  afterAll(async () => server?.close());

  it("creates folders in order, with channel_folder add events, and lists them", async () => {
    const queue = await openQueue(server, member, ["channel_folder"]);
    const frontend = await create(admin, { name: "Frontend", description: "Channels for **frontend**" });
    expect(frontend.status, JSON.stringify(frontend.body)).toBe(200);
    const backend = await create(admin, { name: " Backend " });
    const folders = await list(member);
    expect(folders).toEqual([
      {
        id: frontend.body.channel_folder_id,
        name: "Frontend",
        description: "Channels for **frontend**",
        rendered_description: "<p>Channels for <strong>frontend</strong></p>",
        order: 0,
        creator_id: admin.id,
        date_created: expect.any(Number),
        is_archived: false,
      },
      expect.objectContaining({ id: backend.body.channel_folder_id, name: "Backend", description: "", order: 1 }),
    ]);
    expect(await queue.events()).toEqual(folders.map((f) => ({ type: "channel_folder", op: "add", channel_folder: f })));
    expect((await api(server, "POST", "/register", { as: member, params: { fetch_event_types: ["channel_folders"] } })).body.channel_folders).toEqual(folders);
  });

  it("renames, describes, archives and unarchives, one update event per change", async () => {
    const id = (await create(admin, { name: "Ops" })).body.channel_folder_id;
    const queue = await openQueue(server, member, ["channel_folder"]);
    expect((await update(admin, id, { name: "Operations", description: "Keeping *it* running" })).status).toBe(200);
    expect((await update(admin, id, { is_archived: true })).status).toBe(200);
    expect(await queue.events()).toEqual([
      { type: "channel_folder", op: "update", channel_folder_id: id, data: { name: "Operations" } },
      { type: "channel_folder", op: "update", channel_folder_id: id, data: { description: "Keeping *it* running", rendered_description: "<p>Keeping <em>it</em> running</p>" } },
      { type: "channel_folder", op: "update", channel_folder_id: id, data: { is_archived: true } },
    ]);
    expect((await list(member)).map((f) => f.id)).not.toContain(id);
    expect((await list(member, true)).find((f) => f.id === id)).toMatchObject({ name: "Operations", is_archived: true });
    expect((await update(admin, id, { is_archived: false })).status).toBe(200);
    expect((await list(member)).map((f) => f.id)).toContain(id);
  });

  it("reorders every folder, archived ones too", async () => {
    const ids = (await list(admin, true)).map((f) => f.id);
    const reversed = [...ids].reverse();
    const queue = await openQueue(server, member, ["channel_folder"]);
    expect((await api(server, "PATCH", "/channel_folders", { as: admin, params: { order: reversed } })).status).toBe(200);
    expect((await list(member, true)).map((f) => [f.id, f.order])).toEqual(reversed.map((id, order) => [id, order]));
    expect(await queue.events()).toEqual([{ type: "channel_folder", op: "reorder", order: reversed }]);
    const partial = await api(server, "PATCH", "/channel_folders", { as: admin, params: { order: reversed.slice(1) } });
    expect([partial.status, partial.body.msg]).toEqual([400, "Invalid order mapping"]);
  });

  it("puts a channel in a folder (stream update folder_id), and keeps a folder holding channels from being archived", async () => {
    const folder = (await create(admin, { name: "Holding" })).body.channel_folder_id;
    await api(server, "POST", "/users/me/subscriptions", { as: admin, params: { subscriptions: [{ name: "filed" }], principals: [admin.id, member.id] } });
    const streamId = (await api(server, "GET", "/get_stream_id", { as: admin, params: { stream: "filed" } })).body.stream_id;
    const queue = await openQueue(server, member, ["stream"]);
    const patch = (params: Record<string, unknown>) => api(server, "PATCH", `/streams/${streamId}`, { as: admin, params, template: "/streams/{stream_id}" });
    expect((await patch({ folder_id: folder })).status).toBe(200);
    expect(await queue.events()).toEqual([{ type: "stream", op: "update", stream_id: streamId, name: "filed", property: "folder_id", value: folder }]);
    const listed = (await api(server, "GET", `/streams/${streamId}`, { as: member, template: "/streams/{stream_id}" })).body.stream;
    expect(listed.folder_id).toBe(folder);
    expect((await update(admin, folder, { is_archived: true })).body.msg).toBe("You need to remove all the channels from this folder to archive it.");
    expect((await patch({ folder_id: 999999 })).body.msg).toBe("Invalid channel folder ID");
    expect((await patch({ folder_id: null })).status).toBe(200);
    expect((await update(admin, folder, { is_archived: true })).status).toBe(200);
    expect((await patch({ folder_id: folder })).body.msg).toBe("Invalid channel folder ID");
    // A new channel may start in a folder.
    const open = (await create(admin, { name: "Open" })).body.channel_folder_id;
    const made = await api(server, "POST", "/channels/create", { as: admin, params: { name: "born filed", subscribers: [admin.id], folder_id: open } });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    expect((await api(server, "GET", `/streams/${made.body.id}`, { as: admin, template: "/streams/{stream_id}" })).body.stream.folder_id).toBe(open);
    expect((await api(server, "POST", "/channels/create", { as: admin, params: { name: "nowhere", subscribers: [], folder_id: folder } })).body.msg).toBe("Invalid channel folder ID");
  });

  it("refuses members, bad names and unknown folders", async () => {
    expect((await create(member, { name: "Mine" })).body.msg).toBe("Must be an organization administrator");
    const someId = (await list(admin))[0].id;
    expect((await update(member, someId, { name: "Mine" })).body.msg).toBe("Must be an organization administrator");
    expect((await api(server, "PATCH", "/channel_folders", { as: member, params: { order: [someId] } })).body.msg).toBe("Must be an organization administrator");
    expect((await create(admin, { name: "  " })).body.msg).toBe("Channel folder name can't be empty.");
    expect((await create(admin, { name: "frontend" })).body.msg).toBe("Channel folder name already in use");
    expect((await create(admin, { name: "Bad\u0007name" })).body.msg).toBe("Invalid character in channel folder name, at position 4.");
    expect((await create(admin, { name: "x".repeat(61) })).status).toBe(400);
    expect((await update(admin, 999999, { name: "Nope" })).body.msg).toBe("Invalid channel folder ID");
  });
});
