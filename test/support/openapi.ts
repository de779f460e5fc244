/**
 * Test support: check Chorus HTTP responses against Zulip's own OpenAPI description.
 *
 * The description is `shared/zulip/zulip.yaml` beside the repository (OpenAPI 3.0.1, re-serialized by
 * openapi-generator; see its header and shared/zulip/NOTES.md), found through zulip-reference.ts. Without it (a
 * fresh clone) {@link HAVE_ZULIP_OPENAPI} is false and the validators accept every body: HTTP tests still run, only
 * the schema check is left out, and global-setup.ts says so once.
 *
 * How the OpenAPI 3.0 schemas become JSON Schema for Ajv (draft-07, the project's one instance):
 * - `#/components/schemas/X` refs stay refs: every component is added once to Ajv inside one document whose `$id`
 *   is {@link COMPONENTS_ID}; each operation's response schema is added under its own `$id`, so asking for the same
 *   operation again returns Ajv's cached validator. Recursive schemas are therefore fine.
 * - `nullable: true` allows null: `type: [t, "null"]` (plus `null` in `enum`) for plain schemas, otherwise the
 *   schema is wrapped as `anyOf: [{type: "null"}, schema]` (covers `$ref`, `allOf`, `oneOf`, missing `type`).
 * - `oneOf` becomes `anyOf`. Zulip's yaml uses `oneOf` loosely: error responses list the same `CodedError` several
 *   times (one per documented error) and some variants overlap, so a strict "exactly one" would reject valid
 *   bodies. Zulip's own test suite does not check oneOf exclusivity either.
 * - Unions whose every branch pins `type` (and then `op`) to constant values, i.e. the ~86 event variants of
 *   GET /events, are rewritten as `if type == T then (branches for T)`: the same accepted set as the plain union,
 *   but a failure reports the errors of the matching variant instead of one line per variant.
 * - Annotations (`description`, `example`, `title`, `deprecated`, `discriminator`, `xml`, `externalDocs`,
 *   `readOnly`, `writeOnly`) are dropped, and so is `default` (the shared instance has `useDefaults: true`; a default
 *   must never fill in a missing field of the body under test). `format`s Ajv does not know are dropped.
 * - Siblings of `$ref` are ignored, as OpenAPI 3.0 specifies.
 * Validation runs on a `structuredClone` of the body, so the body under test is never mutated.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import type { ErrorObject, ValidateFunction } from "ajv";
import { parse } from "yaml";
import { ajv } from "../../gateway/validate.ts";
import { hasZulipReference, zulipReferencePath } from "./zulip-reference.ts";

/** Absolute path of Zulip's OpenAPI description: `<repo>/../shared/zulip/zulip.yaml`. */
export const ZULIP_OPENAPI_PATH = zulipReferencePath("zulip.yaml");
/** Whether the description is there; when not, every validator here accepts everything. */
export const HAVE_ZULIP_OPENAPI = hasZulipReference("zulip.yaml");

const ID_BASE = "https://chorus.invalid/zulip-openapi";
/** Ajv `$id` of the document holding every `components.schemas` entry (converted). */
export const COMPONENTS_ID = `${ID_BASE}/components.json`;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** Validates a response body; returns readable error lines (JSON pointer first), empty when valid. */
export type ResponseValidator = (body: unknown) => string[];
const ACCEPT_ALL: ResponseValidator = () => [];

interface OpenApiDocument {
  paths: Record<string, Record<string, unknown>>;
  components: { schemas: Record<string, Json>; responses?: Record<string, Json> };
}

const HTTP_METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);

// ---------------------------------------------------------------------------------------------------------------
// Loading (once per process: the file is 1.27 MB and takes a few hundred ms to parse)

const CACHE_KEY = Symbol.for("chorus.test.zulipOpenApi");
interface Cache {
  doc?: OpenApiDocument;
  components?: JsonObject;
}
const cache: Cache = ((globalThis as Record<symbol, unknown>)[CACHE_KEY] as Cache | undefined) ??
  ((globalThis as Record<symbol, unknown>)[CACHE_KEY] = {});

/**
 * The run's copy of the parsed document as JSON, written by the global setup (`writeZulipOpenApiJson`): each test
 * file runs in a fresh process, and parsing the yaml there took 1.2 s where the JSON takes 15 ms (docs/testing.md).
 */
const OPENAPI_JSON_ENV = "CHORUS_TEST_ZULIP_OPENAPI_JSON";

