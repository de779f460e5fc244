/**
 * Zulip-flavoured markdown, rendered to the HTML Zulip itself produces (`rendered_content`), on markdown-it.
 *
 * markdown-it does CommonMark; the rules below bend it to Zulip's dialect:
 * - `*em*` and `**strong**` only (no underscores), never across a line break; `~~strike~~` even with inner spaces;
 *   inline code keeps its spaces; paragraphs keep trailing spaces; every newline is a `<br>`.
 * - No reference links, images, raw HTML, `<autolinks>`, setext headings or backslash escapes; only safe URL
 *   schemes are linked; links into the realm itself become fragment links (`#narrow/...`).
 * - Fences: code (`<div class="codehilite">`), ```quote, ```spoiler, ```math; fences nest inside quotes/spoilers.
 * - Mentions, user-group mentions, channel and topic links, `:emoji:` and unicode emoji, `$$tex$$`.
 * - The realm's linkifiers, on the text no other rule took, in the realm's order.
 *
 * Rendering is a pure function of the content and a context of synchronous lookups that the caller prefetches
 * (users, groups, channels): the result says which users, groups and wildcards were mentioned, for message flags
 * and the wildcard-mention permission rules. The markdown-it instance is built once, at module load.
 *
 * TeX goes through KaTeX (tex.ts), loaded on the first message that has math; `<time:…>` through timestamps.ts.
 *
 * Messages (not descriptions) get Zulip's inline image, video and audio previews (previews.ts).
 *
 * Not done (Chorus knowingly differs): syntax highlighting (code is escaped, not coloured; no npm package
 * produces Pygments' markup), previews that need fetching,
 * `#**channel>topic@id**` message links, and a few Python-Markdown quirks; test/actors/chat/rendering/markdown.test.ts
 * names each corpus case we do not match, with the reason.
 */
import { createRequire } from "node:module";
import MarkdownItFactory from "markdown-it";
import type { Delimiter, Env, MarkdownIt, RendererRule, StateBlock, StateCore, StateInline, Token } from "markdown-it";
import { emojiCodeFor, emojiCodeOfText, emojiNameFor, ZULIP_EXTRA_EMOJI_NAMES } from "./emoji.ts";
import { escapeAttribute, escapeCode, escapeText } from "./escape.ts";
import { linkifierMatches, type CompiledLinkifier } from "./linkifiers.ts";
import { addInlinePreviews, audioPlayer } from "./previews.ts";
import { renderTex } from "./tex.ts";
import type { UploadPreview } from "./thumbnails.ts";
import { parseTimestamp } from "./timestamps.ts";

export interface MentionableUser {
  id: number;
  full_name: string;
  /** Zulip renders a mention of a deactivated user silently. */
  is_active?: boolean;
}

export interface MarkdownContext {
  /** The user with this full name (Zulip compares case-insensitively), if exactly one. */
  userByName?(name: string): MentionableUser | undefined;
  userById?(id: number): MentionableUser | undefined;
  groupByName?(name: string): { id: number; name: string } | undefined;
  channelByName?(name: string): { id: number; name: string } | undefined;
  realmEmojiByName?(name: string): { id: string; source_url: string } | undefined;
  /** The realm's own URL, e.g. `https://chat.example.com`: links under it are rewritten to `#narrow/...`. */
  realmUrl?: string;
  /** The sender's `translate_emoticons` setting: `:)` becomes 🙂. */
  translateEmoticons?: boolean;
  /** Image, video and audio previews (previews.ts): Zulip adds them to messages, not to descriptions. */
  inlinePreviews?: boolean;
  /** Zulip's camo proxy (CAMO_URI, ending in `/`, and CAMO_KEY), which previews of external media load through. */
  camo?: { url: string; key: string };
  /** Uploaded images' records, by the path after `/user_uploads/` as linked (thumbnails.ts). */
  uploadPreview?(path: string): UploadPreview | undefined;
  /** The realm's linkifiers, in their order (linkifiers.ts). */
  linkifiers?: CompiledLinkifier[];
}

export interface RenderResult {
  html: string;
  /** Users mentioned by name (not silently): they get the `mentioned` flag. */
  mentionedUserIds: number[];
  /** User groups mentioned (not silently): their members get the `mentioned` flag. */
  mentionedGroupIds: number[];
  /** `@**all**`-style (channel) beats `@**topic**`; silent wildcards do not count. */
  wildcardMention: "channel" | "topic" | null;
  /** For `has:link` narrows. */
  hasLink: boolean;
}

type InlineRule = (state: StateInline, silent: boolean) => boolean;
type BlockRule = (state: StateBlock, startLine: number, endLine: number, silent: boolean) => boolean;

/** What the rules collect while rendering: markdown-it passes it along as `env`. */
interface RenderEnv extends Env {
  context: MarkdownContext;
  userIds: Set<number>;
  groupIds: Set<number>;
  channelWildcard: boolean;
  topicWildcard: boolean;
  hasLink: boolean;
}

const CHANNEL_WILDCARDS = new Set(["all", "everyone", "channel", "stream"]);
const TOPIC_WILDCARDS = new Set(["topic"]);
const SAFE_SCHEMES = /^(?:https?|ftp|mailto|tel|sms|bitcoin):/i;
const ANY_SCHEME = /^[a-z][a-z0-9+.-]*:/i;

/** What Zulip's `translate_emoticons` setting turns into emoji. */
const EMOTICONS: Record<string, string> = {
  ":)": "slight_smile",
  "(:": "slight_smile",
  ":(": "frown",
  "<3": "heart",
  ":|": "neutral",
  ":/": "confused",
  ";)": "wink",
  ":D": "grinning",
  ":o": "open_mouth",
  ":O": "open_mouth",
  ":p": "stuck_out_tongue",
  ":P": "stuck_out_tongue",
};

// ---------------------------------------------------------------------------------------------------------------
// Zulip's narrow URLs (zerver/lib/url_encoding.py): Python's quote() with "." standing in for "%".

