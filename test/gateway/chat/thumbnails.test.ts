/**
 * Thumbnails of uploaded images, as Zulip 9+ has them, through a real listening server on both engines: register's
 * server_thumbnail_formats, the loading placeholder in a message sent before the thumbnails exist and the
 * rendering-only update_message that replaces it, the thumbnail URLs (access rule, format, made on demand), animated
 * images, what gets no thumbnail (SVG, a corrupt image, one past the pixel limit) without failing anything, and the
 * start-up sweep that makes the thumbnails a stopped process did not.
 */
import fs from "node:fs";
import path from "node:path";
import sharp from "sharp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startRestartableServer, startTestServer, type Credentials, type TestServer } from "../../support/server.ts";
import { eventually, messageApi, type User } from "../../support/messages.ts";
import { expectZulipResponse } from "../../support/openapi.ts";

/** An image of noise (it does not compress away, so it takes a real decode and resize). */
function noise(width: number, height: number, channels: 3 | 4 = 3, seed = 1): Buffer {
  const data = Buffer.alloc(width * height * channels);
  let x = seed;
  for (let i = 0; i < data.length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    data[i] = x >>> 24;
  }
  return data;
}

const png = (width: number, height: number, seed = 1) => sharp(noise(width, height, 3, seed), { raw: { width, height, channels: 3 } }).png().toBuffer();

/** An animated GIF of `frames` frames. */
const gif = (width: number, height: number, frames: number) =>
  sharp(noise(width, height * frames, 4), { raw: { width, height: height * frames, channels: 4, pageHeight: height } })
    .gif()
    .toBuffer();

/** A PNG whose header says `width` × `height` (its checksum no longer matches: nothing may decode it). */
function withClaimedSize(image: Buffer, width: number, height: number): Buffer {
  const copy = Buffer.from(image);
  copy.writeUInt32BE(width, 16);
  copy.writeUInt32BE(height, 20);
  return copy;
}