/** Parses zulip.yaml (with a clear error when it cannot be read). */
function parseZulipOpenApi(): OpenApiDocument {
  let text: string;
  try {
    text = readFileSync(ZULIP_OPENAPI_PATH, "utf8");
  } catch (err) {
    throw new Error(
      `Cannot read Zulip's OpenAPI description at ${ZULIP_OPENAPI_PATH} (expected shared/zulip/zulip.yaml ` +
        `beside the repository): ${(err as Error).message}`,
    );
  }
  return parse(text, { maxAliasCount: -1 }) as OpenApiDocument;
}

/** Writes the parsed document as JSON to `file` for the run's test files (when the yaml is there). */
export function writeZulipOpenApiJson(file: string): void {
  if (!HAVE_ZULIP_OPENAPI) return;
  writeFileSync(file, JSON.stringify(parseZulipOpenApi()));
  process.env[OPENAPI_JSON_ENV] = file;
}

/** The parsed (unconverted) OpenAPI document, parsed once per process (from the run's JSON copy when there is one). */
export function zulipOpenApi(): OpenApiDocument {
  if (!cache.doc) {
    const copy = process.env[OPENAPI_JSON_ENV];
    const doc = copy && existsSync(copy) ? (JSON.parse(readFileSync(copy, "utf8")) as OpenApiDocument) : parseZulipOpenApi();
    if (!isObject(doc) || !isObject(doc.paths) || !isObject(doc.components?.schemas)) {
      throw new Error(`${ZULIP_OPENAPI_PATH} does not look like an OpenAPI document (no paths/components.schemas)`);
    }
    cache.doc = doc;
  }
  return cache.doc;
}

function convertedComponents(): JsonObject {
  if (!cache.components) {
    const out: JsonObject = {};
    for (const [name, schema] of Object.entries(zulipOpenApi().components.schemas)) out[name] = convertSchema(schema);
    cache.components = out;
  }
  return cache.components;
}

/** Adds the components document to the shared Ajv instance (once per Ajv instance). */
function ensureComponents(): void {
  if (ajv.getSchema(COMPONENTS_ID)) return;
  ajv.addSchema({ $id: COMPONENTS_ID, components: { schemas: convertedComponents() } });
}

// ---------------------------------------------------------------------------------------------------------------
// OpenAPI 3.0 schema -> JSON Schema (draft-07)

function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

const COPIED_KEYWORDS = new Set([
  "type",
  "enum",
  "const",
  "required",
  "minimum",
  "maximum",
  "multipleOf",
  "minLength",
  "maxLength",
  "pattern",
  "minItems",
  "maxItems",
  "uniqueItems",
  "minProperties",
  "maxProperties",
]);

function absoluteRef(ref: string): string {
  if (ref.startsWith("#/components/schemas/")) return COMPONENTS_ID + ref;
  throw new Error(`Unsupported $ref in Zulip's OpenAPI description: ${ref}`);
}

/** Converts one OpenAPI 3.0 schema object to JSON Schema. Never mutates its input. */
export function convertSchema(schema: Json): Json {
  if (typeof schema === "boolean") return schema;
  if (!isObject(schema)) throw new Error(`Not a schema: ${JSON.stringify(schema)?.slice(0, 100)}`);
  if (typeof schema.$ref === "string") {
    const ref: JsonObject = { $ref: absoluteRef(schema.$ref) };
    return schema.nullable === true ? { anyOf: [{ type: "null" }, ref] } : ref;
  }
  const out: JsonObject = {};
  const allOf: Json[] = [];
  for (const [key, value] of Object.entries(schema)) {
    switch (key) {
      case "properties":
      case "patternProperties": {
        const props: JsonObject = {};
        for (const [name, sub] of Object.entries(value as JsonObject)) props[name] = convertSchema(sub);
        out[key] = props;
        break;
      }
      case "items":
      case "not":
        out[key] = convertSchema(value);
        break;
      case "additionalProperties":
        out[key] = typeof value === "boolean" ? value : convertSchema(value);
        break;
      case "allOf":
        allOf.push(...(value as Json[]).map(convertSchema));
        break;
      case "anyOf":
      case "oneOf": {
        const union = unionSchema(value as Json[]);
        if (Array.isArray(union.allOf)) allOf.push(...union.allOf);
        else if (Object.keys(union).some((k) => k in out)) allOf.push(union);
        else Object.assign(out, union);
        break;
      }
      case "exclusiveMinimum":
      case "exclusiveMaximum":
        break; // OpenAPI 3.0 booleans; handled below
      case "format":
        if (typeof value === "string" && ajv.formats[value] !== undefined) out.format = value;
        break;
      default:
        if (COPIED_KEYWORDS.has(key)) out[key] = structuredClone(value);
      // everything else (nullable, description, example(s), default, title, deprecated, discriminator, xml,
      // externalDocs, readOnly, writeOnly, x-*) is an annotation here or handled below
    }
  }
  for (const [flag, bound] of [
    ["exclusiveMinimum", "minimum"],
    ["exclusiveMaximum", "maximum"],
  ] as const) {
    if (schema[flag] === true && typeof schema[bound] === "number") {
      out[flag] = schema[bound];
      delete out[bound];
    }
  }
  if (allOf.length > 0) out.allOf = allOf;
  return schema.nullable === true ? nullable(out) : out;
}

