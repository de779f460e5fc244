/**
 * Thumbnails of uploaded images as Zulip 9+ has them (zerver/lib/thumbnail.py): the formats made, their URLs
 * (`/user_uploads/thumbnail/{path_id}/{format}`), and how a message shows an uploaded image. When a message is
 * rendered before its image's thumbnails exist, the preview is a placeholder (`image-loading-placeholder`, with the
 * image's size); once they exist, the placeholder becomes the default thumbnail, in the message as stored and for
 * clients through an `update_message` event with `rendering_only` (conversation.ts refreshUploadPreview). An image
 * that turns out not to decode loses its preview the same way.
 */
import { escapeAttribute } from "./escape.ts";

export interface ThumbnailFormat {
  extension: string;
  maxWidth: number;
  maxHeight: number;
  animated: boolean;
}

/** A thumbnail made (Zulip's StoredThumbnailFormat, as kept in image_attachments.thumbnail_metadata). */
export interface StoredThumbnail {
  extension: string;
  content_type: string;
  max_width: number;
  max_height: number;
  animated: boolean;
  width: number;
  height: number;
  byte_size: number;
}

/**
 * Zulip's THUMBNAIL_OUTPUT_FORMATS: large enough that clients which do not know the protocol show something
 * sharp. The first animated and the first still one are what messages link.
 */
export const THUMBNAIL_FORMATS: readonly ThumbnailFormat[] = [
  { extension: "webp", maxWidth: 840, maxHeight: 560, animated: true },
  { extension: "webp", maxWidth: 840, maxHeight: 560, animated: false },
];

/**
 * Types thumbnailed: those browsers show inline anyway, so no transcoded full-size copy is needed (Zulip also takes
 * HEIC and TIFF, which it transcodes). Never SVG: its bytes are a document, not pixels.
 */
export const THUMBNAIL_TYPES = new Set(["image/avif", "image/gif", "image/jpeg", "image/png", "image/webp"]);

/** Zulip's IMAGE_BOMB_TOTAL_PIXELS: no image past it is decoded (about a quarter GiB at 3 bytes a pixel). */
export const MAX_IMAGE_PIXELS = 90_000_000;
/** Zulip's IMAGE_MAX_ANIMATED_PIXELS: what the frames decoded for an animated thumbnail may add up to. */
export const MAX_ANIMATED_PIXELS = MAX_IMAGE_PIXELS / 3;

/** A format's name, the last part of its URL: `840x560.webp`, `840x560-anim.webp`. */
export function formatName(format: Pick<ThumbnailFormat, "maxWidth" | "maxHeight" | "animated" | "extension">): string {
  return `${format.maxWidth}x${format.maxHeight}${format.animated ? "-anim" : ""}.${format.extension}`;
}

export function storedFormatName(stored: StoredThumbnail): string {
  return formatName({ maxWidth: stored.max_width, maxHeight: stored.max_height, animated: stored.animated, extension: stored.extension });
}

/** Where a thumbnail's bytes are in the blob store, beside none of the files' own keys. */
export function thumbnailBlobKey(fileBlobKey: string, name: string): string {
  return `thumbnail/${fileBlobKey}/${name}`;
}

/** The formats of register's `server_thumbnail_formats`. */
export function serverThumbnailFormats() {
  return THUMBNAIL_FORMATS.map((f) => ({ name: formatName(f), max_width: f.maxWidth, max_height: f.maxHeight, format: f.extension, animated: f.animated }));
}

/** The formats an image gets: animated ones only for an animated image. */
export function formatsFor(frames: number): ThumbnailFormat[] {
  return THUMBNAIL_FORMATS.filter((f) => frames > 1 || !f.animated);
}

/** What rendering knows of an uploaded image (Zulip's MarkdownImageMetadata). */
export interface UploadPreview {
  width: number;
  height: number;
  contentType: string;
  /** The default thumbnail's URL; undefined while none is made. */
  url?: string;
  animated: boolean;
}

/** An image_attachments row as rendering sees it. */
export interface ImageRecord {
  path_id: string;
  original_width_px: number;
  original_height_px: number;
  frames: number;
  content_type: string;
  thumbnail_metadata: unknown;
}

/** Zulip's get_default_thumbnail_url: the first format whose animation matches the image's, once made. */
export function uploadPreview(image: ImageRecord): UploadPreview {
  const made = Array.isArray(image.thumbnail_metadata) && image.thumbnail_metadata.length > 0;
  const animated = image.frames > 1;
  const format = THUMBNAIL_FORMATS.find((f) => f.animated === animated) ?? THUMBNAIL_FORMATS[0]!;
  return {
    width: image.original_width_px,
    height: image.original_height_px,
    contentType: image.content_type,
    url: made ? `/user_uploads/thumbnail/${image.path_id}/${formatName(format)}` : undefined,
    animated: format.animated,
  };
}

const PLACEHOLDER_SRC = "/static/images/loading/loader-black.svg";

/** The `<img>` of an uploaded image's preview: the placeholder, or the thumbnail (Zulip's attributes, in its order). */
export function uploadImageTag(preview: UploadPreview): string {
  const dimensions = `${preview.width}x${preview.height}`;
  if (!preview.url) return `<img class="image-loading-placeholder" src="${PLACEHOLDER_SRC}" data-original-dimensions="${dimensions}">`;
  const animated = preview.animated ? ` data-animated="true"` : "";
  return `<img${animated} data-original-content-type="${escapeAttribute(preview.contentType)}" data-original-dimensions="${dimensions}" src="${escapeAttribute(preview.url)}">`;
}

/**
 * The previews of uploaded images in rendered HTML: `<div class="message_inline_image"><a href="/user_uploads/…"
 * …><img class="image-loading-placeholder" …></a></div>`, as uploadImageTag and previews.ts write them.
 */
const PLACEHOLDER_PREVIEW =
  /<div class="message_inline_image"><a href="\/user_uploads\/([^"]+)"([^>]*)><img class="image-loading-placeholder" [^>]*><\/a><\/div>/g;

/**
 * A message's HTML with the placeholders of one image (by the path in its link, encoded or not) made thumbnails,
 * or removed when `preview` is null (the image did not decode); undefined when nothing changed (Zulip's
 * rewrite_thumbnailed_images).
 */
export function rewriteUploadPreviews(html: string, paths: { pathId: string; urlPath: string }, preview: UploadPreview | null): string | undefined {
  let changed = false;
  const out = html.replace(PLACEHOLDER_PREVIEW, (whole, path: string, attributes: string) => {
    if (path !== paths.urlPath && path !== paths.pathId) return whole;
    changed = true;
    if (!preview) return "";
    return `<div class="message_inline_image"><a href="/user_uploads/${path}"${attributes}>${uploadImageTag(preview)}</a></div>`;
  });
  // Zulip strips the rewritten message: a preview removed at the end leaves no line break behind.
  return changed ? out.trim() : undefined;
}

/** The paths (as linked) of the uploaded images whose placeholders `html` shows. */
export function placeholderPaths(html: string): string[] {
  if (!html.includes("image-loading-placeholder")) return [];
  return [...new Set([...html.matchAll(PLACEHOLDER_PREVIEW)].map((m) => m[1]!))];
}

/** The uploaded-file paths a message's content may link: candidates for its image previews. */
export function linkedUploadPaths(content: string): string[] {
  return [...new Set([...content.matchAll(/\/user_uploads\/(\d+\/[^\s()<>"'\]\[?#]+)/g)].map((m) => m[1]!))];
}
