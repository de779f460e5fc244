/**
 * Thumbnails of uploaded images (Zulip's zerver/lib/thumbnail.py and zerver/worker/thumbnail.py), with sharp.
 *
 * On the upload's request path only the file's head is read (image-size): an image type whose header names a size
 * within the pixel limit gets an image record, so a message sent at once previews it as a placeholder. The
 * thumbnails are made after the answer, one image at a time per process, by `thumbnailSoon`; when a thumbnail URL is
 * asked for before they exist, they are made then (as Zulip does). Once made, the realm actor records them and each
 * conversation linking the image replaces its placeholders (conversation.ts refreshUploadPreview). An image that does
 * not decode loses its record and its previews; nothing is thrown at the uploader.
 *
 * Where a job is lost (the process dies between the upload and the thumbnails), the start-up sweep
 * (`thumbnailPending`) picks the image up again.
 */
import { imageSize } from "image-size";
import sharp from "sharp";
import { Readable } from "node:stream";
import { Realm } from "../../actors/chat/organization/realm.protocol.ts";
import {
  formatName,
  formatsFor,
  MAX_ANIMATED_PIXELS,
  MAX_IMAGE_PIXELS,
  storedFormatName,
  thumbnailBlobKey,
  THUMBNAIL_TYPES,
  uploadPreview,
  type StoredThumbnail,
} from "../../actors/chat/rendering/thumbnails.ts";
import { log } from "../../runtime/log.ts";
import { ownerOf } from "./messages.ts";
import type { Services } from "./app.ts";

/** What of the file is read on the request path: enough for every supported format's header. */
const HEAD_BYTES = 256 * 1024;
/**
 * Files past this size get no thumbnail: the job decodes from memory (as Zulip's does), and a larger image is rare
 * enough to be shown by its link alone.
 */
export const MAX_THUMBNAIL_SOURCE_BYTES = 32 * 1024 * 1024;

/** The image record of a just-stored upload, when its type and header say it is an image to thumbnail. */
export async function probeImage(services: Services, blobKey: string, contentType: string, size: number): Promise<{ width: number; height: number; frames: number } | undefined> {
  const bare = contentType.split(";")[0]!.trim().toLowerCase();
  if (!THUMBNAIL_TYPES.has(bare) || size > MAX_THUMBNAIL_SOURCE_BYTES) return undefined;
  try {
    const head = await readAll(services.blobs.read(blobKey, { start: 0, end: Math.min(size, HEAD_BYTES) - 1 }));
    const header = imageSize(head);
    // Orientations 5 to 8 turn the image a quarter: its size as shown is the other way round.
    const turned = (header.orientation ?? 1) >= 5;
    const width = turned ? header.height : header.width;
    const height = turned ? header.width : header.height;
    if (!width || !height || width * height > MAX_IMAGE_PIXELS) return undefined;
    // Whether it is animated is known once it is decoded (the job counts the frames).
    return { width, height, frames: 1 };
  } catch {
    // Not an image after all (or a header past the head): a plain file.
    return undefined;
  }
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Jobs of this process, one at a time: thumbnailing is CPU work beside the requests. */
let queue: Promise<void> = Promise.resolve();
/** The job running or waiting for each attachment, so that an upload's job and a request for its thumbnail share one. */
const pending = new Map<number, Promise<void>>();

/** Make an image's thumbnails after the current request, in this process's queue. */
export function thumbnailSoon(services: Services, attachmentId: number): Promise<void> {
  const running = pending.get(attachmentId);
  if (running) return running;
  const job = queue.then(() => ensureThumbnails(services, attachmentId)).finally(() => pending.delete(attachmentId));
  pending.set(attachmentId, job);
  queue = job.catch(() => {});
  return job;
}

/** Start-up: the images whose thumbnails a previous process did not get to make. */
export async function thumbnailPending(services: Services): Promise<void> {
  const rows = await services.store.db.selectFrom("image_attachments").select("attachment_id").where(({ eb, fn }) => eb(fn("jsonb_array_length", ["thumbnail_metadata"]), "=", 0)).execute();
  for (const row of rows) thumbnailSoon(services, row.attachment_id).catch((err) => log.warn({ err }, "thumbnailing a pending image failed"));
}

async function loadImage(services: Services, attachmentId: number) {
  return services.store.db
    .selectFrom("image_attachments as i")
    .innerJoin("attachments as a", "a.id", "i.attachment_id")
    .select(["a.id", "a.realm_id", "a.path_id", "a.url_path", "a.blob_key", "a.size", "i.original_width_px", "i.original_height_px", "i.frames", "i.content_type", "i.thumbnail_metadata"])
    .where("i.attachment_id", "=", attachmentId)
    .executeTakeFirst();
}

/** Zulip's ensure_thumbnails: every format not made yet, then the messages told. */
async function ensureThumbnails(services: Services, attachmentId: number): Promise<void> {
  const image = await loadImage(services, attachmentId);
  if (!image || (image.thumbnail_metadata as unknown[]).length) return;
  let made: { frames: number; thumbnails: StoredThumbnail[] } | null;
  try {
    made = await makeThumbnails(services, image.blob_key);
  } catch (err) {
    // A store that failed is tried again later (on demand, or at the next start); only a bad image is final.
    if (!(err instanceof NotAnImage)) throw err;
    log.info({ err: err.cause, path_id: image.path_id }, "an uploaded image did not decode: no thumbnail");
    made = null;
  }
  const realm = services.system.ref(Realm, image.realm_id);
  await realm.ask({ op: "recordThumbnails", attachmentId, frames: made?.frames ?? image.frames, thumbnails: made?.thumbnails ?? null });
  // Deleted while they were being made: its deletion could not know of these thumbnails.
  if (made && !(await loadImage(services, attachmentId))) {
    await Promise.all(made.thumbnails.map((t) => services.blobs.delete(thumbnailBlobKey(image.blob_key, storedFormatName(t)))));
    return;
  }
  const preview = made ? uploadPreview({ ...image, frames: made.frames, thumbnail_metadata: made.thumbnails }) : null;
  // After the record commits: a message committing later finds the thumbnails itself (conversation.ts).
  const linking = await services.store.db
    .selectFrom("attachment_messages as am")
    .innerJoin("messages as m", "m.id", "am.message_id")
    .innerJoin("recipients as r", "r.id", "m.recipient_id")
    .select(["m.id", "m.stream_id", "r.dm_key"])
    .where("am.attachment_id", "=", attachmentId)
    .execute();
  const byOwner = new Map<string, { row: (typeof linking)[number]; ids: number[] }>();
  for (const row of linking) {
    const key = row.stream_id !== null ? `s${row.stream_id}` : `d${row.dm_key}`;
    const entry = byOwner.get(key) ?? { row, ids: [] };
    entry.ids.push(Number(row.id));
    byOwner.set(key, entry);
  }
  await Promise.all(
    [...byOwner.values()].map(({ row, ids }) =>
      ownerOf(services.system, row).ask({ op: "refreshUploadPreview", messageIds: ids, pathId: image.path_id, urlPath: image.url_path, preview }),
    ),
  );
}

/** The image does not decode, or is past the pixel limits (Zulip's BadImageError). */
class NotAnImage extends Error {}

/** Decoding with sharp, whose failures mean a bad image (not a failing store). */
async function decoding<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw new NotAnImage("the image does not decode", { cause: err });
  }
}