export function encodeHashComponent(s: string): string {
  return encodeURIComponent(s)
    .replace(/[!'()]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase())
    .replaceAll(".", "%2E")
    .replaceAll("%", ".");
}

function channelNarrow(channel: { id: number; name: string }): string {
  return `/#narrow/channel/${channel.id}-${encodeHashComponent(channel.name.replaceAll(" ", "-"))}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Emoji HTML, shared by `:name:`, unicode emoji and emoticons.

function emojiHtml(name: string, context: MarkdownContext): string | undefined {
  const realm = context.realmEmojiByName?.(name);
  if (realm) {
    return `<img alt=":${escapeAttribute(name)}:" class="emoji" src="${escapeAttribute(realm.source_url)}" title="${escapeAttribute(name.replaceAll("_", " "))}">`;
  }
  if (ZULIP_EXTRA_EMOJI_NAMES.has(name)) {
    return `<img alt=":${name}:" class="emoji" src="/static/generated/emoji/images/emoji/unicode/${name}.png" title="${name}">`;
  }
  const code = emojiCodeFor(name);
  return code === undefined ? undefined : unicodeEmojiHtml(name, code);
}

function unicodeEmojiHtml(name: string, code: string): string {
  const label = escapeAttribute(name.replaceAll("_", " "));
  return `<span aria-label="${label}" class="emoji emoji-${code}" role="img" title="${label}">:${escapeText(name)}:</span>`;
}

// ---------------------------------------------------------------------------------------------------------------
// Inline rules.

/** Zulip's mentions, channel links and bare URLs may follow only a line start, a space or one of these. */
function atSyntaxBoundary(src: string, pos: number): boolean {
  return pos === 0 || /[\s'"(,:<]/.test(src[pos - 1]!);
}

/** A sticky (`y`) pattern matched at the parser's position, within the inline content being parsed. */
function matchHere(pattern: RegExp, state: StateInline): RegExpExecArray | null {
  pattern.lastIndex = state.pos;
  const match = pattern.exec(state.src);
  return match && state.pos + match[0].length <= state.posMax ? match : null;
}

/** Push a token whose HTML we have built ourselves (mentions, emoji, tex). */
function pushHtml(state: StateInline, html: string): void {
  state.push("zulip_html", "", 0).content = html;
}

const USER_MENTION = /@(_?)\*\*([^*]+)\*\*/y;
const GROUP_MENTION = /@(_?)\*([^*]+)\*/y;
const NAME_WITH_ID = /^(.*)\|(\d+)$/;

function userMentionHtml(env: RenderEnv, name: string, silent: boolean): string | undefined {
  const silentClass = silent ? " silent" : "";
  const shown = (text: string) => escapeText(silent ? text : "@" + text);
  if (CHANNEL_WILDCARDS.has(name)) {
    if (!silent) env.channelWildcard = true;
    return `<span class="user-mention channel-wildcard-mention${silentClass}" data-user-id="*">${shown(name)}</span>`;
  }
  if (TOPIC_WILDCARDS.has(name)) {
    if (!silent) env.topicWildcard = true;
    return `<span class="topic-mention${silentClass}">${shown(name)}</span>`;
  }
  const { context } = env;
  let user: MentionableUser | undefined;
  const withId = NAME_WITH_ID.exec(name);
  if (withId) {
    user = context.userById?.(Number(withId[2]));
    // `@**Someone Else|7**` is not a mention of user 7 (Zulip's rule).
    if (user && withId[1] && user.full_name !== withId[1]) return undefined;
  } else {
    user = context.userByName?.(name);
  }
  if (!user) return undefined;
  const reallySilent = silent || user.is_active === false;
  if (!reallySilent) env.userIds.add(user.id);
  const cls = reallySilent ? "user-mention silent" : "user-mention";
  const text = escapeText(reallySilent ? user.full_name : "@" + user.full_name);
  return `<span class="${cls}" data-user-id="${user.id}">${text}</span>`;
}

function mention(state: StateInline, silent: boolean): boolean {
  const { src, pos } = state;
  if (src.charCodeAt(pos) !== 0x40 /* @ */ || !atSyntaxBoundary(src, pos)) return false;
  const env = state.env as RenderEnv;
  let match = matchHere(USER_MENTION, state);
  let html: string | undefined;
  if (match) {
    html = userMentionHtml(env, match[2]!, match[1] === "_");
  } else {
    match = matchHere(GROUP_MENTION, state);
    if (!match) return false;
    const group = env.context.groupByName?.(match[2]!);
    if (group) {
      const isSilent = match[1] === "_";
      if (!isSilent) env.groupIds.add(group.id);
      html = isSilent
        ? `<span class="user-group-mention silent" data-user-group-id="${group.id}">${escapeText(group.name)}</span>`
        : `<span class="user-group-mention" data-user-group-id="${group.id}">@${escapeText(group.name)}</span>`;
    }
  }
  if (html === undefined) return false;
  if (!silent) pushHtml(state, html);
  state.pos += match[0].length;
  return true;
}

const CHANNEL_LINK = /#\*\*([^*]+)\*\*/y;

function channelLink(state: StateInline, silent: boolean): boolean {
  const { src, pos } = state;
  if (src.charCodeAt(pos) !== 0x23 /* # */ || !atSyntaxBoundary(src, pos)) return false;
  const match = matchHere(CHANNEL_LINK, state);
  if (!match) return false;
  const env = state.env as RenderEnv;
  const target = match[1]!;
  const split = target.indexOf(">");
  const channel = env.context.channelByName?.(split < 0 ? target : target.slice(0, split));
  if (!channel) return false;
  if (!silent) {
    const name = escapeText(channel.name);
    if (split < 0) {
      pushHtml(state, `<a class="stream" data-stream-id="${channel.id}" href="${channelNarrow(channel)}">#${name}</a>`);
    } else {
      const topic = target.slice(split + 1);
      const href = `${channelNarrow(channel)}/topic/${encodeHashComponent(topic)}`;
      pushHtml(
        state,
        `<a class="stream-topic" data-stream-id="${channel.id}" href="${escapeAttribute(href)}">#${name} &gt; ${escapeText(topic)}</a>`,
      );
    }
  }
  state.pos += match[0].length;
  return true;
}

