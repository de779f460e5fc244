/**
 * The one Ajv instance. Route schemas are compiled here at registration; tests compile Zulip's OpenAPI response
 * schemas with the same instance. No type coercion: Zulip's wire decoding (strings to ints, booleans, JSON) is
 * done by gateway/params.ts with strict rules before a schema ever sees the value.
 */
import { Ajv } from "ajv";

export const ajv = new Ajv({ strict: false, allErrors: false, coerceTypes: false, useDefaults: true });
