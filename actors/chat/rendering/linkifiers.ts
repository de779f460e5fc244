/**
 * Linkifiers in messages: a realm's patterns (Zulip's re2 syntax) turned into JavaScript regular expressions with
 * Zulip's boundaries (zerver/lib/markdown prepare_linkifier_pattern: a match starts at the text's start, after
 * white space or one of `'"(,:<`, and is not followed by a letter or digit), and the URL each match links to.
 */
import { expandUrlTemplate } from "./url-template.ts";

export interface Linkifier {
  id: number;
  pattern: string;
  url_template: string;
}

export interface CompiledLinkifier {
  /** Global, sticky-free: `exec` from lastIndex finds the next match with Zulip's boundaries. */
  regex: RegExp;
  urlTemplate: string;
}

/** Escapes JavaScript's unicode mode refuses (`\#`, `\-` outside a class…) are written as the character's code. */
const KEPT_ESCAPE = /[\^$\\.*+?()[\]{}|/]/;

/**
 * A re2 pattern as a JavaScript one: Python's `(?P<name>` and `(?P=name)`, re2's one-letter `\pL` classes, and
 * leading inline flags (`(?i)`) as the expression's flags, as Zulip's own web client translates them. What remains
 * is either valid in both dialects or refused by the RegExp constructor.
 */
export function translatePattern(pattern: string): { source: string; flags: string } {
  let source = pattern;
  let flags = "";
  const leading = /^\(\?([ims]+)\)/.exec(source);
  if (leading) {
    flags = [...new Set(leading[1]!)].join("");
    source = source.slice(leading[0].length);
  }
  source = source
    .replace(/\\(.)|\(\?P<|\(\?P=(\w+)\)/gsu, (whole, escaped: string | undefined, backref: string | undefined) => {
      if (backref) return `\\k<${backref}>`;
      if (escaped === undefined) return "(?<";
      if (/[A-Za-z0-9]/.test(escaped) || KEPT_ESCAPE.test(escaped)) return whole;
      return `\\u{${escaped.codePointAt(0)!.toString(16)}}`;
    })
    .replace(/\\([pP])([A-Za-z])/g, "\\$1{$2}");
  return { source, flags };
}

/** The pattern compiled with Zulip's boundaries; throws the RegExp constructor's SyntaxError for a bad pattern. */
export function compileLinkifier(pattern: string, urlTemplate: string): CompiledLinkifier {
  const { source, flags } = translatePattern(pattern);
  const regex = new RegExp(`(?<=^|[\\s\\u0085\\p{Z}'"(,:<])(?:${source})(?=$|[^\\p{L}\\p{N}])`, "gu" + flags);
  return { regex, urlTemplate };
}

/** The group names a pattern captures (Zulip compares them with the URL template's variables). */
export function patternGroups(pattern: string): Set<string> {
  const { source } = translatePattern(pattern);
  return new Set([...source.matchAll(/(?<!\\)\(\?<([A-Za-z_]\w*)>/g)].map((m) => m[1]!));
}

export interface LinkifierMatch {
  start: number;
  end: number;
  url: string;
}

/**
 * The matches of one linkifier in a piece of text. `before` is the character in front of the piece, or "" at the
 * start of a block (Zulip's `^`).
 */
export function linkifierMatches(linkifier: CompiledLinkifier, text: string, before: string): LinkifierMatch[] {
  const offset = before.length;
  const haystack = before + text;
  const found: LinkifierMatch[] = [];
  const regex = linkifier.regex;
  regex.lastIndex = offset;
  for (let m = regex.exec(haystack); m; m = regex.exec(haystack)) {
    if (m[0] === "") {
      regex.lastIndex++;
      continue;
    }
    const url = expandUrlTemplate(linkifier.urlTemplate, m.groups ?? {});
    if (url !== undefined) found.push({ start: m.index - offset, end: m.index - offset + m[0].length, url });
  }
  return found;
}

/** Bare http(s) URLs in a topic, which Zulip links as well (its topic_links' "raw URLs"). */
const TOPIC_URL = /\bhttps?:\/\/[^\s<>"]+[^\s<>".,;:!?)\]'"]/g;

/**
 * Zulip's topic_links: the realm's linkifiers' matches in a topic, and its bare URLs, in the order they stand,
 * a match overlapping an earlier one left out.
 */
export function topicLinks(linkifiers: CompiledLinkifier[], topic: string): Array<{ text: string; url: string }> {
  if (!topic) return [];
  const found = linkifiers.flatMap((l) => linkifierMatches(l, topic, ""));
  for (const m of topic.matchAll(TOPIC_URL)) found.push({ start: m.index!, end: m.index! + m[0].length, url: m[0] });
  found.sort((a, b) => a.start - b.start);
  const links: Array<{ text: string; url: string }> = [];
  let reached = 0;
  for (const m of found) {
    if (m.start < reached) continue;
    links.push({ text: topic.slice(m.start, m.end), url: m.url });
    reached = m.end;
  }
  return links;
}
