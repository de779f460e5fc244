/**
 * Routing shared by both faces (Zulip's /api/v1 and the assistant's): method + path templates, matched as Django
 * matches Zulip's urls.py (the path decoded, then each pattern's converters), 405 detection, and the
 * mapping of errors to each face's envelope.
 *
 * A template's `{name}` segment is one of Django's converters: `int` (digits only, as Zulip's `<int:…>` ids),
 * `str` (one non-empty segment without `/`) or `path` (one or more segments, slashes included, as Zulip's
 * `<path:…>`: a navigation view's `narrow/is/alerted` arrives unencoded from the Python bindings). Where several
 * templates match a path, the most specific wins (literal before int before str before path, left to right), as
 * Zulip's urls.py lists its patterns. A broader template that also matches serves a method the most specific one
 * lacks (Zulip declares GET on both `users/<int:user_id>` and `users/<email>`; Chorus serves both with the broader
 * one); a 405 lists the most specific template's methods, so a path is never answered with a broader pattern's.
 */
import { ChorusError, errors } from "../runtime/errors.ts";
import type { HttpRequest, HttpResult, HttpStream } from "./http.ts";
import { log } from "../runtime/log.ts";

/** How a `{name}` segment matches: Django's path converters, in Zulip's urls.py. */
export type Converter = "int" | "str" | "path";

export interface Routable {
  method: string;
  path: string;
  /** Converters of the path's `{name}` segments; `str` where not given. */
  converters?: Record<string, Converter>;
}

export interface Match<R> {
  route?: R;
  pathParams: Record<string, string>;
  /** The methods of the matched path when none is this method (for 405): each once, in the order added. */
  allowed: string[];
}

type Segment = { literal: string } | { name: string; converter: Converter };

/** Routes sharing one path shape (literals and converters; parameter names may differ between them). */
interface Template<R> {
  segments: Segment[];
  /** Specificity, compared left to right: 0 literal, 1 int, 2 str, 3 path. */
  rank: number[];
  routes: Array<{ route: R; names: string[] }>;
}

const RANK: Record<Converter, number> = { int: 1, str: 2, path: 3 };

export class Router<R extends Routable> {
  /** Most specific first. */
  private readonly templates: Array<Template<R>> = [];
  /** Templates without parameters by their path: the most specific match of any path they match, found at once. */
  private readonly literal = new Map<string, Template<R>>();

  add(route: R): void {
    const segments = route.path
      .split("/")
      .slice(1)
      .map((seg): Segment => {
        if (!seg.startsWith("{")) return { literal: seg };
        const name = seg.slice(1, -1);
        return { name, converter: route.converters?.[name] ?? "str" };
      });
    if (segments.filter((s) => "name" in s && s.converter === "path").length > 1) {
      throw new Error(`${route.path}: at most one path-converter segment`);
    }
    const shape = shapeOf(segments);
    const names = segments.flatMap((s) => ("name" in s ? [s.name] : []));
    const existing = this.templates.find((t) => shapeOf(t.segments) === shape);
    if (existing) {
      existing.routes.push({ route, names });
      return;
    }
    const rank = segments.map((s) => ("literal" in s ? 0 : RANK[s.converter]));
    const at = this.templates.findIndex((t) => compareRanks(rank, t.rank) < 0);
    const template = { segments, rank, routes: [{ route, names }] };
    if (names.length === 0) this.literal.set(route.path, template);
    if (at < 0) this.templates.push(template);
    else this.templates.splice(at, 0, template);
  }

  match(method: string, path: string): Match<R> {
    const parts = path.split("/").slice(1).map(decodeSegment);
    if (parts.some((p) => p === undefined)) return { pathParams: {}, allowed: [] }; // malformed percent-encoding
    if (parts.some((p) => p!.includes("\0"))) throw errors.badRequest("The path contains NULL (0x00) characters.");
    let first: Match<R> | undefined;
    const literal = this.literal.get("/" + parts.join("/"));
    // A literal template is listed before any pattern in Zulip's urls.py: Django stops at it, so a method it lacks is
    // a 405 (PATCH /users/me), never a broader pattern's route.
    if (literal) return pick(literal, method, []);
    for (const template of this.templates) {
      const values = matchSegments(template.segments, parts as string[]);
      if (!values) continue;
      const found = pick(template, method, values);
      if (found.route) return found;
      first ??= found;
    }
    return first ?? { pathParams: {}, allowed: [] };
  }
}

/** The matched template's route for this method, or the methods it has (each once) for a 405. */
function pick<R extends Routable>(template: Template<R>, method: string, values: string[]): Match<R> {
  const found = template.routes.find(({ route }) => route.method === method);
  if (found) return { route: found.route, pathParams: Object.fromEntries(found.names.map((n, i) => [n, values[i]!])), allowed: [] };
  return { pathParams: {}, allowed: [...new Set(template.routes.map(({ route }) => route.method))] };
}

function shapeOf(segments: Segment[]): string {
  return segments.map((s) => ("literal" in s ? s.literal : `{${s.converter}}`)).join("/");
}

function compareRanks(a: number[], b: number[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! - b[i]!;
  return b.length - a.length; // a longer template is the more specific
}

/** The parameter values, in the template's order, if the decoded path segments match it. */
function matchSegments(segments: Segment[], parts: string[]): string[] | undefined {
  const spanning = segments.findIndex((s) => "name" in s && s.converter === "path");
  if (spanning < 0 ? parts.length !== segments.length : parts.length < segments.length) return undefined;
  // A path-converter segment takes what the segments before and after it leave.
  const taken = parts.length - segments.length + 1;
  const values: string[] = [];
  for (let i = 0, at = 0; i < segments.length; i++) {
    const seg = segments[i]!;
    const value = i === spanning ? parts.slice(at, at + taken).join("/") : parts[at]!;
    at += i === spanning ? taken : 1;
    if ("literal" in seg) {
      if (value !== seg.literal) return undefined;
    } else {
      if (!converts(seg.converter, value)) return undefined;
      values.push(value);
    }
  }
  return values;
}

function converts(converter: Converter, value: string): boolean {
  if (converter === "int") return /^[0-9]+$/.test(value);
  if (converter === "str") return value !== "" && !value.includes("/");
  return value !== "";
}

function decodeSegment(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

/**
 * Run a request's handling; a thrown error becomes `toResult(error)` (each face has its own envelope), and
 * unexpected failures are logged without reaching the client. (Its span is the server span around the whole
 * handler: gateway/tracing.ts.)
 */
export async function answerErrors(
  req: HttpRequest,
  run: () => Promise<HttpResult | HttpStream>,
  toResult: (error: ChorusError) => HttpResult,
): Promise<HttpResult | HttpStream> {
  try {
    return await run();
  } catch (err) {
    const error = ChorusError.wrap(err);
    if (error.code === "INTERNAL_SERVER_ERROR") log.error({ err: error.cause ?? error }, `${req.method} ${req.path} failed`);
    return toResult(error);
  }
}