function nullable(out: JsonObject): JsonObject {
  const keys = Object.keys(out);
  if (keys.length === 0) return out; // `{nullable: true}` alone: anything goes
  const composite = keys.some((k) => k === "allOf" || k === "anyOf" || k === "$ref" || k === "not" || k === "if");
  if (!composite && typeof out.type === "string") {
    const res: JsonObject = { ...out, type: [out.type, "null"] };
    if (Array.isArray(out.enum) && !out.enum.includes(null)) res.enum = [...out.enum, null];
    return res;
  }
  return { anyOf: [{ type: "null" }, out] };
}

// --- discriminated unions ---------------------------------------------------------------------------------------

const DISCRIMINATORS = ["type", "op"];

function resolveRaw(schema: Json, depth = 0): JsonObject | undefined {
  if (!isObject(schema) || depth > 20) return undefined;
  if (typeof schema.$ref === "string") {
    const name = schema.$ref.replace("#/components/schemas/", "");
    return resolveRaw(zulipOpenApi().components.schemas[name] ?? null, depth + 1);
  }
  return schema;
}

/** The constant values a (raw) schema allows, if it pins them with `enum` (possibly through `$ref`/`allOf`). */
function constantValues(schema: Json, depth = 0): Json[] | undefined {
  const s = resolveRaw(schema, depth);
  if (!s || s.nullable === true) return undefined;
  let values: Json[] | undefined = Array.isArray(s.enum) ? s.enum : undefined;
  if (Array.isArray(s.allOf)) {
    for (const member of s.allOf) {
      const v = constantValues(member, depth + 1);
      if (v) values = values ? values.filter((x) => v.includes(x)) : v;
    }
  }
  return values;
}

/** The values a union branch allows for property `key`, found in its `properties` or those of its `allOf` members. */
function branchValues(branch: Json, key: string, depth = 0): Json[] | undefined {
  const s = resolveRaw(branch, depth);
  if (!s) return undefined;
  let values: Json[] | undefined;
  if (isObject(s.properties) && key in s.properties) values = constantValues(s.properties[key] ?? null);
  if (Array.isArray(s.allOf)) {
    for (const member of s.allOf) {
      const v = branchValues(member, key, depth + 1);
      if (v) values = values ? values.filter((x) => v.includes(x)) : v;
    }
  }
  return values;
}

/**
 * `anyOf` over raw branches, rewritten as a dispatch on a constant-valued property when every branch pins it:
 * `{if: {type: object, required: [key]}, then: {enum check, if key == v then anyOf(branches allowing v)},
 * else: anyOf(all)}`.
 * Accepts exactly what the plain `anyOf` accepts.
 */
function unionSchema(branches: Json[], keys: string[] = DISCRIMINATORS): JsonObject {
  if (branches.length === 1) return { allOf: [convertSchema(branches[0]!)] };
  for (const [i, key] of keys.entries()) {
    const values = branches.map((b) => branchValues(b, key));
    if (values.some((v) => v === undefined || v.length === 0)) continue;
    const all: Json[] = [];
    for (const v of values) for (const x of v!) if (!all.some((y) => JSON.stringify(y) === JSON.stringify(x))) all.push(x);
    if (all.length < 2) continue;
    const cases: Json[] = all.map((value) => {
      const group = branches.filter((_, j) => values[j]!.some((x) => JSON.stringify(x) === JSON.stringify(value)));
      const then = group.length === 1 ? convertSchema(group[0]!) : unionSchema(group, keys.slice(i + 1));
      return { if: { properties: { [key]: { const: value } } }, then };
    });
    return {
      if: { type: "object", required: [key] },
      then: { allOf: [{ properties: { [key]: { enum: all } } }, ...cases] },
      else: { anyOf: branches.map(convertSchema) },
    };
  }
  return { anyOf: branches.map(convertSchema) };
}

