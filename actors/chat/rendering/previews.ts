/**
 * Zulip's inline media previews, for messages (not for channel or profile descriptions): a link to an image or a
 * video gets a preview after the paragraph that holds it, and `![title](file.mp3)` becomes an audio player.
 * External media load through Zulip's camo proxy when one is configured: `{camo url}{HMAC-SHA1 of the URL under
 * the camo key, hex}/{the URL, hex}`; without one, from where they are (Zulip's behaviour with camo disabled).
 *
 * Where a preview goes follows Zulip's server (InlineInterestingLinkProcessor): links are taken breadth-first,
 * each URL once, none inside a quote, none at all past 24 distinct URLs. A link in a paragraph previews after that
 * paragraph, and a paragraph that is nothing but a bare URL gives way to its preview; a link directly in a tight
 * list item previews at the end of the item; a link anywhere else (heading, table cell, inside emphasis) previews
 * at the end of the message. A named link (`[text](url)`) keeps its text as the preview's title.
 *
 * An uploaded image (a link to `/user_uploads/…` whose file has an image record) previews as its thumbnail, or as
 * Zulip's loading placeholder until the thumbnail is made (thumbnails.ts).
 *
 * Not done, because they need what rendering has not: the previews that fetch the page (website embeds, Vimeo and
 * YouTube titles, Dropbox, tweets).
 */
import crypto from "node:crypto";
import type { StateCore, StateInline, Token } from "markdown-it";
import { escapeAttribute } from "./escape.ts";
import { uploadImageTag, type UploadPreview } from "./thumbnails.ts";

export interface PreviewSettings {
  realmUrl?: string;
  /** Zulip's CAMO_URI (ending in `/`) and CAMO_KEY. */
  camo?: { url: string; key: string };
  /** The image record of an uploaded file, by its path after `/user_uploads/` (as linked); undefined for none. */
  uploadPreview?(path: string): UploadPreview | undefined;
}

