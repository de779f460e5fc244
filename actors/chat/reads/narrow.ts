/**
 * Narrows: Zulip's message filters, in the modern object form (`{operator, operand, negated}`) or the legacy
 * pair form (`["stream", "design"]`). One parser for GET /messages and POST /register (operators normalised to
 * their modern names), one matcher for events; the SQL form is in messages.ts.
 */
import { ChorusError } from "../../../runtime/errors.ts";
import type { MessageRecord } from "../rendering/message-format.ts";
import type { Narrow } from "../users/user.protocol.ts";

/** Legacy operator names and their modern ones (zerver/lib/narrow.py). */
const ALIASES: Record<string, string> = {
  stream: "channel",
  subject: "topic",
  "pm-with": "dm",
  "group-pm-with": "dm-including",
  streams: "channels",
};
const OPERATORS = new Set(["channel", "topic", "dm", "dm-including", "is", "sender", "id", "channels", "has", "near", "search", "with"]);
export const IS_OPERANDS = new Set(["dm", "private", "starred", "unread", "mentioned", "alerted", "resolved", "followed", "muted"]);
export const HAS_OPERANDS = new Set(["link", "image", "attachment", "reaction"]);
const MAX_TERMS = 100;

/** Zulip's resolved-topic marker (zerver/lib/topic.py RESOLVED_TOPIC_PREFIX). */
export const RESOLVED_TOPIC_PREFIX = "✔ ";

/**
 * `has:` operands read from the rendered content (case-insensitive patterns, run in SQL by messages.ts and here for
 * events), so a URL inside a code block is no link. A link is an anchor to the web or to an upload (not Zulip's own
 * channel and topic links, not mailto); an attachment, a link to an upload; an image, an inline image preview or a
 * link to an image file (which Zulip previews). Fetches decide `attachment` (and image uploads) from the attachment
 * records instead (messages.ts); an event, matched before its links are read back, uses the pattern.
 */
export const HAS_CONTENT = {
  link: '<a [^>]*href="(https?://|/user_uploads/)',
  attachment: '<a [^>]*href="/user_uploads/',
  image: 'message_inline_image|<a [^>]*href="[^"]+\\.(bmp|gif|jpe?g|png|webp)(\\?[^"]*)?"',
} as const;
const HAS_REGEX = Object.fromEntries(Object.entries(HAS_CONTENT).map(([k, v]) => [k, new RegExp(v, "i")]));

export const badNarrow = (msg: string) => new ChorusError("BAD_NARROW", msg, 400);

const isId = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

export function parseNarrow(raw: unknown): Narrow {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw badNarrow("Invalid narrow: narrow must be a list");
  if (raw.length > MAX_TERMS) throw badNarrow(`Invalid narrow: at most ${MAX_TERMS} operators`);
  const terms = raw.map((term) => {
    let operator: unknown;
    let operand: unknown;
    let negated = false;
    if (Array.isArray(term)) {
      if (term.length !== 2) throw badNarrow("Invalid narrow: a legacy term is [operator, operand]");
      [operator, operand] = term;
    } else if (term && typeof term === "object") {
      ({ operator, operand } = term as Record<string, unknown>);
      negated = (term as Record<string, unknown>).negated === true;
    } else throw badNarrow("Invalid narrow: each term is an object or a pair");
    if (typeof operator !== "string") throw badNarrow("Invalid narrow: operator must be a string");
    const op = ALIASES[operator] ?? operator;
    if (!OPERATORS.has(op)) throw badNarrow(`Invalid narrow operator: unknown operator ${operator}`);
    // An id as text too, but never one past 2^53 (which Number() would round onto another id).
    const asId = typeof operand === "string" && /^\d{1,16}$/.test(operand) ? Number(operand) : operand;
    if (op === "with" && !isId(asId)) throw badNarrow("Invalid narrow operator: Invalid 'with' operator");
    // dm takes a list of user ids too; every other operand is a string or an id.
    const listOk = op === "dm" && Array.isArray(operand) && operand.length > 0 && operand.every(isId);
    if (!listOk && typeof operand !== "string" && !isId(operand)) throw badNarrow(`Invalid narrow operand for ${operator}`);
    // JSON can spell a NUL (\u0000), which no query may see.
    if (typeof operand === "string" && operand.includes("\u0000")) throw badNarrow(`Invalid narrow operand for ${operator}: contains NULL (0x00) characters`);
    if (op === "is" && !IS_OPERANDS.has(String(operand))) throw badNarrow(`Invalid narrow operator: unknown 'is' operand ${operand}`);
    if (op === "has" && !HAS_OPERANDS.has(String(operand))) throw badNarrow(`Invalid narrow operator: unknown 'has' operand ${operand}`);
    if (op === "channels" && operand !== "public") throw badNarrow(`Invalid narrow operator: unknown 'channels' operand ${operand}`);
    if ((op === "id" || op === "near") && !isId(asId)) throw badNarrow(`Invalid narrow operand for ${operator}`);
    const normalised = op === "is" && operand === "private" ? "dm" : op === "id" || op === "near" || op === "with" ? Number(operand) : operand;
    return { operator: op, operand: normalised, negated };
  });
  if (terms.filter((t) => t.operator === "with").length > 1) throw badNarrow("Invalid narrow operator combination: Duplicate 'with' operators.");
  return terms;
}