const EMOJI_NAME = /:([\p{L}\p{N}_+-]+):/uy;

function emojiName(state: StateInline, silent: boolean): boolean {
  if (state.src.charCodeAt(state.pos) !== 0x3a /* : */) return false;
  const match = matchHere(EMOJI_NAME, state);
  if (!match) return false;
  const html = emojiHtml(match[1]!, (state.env as RenderEnv).context);
  if (html === undefined) return false;
  if (!silent) pushHtml(state, html);
  state.pos += match[0].length;
  return true;
}

/** Zulip's inline code: a run of backticks up to the same run, on one line, spaces kept. */
function codeSpan(state: StateInline, silent: boolean): boolean {
  const { src, pos } = state;
  // A backslash before the backticks keeps them literal (Zulip has no other backslash escapes).
  if (src.charCodeAt(pos) !== 0x60 /* ` */ || src.charCodeAt(pos - 1) === 0x5c /* \ */) return false;
  let afterOpen = pos;
  while (src.charCodeAt(afterOpen) === 0x60) afterOpen++;
  const fence = src.slice(pos, afterOpen);
  const lineEnd = src.indexOf("\n", afterOpen);
  const max = lineEnd < 0 ? state.posMax : Math.min(lineEnd, state.posMax);
  let close = src.indexOf(fence, afterOpen + 1);
  // The closing run must be exactly as long as the opening one.
  while (close >= 0 && close < max && src.charCodeAt(close + fence.length) === 0x60) {
    let end = close;
    while (src.charCodeAt(end) === 0x60) end++;
    close = src.indexOf(fence, end + 1);
  }
  if (close < 0 || close + fence.length > max) {
    if (!silent) state.pending += fence;
    state.pos = afterOpen;
    return true;
  }
  if (!silent) {
    const token = state.push("code_inline", "code", 0);
    token.markup = fence;
    token.content = src.slice(afterOpen, close);
  }
  state.pos = close + fence.length;
  return true;
}

const STRIKETHROUGH = /~~([^~\n]+?)~~(?!~)/y;

function strikethrough(state: StateInline, silent: boolean): boolean {
  const { src, pos } = state;
  if (src.charCodeAt(pos) !== 0x7e /* ~ */ || src.charCodeAt(pos - 1) === 0x7e) return false;
  const match = matchHere(STRIKETHROUGH, state);
  if (!match) return false;
  if (!silent) {
    const max = state.posMax;
    state.push("s_open", "del", 1).markup = "~~";
    state.pos = pos + 2;
    state.posMax = pos + 2 + match[1]!.length;
    state.md.inline.tokenize(state);
    state.posMax = max;
    state.push("s_close", "del", -1).markup = "~~";
  }
  state.pos = pos + match[0].length;
  return true;
}

/** Zulip's inline `$$tex$$`: never across lines, never starting with `_` or `$`. */
const INLINE_TEX = /\$\$([^\n_$](?:\\\$|[^$\n])*)\$\$(?!\$)/y;

function inlineTex(state: StateInline, silent: boolean): boolean {
  const { src, pos } = state;
  if (src.charCodeAt(pos) !== 0x24 /* $ */ || src.charCodeAt(pos - 1) === 0x24) return false;
  const match = matchHere(INLINE_TEX, state);
  if (!match) return false;
  if (!silent) pushHtml(state, renderTex(match[1]!, false) ?? `<span class="tex-error">${escapeText(match[0])}</span>`);
  state.pos = pos + match[0].length;
  return true;
}

const TIMESTAMP = /<time:([^>]*)>/y;

/** `<time:…>` as a `<time datetime>` in UTC, or Zulip's error text. */
function timestamp(state: StateInline, silent: boolean): boolean {
  if (state.src.charCodeAt(state.pos) !== 0x3c /* < */) return false;
  const match = matchHere(TIMESTAMP, state);
  if (!match) return false;
  if (!silent) {
    const text = match[1]!;
    const date = parseTimestamp(text);
    pushHtml(
      state,
      date
        ? `<time datetime="${date.toISOString().replace(/\.\d{3}Z$/, "Z")}">${escapeText(text)}</time>`
        : `<span class="timestamp-error">Invalid time format: ${escapeText(text)}</span>`,
    );
  }
  state.pos += match[0].length;
  return true;
}

/** A line's leading spaces survive its line break, as in Python-Markdown (markdown-it drops them). */
function newlineKeepingIndent(newline: InlineRule): InlineRule {
  return (state, silent) => {
    const start = state.pos;
    if (!newline(state, silent)) return false;
    if (!silent) state.pending += state.src.slice(start + 1, state.pos);
    return true;
  };
}

/** Zulip has no underscore emphasis; `*` emphasis never spans a line break. */
function withoutUnderscores(emphasis: InlineRule): InlineRule {
  return (state, silent) => state.src.charCodeAt(state.pos) !== 0x5f /* _ */ && emphasis(state, silent);
}

/** Runs after markdown-it pairs the `*` delimiters: unpair those with a line break between them. */
function emphasisWithinLines(state: StateInline): boolean {
  const unpair = (delimiters: Delimiter[]) => {
    for (const opener of delimiters) {
      if (opener.marker !== 0x2a || opener.end < 0) continue;
      const closer = delimiters[opener.end]!;
      for (let i = opener.token + 1; i < closer.token; i++) {
        const type = state.tokens[i]!.type;
        if (type === "softbreak" || type === "hardbreak") {
          opener.end = -1;
          break;
        }
      }
    }
  };
  unpair(state.delimiters);
  for (const meta of state.tokens_meta) if (meta?.delimiters) unpair(meta.delimiters);
  return false;
}

// ---------------------------------------------------------------------------------------------------------------
// Core rules: work on the token stream after inline parsing.