/** The thumbnails of the file under `blobKey`, stored beside it (Zulip's libvips_check_image limits first). */
async function makeThumbnails(services: Services, blobKey: string): Promise<{ frames: number; thumbnails: StoredThumbnail[] }> {
  const bytes = await readAll(services.blobs.read(blobKey));
  const meta = await decoding(() => sharp(bytes, { animated: true, limitInputPixels: MAX_IMAGE_PIXELS }).metadata());
  const frames = meta.pages ?? 1;
  const width = meta.width ?? 0;
  const frameHeight = meta.pageHeight ?? meta.height ?? 0;
  if (!width || !frameHeight) throw new NotAnImage("an image without a size");
  // Animated thumbnails keep the first frames that fit the animated budget, and at least three must.
  if (frames > 1 && width * frameHeight * Math.min(3, frames) > MAX_ANIMATED_PIXELS) throw new NotAnImage("an animation past the pixel limit");
  const thumbnails: StoredThumbnail[] = [];
  for (const format of formatsFor(frames)) {
    const pages = !format.animated ? 1 : width * frameHeight * frames < MAX_ANIMATED_PIXELS ? -1 : Math.floor(MAX_ANIMATED_PIXELS / (width * frameHeight));
    const { data, info } = await decoding(() =>
      sharp(bytes, { animated: format.animated, pages, limitInputPixels: MAX_IMAGE_PIXELS })
        // As libvips' thumbnail does: the EXIF orientation applied, never enlarged.
        .rotate()
        .resize(format.maxWidth, format.maxHeight, { fit: "inside", withoutEnlargement: true })
        .webp()
        .toBuffer({ resolveWithObject: true }),
    );
    const name = formatName(format);
    const key = thumbnailBlobKey(blobKey, name);
    // A run cut off before its record leaves thumbnails behind; a put never replaces one.
    await services.blobs.delete(key);
    await services.blobs.put(key, Readable.from([data]));
    thumbnails.push({
      extension: format.extension,
      content_type: "image/webp",
      max_width: format.maxWidth,
      max_height: format.maxHeight,
      animated: format.animated,
      width: info.width,
      height: format.animated ? (info.pageHeight ?? info.height) : info.height,
      byte_size: data.length,
    });
  }
  return { frames, thumbnails };
}