/** Users named by a dm / dm-including / sender operand: ids, or e-mails (a list, or comma-separated). */
export function operandUsers(operand: unknown): Array<number | string> {
  if (Array.isArray(operand)) return operand as number[];
  if (typeof operand === "number") return [operand];
  return String(operand)
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

function sameUser(ref: number | string, u: { id: number; email: string }): boolean {
  return typeof ref === "number" ? ref === u.id : ref.toLowerCase() === u.email.toLowerCase();
}

/**
 * Whether a message belongs in a queue registered with this narrow. Terms that depend on the reader's flags
 * (is:starred, is:unread, ...) or on stored data (has:) cannot be decided from the message alone and match.
 */
export function matchesNarrow(narrow: Narrow, m: MessageRecord): boolean {
  const people = Array.isArray(m.display_recipient) ? m.display_recipient : [];
  for (const term of narrow) {
    let match: boolean;
    switch (term.operator) {
      case "channel":
        match =
          m.type === "stream" &&
          (typeof term.operand === "number"
            ? m.stream_id === term.operand
            : String(m.display_recipient).toLowerCase() === String(term.operand).toLowerCase());
        break;
      case "topic":
        match = m.type === "stream" && m.subject.toLowerCase() === String(term.operand).toLowerCase();
        break;
      case "dm": {
        const refs = operandUsers(term.operand);
        // The conversation is exactly the named users plus the reader (who is always a participant).
        match = m.type === "private" && refs.every((r) => people.some((p) => sameUser(r, p))) && people.length <= refs.length + 1;
        break;
      }
      case "dm-including":
        match = m.type === "private" && operandUsers(term.operand).every((r) => people.some((p) => sameUser(r, p)));
        break;
      case "sender":
        match = operandUsers(term.operand).some((r) => sameUser(r, { id: m.sender_id, email: m.sender_email }));
        break;
      case "id":
        match = m.id === term.operand;
        break;
      case "is":
        match = term.operand === "dm" ? m.type === "private" : term.operand === "resolved" ? m.subject.startsWith(RESOLVED_TOPIC_PREFIX) : true;
        break;
      case "channels":
        match = m.type === "stream";
        break;
      case "has":
        // A message just sent has no reactions yet.
        match = HAS_REGEX[String(term.operand)]?.test(m.rendered_content) ?? false;
        break;
      default:
        match = true;
    }
    if (match === Boolean(term.negated) && !(match && isUndecided(term))) return false;
  }
  return true;
}

function isUndecided(term: Narrow[number]): boolean {
  return term.operator === "near" || term.operator === "search" || term.operator === "with" || (term.operator === "is" && !["dm", "resolved"].includes(String(term.operand)));
}