/** Emoji found in plain text rather than written as `:name:`: how to find them and what they become. */
interface TextEmojiKind {
  pattern: RegExp;
  /** A cheap test that lets most text skip the pattern. */
  mayContain?: RegExp;
  html(found: string, context: MarkdownContext): string | undefined;
}

const UNICODE_EMOJI: TextEmojiKind = {
  pattern: new RegExp(
    // A ZWJ sequence may be written without its U+FE0F selectors (👁‍🗨), so its parts need not be RGI alone.
    String.raw`(?:\p{RGI_Emoji}|\p{Extended_Pictographic}\uFE0F?(?=\u200D))(?:\u200D(?:\p{RGI_Emoji}|\p{Extended_Pictographic}\uFE0F?))*`,
    "gv",
  ),
  // Every emoji has a code point at U+2000 or above (keycaps and ©️ need U+20E3/U+FE0F).
  mayContain: /[^\u0000-\u1fff]/,
  html(found) {
    const code = emojiCodeOfText(found);
    return code === undefined ? undefined : unicodeEmojiHtml(emojiNameFor(code)!, code);
  },
};

const EMOTICON: TextEmojiKind = {
  pattern: new RegExp(
    `(?<![\\p{L}\\p{N}])(?:${Object.keys(EMOTICONS)
      .map((e) => e.replace(/[()|/]/g, "\\$&"))
      .join("|")})(?![\\p{L}\\p{N}])`,
    "gu",
  ),
  html: (found, context) => emojiHtml(EMOTICONS[found]!, context),
};

/** Splits text tokens around unicode emoji (and emoticons, when the sender wants them) into emoji tokens. */
function textEmoji(state: StateCore): void {
  const context = (state.env as RenderEnv).context;
  const kinds = context.translateEmoticons ? [UNICODE_EMOJI, EMOTICON] : [UNICODE_EMOJI];
  for (const block of state.tokens) {
    if (block.type !== "inline" || !block.children) continue;
    let children = block.children;
    for (const kind of kinds) {
      children = children.flatMap((token) => (token.type === "text" ? splitText(state, token, kind, context) : [token]));
    }
    block.children = children;
  }
}

function splitText(state: StateCore, token: Token, kind: TextEmojiKind, context: MarkdownContext): Token[] {
  const text = token.content;
  if (kind.mayContain && !kind.mayContain.test(text)) return [token];
  const pieces: Token[] = [];
  const piece = (type: string, content: string) => {
    const t = new state.Token(type, "", 0);
    t.content = content;
    t.level = token.level;
    pieces.push(t);
  };
  let last = 0;
  for (const match of text.matchAll(kind.pattern)) {
    const html = kind.html(match[0], context);
    if (html === undefined) continue; // an unknown sequence stays as it was written
    if (match.index > last) piece("text", text.slice(last, match.index));
    piece("zulip_html", html);
    last = match.index + match[0].length;
  }
  if (pieces.length === 0) return [token];
  if (last < text.length) piece("text", text.slice(last));
  return pieces;
}

/**
 * Zulip's link conventions: a bare URL is linked only where a mention could start (not in `src=http://…`), realm
 * links become fragments, an empty link shows its URL.
 */
function zulipLinks(state: StateCore): void {
  const env = state.env as RenderEnv;
  for (const block of state.tokens) {
    const children = block.children;
    if (block.type !== "inline" || !children) continue;
    for (let i = 0; i < children.length; i++) {
      const token = children[i]!;
      if (token.type !== "link_open") continue;
      if (token.markup === "linkify" && !isZulipAutolink(children[i + 1]!.content, children[i - 1], children[i + 3])) {
        const text = new state.Token("text", "", 0);
        text.content = children[i + 1]!.content;
        children.splice(i, 3, text);
        continue;
      }
      env.hasLink = true;
      const href = String(token.attrGet("href") ?? "");
      token.attrSet("href", relativeToRealm(env, href));
      const next = children[i + 1]!;
      const blankText = next.type === "text" && next.content.trim() === "" && children[i + 2]?.type === "link_close";
      if (next.type === "link_close" || blankText) {
        const text = new state.Token("text", "", 0);
        text.content = href;
        children.splice(i + 1, blankText ? 1 : 0, text);
      }
    }
  }
}

/** Zulip's rewrite_local_links_to_relative: a link into the realm's own narrows becomes a fragment. */
function relativeToRealm(env: RenderEnv, href: string): string {
  const realm = env.context.realmUrl?.replace(/\/$/, "");
  return realm && href.startsWith(realm + "/#") ? href.slice(realm.length + 1) : href;
}

