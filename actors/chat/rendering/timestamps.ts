/**
 * The instant a `<time:…>` names. Zulip parses the text with Python's dateutil (with its own table of zone
 * abbreviations), then as UNIX seconds; a time without a zone is UTC, a date without a time is midnight, and a
 * time without a date is today's.
 *
 * We take UNIX seconds and ISO 8601 (what clients' time pickers write) ourselves, and the rest, written dates like
 * `Jun 5th 2017, 10:30PM` or `31 Dec 2017 5:30 am IST`, with chrono-node's strict English parser, loaded on the
 * first such timestamp. chrono and dateutil agree on the usual ways of writing a date; where they differ
 * (dateutil takes a lone year, `2017`; chrono takes no relative dates in strict mode either) we may refuse a
 * text Zulip accepts, or the other way round.
 */
import { createRequire } from "node:module";
import type * as ChronoEnglish from "chrono-node/en";

const UNIX_SECONDS = /^-?\d+(?:\.\d+)?$/;
const ISO_TIME =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?)?[ ]*(?:(Z)|([+-])(\d{2}):?(\d{2}))?$/i;

let chrono: typeof ChronoEnglish | undefined;

/** The instant, or undefined for a text that names none, or one outside years 1 to 9999 (Python's range). */
export function parseTimestamp(text: string): Date | undefined {
  const trimmed = text.trim();
  const millis = UNIX_SECONDS.test(text)
    ? Number(text) * 1000
    : ISO_TIME.test(trimmed)
      ? isoMillis(trimmed)
      : writtenDateMillis(trimmed);
  if (millis === undefined || Number.isNaN(millis)) return undefined;
  const date = new Date(millis);
  const year = date.getUTCFullYear();
  return year < 1 || year > 9999 ? undefined : date;
}

function isoMillis(text: string): number | undefined {
  const m = ISO_TIME.exec(text)!;
  const [year, month, day, hour = 0, minute = 0, second = 0] = m.slice(1, 7).map((part) => Number(part ?? 0));
  const offsetHours = Number(m[9] ?? 0);
  const offsetMinutes = Number(m[10] ?? 0);
  if (offsetHours > 23 || offsetMinutes > 59) return undefined;
  const offset = (m[8] === "-" ? -1 : 1) * (offsetHours * 60 + offsetMinutes);
  return utcMillis(year!, month!, day!, hour, minute, second, offset);
}

/** A date as people write it, when chrono reads the whole text as exactly one date. */
function writtenDateMillis(text: string): number | undefined {
  chrono ??= createRequire(import.meta.url)("chrono-node/en") as typeof ChronoEnglish;
  const results = chrono.strict.parse(text, { instant: new Date(), timezone: 0 });
  const result = results[0];
  if (results.length !== 1 || result!.index !== 0 || result!.text.length !== text.length || result!.end) return undefined;
  const start = result!.start;
  // chrono puts a date without a time at noon; dateutil at midnight.
  const timed = start.isCertain("hour");
  const part = (component: "hour" | "minute" | "second") => (timed ? (start.get(component) ?? 0) : 0);
  return utcMillis(
    start.get("year")!,
    start.get("month")!,
    start.get("day")!,
    part("hour"),
    part("minute"),
    part("second"),
    start.isCertain("timezoneOffset") ? (start.get("timezoneOffset") ?? 0) : 0,
  );
}

/** The UTC milliseconds of a wall-clock time at a UTC offset (minutes), or undefined if there is no such time. */
function utcMillis(
  year: number,
  month: number,
  day: number,
  hour: number,
  minute: number,
  second: number,
  offsetMinutes: number,
): number | undefined {
  // Not Date.UTC: it reads years 0-99 as 1900-1999.
  const utc = new Date(0);
  utc.setUTCFullYear(year, month - 1, day);
  utc.setUTCHours(hour, minute, second);
  if (utc.getUTCDate() !== day || utc.getUTCHours() !== hour || utc.getUTCMinutes() !== minute) return undefined;
  return utc.getTime() - offsetMinutes * 60_000;
}