/** Zulip previews nothing in a message with more distinct link targets than this. */
const PREVIEW_LIMIT = 24;
const IMAGE_PATH = /\.(?:bmp|gif|jpe|jpeg|jpg|png|webp)$/i;
/** Zulip asks Python's mimetypes, which reads the whole URL: a query or fragment hides the type. */
const VIDEO_URL = /\.(?:mp4|webm)$/i;
const AUDIO_URL = /\.(?:aac|flac|mp2|mp3|wav)$/i;
const SCHEME_AND_HOST = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i;
const GITHUB_BLOB = /^https?:\/\/(?:[^/?#]*\.)?github\.com(\/[^/?#]*\/[^/?#]*)\/blob(\/[^?#]*)/i;

function hostOf(url: string): string {
  return SCHEME_AND_HOST.exec(url)?.[1]!.toLowerCase() ?? "";
}

/** The URL media load from: through camo, unless it is the realm's own (uploads need the reader's session). */
function mediaSource(url: string, settings: PreviewSettings): string {
  const { camo } = settings;
  const host = hostOf(url);
  if (!camo || host === "" || host === hostOf(settings.realmUrl ?? "")) return url;
  const digest = crypto.createHmac("sha1", camo.key).update(url).digest("hex");
  return `${camo.url}${digest}/${Buffer.from(url).toString("hex")}`;
}

const UPLOAD_PREFIX = "/user_uploads/";

/** An uploaded file's image record, for a link to it (relative, as clients link uploads). */
function uploadOf(url: string, settings: PreviewSettings): UploadPreview | undefined {
  return url.startsWith(UPLOAD_PREFIX) ? settings.uploadPreview?.(url.slice(UPLOAD_PREFIX.length)) : undefined;
}

function isImage(url: string, settings: PreviewSettings): boolean {
  // Zulip's rule for uploads: an image is a file whose header read as one (it has an image record), whatever its name.
  if (url.startsWith(UPLOAD_PREFIX)) return uploadOf(url, settings) !== undefined;
  const host = hostOf(url);
  const path = url.replace(SCHEME_AND_HOST, "").replace(/[?#].*$/s, "");
  // pasteboard.co pages end in `.png`.
  if (host === "" || host === "pasteboard.co" || path.startsWith(UPLOAD_PREFIX)) return false;
  return IMAGE_PATH.test(path);
}

function previewHtml(url: string, title: string | undefined, settings: PreviewSettings): string | undefined {
  const titleAttribute = title === undefined ? "" : ` title="${escapeAttribute(title)}"`;
  const link = `<a href="${escapeAttribute(url)}"${titleAttribute}>`;
  if (VIDEO_URL.test(url)) {
    const video = `<video preload="metadata" src="${escapeAttribute(mediaSource(url, settings))}"></video>`;
    return `<div class="message_inline_image message_inline_video">${link}${video}</a></div>`;
  }
  const upload = uploadOf(url, settings);
  if (upload) return `<div class="message_inline_image">${link}${uploadImageTag(upload)}</a></div>`;
  if (!isImage(url, settings)) return undefined;
  // A GitHub file page previews as the raw file.
  const blob = GITHUB_BLOB.exec(url);
  const image = blob ? `https://raw.githubusercontent.com${blob[1]}${blob[2]}` : url;
  return `<div class="message_inline_image">${link}<img src="${escapeAttribute(mediaSource(image, settings))}"></a></div>`;
}

/** A link and where its preview would go. */
interface FoundLink {
  url: string;
  /** The text the link starts with (Python-Markdown's `a.text`); undefined when it starts with markup. */
  text: string | undefined;
  /** Its depth in the HTML tree: links are previewed breadth-first. */
  depth: number;
  inQuote: boolean;
  place:
    | { kind: "paragraph"; close: number; open: number; alone: boolean }
    | { kind: "item"; itemOpen: number; children: Token[]; link: number; bare: boolean }
    | { kind: "message" };
}

/** Whether a block token is an element of Zulip's HTML tree: a tight list's paragraphs and spoilers' wrappers are not. */
function isElement(token: Token): boolean {
  return !token.hidden && token.type !== "zulip_spoiler_open";
}

const isEmptyText = (token: Token) => token.type === "text" && token.content === "";

/** The index of the link_close that ends the link opened at `open`. */
function linkEnd(children: Token[], open: number): number {
  let end = open + 1;
  while (children[end]!.type !== "link_close") end++;
  return end;
}

function findLinks(tokens: Token[]): { links: FoundLink[]; closeOf: Map<number, number> } {
  const links: FoundLink[] = [];
  const closeOf = new Map<number, number>();
  const open: number[] = [];
  let depth = 0;
  let quotes = 0;
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i]!;
    if (token.nesting === 1) {
      open.push(i);
      if (isElement(token)) depth++;
      if (token.type === "blockquote_open") quotes++;
    } else if (token.nesting === -1) {
      const opening = open.pop()!;
      closeOf.set(opening, i);
      if (isElement(tokens[opening]!)) depth--;
      if (tokens[opening]!.type === "blockquote_open") quotes--;
    } else if (token.type === "inline" && token.children) {
      const parent = tokens[open[open.length - 1]!];
      const children = token.children;
      let inlineDepth = 0;
      for (let j = 0; j < children.length; j++) {
        const child = children[j]!;
        if (child.nesting === -1) inlineDepth--;
        if (child.nesting !== 1) continue;
        inlineDepth++;
        if (child.type !== "link_open") continue;
        const next = children[j + 1];
        const end = linkEnd(children, j);
        const tail = children[end + 1];
        let place: FoundLink["place"] = { kind: "message" };
        if (inlineDepth === 1 && parent?.type === "paragraph_open") {
          if (!parent.hidden) {
            const alone = children.every((c, k) => (k >= j && k <= end) || isEmptyText(c));
            place = { kind: "paragraph", open: open[open.length - 1]!, close: i + 1, alone };
          } else {
            // Python-Markdown's `li.text`: the text before the item's first element.
            const leading = children.slice(0, children.findIndex((c) => c.type !== "text"));
            const bare = leading.every(isEmptyText) && !(tail?.type === "text" && tail.content !== "");
            place = { kind: "item", itemOpen: open[open.length - 2]!, children, link: j, bare };
          }
        }
        links.push({
          url: String(child.attrGet("href") ?? ""),
          text: next?.type === "text" ? next.content : undefined,
          depth: depth + inlineDepth,
          inQuote: quotes > 0,
          place,
        });
      }
    }
  }
  return { links, closeOf };
}

/** Adds the previews of a message's image and video links (a core rule, after links are final). */
export function addInlinePreviews(state: StateCore, settings: PreviewSettings): void {
  const { links, closeOf } = findLinks(state.tokens);
  // Most links are to pages: nothing to do.
  if (!links.some((link) => !link.inQuote && (VIDEO_URL.test(link.url) || isImage(link.url, settings)))) return;
  const previewable = new Set(links.filter((link) => !link.inQuote).map((link) => link.url));
  if (previewable.size > PREVIEW_LIMIT) return;

  const after = new Map<number, Token[]>();
  const removedUpTo = new Map<number, number>();
  const linkRemovals: Array<{ children: Token[]; from: number; to: number }> = [];
  const atEnd: Token[] = [];
  const addAfter = (index: number, token: Token) => {
    const list = after.get(index);
    if (list) list.push(token);
    else after.set(index, [token]);
  };

  // Breadth-first, as Zulip walks its tree; a stable sort keeps document order within a depth.
  links.sort((a, b) => a.depth - b.depth);
  const done = new Set<string>();
  for (const link of links) {
    // The first occurrence of a URL decides, even one inside a quote when the URL is also outside it (as in Zulip).
    if (!previewable.has(link.url) || done.has(link.url)) continue;
    done.add(link.url);
    const bare = link.text === undefined || link.text === link.url;
    const html = previewHtml(link.url, bare ? undefined : link.text, settings);
    if (html === undefined) continue;
    const preview = new state.Token("zulip_html", "", 0);
    preview.content = html;
    const { place } = link;
    if (place.kind === "paragraph") {
      addAfter(place.close, preview);
      if (place.alone && bare) removedUpTo.set(place.open, place.close);
    } else if (place.kind === "item") {
      // At the end of the item: just before its closing token.
      addAfter(closeOf.get(place.itemOpen)! - 1, preview);
      if (place.bare && bare) linkRemovals.push({ children: place.children, from: place.link, to: linkEnd(place.children, place.link) });
    } else {
      atEnd.push(preview);
    }
  }

  // Last first, so that earlier positions in the same item stay right.
  linkRemovals.sort((a, b) => b.from - a.from);
  for (const { children, from, to } of linkRemovals) children.splice(from, to - from + 1);
  const tokens: Token[] = [];
  for (let i = 0; i < state.tokens.length; i++) {
    const removedTo = removedUpTo.get(i);
    if (removedTo === undefined) tokens.push(state.tokens[i]!);
    else i = removedTo;
    const previews = after.get(i);
    if (previews) tokens.push(...previews);
  }
  tokens.push(...atEnd);
  state.tokens = tokens;
}

/**
 * `![title](https://…/file.mp3)`: an audio player. Zulip has no other Markdown media syntax for external files, so
 * anything else is left to the link rules (`!` then a link).
 */
export function audioPlayer(state: StateInline, silent: boolean, settings: PreviewSettings): boolean {
  const { src, pos, posMax } = state;
  if (src.charCodeAt(pos) !== 0x21 /* ! */ || src.charCodeAt(pos + 1) !== 0x5b /* [ */) return false;
  const labelEnd = state.md.helpers.parseLinkLabel(state, pos + 1, false);
  if (labelEnd < 0 || src.charCodeAt(labelEnd + 1) !== 0x28 /* ( */) return false;
  const destination = state.md.helpers.parseLinkDestination(src, labelEnd + 2, posMax);
  if (!destination.ok || src.charCodeAt(destination.pos) !== 0x29 /* ) */) return false;
  const url = state.md.normalizeLink(destination.str);
  if (!AUDIO_URL.test(url) || !state.md.validateLink(url)) return false;
  if (!silent) {
    const source = mediaSource(url, settings);
    const original = source === url ? "" : ` data-original-url="${escapeAttribute(url)}"`;
    const title = escapeAttribute(src.slice(pos + 2, labelEnd));
    state.push("zulip_html", "", 0).content =
      `<audio controls${original} preload="metadata" src="${escapeAttribute(source)}" title="${title}"></audio>`;
  }
  state.pos = destination.pos + 1;
  return true;
}