/** Zulip's TLD list leaves out these two, which are mostly file names (`views.py`, `README.md`). */
const FILE_LIKE_DOMAIN = /^[^/?#]*\.(?:py|md)(?:[/:?#]|$)/i;

/** After a URL Zulip links: only trailing punctuation, then a space or the end of the text. */
const URL_END = /^[!:;?),.'">]*(?:\s|$)/;

/** Whether a URL markdown-it found in text is one Zulip links, given the tokens around it. */
function isZulipAutolink(text: string, previous: Token | undefined, next: Token | undefined): boolean {
  if (!ANY_SCHEME.test(text) && FILE_LIKE_DOMAIN.test(text)) return false;
  const endsWell = !next || next.type !== "text" || URL_END.test(next.content);
  if (!endsWell) return false;
  if (!previous || previous.type === "softbreak" || previous.type === "hardbreak") return true;
  return previous.type === "text" && atSyntaxBoundary(previous.content, previous.content.length);
}

/** What stands before text that follows a link, an emoji, a mention or code: Python-Markdown's placeholder. */
const NOT_A_BOUNDARY = "\u0003";

/**
 * The realm's linkifiers, as Zulip applies them (after links, mentions, emoji and code, each on the text the ones
 * before it left): a match becomes `<a href="{expanded template}">{matched text}</a>`. A piece of text starts at a
 * boundary at the start of its block, after a line break or an opening emphasis; after other text, as that text
 * ends.
 */
function linkifiers(state: StateCore): void {
  const env = state.env as RenderEnv;
  const all = env.context.linkifiers;
  if (!all?.length) return;
  for (const block of state.tokens) {
    if (block.type !== "inline" || !block.children) continue;
    let children = block.children;
    for (const linkifier of all) {
      const out: Token[] = [];
      let inLink = 0;
      for (let i = 0; i < children.length; i++) {
        const token = children[i]!;
        if (token.type === "link_open") inLink++;
        if (token.type === "link_close") inLink--;
        if (token.type !== "text" || inLink > 0) {
          out.push(token);
          continue;
        }
        const previous = children[i - 1];
        let before = "";
        if (previous?.type === "text") before = previous.content.slice(-1);
        else if (previous && !/^(?:softbreak|hardbreak|em_open|strong_open|s_open)$/.test(previous.type)) before = NOT_A_BOUNDARY;
        // Zulip's url_to_a: a URL of an unsafe scheme is no link, and the text stays for the next linkifier.
        const matches = linkifierMatches(linkifier, token.content, before).filter((m) => SAFE_SCHEMES.test(m.url) || !ANY_SCHEME.test(m.url));
        if (!matches.length) {
          out.push(token);
          continue;
        }
        let last = 0;
        const text = (content: string) => {
          const t = new state.Token("text", "", 0);
          t.content = content;
          out.push(t);
        };
        for (const match of matches) {
          if (match.start > last) text(token.content.slice(last, match.start));
          const open = new state.Token("link_open", "a", 1);
          const url = ANY_SCHEME.test(match.url) || /^[/#]/.test(match.url) ? match.url : "http://" + match.url;
          open.attrs = [["href", relativeToRealm(env, url)]];
          out.push(open);
          text(token.content.slice(match.start, match.end));
          out.push(new state.Token("link_close", "a", -1));
          last = match.end;
        }
        if (last < token.content.length) text(token.content.slice(last));
        env.hasLink = true;
      }
      children = out;
    }
    block.children = children;
  }
}

/** Previews of image and video links, in messages that have links. */
function inlinePreviews(state: StateCore): void {
  const env = state.env as RenderEnv;
  if (env.context.inlinePreviews && env.hasLink) addInlinePreviews(state, env.context);
}

/** Zulip nests `***x***` as strong around em; CommonMark the other way round. */
function strongOutside(state: StateCore): void {
  for (const block of state.tokens) {
    const children = block.children;
    if (block.type !== "inline" || !children) continue;
    // markdown-it leaves empty text tokens where the delimiters were.
    const next = (i: number) => {
      let j = i + 1;
      while (children[j]?.type === "text" && children[j]!.content === "") j++;
      return j;
    };
    for (let emOpen = 0; emOpen < children.length; emOpen++) {
      const strongOpen = next(emOpen);
      if (children[emOpen]!.type !== "em_open" || children[strongOpen]?.type !== "strong_open") continue;
      const level = children[strongOpen]!.level;
      const strongClose = children.findIndex((t, j) => j > strongOpen && t.type === "strong_close" && t.level === level);
      const emClose = next(strongClose);
      if (strongClose < 0 || children[emClose]?.type !== "em_close") continue;
      for (const [a, b] of [[emOpen, strongOpen], [strongClose, emClose]] as const) {
        [children[a], children[b]] = [children[b]!, children[a]!];
      }
    }
  }
}

/** Zulip keeps a list going when the bullet changes (`*`, then `-`); CommonMark starts a new one. */
function joinBulletLists(state: StateCore): void {
  const tokens = state.tokens;
  for (let i = tokens.length - 2; i >= 0; i--) {
    if (tokens[i]!.type === "bullet_list_close" && tokens[i + 1]!.type === "bullet_list_open") tokens.splice(i, 2);
  }
}

/**
 * Tables as Python-Markdown's tables extension writes them, which Zulip's clients parse (the mobile app renders a
 * table only when a cell's style is exactly `text-align: left;`, `center;` or `right;`): the alignment spelled so
 * (markdown-it writes `text-align:left`), and a table of headers alone given one empty body row.
 */
function pythonMarkdownTables(state: StateCore): void {
  const tokens = state.tokens;
  for (let i = tokens.length - 1; i >= 0; i--) {
    const token = tokens[i]!;
    const style = token.attrGet("style");
    if ((token.type === "th_open" || token.type === "td_open") && style) token.attrSet("style", String(style).replace(/^text-align:(\w+)$/, "text-align: $1;"));
    if (token.type === "thead_close" && tokens[i + 1]?.type === "table_close") {
      let columns = 0;
      for (let j = i - 1; j >= 0 && tokens[j]!.type !== "thead_open"; j--) if (tokens[j]!.type === "th_open") columns++;
      const open = (type: string, tag: string) => Object.assign(new state.Token(type, tag, 1), { block: true });
      const close = (type: string, tag: string) => Object.assign(new state.Token(type, tag, -1), { block: true });
      const cells = Array.from({ length: columns }, () => [open("td_open", "td"), close("td_close", "td")]).flat();
      tokens.splice(i + 1, 0, open("tbody_open", "tbody"), open("tr_open", "tr"), ...cells, close("tr_close", "tr"), close("tbody_close", "tbody"));
    }
  }
}

const LIST_ITEM = /^( *)([*+-]|\d{1,9}[.)])( +|$)/;
const INDENTED_ORDERED_ITEM = /^ +\d{1,9}[.)] /m;
const TOP_LEVEL_FENCE = /^ {0,3}(`{3,}|~{3,})/;

/**
 * Zulip nests a list item under the one above it when it is indented by two more spaces (`1. a` / `  1. b`);
 * CommonMark wants it indented past the parent's marker, three columns for `1. `. We move such items (and their
 * continuation lines) to the parent's content column before parsing. Only ordered lists need it: a bullet's
 * content starts two columns in already.
 */
function reindentNestedLists(state: StateCore): void {
  if (!INDENTED_ORDERED_ITEM.test(state.src)) return;
  const lines = state.src.split("\n");
  /** The open items, innermost last: where each was written, and how far we moved it. */
  const items: Array<{ indent: number; shift: number; contentColumn: number }> = [];
  let fence: string | undefined;
  let previousBlank = false;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const blank = line.trim() === "";
    const indent = line.length - line.trimStart().length;
    const item = LIST_ITEM.exec(line);
    if (items.length === 0) {
      const marker = TOP_LEVEL_FENCE.exec(line)?.[1];
      if (fence !== undefined) {
        if (marker !== undefined && marker.startsWith(fence) && line.trim() === marker) fence = undefined;
      } else if (marker !== undefined) {
        fence = marker;
      }
    }
    if (fence !== undefined) {
      previousBlank = blank;
      continue;
    }
    if (item && (items.length > 0 || indent <= 1)) {
      while (items.length && indent < items[items.length - 1]!.indent + 2) items.pop();
      const parent = items[items.length - 1];
      const column = parent ? Math.max(indent + parent.shift, parent.contentColumn) : indent;
      lines[i] = " ".repeat(column) + line.trimStart();
      items.push({ indent, shift: column - indent, contentColumn: column + item[2]!.length + Math.max(1, item[3]!.length) });
    } else if (!blank && indent === 0 && previousBlank) {
      items.length = 0; // the list is over
    } else if (!blank && indent > 0 && items.length) {
      lines[i] = " ".repeat(indent + items[items.length - 1]!.shift) + line.trimStart();
    }
    previousBlank = blank;
  }
  state.src = lines.join("\n");
}

// ---------------------------------------------------------------------------------------------------------------
// Block rules.

/** An opening fence: ``` or ~~~, an optional language (`.lang`/`{lang}` too), and a header for spoilers only. */
const FENCE_OPEN = /^(`{3,}|~{3,})[ \t]*(?:\{?\.?([\w+\-./#]*)\}?)?[ \t]*(.*)$/;
const FENCE_CLOSE = /^(`{3,}|~{3,})[ \t]*$/;

interface Fence {
  marker: string;
  lang: string;
  header: string;
}

function parseFence(line: string): Fence | undefined {
  const match = FENCE_OPEN.exec(line);
  if (!match) return undefined;
  const lang = match[2] ?? "";
  const header = match[3]!.trim();
  if (header && lang.toLowerCase() !== "spoiler") return undefined;
  return { marker: match[1]!, lang, header };
}

function lineText(state: StateBlock, line: number): string {
  return state.src.slice(state.bMarks[line]! + state.tShift[line]!, state.eMarks[line]!);
}

/** Whether a fence's content is markdown (and may hold fences of its own) rather than literal text. */
function holdsMarkdown(lang: string): boolean {
  const kind = lang.toLowerCase();
  return kind === "quote" || kind === "spoiler";
}

/**
 * Where the fence opened at startLine ends: at a bare fence exactly like the opening one (so ```` inside ``` is
 * content), else where the enclosing block ends. Inside a quote or spoiler, a fence with a language opens a nested
 * block, and a bare fence closes the innermost one.
 */
function findFenceEnd(
  state: StateBlock,
  startLine: number,
  endLine: number,
  opening: Fence,
): { end: number; closed: boolean } {
  const stack = [opening];
  for (let line = startLine + 1; line < endLine; line++) {
    const blank = state.bMarks[line]! + state.tShift[line]! >= state.eMarks[line]!;
    if (!blank && state.sCount[line]! < state.blkIndent) return { end: line, closed: false }; // the list item ended
    if (state.sCount[line]! - state.blkIndent >= 4) continue;
    const text = lineText(state, line);
    const top = stack[stack.length - 1]!;
    const close = FENCE_CLOSE.exec(text);
    if (close && close[1] === top.marker) {
      stack.pop();
      if (stack.length === 0) return { end: line, closed: true };
      continue;
    }
    if (!holdsMarkdown(top.lang)) continue;
    const nested = parseFence(text);
    if (nested) stack.push(nested);
  }
  return { end: endLine, closed: false };
}

function fence(state: StateBlock, startLine: number, endLine: number, silent: boolean): boolean {
  if (state.sCount[startLine]! - state.blkIndent >= 4) return false;
  const opening = parseFence(lineText(state, startLine));
  if (!opening) return false;
  if (silent) return true;
  const { end: closeLine, closed } = findFenceEnd(state, startLine, endLine, opening);
  const kind = opening.lang.toLowerCase();
  if (holdsMarkdown(kind)) {
    nestedMarkdown(state, startLine, closeLine, kind, opening.header);
  } else {
    const token = state.push(kind === "math" ? "zulip_math" : "zulip_code", "", 0);
    token.info = opening.lang;
    token.content = state.getLines(startLine + 1, closeLine, state.sCount[startLine]!, true);
    token.map = [startLine, closeLine];
  }
  state.line = closed ? closeLine + 1 : closeLine;
  return true;
}

/** ```quote and ```spoiler: their lines are parsed as markdown in their own right. */
function nestedMarkdown(state: StateBlock, startLine: number, closeLine: number, kind: string, header: string): void {
  const oldParent = state.parentType;
  const oldLineMax = state.lineMax;
  // Keeps lazy continuation lines from running past the closing fence.
  state.lineMax = closeLine;
  state.parentType = "blockquote";
  if (kind === "quote") {
    state.push("blockquote_open", "blockquote", 1).map = [startLine, closeLine];
    state.md.block.tokenize(state, startLine + 1, closeLine);
    state.push("blockquote_close", "blockquote", -1);
  } else {
    state.push("zulip_spoiler_open", "", 1);
    if (header) {
      state.push("paragraph_open", "p", 1).map = [startLine, startLine + 1];
      const inline = state.push("inline", "", 0);
      inline.content = header;
      inline.map = [startLine, startLine + 1];
      inline.children = [];
      state.push("paragraph_close", "p", -1);
    }
    state.push("zulip_spoiler_content", "", 0);
    state.md.block.tokenize(state, startLine + 1, closeLine);
    state.push("zulip_spoiler_close", "", -1);
  }
  state.parentType = oldParent;
  state.lineMax = oldLineMax;
}

/** A `>` quote with nothing in it is not a quote for Zulip: `>` alone stays text. */
function nonEmptyBlockquote(blockquote: BlockRule): BlockRule {
  return (state, startLine, endLine, silent) => {
    const before = state.tokens.length;
    if (!blockquote(state, startLine, endLine, silent)) return false;
    if (silent || state.tokens[before + 1]?.type !== "blockquote_close") return true;
    state.tokens.length = before;
    state.line = startLine;
    return false;
  };
}

/**
 * Inside a list item, Zulip lets a nested ordered list start at any number right under the item's text (`2. B` /
 * `  3. C`); CommonMark lets only a list starting at 1 interrupt a paragraph. markdown-it applies that rule when
 * a paragraph asks whether a list ends it, so there we ask as if no paragraph were open.
 */
function nestedListsInterruptText(list: BlockRule): BlockRule {
  return (state, startLine, endLine, silent) => {
    if (!silent || state.parentType !== "paragraph" || state.blkIndent === 0) {
      return list(state, startLine, endLine, silent);
    }
    state.parentType = "list";
    try {
      return list(state, startLine, endLine, silent);
    } finally {
      state.parentType = "paragraph";
    }
  };
}

/** Paragraphs keep their trailing spaces, as Python-Markdown's do (markdown-it trims them). */
function keepTrailingSpaces(paragraph: BlockRule): BlockRule {
  return (state, startLine, endLine, silent) => {
    const before = state.tokens.length;
    if (!paragraph(state, startLine, endLine, silent)) return false;
    const inline = state.tokens[before + 1];
    if (inline?.type === "inline") {
      inline.content = state.getLines(startLine, state.line, state.blkIndent, false).trimStart();
    }
    return true;
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Rendering of code and of our own tokens.

/** Pygments' lexers, alias to display name; loaded with the first code block that names a language. */
let lexerNames: Map<string, string> | undefined;

/**
 * Zulip labels a code block with the display name of the Pygments lexer the language names (`py2` is
 * `Python 2.x`), which clients show and match code playgrounds against; a language Pygments does not know keeps
 * its name, in lower case. pygments-lexers.json lists every lexer's name with its aliases, as Pygments 2.20
 * resolves them (the first lexer with an alias wins):
 * `python3 -c 'from pygments.lexers import get_all_lexers; print([(n, a) for n, a, _, _ in get_all_lexers()])'`.
 */
function codeLanguageName(lang: string): string {
  if (!lexerNames) {
    const byName = createRequire(import.meta.url)("./pygments-lexers.json") as Record<string, string>;
    lexerNames = new Map();
    for (const [name, aliases] of Object.entries(byName)) {
      for (const alias of aliases.split(" ")) lexerNames.set(alias, name);
    }
  }
  const alias = lang.toLowerCase();
  return lexerNames.get(alias) ?? alias;
}

/**
 * Code blocks as Pygments wraps them; lines lose trailing whitespace, the block its blank edges. Pygments escapes
 * quotes; a block with a language goes through lxml in Zulip (to add the language), which writes them back plain.
 */
function codeBlockHtml(code: string, lang: string): string {
  const lines = code.split("\n").map((line) => line.trimEnd());
  while (lines.length && lines[0] === "") lines.shift();
  while (lines.length && lines[lines.length - 1] === "") lines.pop();
  const text = lines.join("\n");
  const language = lang ? ` data-code-language="${escapeAttribute(codeLanguageName(lang))}"` : "";
  const body = lines.length ? (lang ? escapeText(text) : escapeCode(text, "&#39;")) + "\n" : "";
  return `<div class="codehilite"${language}><pre><span></span><code>${body}</code></pre></div>\n`;
}

/**
 * A ```math block as Zulip renders it: lines lose trailing whitespace, each paragraph (split at an empty line) is
 * rendered in display mode, and they all go in one `<p>`; an empty block renders as nothing.
 */
function mathBlockHtml(tex: string): string {
  if (tex === "") return "";
  const lines = tex.slice(0, -1).split("\n"); // markdown-it ends every line with a newline
  const paragraphs = lines.map((line) => line.trimEnd()).join("\n").split("\n\n");
  const html = paragraphs.map(
    (paragraph) => renderTex(paragraph, true) ?? `<span class="tex-error">${escapeCode(paragraph, "&#x27;")}</span>`,
  );
  return `<p>${html.join("\n\n")}</p>\n`;
}

// ---------------------------------------------------------------------------------------------------------------
// The instance, built once.

/** markdown-it exposes no getter for a rule it already has, and we wrap a few of them. */
function existingRule<T>(ruler: unknown, name: string): T {
  const rules = (ruler as { __rules__: Array<{ name: string; fn: T }> }).__rules__;
  return rules.find((rule) => rule.name === name)!.fn;
}

function build(): MarkdownIt {
  const md = MarkdownItFactory("default", { html: false, linkify: true, breaks: true });
  // Zulip has no reference links, images, `<autolinks>`, setext (underlined) headings or backslash escapes; our
  // own rules replace strikethrough, inline code and fences.
  md.disable(["reference", "image", "autolink", "lheading", "escape", "strikethrough", "backticks", "fence"]);
  // Zulip links bare domains (`example.com`) and e-mail addresses too.
  md.linkify.set({ fuzzyLink: true, fuzzyEmail: true, urlAuth: true });

  const blockAlt = { alt: ["paragraph", "reference", "blockquote", "list"] };
  md.block.ruler.before("code", "zulip_fence", fence, blockAlt);
  md.block.ruler.at("blockquote", nonEmptyBlockquote(existingRule<BlockRule>(md.block.ruler, "blockquote")), blockAlt);
  md.block.ruler.at("list", nestedListsInterruptText(existingRule<BlockRule>(md.block.ruler, "list")), {
    alt: ["paragraph", "reference", "blockquote"],
  });
  md.block.ruler.at("paragraph", keepTrailingSpaces(existingRule<BlockRule>(md.block.ruler, "paragraph")));

  md.inline.ruler.at("newline", newlineKeepingIndent(existingRule<InlineRule>(md.inline.ruler, "newline")));
  md.inline.ruler.before("emphasis", "zulip_code", codeSpan);
  md.inline.ruler.before("emphasis", "zulip_mention", mention);
  md.inline.ruler.before("emphasis", "zulip_channel_link", channelLink);
  md.inline.ruler.before("emphasis", "zulip_strikethrough", strikethrough);
  md.inline.ruler.before("emphasis", "zulip_tex", inlineTex);
  md.inline.ruler.before("emphasis", "zulip_timestamp", timestamp);
  md.inline.ruler.before("linkify", "zulip_emoji", emojiName);
  md.inline.ruler.before("link", "zulip_audio", (state, silent) => {
    const context = (state.env as RenderEnv).context;
    return context.inlinePreviews === true && audioPlayer(state, silent, context);
  });
  md.inline.ruler.at("emphasis", withoutUnderscores(existingRule<InlineRule>(md.inline.ruler, "emphasis")));
  md.inline.ruler2.before("emphasis", "zulip_emphasis_lines", emphasisWithinLines);

  md.core.ruler.after("linkify", "zulip_text_emoji", textEmoji);
  md.core.ruler.after("zulip_text_emoji", "zulip_links", zulipLinks);
  md.core.ruler.after("zulip_links", "zulip_linkifiers", linkifiers);
  md.core.ruler.after("zulip_linkifiers", "zulip_strong_outside", strongOutside);
  md.core.ruler.after("zulip_strong_outside", "zulip_previews", inlinePreviews);
  md.core.ruler.after("block", "zulip_join_bullet_lists", joinBulletLists);
  md.core.ruler.after("zulip_join_bullet_lists", "zulip_tables", pythonMarkdownTables);
  md.core.ruler.after("normalize", "zulip_nested_lists", reindentNestedLists);

  // Only safe schemes; a URL without one is a web address (Zulip's sanitize_url).
  md.validateLink = (url) => SAFE_SCHEMES.test(url) || !ANY_SCHEME.test(url);
  const normalizeLink = md.normalizeLink.bind(md);
  md.normalizeLink = (url) =>
    normalizeLink(ANY_SCHEME.test(url) || url.startsWith("/") || url.startsWith("#") ? url : "http://" + url);

  const rules = md.renderer.rules;
  rules.text = (tokens, idx) => escapeText(tokens[idx]!.content);
  rules.code_inline = (tokens, idx) => `<code>${escapeText(tokens[idx]!.content)}</code>`;
  rules.code_block = (tokens, idx) => codeBlockHtml(tokens[idx]!.content, "");
  rules.zulip_code = (tokens, idx) => codeBlockHtml(tokens[idx]!.content, tokens[idx]!.info);
  rules.zulip_math = (tokens, idx) => mathBlockHtml(tokens[idx]!.content);
  rules.zulip_html = (tokens, idx) => tokens[idx]!.content;
  rules.zulip_spoiler_open = () => `<div class="spoiler-block"><div class="spoiler-header">\n`;
  rules.zulip_spoiler_content = () => `</div><div class="spoiler-content" aria-hidden="true">\n`;
  rules.zulip_spoiler_close = () => `</div></div>\n`;
  // A nested list follows its tight item's text directly: `<li>B<ol>`, not `<li>B\n<ol>`.
  const listOpen: RendererRule = (tokens, idx, options, _env, self) => {
    const html = self.renderToken(tokens, idx, options);
    return idx > 0 && tokens[idx - 1]!.hidden ? html.replace(/^\n/, "") : html;
  };
  rules.bullet_list_open = listOpen;
  rules.ordered_list_open = listOpen;
  return md;
}

const markdown = build();

/**
 * One line of plain words: an ASCII letter first, then letters, digits, single spaces between words, and
 * punctuation that means nothing to Zulip's markdown where it stands (`,` `!` `?` `'`, and `.` only before a space
 * or at the end, so never inside a domain to link). Nothing in it can open a list, a mention, an emoji, an
 * emoticon, a link or an entity to escape, so markdown-it would render it as the paragraph it is. Many chat
 * messages look like this; markdown-it spends 17 µs on a short one, this test 0.3 µs (a node micro-measure; at
 * 1,000 sends a second, 1.7% of a core). test/actors/chat/rendering/markdown.test.ts holds the two renderings to each other.
 */
const PLAIN_LINE = /^[A-Za-z](?:[A-Za-z0-9,!?']| (?=[^ ])|\.(?= |$))*$/;

export function isPlainLine(content: string): boolean {
  return PLAIN_LINE.test(content);
}

export function renderMarkdown(content: string, context: MarkdownContext = {}): RenderResult {
  // A plain line may still hold a linkifier's match (`JIRA-12`, `issue 42`).
  if (isPlainLine(content) && !context.linkifiers?.length) {
    return { html: `<p>${content}</p>`, mentionedUserIds: [], mentionedGroupIds: [], wildcardMention: null, hasLink: false };
  }
  return renderWithMarkdownIt(content, context);
}

/** Every message that is not a plain line (renderMarkdown), and the test's reference for the ones that are. */
export function renderWithMarkdownIt(content: string, context: MarkdownContext = {}): RenderResult {
  const env: RenderEnv = {
    context,
    userIds: new Set(),
    groupIds: new Set(),
    channelWildcard: false,
    topicWildcard: false,
    hasLink: false,
  };
  const html = markdown.render(content, env).trimEnd();
  return {
    html,
    mentionedUserIds: [...env.userIds],
    mentionedGroupIds: [...env.groupIds],
    wildcardMention: env.channelWildcard ? "channel" : env.topicWildcard ? "topic" : null,
    hasLink: env.hasLink,
  };
}
