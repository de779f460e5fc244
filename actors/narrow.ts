/**
 * Narrows: Zulip's message filters, in the modern object form (`{operator, operand, negated}`) or the legacy
 * pair form (`["stream", "design"]`). One parser for GET /messages and POST /register, one matcher for events.
 */
import { ChorusError } from "../runtime/errors.ts";
import type { MessageRecord } from "./message-format.ts";
import type { Narrow } from "./protocol.ts";

/** Operators served so far; the rest of Zulip's set comes with the messages issue. */
const SUPPORTED = new Set(["channel", "stream", "topic", "subject"]);
const MAX_TERMS = 100;

export const badNarrow = (msg: string) => new ChorusError("BAD_NARROW", msg, 400);

export function parseNarrow(raw: unknown): Narrow {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw badNarrow("Invalid narrow: narrow must be a list");
  if (raw.length > MAX_TERMS) throw badNarrow(`Invalid narrow: at most ${MAX_TERMS} operators`);
  return raw.map((term) => {
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
    if (typeof operand !== "string" && !(typeof operand === "number" && Number.isSafeInteger(operand))) {
      throw badNarrow(`Invalid narrow operand for ${operator}`);
    }
    if (!SUPPORTED.has(operator)) throw badNarrow(`Invalid narrow operator: unknown operator ${operator}`);
    return { operator: operator === "stream" ? "channel" : operator === "subject" ? "topic" : operator, operand, negated };
  });
}

/** Whether a message belongs in a queue registered with this narrow. */
export function matchesNarrow(narrow: Narrow, m: MessageRecord): boolean {
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
      default:
        match = true;
    }
    if (match === Boolean(term.negated)) return false;
  }
  return true;
}
