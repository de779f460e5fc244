/**
 * The HTTP application: routing with path parameters, Zulip's parameter decoding and validation, authentication,
 * and the one place errors become Zulip's envelope. Routes hold no state; they call actors and read modules.
 */
import { context, trace, SpanStatusCode } from "@opentelemetry/api";
import { ChorusError, errors } from "../runtime/errors.ts";
import type { ActorSystem } from "../runtime/system.ts";
import type { Config } from "../runtime/config.ts";
import type { Keyring } from "../runtime/secrets.ts";
import type { Store } from "../runtime/store/store.ts";
import type { Authenticator, AuthUser } from "./auth.ts";
import { bodyFields, isStream, type HttpRequest, type HttpResult, type HttpStream } from "./http.ts";
import { compileParams, decodeParams, type CompiledParams, type ParamsSchema } from "./params.ts";

const tracer = trace.getTracer("chorus.gateway");

/** What a route handler gets: its decoded parameters, the caller, and the services. */
export interface Call<P = Record<string, any>> {
  params: P;
  user: AuthUser;
  req: HttpRequest;
  services: Services;
}

export interface Services {
  system: ActorSystem;
  store: Store;
  keyring: Keyring;
  config: Config;
  auth: Authenticator;
  /** The site URL clients should use: the configured one, else built from the request's Host header. */
  siteUrl(host?: string): string;
}

export interface RouteSpec {
  method: "GET" | "POST" | "PATCH" | "PUT" | "DELETE";
  /** Path under /api/v1, with `{name}` segments. */
  path: string;
  /** false: no authentication (server_settings, fetch_api_key). */
  auth?: boolean;
  params: ParamsSchema;
  /** The success body (the envelope is added), or a stream (server-sent events) that answers on its own. */
  handle(call: Call): Promise<Record<string, unknown> | HttpStream> | Record<string, unknown> | HttpStream;
}

interface CompiledRoute {
  spec: RouteSpec;
  segments: string[];
  params: CompiledParams;
}

const JSON_HEADERS = { "content-type": "application/json" };
const UNAUTHORIZED_HEADERS = { ...JSON_HEADERS, "www-authenticate": 'Basic realm="zulip"' };

export function envelope(error: ChorusError): HttpResult {
  const body: Record<string, unknown> = { result: "error", msg: error.message, code: error.code, ...error.extra };
  return { status: error.status, headers: error.status === 401 ? UNAUTHORIZED_HEADERS : JSON_HEADERS, body: JSON.stringify(body) };
}

export class App {
  private readonly routes: CompiledRoute[] = [];
  /** Static paths straight to their routes; only paths with parameters are matched segment by segment. */
  private readonly byPath = new Map<string, CompiledRoute[]>();

  constructor(readonly services: Services) {}

  add(...specs: RouteSpec[]): void {
    for (const spec of specs) {
      const route = { spec, segments: spec.path.split("/").slice(1), params: compileParams(spec.params) };
      this.routes.push(route);
      if (!spec.path.includes("{")) {
        const list = this.byPath.get(spec.path) ?? [];
        list.push(route);
        this.byPath.set(spec.path, list);
      }
    }
  }

  handle = async (req: HttpRequest): Promise<HttpResult | HttpStream> => {
    const span = tracer.startSpan(`${req.method} ${req.path}`);
    try {
      return await context.with(trace.setSpan(context.active(), span), () => this.dispatch(req));
    } catch (err) {
      const error = ChorusError.wrap(err);
      if (error.status >= 500) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: error.code });
        if (error.code === "INTERNAL_SERVER_ERROR") console.error(`${req.method} ${req.path} failed`, error.cause ?? error);
      }
      return envelope(error);
    } finally {
      span.end();
    }
  };

  private async dispatch(req: HttpRequest): Promise<HttpResult | HttpStream> {
    const prefix = "/api/v1";
    if (!req.path.startsWith(prefix + "/")) return envelope(new ChorusError("BAD_REQUEST", "Not Found", 404));
    const path = req.path.slice(prefix.length).replace(/\/+$/, "") || "/";
    const { route, pathParams, allowed } = this.match(req.method, path);
    if (!route) {
      if (allowed.length) {
        return {
          status: 405,
          headers: JSON_HEADERS,
          body: JSON.stringify({ result: "error", msg: "Method Not Allowed", allowed_methods: allowed }),
        };
      }
      return envelope(new ChorusError("BAD_REQUEST", `Endpoint not found: ${req.method} ${path}`, 404));
    }
    const spec = route.spec;
    const user = spec.auth === false ? (undefined as unknown as AuthUser) : await this.services.auth.authenticate(req.headers.authorization);
    const fields = bodyFields(req.body, req.headers["content-type"]);
    if (!fields) throw errors.badRequest("Unsupported Content-Type: send application/x-www-form-urlencoded or multipart/form-data");
    const { params, ignored } = decodeParams(route.params, req.query, fields, pathParams);
    const result = await spec.handle({ params, user, req, services: this.services });
    if (isStream(result)) return result;
    const body: Record<string, unknown> = { result: "success", msg: "", ...result };
    if (ignored.length) body.ignored_parameters_unsupported = ignored;
    return { status: 200, headers: JSON_HEADERS, body: JSON.stringify(body) };
  }

  private match(method: string, path: string): { route?: CompiledRoute; pathParams: Record<string, string>; allowed: string[] } {
    const allowed: string[] = [];
    const exact = this.byPath.get(path);
    if (exact) {
      for (const r of exact) {
        if (r.spec.method === method) return { route: r, pathParams: {}, allowed };
        allowed.push(r.spec.method);
      }
    }
    const parts = path.split("/").slice(1);
    for (const r of this.routes) {
      if (!r.spec.path.includes("{") || r.segments.length !== parts.length) continue;
      const pathParams: Record<string, string> = {};
      let ok = true;
      for (let i = 0; i < parts.length && ok; i++) {
        const seg = r.segments[i]!;
        if (seg.startsWith("{")) {
          if (!parts[i]) ok = false;
          else pathParams[seg.slice(1, -1)] = decodeURIComponent(parts[i]!);
        } else ok = seg === parts[i];
      }
      if (!ok) continue;
      if (r.spec.method === method) return { route: r, pathParams, allowed };
      allowed.push(r.spec.method);
    }
    return { pathParams: {}, allowed };
  }
}
