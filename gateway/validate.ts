/**
 * The one Ajv instance. Route schemas are compiled here on their first request (gateway/params.ts); tests compile
 * Zulip's OpenAPI response schemas with the same instance. No type coercion: Zulip's wire decoding (strings to ints,
 * booleans, JSON) is done by gateway/params.ts with strict rules before a schema ever sees the value.
 */
import { Ajv } from "ajv";

export const ajv = new Ajv({ strict: false, allErrors: false, coerceTypes: false, useDefaults: true });

/**
 * Whether a decoded value holds a NUL character in any string (a key included). Postgres refuses NUL in text, so a
 * value with one would fail at the store as a 500; the assistant refuses it up front as a 400 instead (the chat face
 * refuses it per parameter, in Zulip's words: params.ts, and the routes for JSON parameters).
 */
export function containsNul(value: unknown): boolean {
  if (typeof value === "string") return value.includes("\0");
  if (Array.isArray(value)) return value.some(containsNul);
  if (value && typeof value === "object") return Object.entries(value).some(([k, v]) => k.includes("\0") || containsNul(v));
  return false;
}