describe.each(ENGINES)("thumbnails on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  const messages = messageApi(() => server);

  const uploadOne = async (as: Credentials, filename: string, data: Uint8Array, type: string) => {
    const res = await api(server, "POST", "/user_uploads", { as, files: [{ filename, type, data }] });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.url as string;
  };
  const basic = (as: Credentials) => `Basic ${Buffer.from(`${as.email}:${as.key}`).toString("base64")}`;
  const download = (url: string, as: Credentials, method = "GET") => fetch(new URL(url, server.url), { method, headers: { authorization: basic(as) } });
  const thumbnailUrl = (url: string, name = "840x560.webp") => `/user_uploads/thumbnail/${url.slice("/user_uploads/".length)}/${name}`;
  const rendered = async (as: Credentials, id: number) => {
    const res = await api(server, "GET", `/messages/${id}`, { as, params: { apply_markdown: true }, template: "/messages/{message_id}" });
    expect(res.status).toBe(200);
    return res.body.message.content as string;
  };
  /**
   * Thumbnail jobs run one at a time per process: large images queued ahead of one keep its job waiting far longer
   * than a message takes to send.
   */
  let slow: Buffer | undefined;
  const queueSlowJobs = async (as: Credentials) => {
    slow ??= await png(2500, 2000, 2);
    for (let i = 0; i < 2; i++) await uploadOne(as, `slow-${i}.png`, slow, "image/png");
  };

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    await messages.subscribe(server.owner, ["general"], { principals: [alice.id, bob.id] });
    await messages.subscribe(alice, ["secret"], { invite_only: true });
  });
  afterAll(() => server?.close());

  it("register advertises the thumbnail formats", async () => {
    const res = await api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["realm"] } });
    expect(res.body.server_thumbnail_formats).toEqual([
      { name: "840x560-anim.webp", max_width: 840, max_height: 560, format: "webp", animated: true },
      { name: "840x560.webp", max_width: 840, max_height: 560, format: "webp", animated: false },
    ]);
  });

  /** For tests that wait on thumbnail jobs: CPU work that a loaded 2-core machine may stretch well past the default. */
  const JOBS_TIMEOUT = 180_000;

  it("shows a placeholder until the thumbnail is made, then updates the message in place", { timeout: JOBS_TIMEOUT }, async () => {
    const queue = await messages.register(alice, ["update_message"]);
    await queueSlowJobs(alice);
    const url = await uploadOne(alice, "photo.png", await png(1200, 900), "image/png");
    const id = await messages.toChannel(alice, "photos", `[photo.png](${url})`);
    const paragraph = `<p><a href="${url}">photo.png</a></p>\n`;
    expect(await rendered(alice, id)).toBe(
      `${paragraph}<div class="message_inline_image"><a href="${url}" title="photo.png"><img class="image-loading-placeholder" src="/static/images/loading/loader-black.svg" data-original-dimensions="1200x900"></a></div>`,
    );
    const update = await eventually(async () => (await messages.events(alice, queue)).find((e) => e.type === "update_message" && e.message_id === id), 120_000);
    const thumbnailed = `${paragraph}<div class="message_inline_image"><a href="${url}" title="photo.png"><img data-original-content-type="image/png" data-original-dimensions="1200x900" src="${thumbnailUrl(url)}"></a></div>`;
    // is_me_message too: zulip-terminal reads it from every update_message with rendered_content (its event loop
    // died on the KeyError, and it received nothing more).
    expect(update).toMatchObject({ rendering_only: true, user_id: null, message_ids: [id], rendered_content: thumbnailed, content: `[photo.png](${url})`, is_me_message: false });
    expectZulipResponse("GET", "/events", 200, { result: "success", msg: "", events: [update] });
    expect(await rendered(alice, id)).toBe(thumbnailed);
    // Edit history is for people's edits, not renderings.
    expect((await api(server, "GET", `/messages/${id}/history`, { as: alice, template: "/messages/{message_id}/history" })).body.message_history).toHaveLength(1);

    const res = await download(thumbnailUrl(url), alice);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("image/webp");
    const thumbnail = await sharp(Buffer.from(await res.arrayBuffer())).metadata();
    expect([thumbnail.format, thumbnail.width, thumbnail.height]).toEqual(["webp", 747, 560]);
    expect(Number(res.headers.get("content-length"))).toBeGreaterThan(0);
  });

  it("links the thumbnail at once when it exists, and serves it only to those who may see the image", async () => {
    const url = await uploadOne(alice, "ready.png", await png(300, 200), "image/png");
    // Asked for before the job got to it, it is made there and then.
    expect((await download(thumbnailUrl(url), alice)).status).toBe(200);
    expect((await download(thumbnailUrl(url), bob)).status).toBe(403);
    expect((await download(thumbnailUrl(url, "100x100.webp"), alice)).status).toBe(404);
    expect((await download(thumbnailUrl(url, "840x560-anim.webp"), alice)).status).toBe(404);
    const id = await messages.toChannel(alice, "photos", `[ready.png](${url})`);
    expect(await rendered(alice, id)).toBe(
      `<p><a href="${url}">ready.png</a></p>\n<div class="message_inline_image"><a href="${url}" title="ready.png"><img data-original-content-type="image/png" data-original-dimensions="300x200" src="${thumbnailUrl(url)}"></a></div>`,
    );
    expect((await download(thumbnailUrl(url), bob)).status).toBe(200);
    const small = await sharp(Buffer.from(await (await download(thumbnailUrl(url), bob)).arrayBuffer())).metadata();
    // Never enlarged.
    expect([small.width, small.height]).toEqual([300, 200]);
  });

  it("gives an animated image animated and still thumbnails, and links the animated one", async () => {
    const url = await uploadOne(alice, "wave.gif", await gif(120, 80, 4), "image/gif");
    const animated = await download(thumbnailUrl(url, "840x560-anim.webp"), alice);
    expect(animated.status).toBe(200);
    const meta = await sharp(Buffer.from(await animated.arrayBuffer()), { animated: true }).metadata();
    expect([meta.pages, meta.width, meta.pageHeight]).toEqual([4, 120, 80]);
    const still = await sharp(Buffer.from(await (await download(thumbnailUrl(url), alice)).arrayBuffer()), { animated: true }).metadata();
    expect(still.pages ?? 1).toBe(1);
    const id = await messages.toChannel(alice, "photos", `look [wave.gif](${url})`);
    expect(await rendered(alice, id)).toContain(
      `<img data-animated="true" data-original-content-type="image/gif" data-original-dimensions="120x80" src="${thumbnailUrl(url, "840x560-anim.webp")}">`,
    );
  });

  it("makes no thumbnail of SVG, of an image past the pixel limit or of a corrupt one, and fails nothing", { timeout: JOBS_TIMEOUT }, async () => {
    const queue = await messages.register(alice, ["update_message"]);
    const svg = await uploadOne(alice, "drawing.svg", Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>`), "image/svg+xml");
    const huge = await uploadOne(alice, "huge.png", withClaimedSize(await png(10, 10), 20_000, 20_000), "image/png");
    const good = await png(400, 300);
    for (const url of [svg, huge]) {
      const id = await messages.toChannel(alice, "photos", `[file](${url})`);
      expect(await rendered(alice, id)).toBe(`<p><a href="${url}">file</a></p>`);
      expect((await download(thumbnailUrl(url), alice)).status).toBe(404);
    }
    await queueSlowJobs(alice);
    // A real header, then bytes that are no image: it passes the upload's look at the header, not the decoder.
    const corrupt = await uploadOne(alice, "corrupt.png", Buffer.concat([good.subarray(0, 33), Buffer.alloc(5000, 0x55)]), "image/png");
    const id = await messages.toChannel(alice, "photos", `broken: [corrupt.png](${corrupt})`);
    // The placeholder, then no preview at all once the job finds the image broken.
    expect(await rendered(alice, id)).toContain("image-loading-placeholder");
    const update = await eventually(async () => (await messages.events(alice, queue)).find((e) => e.type === "update_message" && e.message_id === id), 120_000);
    expect(update.rendered_content).toBe(`<p>broken: <a href="${corrupt}">corrupt.png</a></p>`);
    expect(await rendered(alice, id)).toBe(update.rendered_content);
    expect((await download(thumbnailUrl(corrupt), alice)).status).toBe(404);
    // The file itself is still served as uploaded.
    expect((await download(corrupt, alice)).status).toBe(200);
  });

  it("deletes an image's thumbnails with it", async () => {
    const url = await uploadOne(alice, "gone.png", await png(200, 100), "image/png");
    expect((await download(thumbnailUrl(url), alice)).status).toBe(200);
    const dir = server.node.config.uploadsDir;
    const blobKey = url.split("/").slice(2, 5).join("/");
    expect(fs.readdirSync(path.join(dir, "thumbnail", blobKey))).toEqual(["840x560.webp"]);
    const listed = (await api(server, "GET", "/attachments", { as: alice })).body.attachments.find((a: any) => url.endsWith(a.path_id));
    const deleted = await api(server, "DELETE", `/attachments/${listed.id}`, { as: alice, template: "/attachments/{attachment_id}" });
    expect(deleted.status).toBe(200);
    expect(fs.existsSync(path.join(dir, "thumbnail", blobKey, "840x560.webp"))).toBe(false);
    expect((await download(thumbnailUrl(url), alice)).status).toBe(404);
  });
});

describe.each(ENGINES)("thumbnails across a restart on %s", (engine) => {
  it("makes the thumbnails a stopped process did not get to, and updates the messages showing placeholders", { timeout: 180_000 }, async () => {
    const server = await startRestartableServer(engine);
    try {
      const { owner, config } = server;
      const url = (await api(server, "POST", "/user_uploads", { as: owner, files: [{ filename: "late.png", type: "image/png", data: await png(500, 400) }] })).body.url as string;
      const sent = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "general", topic: "restart", content: `[late.png](${url})` } });
      const id = sent.body.id as number;
      const message = async () =>
        (await api(server, "GET", `/messages/${id}`, { as: owner, template: "/messages/{message_id}" })).body.message.content as string;
      const thumbnail = `src="/user_uploads/thumbnail/${url.slice("/user_uploads/".length)}/840x560.webp"`;
      expect(await eventually(async () => (await message()).includes(thumbnail), 60_000)).toBe(true);
      // As a process that stopped before its job ran leaves it: no thumbnails, the message showing the placeholder.
      const db = server.node.store.db;
      await db.updateTable("image_attachments").set({ thumbnail_metadata: "[]" }).execute();
      const placeholder = `<img class="image-loading-placeholder" src="/static/images/loading/loader-black.svg" data-original-dimensions="500x400">`;
      const content = (await message()).replace(/<img [^>]*>/, placeholder);
      await db.updateTable("messages").set({ rendered_content: content }).where("id", "=", id).execute();
      fs.rmSync(path.join(config.uploadsDir, "thumbnail"), { recursive: true, force: true });
      await server.restart();
      // Nothing else asks for this image's thumbnails: only the start-up sweep can make them.
      expect(await eventually(async () => (await message()).includes(thumbnail), 60_000)).toBe(true);
      expect(fs.readdirSync(path.join(config.uploadsDir, "thumbnail"), { recursive: true })).toContain(path.join(url.split("/").slice(2, 5).join(path.sep), "840x560.webp"));
    } finally {
      await server.close();
    }
  });
});
