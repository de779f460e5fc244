/**
 * File uploads through a real listening server on both engines: POST /user_uploads (raw multipart, as every client
 * sends it), serving with Zulip's access rule, temporary URLs, ranges and safe types, GET/DELETE /attachments with
 * their events, detached uploads on edit, and bad input (no file, two files, an empty one, over the limit, traversal,
 * another realm's file, an upload aborted midway).
 */
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import sharp from "sharp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../support/server.ts";
import { eventually, messageApi, type User } from "../../support/messages.ts";

const MIB = 1024 * 1024;

describe.each(ENGINES)("uploads on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;
  let alice: User;
  let bob: User;
  let realmId: number;
  const messages = messageApi(() => server);

  const upload = (as: Credentials | null, files: Array<{ filename: string; type: string; data: Uint8Array }>, params?: Record<string, unknown>) =>
    api(server, "POST", "/user_uploads", { as, files, multipart: true, params });
  const uploadOne = async (as: Credentials, filename: string, data: string | Uint8Array, type = "text/plain") => {
    const res = await upload(as, [{ filename, type, data: typeof data === "string" ? Buffer.from(data) : data }]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as { uri: string; url: string; filename: string };
  };
  const basic = (as: Credentials) => `Basic ${Buffer.from(`${as.email}:${as.key}`).toString("base64")}`;
  const download = (url: string, as?: Credentials | null, headers: Record<string, string> = {}) =>
    fetch(new URL(url, server.url), { headers: { ...(as ? { authorization: basic(as) } : {}), ...headers } });
  /** Every file in the uploads directory, temporary ones included. */
  const storedFiles = () => {
    const dir = server.node.config.uploadsDir;
    if (!fs.existsSync(dir)) return [];
    return (fs.readdirSync(dir, { recursive: true }) as string[]).filter((f) => fs.statSync(path.join(dir, f)).isFile());
  };

  beforeAll(async () => {
    server = await startTestServer(engine, { maxFileUploadSizeMib: 60 });
    owner = server.owner;
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    realmId = (await server.node.store.db.selectFrom("realms").select("id").executeTakeFirstOrThrow()).id;
    await messages.subscribe(owner, ["general"], { principals: [alice.id, bob.id] });
    await messages.subscribe(alice, ["secret"], { invite_only: true });
  });
  afterAll(() => server?.close());

  it("register advertises the size limit and the quota", async () => {
    const res = await api(server, "POST", "/register", { as: alice, params: { fetch_event_types: ["realm"] } });
    expect(res.body.max_file_upload_size_mib).toBe(60);
    expect(res.body.realm_upload_quota_mib).toBeNull();
  });

  it("uploads a file and serves it to its owner with the API key", async () => {
    const body = await uploadOne(alice, "notes.txt", "hello uploads");
    expect(body.url).toBe(body.uri);
    expect(body.filename).toBe("notes.txt");
    expect(body.url).toMatch(new RegExp(`^/user_uploads/${realmId}/[0-9a-f]{2}/[A-Za-z0-9_-]{24}/notes\\.txt$`));
    const res = await download(body.url, alice);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("hello uploads");
    expect(res.headers.get("content-type")).toBe("text/plain");
    expect(res.headers.get("content-disposition")).toBe(`inline; filename="notes.txt"; filename*=UTF-8''notes.txt`);
    expect(res.headers.get("cache-control")).toContain("private");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(res.headers.get("content-length")).toBe("13");
    expect((await download(body.url)).status).toBe(401);
  });

  it("takes a hand-written multipart body, as curl -F sends it, with an RFC 5987 file name", async () => {
    const boundary = "------------------------chorus1234";
    const body = Buffer.concat([
      Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename*=UTF-8''%C3%A9t%C3%A9.txt\r\nContent-Type: text/plain\r\n\r\n`),
      Buffer.from("summer"),
      Buffer.from(`\r\n--${boundary}--\r\n`),
    ]);
    const res = await fetch(new URL("/api/v1/user_uploads", server.url), {
      method: "POST",
      headers: { authorization: basic(alice), "content-type": `multipart/form-data; boundary=${boundary}` },
      body,
    });
    expect(res.status).toBe(200);
    const answer = (await res.json()) as { filename: string; url: string };
    expect(answer.filename).toBe("été.txt");
    expect(await (await download(answer.url, alice)).text()).toBe("summer");
    // The decoded path finds the file too.
    expect((await download(decodeURIComponent(answer.url), alice)).status).toBe(200);
  });

  it("types a file part that declares no Content-Type from its name, as python-zulip-api's upload_file sends it", async () => {
    // requests writes `files=[(f.name, f)]` as a part with a Content-Disposition and no Content-Type; Django reads
    // that as no type and Zulip guesses one from the name. A PNG so sent is an image: served as one, previewed.
    const image = await sharp({ create: { width: 64, height: 48, channels: 3, background: { r: 200, g: 50, b: 90 } } }).png().toBuffer();
    const boundary = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
    const send = (name: string, data: Buffer, partType?: string) =>
      fetch(new URL("/api/v1/user_uploads", server.url), {
        method: "POST",
        headers: { authorization: basic(alice), "content-type": `multipart/form-data; boundary=${boundary}` },
        body: Buffer.concat([
          Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="/tmp/${name}"; filename="${name}"\r\n${partType ? `Content-Type: ${partType}\r\n` : ""}\r\n`),
          data,
          Buffer.from(`\r\n--${boundary}--\r\n`),
        ]),
      }).then(async (res) => {
        expect(res.status).toBe(200);
        return ((await res.json()) as { url: string }).url;
      });
    const picture = await send("pic.png", image);
    expect((await download(picture, alice)).headers.get("content-type")).toBe("image/png");
    const id = await messages.toChannel(alice, "python", `py upload [pic](${picture})`);
    const res = await api(server, "GET", `/messages/${id}`, { as: alice, params: { apply_markdown: true }, template: "/messages/{message_id}" });
    expect(res.body.message.content).toContain(`<div class="message_inline_image"><a href="${picture}" title="pic">`);
    // A name that tells nothing is an octet stream; a type the part does declare is kept, even text/plain.
    expect((await download(await send("README", Buffer.from("notes")), alice)).headers.get("content-type")).toBe("application/octet-stream");
    expect((await download(await send("data.png", Buffer.from("plain words"), "text/plain"), alice)).headers.get("content-type")).toBe("text/plain");
  });

  it("sanitises the stored name as Zulip does and answers the name as uploaded", async () => {
    const body = await uploadOne(alice, "my report (final)?.txt", "x");
    expect(body.filename).toBe("my report (final)?.txt");
    expect(body.url.endsWith("/my-report-final.txt")).toBe(true);
    const unicode = await uploadOne(alice, "résumé café.pdf", "%PDF", "application/pdf");
    expect(unicode.url.endsWith(`/${encodeURIComponent("résumé-café.pdf")}`)).toBe(true);
    expect((await download(unicode.url, alice)).status).toBe(200);
    const dots = await uploadOne(alice, "..", "x");
    expect(dots.url.endsWith("/uploaded-file")).toBe(true);
  });

  it("never serves HTML or SVG inline", async () => {
    for (const [name, type] of [
      ["page.html", "text/html"],
      ["drawing.svg", "image/svg+xml"],
    ]) {
      const body = await uploadOne(alice, name!, "<script>alert(1)</script>", type);
      const res = await download(body.url, alice);
      expect(res.headers.get("content-type")).toBe("application/octet-stream");
      expect(res.headers.get("content-disposition")).toMatch(/^attachment; /);
      expect(res.headers.get("content-security-policy")).toContain("sandbox");
    }
  });

  it("answers byte ranges", async () => {
    const body = await uploadOne(alice, "digits.txt", "0123456789");
    const part = await download(body.url, alice, { range: "bytes=2-5" });
    expect(part.status).toBe(206);
    expect(part.headers.get("content-range")).toBe("bytes 2-5/10");
    expect(part.headers.get("content-length")).toBe("4");
    expect(await part.text()).toBe("2345");
    const tail = await download(body.url, alice, { range: "bytes=-3" });
    expect(await tail.text()).toBe("789");
    const past = await download(body.url, alice, { range: "bytes=10-" });
    expect(past.status).toBe(416);
    expect(past.headers.get("content-range")).toBe("bytes */10");
  });

  it("serves a file to others only once they can read a message linking it", async () => {
    const body = await uploadOne(alice, "plan.txt", "the plan");
    expect((await download(body.url, bob)).status).toBe(403);
    // Linked in a private channel bob is not in: still refused.
    await messages.toChannel(alice, "files", `[plan](${body.url})`, "secret");
    expect((await download(body.url, bob)).status).toBe(403);
    // Bob linking it himself claims nothing: he could not read it.
    await messages.toChannel(bob, "files", `stolen [plan](${body.url})`);
    expect((await download(body.url, bob)).status).toBe(403);
    // Linked where bob reads: served.
    await messages.toChannel(alice, "files", `[plan](${body.url})`);
    const res = await download(body.url, bob);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("the plan");
  });

  it("gives a temporary URL that serves without credentials", async () => {
    const body = await uploadOne(alice, "temp.txt", "temporary");
    const rest = body.url.slice("/user_uploads/".length + String(realmId).length + 1);
    const res = await api(server, "GET", `/user_uploads/${realmId}/${rest}`, { as: alice, template: "/user_uploads/{realm_id_str}/{filename}" });
    expect(res.status).toBe(200);
    expect(res.body.url).toMatch(/^\/user_uploads\/temporary\/[^/]+\/temp\.txt$/);
    const file = await download(res.body.url);
    expect(file.status).toBe(200);
    expect(await file.text()).toBe("temporary");
    const forged = res.body.url.replace(/\.([A-Za-z0-9_-])/, ".X$1");
    expect((await download(forged)).status).toBe(404);
    const refused = await api(server, "GET", `/user_uploads/${realmId}/${rest}`, { as: bob, template: "/user_uploads/{realm_id_str}/{filename}" });
    expect(refused.status).toBe(403);
  });

  it("refuses another realm's path and path traversal", async () => {
    const body = await uploadOne(alice, "mine.txt", "mine");
    const rest = body.url.slice("/user_uploads/".length + String(realmId).length);
    expect((await download(`/user_uploads/${realmId + 1}${rest}`, alice)).status).toBe(404);
    for (const bad of [`/user_uploads/${realmId}/../../secret.key`, `/user_uploads/${realmId}/%2e%2e/%2e%2e/secret.key`, `/user_uploads/${realmId}/..%2F..%2Fsecret.key`]) {
      const res = await download(bad, alice);
      expect(res.status, bad).toBe(404);
    }
  });

  it("refuses a missing file, two files, an empty file and a file over the limit, leaving nothing stored", async () => {
    const before = storedFiles().length;
    const anonymous = await upload(null, [{ filename: "a.txt", type: "text/plain", data: Buffer.from("a") }]);
    expect(anonymous.status).toBe(401);
    const none = await upload(alice, [], { note: "no file" });
    expect(none.status).toBe(400);
    expect(none.body.msg).toBe("You must specify a file to upload");
    const two = await upload(alice, [
      { filename: "a.txt", type: "text/plain", data: Buffer.from("a") },
      { filename: "b.txt", type: "text/plain", data: Buffer.from("b") },
    ]);
    expect(two.status).toBe(400);
    expect(two.body.msg).toBe("You may only upload one file at a time");
    const empty = await upload(alice, [{ filename: "empty.txt", type: "text/plain", data: new Uint8Array() }]);
    expect(empty.status).toBe(400);
    expect(empty.body.msg).toBe("Uploaded file is empty");
    const big = await upload(alice, [{ filename: "big.bin", type: "application/octet-stream", data: Buffer.alloc(61 * MIB) }]);
    expect(big.status).toBe(413);
    expect(big.body.msg).toBe("Uploaded file is larger than the allowed limit of 60 MiB");
    const form = await api(server, "POST", "/user_uploads", { as: alice, params: { x: "1" } });
    expect(form.status).toBe(400);
    await eventually(async () => storedFiles().length === before);
    expect(storedFiles().length, storedFiles().join(", ")).toBe(before);
  });

  it("streams a large file back whole, with its length", async () => {
    const data = Buffer.alloc(12 * MIB);
    for (let i = 0; i < data.length; i += 4096) data.writeUInt32BE(i, i);
    const body = await uploadOne(alice, "large.bin", data, "application/octet-stream");
    const res = await download(body.url, alice);
    expect(res.headers.get("content-length")).toBe(String(data.length));
    expect(Buffer.from(await res.arrayBuffer()).equals(data)).toBe(true);
    const part = await download(body.url, alice, { range: `bytes=${5 * MIB}-${9 * MIB - 1}` });
    expect(Buffer.from(await part.arrayBuffer()).equals(data.subarray(5 * MIB, 9 * MIB))).toBe(true);
  });

  it("an upload aborted midway (50 MiB) leaves no file and no record", async () => {
    const before = storedFiles().length;
    const storedBytes = () => storedFiles().reduce((sum, f) => sum + fs.statSync(path.join(server.node.config.uploadsDir, f)).size, 0);
    const bytesBefore = storedBytes();
    const count = async () => Number((await server.node.store.db.selectFrom("attachments").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow()).n);
    const records = await count();
    const boundary = "----chorus-abort";
    const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`);
    const url = new URL(server.url);
    const req = http.request({
      host: url.hostname,
      port: url.port,
      method: "POST",
      path: "/api/v1/user_uploads",
      headers: { authorization: basic(alice), "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(head.length + 50 * MIB + 100) },
    });
    req.on("error", () => {});
    req.write(head);
    const chunk = Buffer.alloc(MIB, 7);
    for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => (req.write(chunk) ? resolve() : req.once("drain", resolve)));
    // The upload streams: most of what was sent is on the server's disk while the body is still incomplete.
    expect(await eventually(async () => storedBytes() - bytesBefore >= 10 * MIB, 5000)).toBe(true);
    req.destroy();
    expect(await eventually(async () => storedFiles().length === before)).toBe(true);
    expect(await count()).toBe(records);
  });

  it("lists, links and deletes attachments, with their events", async () => {
    const queue = await messages.register(alice, ["attachment"]);
    const body = await uploadOne(alice, "listed.txt", "listed");
    const listed = await api(server, "GET", "/attachments", { as: alice });
    const mine = listed.body.attachments.find((a: any) => body.url.endsWith(a.path_id));
    expect(mine).toMatchObject({ name: "listed.txt", size: 6, messages: [] });
    expect(listed.body.upload_space_used).toBeGreaterThanOrEqual(6);
    const messageId = await messages.toChannel(alice, "files", `see [listed](${body.url})`);
    const linked = (await api(server, "GET", "/attachments", { as: alice })).body.attachments.find((a: any) => a.id === mine.id);
    expect(linked.messages.map((m: any) => m.id)).toEqual([messageId]);
    expect((await api(server, "GET", "/attachments", { as: bob })).body.attachments.some((a: any) => a.id === mine.id)).toBe(false);

    const refused = await api(server, "DELETE", `/attachments/${mine.id}`, { as: bob, template: "/attachments/{attachment_id}" });
    expect(refused.status).toBe(400);
    expect(refused.body.msg).toBe("Invalid attachment");
    const deleted = await api(server, "DELETE", `/attachments/${mine.id}`, { as: alice, template: "/attachments/{attachment_id}" });
    expect(deleted.status).toBe(200);
    expect((await download(body.url, alice)).status).toBe(404);

    const events = await eventually(async () => {
      const all = (await messages.events(alice, queue)).filter((e) => e.type === "attachment");
      return all.length >= 3 ? all : undefined;
    });
    expect(events!.map((e) => e.op)).toEqual(["add", "update", "remove"]);
    expect(events![0]).toMatchObject({ op: "add", attachment: { id: mine.id, name: "listed.txt" } });
    expect(events![1]).toMatchObject({ op: "update", attachment: { id: mine.id, messages: [{ id: messageId }] } });
    expect(events![2]).toMatchObject({ op: "remove", attachment: { id: mine.id } });
    expect(typeof events![2].upload_space_used).toBe("number");
  });

  it("tells the owner each time the messages linking a file change", async () => {
    const queue = await messages.register(alice, ["attachment"]);
    const body = await uploadOne(alice, "shared.txt", "shared");
    const updates = async (count: number) => {
      const found = await eventually(async () => {
        const all = (await messages.events(alice, queue)).filter((e) => e.type === "attachment" && e.op === "update");
        return all.length >= count ? all : undefined;
      });
      expect(found, `${count} attachment updates`).toBeDefined();
      return found!.map((e) => e.attachment.messages.map((m: any) => m.id));
    };
    const first = await messages.toChannel(alice, "files", `[shared](${body.url})`);
    expect(await updates(1)).toEqual([[first]]);
    // Bob read it there: his message links it too, and the owner hears of it.
    const second = await messages.toChannel(bob, "files", `again [shared](${body.url})`);
    expect((await updates(2))[1]).toEqual([first, second]);
    expect((await messages.patch(alice, first, { content: "no file any more" })).status).toBe(200);
    expect((await updates(3))[2]).toEqual([second]);
    // An edit that leaves the links as they were changes nothing to tell.
    expect((await messages.patch(bob, second, { content: `still [shared](${body.url})` })).status).toBe(200);
    expect((await api(server, "DELETE", `/messages/${second}`, { as: owner, template: "/messages/{message_id}" })).status).toBe(200);
    const all = await updates(4);
    expect(all).toHaveLength(4);
    expect(all[3]).toEqual([]);
    const events = (await messages.events(alice, queue)).filter((e) => e.type === "attachment" && e.op === "update");
    expect(events[3]).toMatchObject({ attachment: { name: "shared.txt", size: 6 } });
    expect(typeof events[3].upload_space_used).toBe("number");
  });

  it("answers HEAD on file URLs with GET's headers and no body", async () => {
    const body = await uploadOne(alice, "head.txt", "0123456789");
    const get = await download(body.url, alice);
    const head = await fetch(new URL(body.url, server.url), { method: "HEAD", headers: { authorization: basic(alice) } });
    expect(head.status).toBe(200);
    for (const name of ["content-type", "content-disposition", "content-length", "cache-control", "accept-ranges", "x-content-type-options"]) {
      expect(head.headers.get(name), name).toBe(get.headers.get(name));
    }
    expect(head.headers.get("content-length")).toBe("10");
    expect(await head.text()).toBe("");
    const ranged = await fetch(new URL(body.url, server.url), { method: "HEAD", headers: { authorization: basic(alice), range: "bytes=2-4" } });
    expect([ranged.status, ranged.headers.get("content-length"), ranged.headers.get("content-range")]).toEqual([206, "3", "bytes 2-4/10"]);
    expect((await fetch(new URL(body.url, server.url), { method: "HEAD", headers: { authorization: basic(bob) } })).status).toBe(403);
    // The connection still serves requests after a HEAD.
    expect(await (await download(body.url, alice)).text()).toBe("0123456789");
    const refused = await fetch(new URL(body.url, server.url), { method: "DELETE", headers: { authorization: basic(alice) } });
    expect([refused.status, refused.headers.get("allow")]).toEqual([405, "GET, HEAD"]);
  });

  it("deleting a linked file's record removes the file for everyone, and the message keeps its link", async () => {
    const body = await uploadOne(alice, "linked.txt", "linked");
    const id = await messages.toChannel(alice, "files", `[linked](${body.url})`);
    expect((await download(body.url, bob)).status).toBe(200);
    const mine = (await api(server, "GET", "/attachments", { as: alice })).body.attachments.find((a: any) => body.url.endsWith(a.path_id));
    expect(mine.messages.map((m: any) => m.id)).toEqual([id]);
    expect((await api(server, "DELETE", `/attachments/${mine.id}`, { as: alice, template: "/attachments/{attachment_id}" })).status).toBe(200);
    expect((await download(body.url, bob)).status).toBe(404);
    expect((await download(body.url, alice)).status).toBe(404);
    const message = await api(server, "GET", `/messages/${id}`, { as: bob, template: "/messages/{message_id}" });
    expect(message.body.message.content).toContain(body.url);
    // Nothing of it stays on disk.
    expect(storedFiles().some((f) => body.url.includes(f.split(path.sep).slice(0, 3).join("/")))).toBe(false);
  });

  it("an edit that removes the only link reports the upload as detached", async () => {
    const body = await uploadOne(alice, "draft.txt", "draft");
    const kept = await uploadOne(alice, "kept.txt", "kept");
    const id = await messages.toChannel(alice, "files", `[draft](${body.url}) and [kept](${kept.url})`);
    const edited = await messages.patch(alice, id, { content: `only [kept](${kept.url})` });
    expect(edited.status).toBe(200);
    expect(edited.body.detached_uploads).toHaveLength(1);
    expect(edited.body.detached_uploads[0]).toMatchObject({ name: "draft.txt", messages: [] });
    const again = await messages.patch(alice, id, { content: "nothing linked" });
    expect(again.body.detached_uploads.map((a: any) => a.name)).toEqual(["kept.txt"]);
  });
});

describe.each(ENGINES)("the upload quota on %s", (engine) => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer(engine, { realmUploadQuotaMib: 1 });
  });
  afterAll(() => server?.close());

  it("is advertised, refuses an upload past it, and counts deleted files out", async () => {
    const as = server.owner;
    const state = await api(server, "POST", "/register", { as, params: { fetch_event_types: ["realm"] } });
    expect(state.body.realm_upload_quota_mib).toBe(1);
    const file = (name: string) => [{ filename: name, type: "application/octet-stream", data: Buffer.alloc(600 * 1024, 1) }];
    const first = await api(server, "POST", "/user_uploads", { as, files: file("first.bin") });
    expect(first.status).toBe(200);
    const second = await api(server, "POST", "/user_uploads", { as, files: file("second.bin") });
    expect(second.status).toBe(400);
    expect(second.body).toMatchObject({ code: "REALM_UPLOAD_QUOTA", msg: "Upload would exceed your organization's upload quota." });
    const listed = await api(server, "GET", "/attachments", { as });
    expect(listed.body.upload_space_used).toBe(600 * 1024);
    const removed = await api(server, "DELETE", `/attachments/${listed.body.attachments[0].id}`, { as, template: "/attachments/{attachment_id}" });
    expect(removed.status).toBe(200);
    expect((await api(server, "POST", "/user_uploads", { as, files: file("third.bin") })).status).toBe(200);
  });
});
