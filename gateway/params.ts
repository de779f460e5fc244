/**
 * Zulip's request decoding, in one function: parameters from the query string and the body (the body wins),
 * scalars as text, lists and objects as JSON text inside the field, then the route's JSON schema.
 *
 * How a field is read follows its schema: `string` is the raw text; `integer` is strict decimal (no `0x10`, no
 * blanks, nothing past 2^53); `boolean` is `true`/`false`; anything else is JSON (and falls back to the raw text
 * when the schema also allows a plain string, as `to` does for a channel name).
 */
import type { ErrorObject, ValidateFunction } from "ajv";
import { ChorusError, errors } from "../runtime/errors.ts";
import { chatErrors } from "../actors/chat/errors.ts";
import { ajv } from "./validate.ts";

export interface JsonSchema {
  type?: string | string[];
  [k: string]: unknown;
}

export interface ParamsSchema {
  type: "object";
  properties: Record<string, JsonSchema>;
  required?: string[];
  additionalProperties?: boolean;
}

export interface CompiledParams {
  schema: ParamsSchema;
  /** The schema's validator, compiled on the route's first request (see `validators`). */
  readonly validate: ValidateFunction;
}

/**
 * Validators by route schema, compiled on first use and shared by every app in the process. Compiling every
 * route's at registration was 1.6 of the 14 s a process took to start (docs/testing.md), paid again by each test
 * server and each `npm run manage` command, for routes most of them never serve.
 */
const validators = new WeakMap<ParamsSchema, ValidateFunction>();

/** Non-negative id: also what keeps a rounded JSON number past 2^53 out. */
export const Id = { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;
export const Bool = { type: "boolean" } as const;
export const Str = { type: "string" } as const;

export function compileParams(schema: ParamsSchema): CompiledParams {
  return {
    schema,
    get validate() {
      let validate = validators.get(schema);
      if (!validate) validators.set(schema, (validate = ajv.compile({ ...schema, additionalProperties: true })));
      return validate;
    },
  };
}

const INT = /^-?\d{1,16}$/;
/**
 * Whether text could be JSON at all (JSON.parse accepts nothing that fails this). A plain string where one is allowed
 * (a channel name in `to`) then skips a JSON.parse that would throw: building that exception was 5% of a send.
 */
const MAYBE_JSON = /^\s*(?:[[{"\d-]|true|false|null)/;

function allowsString(schema: JsonSchema): boolean {
  if (schema.type === "string" || (Array.isArray(schema.type) && schema.type.includes("string"))) return true;
  const alternatives = (schema.oneOf ?? schema.anyOf) as JsonSchema[] | undefined;
  return !!alternatives?.some(allowsString);
}

function decodeOne(name: string, raw: string, schema: JsonSchema): unknown {
  if (raw.includes("\u0000")) throw errors.badRequest(`${name} contains NULL (0x00) characters.`);
  switch (schema.type) {
    case "string":
      return raw;
    case "integer": {
      const text = raw.trim() === raw ? raw : "";
      if (!INT.test(text) || !Number.isSafeInteger(Number(text))) throw errors.badRequest(`${name} is not an integer`);
      return Number(text);
    }
    case "boolean":
      if (raw === "true") return true;
      if (raw === "false") return false;
      throw errors.badRequest(`${name} is not a boolean`);
    default:
      if (!MAYBE_JSON.test(raw) && allowsString(schema)) return raw;
      try {
        return JSON.parse(raw);
      } catch {
        if (allowsString(schema)) return raw;
        throw chatErrors.invalidJson(name);
      }
  }
}

function describe(error: ErrorObject, schema: ParamsSchema): ChorusError {
  const parts = error.instancePath.split("/").slice(1);
  const name = parts[0] ?? "";
  const label = parts.length > 1 ? `${name}[${parts.slice(1).join("][")}]` : name;
  switch (error.keyword) {
    case "required":
      return chatErrors.missing(String(error.params.missingProperty));
    case "type":
      return errors.badRequest(`${label} is not ${article(String(error.params.type))}`);
    case "maxLength":
      return errors.badRequest(`${label} is too long (limit: ${error.params.limit} characters)`);
    case "minLength":
      return errors.badRequest(`${label} cannot be blank`);
    case "maximum":
    case "minimum":
      return schema.properties[name]?.type === "integer" && error.params.limit === Number.MAX_SAFE_INTEGER
        ? errors.badRequest(`${label} is too large`)
        : errors.badRequest(`${label} is ${error.keyword === "maximum" ? "too large" : "too small"}`);
    default:
      return errors.badRequest(`Invalid ${label}`);
  }
}

function article(type: string): string {
  const word = { integer: "an integer", boolean: "a boolean", string: "a string", array: "a list", object: "a dict", number: "a number" }[type];
  return word ?? `of type ${type}`;
}

/**
 * Decode and validate. Unknown parameters are not errors: they come back in `ignored` (sorted), for the
 * response's `ignored_parameters_unsupported`.
 */
export function decodeParams(
  compiled: CompiledParams,
  query: string,
  body: Map<string, string>,
  pathParams: Record<string, string> = {},
): { params: Record<string, unknown>; ignored: string[] } {
  const { schema } = compiled;
  const fields = new Map<string, string>();
  if (query) for (const [k, v] of new URLSearchParams(query)) fields.set(k, v);
  for (const [k, v] of body) fields.set(k, v);
  const params: Record<string, unknown> = {};
  const ignored: string[] = [];
  for (const [name, raw] of fields) {
    const prop = schema.properties[name];
    if (!prop || name in pathParams) {
      if (!(name in pathParams)) ignored.push(name);
      continue;
    }
    params[name] = decodeOne(name, raw, prop);
  }
  for (const [name, raw] of Object.entries(pathParams)) {
    const prop = schema.properties[name] ?? { type: "string" };
    params[name] = decodeOne(name, raw, prop);
  }
  for (const name of schema.required ?? []) if (params[name] === undefined) throw chatErrors.missing(name);
  if (!compiled.validate(params)) throw describe(compiled.validate.errors![0]!, schema);
  return { params, ignored: ignored.sort() };
}