// ---------------------------------------------------------------------------------------------------------------
// Operations and responses

function normalizePath(path: string): string {
  let p = path.split("?")[0]!;
  for (const prefix of ["/api/v1", "/json"]) if (p.startsWith(prefix + "/")) p = p.slice(prefix.length);
  if (p.length > 1 && p.endsWith("/")) p = p.slice(0, -1);
  return p;
}

/** Finds the path template for `path`, which may be a template (`/users/{user_id}`) or a concrete path. */
function findTemplate(method: string, path: string): string {
  const doc = zulipOpenApi();
  const p = normalizePath(path);
  if (doc.paths[p]?.[method]) return p;
  const candidates: { template: string; params: number; idScore: number }[] = [];
  for (const [template, item] of Object.entries(doc.paths)) {
    if (!item[method]) continue;
    const names: string[] = [];
    const source = template
      .split(/(\{[^}]+\})/)
      .map((part) => {
        const m = /^\{([^}]+)\}$/.exec(part);
        if (!m) return part.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
        names.push(m[1]!);
        return "([^/]+)";
      })
      .join("");
    const match = new RegExp(`^${source}$`).exec(p);
    if (!match) continue;
    // Prefer fewer parameters (literal segments win); then `*_id` parameters for numeric segments.
    const idScore = names.filter((n, k) => /^\d+$/.test(match[k + 1]!) === /(^|_)id$/.test(n)).length;
    candidates.push({ template, params: names.length, idScore });
  }
  candidates.sort((a, b) => a.params - b.params || b.idScore - a.idScore);
  if (candidates[0]) return candidates[0].template;
  const known = Object.entries(doc.paths)
    .filter(([, item]) => Object.keys(item).includes(method))
    .map(([t]) => t);
  throw new Error(
    `Zulip's OpenAPI description has no operation ${method.toUpperCase()} ${p} ` +
      `(paths are relative to /api/v1; ${method.toUpperCase()} paths: ${known.join(", ")})`,
  );
}

function resolveResponse(response: Json): JsonObject | undefined {
  if (isObject(response) && typeof response.$ref === "string") {
    const m = /^#\/components\/responses\/(.+)$/.exec(response.$ref);
    if (!m) throw new Error(`Unsupported response $ref: ${response.$ref}`);
    return resolveResponse(zulipOpenApi().components.responses?.[m[1]!] ?? null);
  }
  return isObject(response) ? response : undefined;
}

