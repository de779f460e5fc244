/**
 * Custom emoji: POST and DELETE /realm/emoji/{emoji_name}, GET /realm/emoji, and the images themselves under
 * `/user_avatars/{realm_id}/emoji/images/{id}.{ext}` (outside /api/v1, public, as Zulip's local upload backend
 * serves them). The request's own checks happen here; permissions and uniqueness in the realm actor's turn.
 */
import { randomUUID } from "node:crypto";
import { errors } from "../../runtime/errors.ts";
import type { Store } from "../../runtime/store/store.ts";
import { ROLE } from "../../actors/chat/organization/groups.ts";
import { EMOJI_IMAGE_TYPES, emojiNameOf, imageKind, MAX_EMOJI_FILE_SIZE_MIB, realmEmojiImage, realmEmojiObjects } from "../../actors/chat/organization/realm-emoji.ts";
import { askRealm, type RouteSpec } from "./app.ts";
import { EMOJI_DATA_PREFIX, emojiDataDocument } from "../../actors/chat/rendering/emoji.ts";
import type { HttpRequest, HttpResult, UploadedFile } from "../http.ts";
import { Str, type ParamsSchema } from "../params.ts";
import type { Database } from "../../actors/schema.ts";

const NAME_PARAMS: ParamsSchema = { type: "object", properties: { emoji_name: Str }, required: ["emoji_name"] };

const TYPE_OF_EXTENSION: Record<string, string> = { png: "image/png", gif: "image/gif", jpg: "image/jpeg", jpeg: "image/jpeg", webp: "image/webp" };

/**
 * The type the client says the file is: its part's Content-Type, or (when that says nothing, as curl's
 * application/octet-stream does) its file name's extension; empty when neither tells.
 */
function declaredType(file: UploadedFile): string {
  const declared = file.contentType.split(";")[0]!.trim().toLowerCase();
  if (declared && declared !== "application/octet-stream") return declared;
  return TYPE_OF_EXTENSION[file.filename.split(".").pop()!.toLowerCase()] ?? "";
}

export const emojiRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/realm/emoji",
    params: { type: "object", properties: {} },
    async handle({ user, services }) {
      // The list is public within the realm, as in Zulip.
      return { emoji: await realmEmojiObjects(services.store.db, user.realm_id) };
    },
  },
  {
    method: "POST",
    path: "/realm/emoji/{emoji_name}",
    slashesIn: "emoji_name",
    params: NAME_PARAMS,
    async handle(call) {
      // Guests are refused before the upload is looked at; the realm actor checks the caller's current role again.
      if (call.user.role === ROLE.guest) throw errors.badRequest("Not allowed for guest users");
      const name = emojiNameOf(call.params.emoji_name);
      if (call.files.length !== 1) throw errors.badRequest("You must upload exactly one file.");
      const file = call.files[0]!;
      if (file.data.length > MAX_EMOJI_FILE_SIZE_MIB * 1024 * 1024) {
        throw errors.badRequest(`Uploaded file is larger than the allowed limit of ${MAX_EMOJI_FILE_SIZE_MIB} MiB`);
      }
      const declared = declaredType(file);
      if (declared && !(declared in EMOJI_IMAGE_TYPES)) throw errors.badRequest("Invalid image format");
      const kind = imageKind(file.data);
      if (!kind) throw errors.badRequest("Could not decode image; did you upload an image file?");
      return askRealm(call, { op: "uploadEmoji", name, kind, image: file.data.toString("base64"), requestKey: randomUUID() });
    },
  },
  {
    method: "DELETE",
    path: "/realm/emoji/{emoji_name}",
    slashesIn: "emoji_name",
    params: NAME_PARAMS,
    async handle(call) {
      return askRealm(call, { op: "deactivateEmoji", name: call.params.emoji_name, requestKey: randomUUID() });
    },
  },
];

/** The unicode emoji document of `server_emoji_data_url` (emojiDataDocument): public, as Zulip's static file is. */
export function isEmojiDataPath(path: string): boolean {
  return path.startsWith(EMOJI_DATA_PREFIX);
}

export function serveEmojiData(req: HttpRequest): HttpResult {
  if (req.method !== "GET" && req.method !== "HEAD") return { status: 405, headers: { allow: "GET, HEAD", "content-type": "text/plain" }, body: "Method Not Allowed" };
  const document = emojiDataDocument();
  if (req.path !== document.path) return { status: 404, headers: { "content-type": "text/plain" }, body: "Not Found" };
  const headers = { "content-type": "application/json", "cache-control": "public, max-age=31536000, immutable" };
  return req.method === "HEAD" ? { status: 200, headers, body: "", headLength: document.body.length } : { status: 200, headers, body: document.body };
}

const EMOJI_IMAGE_PATH = /^\/user_avatars\/(\d{1,9})\/emoji\/images\/([^/]+)$/;

export function isEmojiImagePath(path: string): boolean {
  return path.startsWith("/user_avatars/");
}

/**
 * An emoji image: its bytes with the type they were recognised as. An image never changes under its URL (each
 * upload has a new id), so clients may keep it for good.
 */
export async function serveEmojiImage(store: Store<Database>, req: HttpRequest): Promise<HttpResult> {
  const notFound: HttpResult = { status: 404, headers: { "content-type": "text/plain" }, body: "Not Found" };
  if (req.method !== "GET") return { status: 405, headers: { allow: "GET", "content-type": "text/plain" }, body: "Method Not Allowed" };
  const match = EMOJI_IMAGE_PATH.exec(req.path);
  if (!match) return notFound;
  const image = await realmEmojiImage(store.db, Number(match[1]), match[2]!);
  if (!image) return notFound;
  return {
    status: 200,
    headers: { "content-type": image.contentType, "cache-control": "public, max-age=31536000, immutable", "x-content-type-options": "nosniff" },
    body: image.data,
  };
}
