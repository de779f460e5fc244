/**
 * Unicode emoji names and codes, as Zulip speaks them: reactions (`reaction_type: unicode_emoji`) and markdown's
 * `:name:` syntax both go through here.
 *
 * The data is iamcal's `emoji-datasource` (the package Zulip's own emoji data is built from). Zulip's conventions:
 * - `emoji_code` is the dash-separated lowercase hex of the emoji's code points with every U+FE0F (variation
 *   selector 16) removed, e.g. `1f600`, `2764`, `0023-20e3`, `1f937-200d-2640`.
 * - names use underscores (`woman_shrugging`); iamcal spells some with dashes (`woman-shrugging`), so we convert.
 * - skin-tone modifiers are not emoji of their own.
 *
 * Zulip's names are a hand-curated layer over iamcal's (zulip/zulip tools/setup/emoji/emoji_names.py), and a few
 * hundred differ (Zulip's `:cat:` is iamcal's `cat2`). We carry the ones clients use most as ZULIP_NAMES below;
 * every other emoji answers to its iamcal names.
 *
 * The 1.3 MB JSON is read once, on first use, and only the two maps below are kept (about 0.5 MB).
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import { createRequire } from "node:module";

/** Zulip names that differ from iamcal's, name → code. Where they collide, Zulip's meaning wins. */
const ZULIP_NAMES: Record<string, string> = {
  "+1": "1f44d",
  thumbs_up: "1f44d",
  "-1": "1f44e",
  thumbs_down: "1f44e",
  slight_smile: "1f642",
  frown: "1f641",
  slight_frown: "1f641",
  neutral: "1f610",
  robot: "1f916",
  poop: "1f4a9",
  working_on_it: "1f6e0",
  cat: "1f408",
  kitten: "1f431",
  dog: "1f415",
  puppy: "1f436",
  rabbit: "1f407",
  bunny: "1f430",
  holiday_tree: "1f384",
  kiwi: "1f95d",
  division: "2797",
  up: "2b06",
  gold: "1f947",
  check: "2705",
  ok: "1f44c",
  thinking: "1f914",
  upside_down: "1f643",
  hug: "1f917",
  nerd: "1f913",
};

/** Zulip's `zulip_extra_emoji` namespace: its one emoji has the same name and code. */
export const ZULIP_EXTRA_EMOJI_NAMES: ReadonlySet<string> = new Set(["zulip"]);

interface EmojiTables {
  nameToCode: Map<string, string>;
  /** Every code we know, with its names, canonical first. */
  codeToNames: Map<string, string[]>;
}

interface DatasourceEntry {
  unified: string;
  short_names: string[];
  category: string;
}

let tables: EmojiTables | undefined;

function load(): EmojiTables {
  if (tables) return tables;
  const require = createRequire(import.meta.url);
  // Read and parse the file ourselves rather than `require` it, so Node's module cache does not keep the whole
  // 1.3 MB parsed array alive next to our maps.
  const entries = JSON.parse(
    fs.readFileSync(require.resolve("emoji-datasource/emoji.json"), "utf8"),
  ) as DatasourceEntry[];
  const zulipNamesOf = new Map<string, string[]>();
  for (const [name, code] of Object.entries(ZULIP_NAMES)) zulipNamesOf.set(code, [...(zulipNamesOf.get(code) ?? []), name]);
  const nameToCode = new Map<string, string>();
  const codeToNames = new Map<string, string[]>();
  for (const entry of entries) {
    if (entry.category === "Component") continue; // skin tones
    const code = codeFromUnified(entry.unified);
    // Zulip's names come first (the first is canonical); an iamcal name Zulip gave to another emoji is dropped.
    const iamcalNames = entry.short_names.map((n) => n.replaceAll("-", "_")).filter((n) => !Object.hasOwn(ZULIP_NAMES, n));
    const names = [...new Set([...(zulipNamesOf.get(code) ?? []), ...iamcalNames])];
    if (names.length === 0) continue;
    codeToNames.set(code, names);
    for (const name of names) nameToCode.set(name, code);
  }
  tables = { nameToCode, codeToNames };
  return tables;
}

/** `1F937-200D-2640-FE0F` → `1f937-200d-2640`. */
function codeFromUnified(unified: string): string {
  return unified
    .toLowerCase()
    .split("-")
    .filter((part) => part !== "fe0f")
    .join("-");
}

/** The `emoji_code` for a unicode emoji name, or undefined when there is no such emoji. */
export function emojiCodeFor(name: string): string | undefined {
  return load().nameToCode.get(name);
}

/** The canonical name of a unicode `emoji_code`, or undefined when the code is unknown. */
export function emojiNameFor(code: string): string | undefined {
  return load().codeToNames.get(code)?.[0];
}

export function isKnownUnicodeEmojiCode(code: string): boolean {
  return load().codeToNames.has(code);
}

/**
 * Every unicode emoji, code → names (canonical first): what a server publishes for clients as Zulip's
 * `server_emoji_data_url` document (`{"code_to_names": …}`), so that they offer the names this server accepts.
 */
export function unicodeEmojiNames(): ReadonlyMap<string, readonly string[]> {
  return load().codeToNames;
}

/**
 * The `server_emoji_data_url` document: `{"code_to_names": …}` of every unicode emoji, and the path it is served
 * under, which carries a hash of its content (as Zulip's hashed static file does), so that clients may keep it until
 * the emoji data changes. Made once, on first use.
 */
export function emojiDataDocument(): { path: string; body: Buffer } {
  if (!emojiData) {
    const body = Buffer.from(JSON.stringify({ code_to_names: Object.fromEntries(unicodeEmojiNames()) }));
    emojiData = { path: `${EMOJI_DATA_PREFIX}${createHash("sha256").update(body).digest("hex").slice(0, 16)}.json`, body };
  }
  return emojiData;
}

/** Where the emoji data document is served: Zulip's static file name, with the content's hash in it. */
export const EMOJI_DATA_PREFIX = "/static/generated/emoji/emoji_api.";

let emojiData: { path: string; body: Buffer } | undefined;

/** Zulip's rule for a `unicode_emoji` reaction: the code must exist and the name must be one of its names. */
export function isValidUnicodeEmoji(name: string, code: string): boolean {
  return isKnownUnicodeEmojiCode(code) && emojiCodeFor(name) === code;
}

export function isValidZulipExtraEmoji(name: string, code: string): boolean {
  return ZULIP_EXTRA_EMOJI_NAMES.has(name) && name === code;
}

/**
 * The emoji code of a piece of text that is exactly one emoji (as written in a message: fully qualified or not),
 * or undefined when it is not one we know.
 */
export function emojiCodeOfText(text: string): string | undefined {
  const parts: string[] = [];
  for (const char of text) {
    const point = char.codePointAt(0)!;
    if (point !== 0xfe0f) parts.push(point.toString(16).padStart(4, "0"));
  }
  const code = parts.join("-");
  return load().codeToNames.has(code) ? code : undefined;
}