function escapePointer(s: string): string {
  return s.replace(/~/g, "~0").replace(/\//g, "~1");
}

/**
 * A validator for the `application/json` body of the response to `method path` with HTTP `status`, per Zulip's
 * OpenAPI description. `path` is relative to /api/v1 (a `/api/v1` or `/json` prefix is stripped) and is best given
 * as the yaml's template (`/users/{user_id}`); a concrete path (`/users/12`) is matched against the templates.
 * The response is the one for the exact status, else its range (`4XX`), else `default`. Throws if the yaml
 * documents no such operation or no JSON schema for that status. Validators are compiled once and cached by Ajv.
 * Without the yaml, accepts every body.
 */
export function responseValidator(method: string, path: string, status: number): ResponseValidator {
  if (!HAVE_ZULIP_OPENAPI) return ACCEPT_ALL;
  const m = method.toLowerCase();
  if (!HTTP_METHODS.has(m)) throw new Error(`Not an HTTP method: ${method}`);
  const template = findTemplate(m, path);
  const op = zulipOpenApi().paths[template]![m];
  const responses = isObject(op) && isObject(op.responses) ? op.responses : {};
  const wanted = [String(status), `${String(status)[0]}XX`, `${String(status)[0]}xx`, "default"];
  const key = wanted.find((k) => k in responses);
  const label = `${m.toUpperCase()} ${template} ${status}`;
  if (key === undefined) {
    throw new Error(
      `Zulip's OpenAPI description documents no ${status} response for ${m.toUpperCase()} ${template} ` +
        `(documented: ${Object.keys(responses).join(", ") || "none"})`,
    );
  }
  const response = resolveResponse(responses[key] ?? null);
  const content = isObject(response?.content) ? response.content : {};
  const mediaType =
    content["application/json"] ?? Object.entries(content).find(([type]) => /[/+]json\b/.test(type))?.[1];
  if (!isObject(mediaType) || mediaType.schema === undefined) {
    throw new Error(
      `Zulip's OpenAPI description has no application/json schema for ${label} (response "${key}")`,
    );
  }
  const id = `${ID_BASE}/paths/${escapePointer(template)}/${m}/responses/${encodeURIComponent(key)}`;
  let validate = ajv.getSchema(id) as ValidateFunction | undefined;
  if (!validate) {
    ensureComponents();
    const converted = convertSchema(mediaType.schema);
    ajv.addSchema(isObject(converted) ? { ...converted, $id: id } : { allOf: [converted], $id: id });
    validate = ajv.getSchema(id) as ValidateFunction;
  }
  const compiled = validate;
  return (body: unknown) => {
    const copy = structuredClone(body); // the shared instance has useDefaults: true
    if (compiled(copy)) return [];
    return formatErrors(compiled.errors ?? [], copy, label);
  };
}

/** A validator for a `components/schemas` entry of the yaml (e.g. `CodedError`, `BadEventQueueIdError`, `User`). */
export function componentValidator(name: string): ResponseValidator {
  if (!HAVE_ZULIP_OPENAPI) return ACCEPT_ALL;
  if (!(name in zulipOpenApi().components.schemas)) {
    throw new Error(`Zulip's OpenAPI description has no components/schemas/${name}`);
  }
  ensureComponents();
  const id = `${ID_BASE}/component/${encodeURIComponent(name)}`;
  let validate = ajv.getSchema(id) as ValidateFunction | undefined;
  if (!validate) {
    ajv.addSchema({ $id: id, $ref: `${COMPONENTS_ID}#/components/schemas/${name}` });
    validate = ajv.getSchema(id) as ValidateFunction;
  }
  const compiled = validate;
  return (body: unknown) => {
    const copy = structuredClone(body);
    if (compiled(copy)) return [];
    return formatErrors(compiled.errors ?? [], copy, name);
  };
}

function valueAt(root: unknown, pointer: string): unknown {
  let v: unknown = root;
  for (const raw of pointer.split("/").slice(1)) {
    const part = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (typeof v !== "object" || v === null) return undefined;
    v = (v as Record<string, unknown>)[part];
  }
  return v;
}

function preview(v: unknown): string {
  if (v === undefined) return "undefined";
  const s = JSON.stringify(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

const MAX_LINES = 40;

function formatErrors(errors: ErrorObject[], body: unknown, label: string): string[] {
  const lines: string[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    // "must match "then" schema" and friends only repeat the error reported just before them.
    if (e.keyword === "if") continue;
    const pointer = e.instancePath || "/";
    let detail = e.message ?? e.keyword;
    const params = e.params as Record<string, unknown>;
    if (e.keyword === "additionalProperties") detail = `must NOT have undocumented property "${String(params.additionalProperty)}"`;
    else if (e.keyword === "enum") detail += ` ${preview(params.allowedValues)}`;
    else if (e.keyword === "const") detail += ` ${preview(params.allowedValue)}`;
    if (e.keyword !== "required" && e.keyword !== "additionalProperties") {
      detail += ` (got ${preview(valueAt(body, e.instancePath))})`;
    }
    const line = `${pointer}: ${detail} [schema ${e.schemaPath}]`;
    if (seen.has(line)) continue;
    seen.add(line);
    lines.push(line);
  }
  if (lines.length === 0) lines.push(`/: does not match the schema of ${label}`);
  if (lines.length > MAX_LINES) {
    const more = lines.length - MAX_LINES;
    lines.length = MAX_LINES;
    lines.push(`... and ${more} more`);
  }
  return lines;
}

/** Throws (with every error line) unless `body` matches Zulip's schema for `method path` answering `status`. */
export function expectZulipResponse(method: string, path: string, status: number, body: unknown): void {
  const errors = responseValidator(method, path, status)(body);
  if (errors.length > 0) {
    throw new Error(
      `Response does not match Zulip's OpenAPI schema for ${method.toUpperCase()} ${path} ${status}:\n  ` +
        errors.join("\n  ") +
        `\nbody: ${preview(body)}`,
    );
  }
}
