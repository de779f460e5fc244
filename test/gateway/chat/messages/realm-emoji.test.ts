/**
 * Custom (realm) emoji through a real server on both engines: upload, list, the image itself, deactivation, the
 * realm_emoji events and register state, reactions with realm_emoji, and `:name:` in markdown. Every API answer is
 * checked against Zulip's OpenAPI description by `api()`.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, createUserWithRole, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";
import { ROLE } from "../../../../actors/chat/organization/groups.ts";
import { Realm, type DeactivateEmoji, type UploadEmoji } from "../../../../actors/chat/organization/realm.protocol.ts";


/** A 1×1 PNG. */
const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==", "base64");
/** A 1×1 GIF, and one of two frames (animated). */
const GIF_HEAD = "47494638396101000100800000000000ffffff";
const GIF_FRAME = "21f90401000000002c00000000010001000002014400";
const GIF = Buffer.from(GIF_HEAD + GIF_FRAME + "3b", "hex");
const ANIMATED_GIF = Buffer.from(GIF_HEAD + GIF_FRAME + GIF_FRAME + "3b", "hex");

describe.each(ENGINES)("custom emoji on %s", (engine) => {
  let server: TestServer;
  let owner: User;
  let alice: User;
  let bob: User;
  let carol: User;
  let guest: User;
  let groups: Map<string, number>;

  const { toChannel, get, register, events, subscribe } = messageApi(() => server);

  /** POST /realm/emoji/{name} with one file, or none for `data: null`. */
  const upload = (as: Credentials, name: string, data: Uint8Array | null = PNG, type = "image/png", filename = "emoji.png") =>
    api(server, "POST", `/realm/emoji/${encodeURIComponent(name)}`, {
      as,
      files: data ? [{ filename, type, data }] : undefined,
      multipart: true,
      template: "/realm/emoji/{emoji_name}",
    });
  const deactivate = (as: Credentials, name: string) =>
    api(server, "DELETE", `/realm/emoji/${encodeURIComponent(name)}`, { as, template: "/realm/emoji/{emoji_name}" });
  const list = async (as: Credentials = alice) => {
    const res = await api(server, "GET", "/realm/emoji", { as });
    expect(res.status).toBe(200);
    return res.body.emoji as Record<string, any>;
  };
  const byName = async (name: string) => Object.values(await list()).find((e: any) => e.name === name && !e.deactivated);
  const react = (as: Credentials, id: number, method: "POST" | "DELETE", params: Record<string, unknown>) =>
    api(server, method, `/messages/${id}/reactions`, { as, params, template: "/messages/{message_id}/reactions" });
  // PATCH /realm is not in Zulip's OpenAPI description.
  const patchRealm = (as: Credentials, params: Record<string, unknown>) => api(server, "PATCH", "/realm", { as, params, validate: false });

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = { ...server.owner, id: (await api(server, "GET", "/users/me", { as: server.owner })).body.user_id };
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    guest = await createUserWithRole(server, "guest@example.com", ROLE.guest, "Guest");
    await subscribe(owner, ["general"], { principals: [owner.id, alice.id, bob.id, carol.id] });
    const all = await api(server, "GET", "/user_groups", { as: owner });
    groups = new Map(all.body.user_groups.map((g: any) => [g.name, g.id]));
  });
  afterAll(async () => server?.close());

  it("uploads an emoji that GET /realm/emoji lists and whose image is served with its type", async () => {
    expect((await upload(alice, "party parrot")).status).toBe(200);
    const emoji = await byName("party_parrot");
    const realmId = (await server.node.store.db.selectFrom("realms").select("id").executeTakeFirstOrThrow()).id;
    expect(emoji).toEqual({
      id: expect.stringMatching(/^\d+$/),
      name: "party_parrot",
      source_url: `/user_avatars/${realmId}/emoji/images/${emoji.id}.png`,
      still_url: null,
      deactivated: false,
      author_id: alice.id,
    });
    const image = await fetch(new URL(emoji.source_url, server.url));
    expect(image.status).toBe(200);
    expect(image.headers.get("content-type")).toBe("image/png");
    expect(image.headers.get("cache-control")).toContain("max-age");
    expect(Buffer.from(await image.arrayBuffer()).equals(PNG)).toBe(true);
    // The type is what the bytes are, whatever the client declared.
    expect((await upload(alice, "blinky", GIF, "image/png", "blinky.png")).status).toBe(200);
    const gif = await fetch(new URL((await byName("blinky")).source_url, server.url));
    expect(gif.headers.get("content-type")).toBe("image/gif");
    expect(Buffer.from(await gif.arrayBuffer()).equals(GIF)).toBe(true);
    expect((await upload(alice, "spinner", ANIMATED_GIF, "image/gif", "spinner.gif")).status).toBe(200);
    // Other paths under /user_avatars/ are not there.
    expect((await fetch(new URL(`/user_avatars/${realmId}/emoji/images/99999.png`, server.url))).status).toBe(404);
    expect((await fetch(new URL(`/user_avatars/${realmId}/emoji/images/${emoji.id}.gif`, server.url))).status).toBe(404);
  });

  it("refuses bad names, duplicates, missing or extra files, files that are not images and files too big", async () => {
    const msg = async (res: Promise<{ status: number; body: any }>) => {
      const { status, body } = await res;
      expect(status).toBe(400);
      return body.msg;
    };
    expect(await msg(upload(alice, "Shouting"))).toBe("Emoji names must contain only lowercase English letters, digits, spaces, dashes, and underscores.");
    expect(await msg(upload(alice, "dots.dots"))).toBe("Emoji names must contain only lowercase English letters, digits, spaces, dashes, and underscores.");
    expect(await msg(upload(alice, "trailing-"))).toBe("Emoji names must end with either a letter or digit.");
    expect(await msg(upload(alice, "  "))).toBe("Emoji name is missing");
    expect((await upload(alice, "dup")).status).toBe(200);
    expect(await msg(upload(bob, "dup"))).toBe("A custom emoji with this name already exists.");
    expect(await msg(upload(alice, "nofile", null))).toBe("You must upload exactly one file.");
    const two = await api(server, "POST", "/realm/emoji/two", {
      as: alice,
      template: "/realm/emoji/{emoji_name}",
      files: [
        { filename: "a.png", type: "image/png", data: PNG },
        { filename: "b.png", type: "image/png", data: PNG },
      ],
    });
    expect(two.body.msg).toBe("You must upload exactly one file.");
    expect(await msg(upload(alice, "text", Buffer.from("not an image at all"), "text/plain", "notes.txt"))).toBe("Invalid image format");
    expect(await msg(upload(alice, "fake", Buffer.from("not an image at all"), "image/png", "fake.png"))).toBe(
      "Could not decode image; did you upload an image file?",
    );
    const big = Buffer.concat([PNG, Buffer.alloc(5 * 1024 * 1024)]);
    expect(await msg(upload(alice, "big", big))).toBe("Uploaded file is larger than the allowed limit of 5 MiB");
    // Built-in names are the administrators' to override.
    expect(await msg(upload(alice, "smile"))).toBe("Only administrators can override built-in emoji.");
    const names = Object.values(await list()).map((e: any) => e.name);
    for (const refused of ["two", "text", "fake", "big", "smile", "nofile"]) expect(names).not.toContain(refused);
    expect(names.filter((n) => n === "dup")).toHaveLength(1);
  });

  it("lets whom can_add_custom_emoji_group names upload, never guests", async () => {
    expect((await upload(guest, "guesty")).body.msg).toBe("Not allowed for guest users");
    const state = (await api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["realm"] } })).body;
    expect(state.realm_can_add_custom_emoji_group).toBe(groups.get("role:members"));
    expect((await patchRealm(alice, { can_add_custom_emoji_group: { new: groups.get("role:administrators") } })).body.msg).toBe(
      "Must be an organization administrator",
    );
    expect((await patchRealm(owner, { can_add_custom_emoji_group: { new: groups.get("role:administrators") } })).status).toBe(200);
    try {
      expect((await upload(alice, "admins_only")).body.msg).toBe("Insufficient permission");
      expect((await upload(owner, "admins_only")).status).toBe(200);
      // A group of named users works too.
      expect((await patchRealm(owner, { can_add_custom_emoji_group: { new: { direct_members: [bob.id], direct_subgroups: [] } } })).status).toBe(200);
      expect((await upload(bob, "bobs_own")).status).toBe(200);
      expect((await upload(alice, "not_alices")).body.msg).toBe("Insufficient permission");
    } finally {
      expect((await patchRealm(owner, { can_add_custom_emoji_group: { new: groups.get("role:members") } })).status).toBe(200);
    }
    expect((await upload(alice, "members_again")).status).toBe(200);
  });

  it("deactivates for the author or an administrator, keeps the row and the image, and sends realm_emoji events", async () => {
    const queue = await register(carol, ["realm_emoji"]);
    expect((await upload(alice, "short_lived")).status).toBe(200);
    expect((await upload(bob, "bobs_emoji")).status).toBe(200);
    const shortLived = await byName("short_lived");
    expect((await deactivate(bob, "short_lived")).body.msg).toBe("Must be an organization administrator or emoji author");
    expect((await deactivate(alice, "short_lived")).status).toBe(200);
    expect((await deactivate(owner, "bobs_emoji")).status).toBe(200);
    const unknown = await deactivate(alice, "short_lived");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({ code: "BAD_REQUEST", msg: "Emoji 'short_lived' does not exist" });
    expect((await deactivate(owner, "never_was")).body.msg).toBe("Emoji 'never_was' does not exist");
    const listed = await list();
    expect(listed[shortLived.id]).toMatchObject({ name: "short_lived", deactivated: true, author_id: alice.id });
    expect((await fetch(new URL(shortLived.source_url, server.url))).status).toBe(200);
    // The name is free again.
    expect((await upload(alice, "short_lived")).status).toBe(200);

    const received = await events(carol, queue);
    expect(received.map((e) => [e.type, e.op])).toEqual(Array(5).fill(["realm_emoji", "update"]));
    // Each event carries the whole set, as it stood after that change.
    expect(received[0].realm_emoji[shortLived.id]).toMatchObject({ name: "short_lived", deactivated: false });
    expect(received[2].realm_emoji[shortLived.id]).toMatchObject({ name: "short_lived", deactivated: true });
    expect(received[4].realm_emoji).toEqual(await list());
  });

  it("treats a redelivered upload or deactivation as done, not as a refusal", async () => {
    const realm = await server.node.store.db.selectFrom("realms").select("id").executeTakeFirstOrThrow();
    // What the transport delivers again after a worker died between committing and acknowledging.
    const deliver = (message: UploadEmoji | DeactivateEmoji) => server.node.system.ref(Realm, realm.id).ask(message);
    const kind = { contentType: "image/png", ext: "png", animated: false };
    const uploadMessage: UploadEmoji = { op: "uploadEmoji", actingId: alice.id, name: "redelivered", kind, image: PNG.toString("base64"), requestKey: "upload-1" };
    expect(await deliver(uploadMessage)).toEqual({});
    expect(await deliver(uploadMessage)).toEqual({});
    const deactivation: DeactivateEmoji = { op: "deactivateEmoji", actingId: alice.id, name: "redelivered", requestKey: "deactivate-1" };
    expect(await deliver(deactivation)).toEqual({});
    expect(await deliver(deactivation)).toEqual({});
    const rows = Object.values(await list()).filter((e: any) => e.name === "redelivered");
    expect(rows).toEqual([expect.objectContaining({ deactivated: true, author_id: alice.id })]);
    // A new request is checked as ever.
    expect((await deactivate(alice, "redelivered")).status).toBe(404);
  });

  it("reports every emoji, active and deactivated, in register's realm_emoji", async () => {
    const state = (await api(server, "POST", "/register", { as: bob, params: { fetch_event_types: ["realm_emoji"] } })).body;
    expect(state.realm_emoji).toEqual(await list());
    expect(Object.values(state.realm_emoji).some((e: any) => e.deactivated)).toBe(true);
    expect(Object.values(state.realm_emoji).some((e: any) => !e.deactivated)).toBe(true);
  });

  it("reacts with realm_emoji: checked on add, resolved by name, removable after deactivation", async () => {
    expect((await upload(alice, "octo")).status).toBe(200);
    const octo = await byName("octo");
    const id = await toChannel(alice, "reactions", "react to me");
    const queue = await register(alice, ["reaction"]);
    const custom = { emoji_name: "octo", emoji_code: octo.id, reaction_type: "realm_emoji" };
    expect((await react(bob, id, "POST", { ...custom, emoji_name: "party_parrot" })).body.msg).toBe("Invalid custom emoji name.");
    expect((await react(bob, id, "POST", { ...custom, emoji_code: "99999" })).body.msg).toBe("Invalid custom emoji.");
    expect((await react(bob, id, "POST", { ...custom, emoji_code: "not-a-number" })).body.msg).toBe("Invalid custom emoji.");
    expect((await react(alice, id, "POST", custom)).status).toBe(200);
    // A name alone means the realm's active emoji of that name.
    expect((await react(bob, id, "POST", { emoji_name: "octo" })).status).toBe(200);
    const message = (await get(alice, { narrow: [{ operator: "id", operand: id }] })).body.messages[0];
    expect(message.reactions).toEqual([
      expect.objectContaining({ emoji_name: "octo", emoji_code: octo.id, reaction_type: "realm_emoji", user_id: alice.id }),
      expect.objectContaining({ emoji_name: "octo", emoji_code: octo.id, reaction_type: "realm_emoji", user_id: bob.id }),
    ]);

    expect((await deactivate(alice, "octo")).status).toBe(200);
    const other = await toChannel(alice, "reactions", "no octopus here");
    expect((await react(carol, other, "POST", custom)).body.msg).toBe("This custom emoji has been deactivated.");
    expect((await react(carol, other, "POST", { emoji_name: "octo" })).body.msg).toBe("Emoji 'octo' does not exist");
    // Where it is already on the message, adding it is a vote for that reaction, under its name (Zulip's rule).
    expect((await react(carol, id, "POST", { ...custom, emoji_name: "anything" })).status).toBe(200);
    // Removing needs no valid emoji: the reaction exists, by code.
    expect((await react(alice, id, "DELETE", { emoji_code: octo.id, reaction_type: "realm_emoji" })).status).toBe(200);
    expect((await react(alice, id, "DELETE", { emoji_code: octo.id, reaction_type: "realm_emoji" })).body.code).toBe("REACTION_DOES_NOT_EXIST");

    const received = await events(alice, queue);
    expect(received.map((e) => [e.op, e.user_id, e.emoji_name, e.emoji_code, e.reaction_type])).toEqual([
      ["add", alice.id, "octo", octo.id, "realm_emoji"],
      ["add", bob.id, "octo", octo.id, "realm_emoji"],
      ["add", carol.id, "octo", octo.id, "realm_emoji"],
      ["remove", alice.id, "octo", octo.id, "realm_emoji"],
    ]);
  });

  it("renders :name: of an active custom emoji as Zulip's img, and stops once it is deactivated", async () => {
    expect((await upload(alice, "thumbs-up-custom")).status).toBe(200);
    expect((await upload(alice, "big_wave")).status).toBe(200);
    const wave = await byName("big_wave");
    const dashed = await byName("thumbs-up-custom");
    const id = await toChannel(bob, "markdown", "hello :big_wave: and :thumbs-up-custom: but `:big_wave:` and :no_such_one:");
    const rendered = (await get(bob, { narrow: [{ operator: "id", operand: id }], apply_markdown: true })).body.messages[0].content;
    expect(rendered).toBe(
      `<p>hello <img alt=":big_wave:" class="emoji" src="${wave.source_url}" title="big wave"> and ` +
        `<img alt=":thumbs-up-custom:" class="emoji" src="${dashed.source_url}" title="thumbs-up-custom"> but <code>:big_wave:</code> and :no_such_one:</p>`,
    );
    expect((await deactivate(alice, "big_wave")).status).toBe(200);
    const later = await toChannel(bob, "markdown", ":big_wave:");
    const plain = (await get(bob, { narrow: [{ operator: "id", operand: later }], apply_markdown: true })).body.messages[0].content;
    expect(plain).toBe("<p>:big_wave:</p>");
    // The earlier message keeps its image, which is still served.
    expect((await fetch(new URL(wave.source_url, server.url))).status).toBe(200);
  });

  it("lets an administrator's custom emoji take a built-in name, which then means it in reactions and markdown", async () => {
    expect((await upload(owner, "heart")).status).toBe(200);
    const heart = await byName("heart");
    try {
      const id = await toChannel(alice, "override", "I :heart: it");
      const rendered = (await get(alice, { narrow: [{ operator: "id", operand: id }], apply_markdown: true })).body.messages[0].content;
      expect(rendered).toBe(`<p>I <img alt=":heart:" class="emoji" src="${heart.source_url}" title="heart"> it</p>`);
      expect((await react(bob, id, "POST", { emoji_name: "heart" })).status).toBe(200);
      const message = (await get(alice, { narrow: [{ operator: "id", operand: id }] })).body.messages[0];
      expect(message.reactions).toEqual([expect.objectContaining({ emoji_name: "heart", emoji_code: heart.id, reaction_type: "realm_emoji" })]);
    } finally {
      expect((await deactivate(owner, "heart")).status).toBe(200);
    }
    // Deactivated, the name is the unicode emoji's again.
    const id = await toChannel(alice, "override", "I :heart: it");
    const rendered = (await get(alice, { narrow: [{ operator: "id", operand: id }], apply_markdown: true })).body.messages[0].content;
    expect(rendered).toContain('class="emoji emoji-2764"');
  });
});
