/**
 * File uploads as Zulip has them: POST /user_uploads (one file, streamed from the socket into the blob store),
 * the files themselves under /user_uploads/{realm_id}/{path} (outside /api/v1, as Zulip serves them) and behind a
 * short-lived temporary URL, GET /attachments and DELETE /attachments/{id}. The records are made in the realm actor
 * (actors/chat/organization/attachments.ts); the bytes never pass through an actor. Semantics follow Zulip's
 * zerver/views/upload.py, zerver/lib/upload/ and zerver/lib/attachments.py.
 */
import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import busboyModule, { type BusboyInstance } from "@fastify/busboy";
import mimeTypes from "mime-types";
import { ChorusError, errors } from "../../runtime/errors.ts";
import { BlobTooLarge } from "../../runtime/blobs/blob-store.ts";
import { safeEqual } from "../../runtime/secrets.ts";
import { attachmentByPath, attachmentObjects, linkedMessageIds, uploadSpaceUsed } from "../../actors/chat/organization/attachments.ts";
import { readableMessages } from "../../actors/chat/reads/messages.ts";
import type { AuthUser } from "../auth.ts";
import type { HttpRequest, HttpResult, HttpStream } from "../http.ts";
import { Id, Str } from "../params.ts";
import { answerErrors } from "../router.ts";
import { askRealm, envelope, type RouteSpec, type Services } from "./app.ts";
import { log } from "../../runtime/log.ts";
import { formatName, storedFormatName, thumbnailBlobKey, THUMBNAIL_FORMATS, type StoredThumbnail } from "../../actors/chat/rendering/thumbnails.ts";
import { probeImage, thumbnailSoon } from "./thumbnails.ts";

const MIB = 1024 * 1024;
/** What a multipart body may add around its one file (boundaries, part headers, a few fields) before it is refused unread. */
const MULTIPART_OVERHEAD = 64 * 1024;
/** How long a temporary URL serves its file (Zulip's 60 seconds). */
export const TEMPORARY_URL_SECONDS = 60;
const TEMPORARY_PURPOSE = "user-upload";

/**
 * Types a browser may show in place: they cannot run script in our origin (Zulip's INLINE_MIME_TYPES). Every other
 * file, HTML and SVG above all, is served as an octet stream to download.
 */
const INLINE_TYPES = new Set([
  "application/pdf",
  "audio/aac",
  "audio/flac",
  "audio/mp4",
  "audio/mpeg",
  "audio/ogg",
  "audio/wav",
  "audio/webm",
  "image/apng",
  "image/avif",
  "image/gif",
  "image/jpeg",
  "image/png",
  "image/webp",
  "text/plain",
  "video/mp4",
  "video/ogg",
  "video/webm",
]);

const tooLarge = (limitMib: number) => new ChorusError("BAD_REQUEST", `Uploaded file is larger than the allowed limit of ${limitMib} MiB`, 413);
const notFound = () => new ChorusError("BAD_REQUEST", "File not found", 404);
const notAuthorized = () => new ChorusError("BAD_REQUEST", "You are not authorized to view this file.", 403);

/**
 * Zulip's sanitize_name: NFKC, only word characters, whitespace, dots and dashes kept, runs of dashes and whitespace
 * become one dash, at most 255 bytes (the extension kept), and never empty, "." or "..".
 */
export function sanitizeFileName(raw: string): string {
  let name = raw
    .normalize("NFKC")
    .replace(/[^\p{L}\p{N}_\s.-]/gu, "")
    .trim()
    .replace(/[-\s]+/g, "-");
  if (Buffer.byteLength(name) > 255) {
    const dot = name.lastIndexOf(".");
    const ext = dot > 0 && Buffer.byteLength(name.slice(dot)) < 255 ? name.slice(dot) : "";
    const stem = Buffer.from(name.slice(0, name.length - ext.length)).subarray(0, 255 - Buffer.byteLength(ext));
    // A character cut in half decodes to U+FFFD: drop it.
    name = stem.toString("utf8").replace(/\uFFFD+$/, "") + ext;
  }
  return name === "" || name === "." || name === ".." ? "uploaded-file" : name;
}

/** The type a file is stored with: as the client declared it, else guessed from its name (Zulip's get_file_info). */
function storedType(declared: string, fileName: string): string {
  const bare = declared.split(";")[0]!.trim().toLowerCase();
  if (bare && bare !== "application/octet-stream") return declared.trim();
  return mimeTypes.lookup(fileName) || "application/octet-stream";
}

/** How far into a body the file part's headers are looked for (Zulip's clients send the file first). */
const PART_HEADER_SCAN_LIMIT = MULTIPART_OVERHEAD;

/**
 * Watches a multipart body for the header block of its first file part and tells whether that part declared a
 * Content-Type. Busboy reports RFC 7578's default, text/plain, for a part that declares none, where Django (which
 * reads Zulip's uploads) reports none and Zulip then types the file from its name: python-zulip-api's
 * `upload_file` declares none, so its PNG must be stored as image/png, not text/plain. Undefined until the block
 * has been seen (or when it was not within the scan limit).
 */
function watchFilePartTypeDeclared(body: Readable, contentType: string): () => boolean | undefined {
  const boundary = /boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType);
  if (!boundary) return () => undefined;
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}\r\n`);
  let head = Buffer.alloc(0);
  let declared: boolean | undefined;
  const onData = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    for (let at = head.indexOf(delimiter); at !== -1; at = head.indexOf(delimiter, at + delimiter.length)) {
      const headersStart = at + delimiter.length;
      const headersEnd = head.indexOf("\r\n\r\n", headersStart);
      if (headersEnd === -1) break; // the rest of this block comes with the next chunk
      const lines = head.toString("latin1", headersStart, headersEnd).split("\r\n");
      const isFile = lines.some((line) => /^content-disposition:.*\bfilename\*?=/i.test(line));
      if (!isFile) continue;
      declared = lines.some((line) => /^content-type:/i.test(line));
      break;
    }
    if (declared !== undefined || head.length > PART_HEADER_SCAN_LIMIT) {
      body.off("data", onData);
      head = Buffer.alloc(0); // the answer outlives the scan: the bytes need not
    }
  };
  body.on("data", onData);
  return () => declared;
}

interface ReceivedFile {
  fileName: string;
  contentType: string;
  blobKey: string;
  size: number;
}

/**
 * Reads a multipart body with exactly one file, streaming the file into the blob store under a fresh key. Whatever
 * fails (a second file, no file, a malformed body, the size limit, the client going away), nothing stays stored.
 */
function receiveOneFile(services: Services, body: Readable, contentType: string, blobKey: string, limitMib: number): Promise<ReceivedFile> {
  const blobs = services.blobs;
  let saving: Promise<ReceivedFile> | undefined;
  let parser: BusboyInstance;
  try {
    // The package is CommonJS: its constructor is the module's `default` both as typed and as Node loads it.
    parser = busboyModule.default({ headers: { "content-type": contentType }, limits: { files: 1, fields: 100, parts: 101 } });
  } catch {
    return Promise.reject(errors.badRequest("Invalid request body: send the file as multipart/form-data"));
  }
  // Listening before the parser pipes: each chunk is seen here before busboy parses it.
  const typeDeclared = watchFilePartTypeDeclared(body, contentType);
  const received = new Promise<ReceivedFile>((resolve, reject) => {
    let failed = false;
    let file: Readable | undefined;
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      body.unpipe(parser);
      body.destroy();
      // The file's stream ends only with the body: cut it off, so that its put removes what it wrote. (A file read
      // to its end is left alone: its put is done, and the caller deletes what it stored.)
      if (file && !file.readableEnded) {
        file.on("error", () => {});
        file.destroy(error instanceof Error ? error : new Error(String(error)));
      }
      // Later complaints of a parser cut off midway are expected.
      parser.on("error", () => {});
      reject(error);
    };
    parser.on("file", (_field, stream, name, _encoding, mimeType) => {
      file = stream;
      const fileName = decodeURIComponentSafely(name).replaceAll("\u0000", "");
      saving = blobs.put(blobKey, stream, { limit: limitMib * MIB }).then(
        ({ size }) => ({ fileName, contentType: storedType(typeDeclared() === false ? "" : mimeType, fileName), blobKey, size }),
        (err) => {
          throw err instanceof BlobTooLarge ? tooLarge(limitMib) : err;
        },
      );
      saving.catch(fail);
    });
    parser.on("filesLimit", () => fail(errors.badRequest("You may only upload one file at a time")));
    parser.on("error", () => fail(errors.badRequest("Invalid request body: malformed multipart/form-data")));
    parser.on("finish", () => {
      if (!saving) return fail(errors.badRequest("You must specify a file to upload"));
      saving.then(resolve, fail);
    });
    // The client went away (http.ts errors the stream): nobody hears this answer, but it is no server failure.
    body.on("error", () => fail(errors.badRequest("The upload was interrupted before it was complete")));
    body.pipe(parser);
  });
  return received.catch(async (err) => {
    // The file may have been stored before the body turned out bad (a second file after it).
    if (saving) await saving.then((f) => blobs.delete(f.blobKey), () => {});
    throw err;
  });
}

function decodeURIComponentSafely(name: string): string {
  try {
    return decodeURIComponent(name);
  } catch {
    return name;
  }
}

/**
 * A new file's place: Zulip's path id is `{realm}/{2 hex}/{24 random url-safe}/{sanitised name}`; the blob's key is
 * the same without the name (known only once the body is read, and no part of a key anyway).
 */
function newUpload(realmId: number) {
  const prefix = `${realmId}/${randomBytes(1).toString("hex")}/${randomBytes(18).toString("base64url")}`;
  return {
    blobKey: prefix,
    paths(fileName: string) {
      const name = sanitizeFileName(fileName);
      return { pathId: `${prefix}/${name}`, urlPath: `${prefix}/${encodeURIComponent(name)}` };
    },
  };
}

/**
 * Zulip's access rule (validate_attachment_request): the uploader, or anyone who can read a message linking the file.
 * Another realm's file is not found at all.
 */
async function accessibleAttachment(services: Services, user: AuthUser, realmId: number, path: string) {
  if (realmId !== user.realm_id) throw notFound();
  const attachment = await attachmentByPath(services.store.db, realmId, `${realmId}/${path}`);
  if (!attachment) throw notFound();
  if (attachment.owner_id === user.id) return attachment;
  const linked = await linkedMessageIds(services.store.db, attachment.id);
  if (!linked.length || !(await readableMessages(services.store.db, user, linked)).length) throw notAuthorized();
  return attachment;
}

export const uploadRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/user_uploads",
    params: { type: "object", properties: {} },
    async handle(call) {
      const { req, user, services } = call;
      const limitMib = services.chat.maxFileUploadSizeMib;
      const contentType = req.headers["content-type"] ?? "";
      if (!contentType.toLowerCase().startsWith("multipart/form-data")) throw errors.badRequest("Invalid request body: send the file as multipart/form-data");
      // The adapter streams this route's body (gateway/main.ts names it); were it buffered, it is read the same way.
      const body = req.bodyStream ?? Readable.from([req.body]);
      // Refused unread when the declared length already says too much (the adapter then closes the connection).
      const declared = Number(req.headers["content-length"] ?? NaN);
      if (declared > limitMib * MIB + MULTIPART_OVERHEAD) throw tooLarge(limitMib);
      const quotaMib = services.chat.realmUploadQuotaMib;
      if (quotaMib !== undefined && Number.isFinite(declared) && (await uploadSpaceUsed(services.store.db, user.realm_id)) + declared - MULTIPART_OVERHEAD > quotaMib * MIB) {
        throw new ChorusError("REALM_UPLOAD_QUOTA", "Upload would exceed your organization's upload quota.", 400);
      }
      const upload = newUpload(user.realm_id);
      const received = await receiveOneFile(services, body, contentType, upload.blobKey, limitMib);
      const { pathId, urlPath } = upload.paths(received.fileName);
      let recorded: { id: number; image: boolean };
      try {
        if (received.size === 0) throw errors.badRequest("Uploaded file is empty");
        const image = await probeImage(services, received.blobKey, received.contentType, received.size);
        const { id } = await askRealm(call, {
          op: "recordUpload",
          pathId,
          urlPath,
          blobKey: received.blobKey,
          fileName: received.fileName,
          contentType: received.contentType,
          size: received.size,
          ...(image ? { image } : {}),
        });
        recorded = { id, image: image !== undefined };
      } catch (err) {
        await services.blobs.delete(received.blobKey);
        throw err;
      }
      // Off the request path: the answer does not wait for the thumbnails.
      if (recorded.image) thumbnailSoon(services, recorded.id).catch((err) => log.warn({ err, path_id: pathId }, "thumbnailing an upload failed"));
      const url = `/user_uploads/${urlPath}`;
      return { uri: url, url, filename: received.fileName };
    },
  },
  {
    method: "GET",
    path: "/user_uploads/{realm_id_str}/{filename}",
    slashesIn: "filename",
    params: { type: "object", properties: { realm_id_str: Id, filename: Str }, required: ["realm_id_str", "filename"] },
    async handle({ params, user, services }) {
      const attachment = await accessibleAttachment(services, user, params.realm_id_str, params.filename);
      const expires = Math.floor(Date.now() / 1000) + TEMPORARY_URL_SECONDS;
      const payload = Buffer.from(JSON.stringify([attachment.path_id, expires])).toString("base64url");
      const token = `${payload}.${services.keyring.sign(TEMPORARY_PURPOSE, payload)}`;
      return { url: `/user_uploads/temporary/${token}/${encodeURIComponent(attachment.path_id.split("/").pop()!)}` };
    },
  },
  {
    method: "GET",
    path: "/attachments",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      const db = services.store.db;
      const [attachments, used] = await Promise.all([attachmentObjects(db, { ownerId: user.id }), uploadSpaceUsed(db, user.realm_id)]);
      return { attachments, upload_space_used: used };
    },
  },
  {
    method: "DELETE",
    path: "/attachments/{attachment_id}",
    params: { type: "object", properties: { attachment_id: Id }, required: ["attachment_id"] },
    async handle(call) {
      const { blobKeys } = await askRealm(call, { op: "deleteAttachment", attachmentId: call.params.attachment_id });
      await Promise.all(blobKeys.map((key) => call.services.blobs.delete(key)));
      return {};
    },
  },
];

/** The adapter streams this request's body to the route instead of reading it whole (gateway/http.ts). */
export function isUploadRequest(method: string, path: string): boolean {
  return method === "POST" && /^\/api\/v1\/+user_uploads\/*$/.test(path);
}

export function isUploadPath(path: string): boolean {
  return path.startsWith("/user_uploads/");
}

/** GET /user_uploads/{realm_id}/{path} (with the API key) and /user_uploads/temporary/{token}/{name} (without). */
export function serveUpload(services: Services, req: HttpRequest): Promise<HttpResult | HttpStream> {
  return answerErrors(req, () => serve(services, req), envelope);
}

async function serve(services: Services, req: HttpRequest): Promise<HttpResult | HttpStream> {
  if (req.method !== "GET" && req.method !== "HEAD") return { status: 405, headers: { allow: "GET, HEAD", "content-type": "text/plain" }, body: "Method Not Allowed" };
  const thumbnail = /^\/user_uploads\/thumbnail\/(\d{1,9})\/(.+)\/([^/]+)$/.exec(req.path);
  if (thumbnail) {
    const user = await services.auth.authenticate(req.headers.authorization);
    const attachment = await accessibleAttachment(services, user, Number(thumbnail[1]), thumbnail[2]!);
    const stored = await thumbnailOf(services, attachment.id, thumbnail[3]!);
    return sendBlob(services, req, {
      blobKey: thumbnailBlobKey(attachment.blob_key, storedFormatName(stored)),
      size: stored.byte_size,
      contentType: stored.content_type,
      fileName: storedFormatName(stored),
      label: `thumbnail of ${attachment.path_id}`,
    });
  }
  const temporary = /^\/user_uploads\/temporary\/([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]+)\/[^/]+$/.exec(req.path);
  let attachment;
  if (temporary) {
    const [, payload, signature] = temporary;
    if (!safeEqual(services.keyring.sign(TEMPORARY_PURPOSE, payload!), signature!)) throw notFound();
    const [pathId, expires] = JSON.parse(Buffer.from(payload!, "base64url").toString("utf8")) as [string, number];
    if (expires < Date.now() / 1000) throw new ChorusError("BAD_REQUEST", "This file's temporary URL has expired", 404);
    attachment = await attachmentByPath(services.store.db, Number(pathId.split("/")[0]), pathId);
    if (!attachment) throw notFound();
  } else {
    const match = /^\/user_uploads\/(\d{1,9})\/(.+)$/.exec(req.path);
    if (!match) throw notFound();
    const user = await services.auth.authenticate(req.headers.authorization);
    attachment = await accessibleAttachment(services, user, Number(match[1]), match[2]!);
  }
  return sendBlob(services, req, {
    blobKey: attachment.blob_key,
    size: Number(attachment.size),
    contentType: attachment.content_type,
    fileName: attachment.file_name,
    label: attachment.path_id,
  });
}

/**
 * Zulip's thumbnail serving: a format of server_thumbnail_formats, made now if the job has not got to it yet; a
 * format name Zulip once made but this server does not is not found (Zulip serves the closest one it has).
 */
async function thumbnailOf(services: Services, attachmentId: number, name: string): Promise<StoredThumbnail> {
  const load = () => services.store.db.selectFrom("image_attachments").select(["frames", "thumbnail_metadata"]).where("attachment_id", "=", attachmentId).executeTakeFirst();
  let image = await load();
  const noImage = () => new ChorusError("BAD_REQUEST", "This file does not exist or has been deleted.", 404);
  if (!image || !THUMBNAIL_FORMATS.some((f) => formatName(f) === name)) throw noImage();
  if (!(image.thumbnail_metadata as unknown[]).length) {
    // A job that failed (not a bad image: that is a missing record) says so in the log; the client may retry.
    await thumbnailSoon(services, attachmentId).catch((err) => log.warn({ err }, "making a thumbnail on demand failed"));
    image = await load();
  }
  const made = (image?.thumbnail_metadata ?? []) as StoredThumbnail[];
  if (image && !made.length) throw new ChorusError("SERVICE_UNAVAILABLE", "The thumbnail is not ready; try again shortly", 503);
  const stored = made.find((t) => storedFormatName(t) === name);
  if (!stored) throw noImage();
  return stored;
}

interface BlobToSend {
  blobKey: string;
  size: number;
  contentType: string;
  fileName: string;
  /** What the log calls it when reading fails. */
  label: string;
}

/** A stored file as a response: safe type and disposition, one byte range, and HEAD (the headers alone). */
function sendBlob(services: Services, req: HttpRequest, file: BlobToSend): HttpResult | HttpStream {
  const size = file.size;
  const headers: Record<string, string> = {
    "accept-ranges": "bytes",
    // The URL names one file forever (a fresh random part per upload), but who may read it can change.
    "cache-control": "private, max-age=31536000, immutable",
    "x-content-type-options": "nosniff",
  };
  const bare = file.contentType.split(";")[0]!.trim().toLowerCase();
  const quoted = file.fileName.replace(/["\\\r\n]/g, "_");
  const disposition = `filename="${quoted}"; filename*=UTF-8''${encodeURIComponent(file.fileName)}`;
  if (INLINE_TYPES.has(bare)) {
    headers["content-type"] = file.contentType;
    headers["content-disposition"] = `inline; ${disposition}`;
  } else {
    headers["content-type"] = "application/octet-stream";
    headers["content-disposition"] = `attachment; ${disposition}`;
    headers["content-security-policy"] = "default-src 'none'; sandbox";
  }
  const range = byteRange(req.headers.range, size);
  if (range === "unsatisfiable") return { status: 416, headers: { ...headers, "content-range": `bytes */${size}` }, body: "" };
  if (range) headers["content-range"] = `bytes ${range.start}-${range.end}/${size}`;
  const status = range ? 206 : 200;
  const length = range ? range.end - range.start + 1 : size;
  if (req.method === "HEAD") return { status, headers, body: "", headLength: length };
  if (length === 0) return { status, headers, body: "" };
  const source = services.blobs.read(file.blobKey, range);
  return {
    status,
    headers,
    length,
    start(sink) {
      sink.onClose(() => source.destroy());
      source.on("data", (chunk: Buffer) => {
        if (!sink.write(chunk)) {
          source.pause();
          sink.onDrain(() => source.resume());
        }
      });
      source.on("end", () => sink.end());
      source.on("error", (err) => {
        log.error({ err }, `serving ${file.label} failed`);
        sink.end();
      });
    },
  };
}

/**
 * One byte range of a `Range: bytes=…` header (first-last, first-, or -suffix), "unsatisfiable" past the end, or
 * undefined for no header or one this server answers whole (several ranges, other units: RFC 9110 allows that).
 */
export function byteRange(header: string | undefined, size: number): { start: number; end: number } | "unsatisfiable" | undefined {
  const match = header && /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0) return "unsatisfiable";
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(match[1]);
  const end = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
  if (start >= size || end < start) return "unsatisfiable";
  return { start, end };
}
