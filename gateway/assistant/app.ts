/**
 * The assistant's HTTP face: everything outside /api/v1 (the embed endpoint, the operator console's internal
 * endpoints, the mobile backend). Its conventions differ from the Zulip face's on purpose: JSON bodies, and
 * errors as `{"error": {"code", "message"}}` with the HTTP status. It reuses the one error type (ChorusError,
 * whose `extra.headers` become response headers, e.g. Retry-After) and the one Ajv instance.
 */
import type { ValidateFunction } from "ajv";
import type { AssistantConfig } from "../../actors/assistant/config.ts";
import type { Config } from "../../runtime/config.ts";
import { ChorusError, RETRY_AFTER_SECONDS } from "../../runtime/errors.ts";
import type { Keyring } from "../../runtime/secrets.ts";
import type { Store } from "../../runtime/store/store.ts";
import type { ActorSystem } from "../../runtime/system.ts";
import { type HttpRequest, type HttpResult, type HttpStream } from "../http.ts";
import { ajv, containsNul } from "../validate.ts";
import { Router, answerErrors } from "../router.ts";
import type { MobileCaller, OperatorAuth, Operator } from "./auth.ts";
import type { RateLimits } from "./limits.ts";
import type { Database } from "../../actors/schema.ts";
import type { Answered } from "../../actors/assistant/agent-session.protocol.ts";

/** The mobile chat's socket.io rooms as the routes use them (implemented by attachSockets in sockets.ts). */
export interface AssistantSockets {
  typing(sessionId: string): void;
  /** Stream the pieces of a finished answer, then its completion, to the session's room. */
  publishAnswer(answered: Answered): void;
  /** One piece of an answer still being generated (`seq` from 1). */
  publishDelta(sessionId: string, messageId: string, delta: string, seq: number): void;
  /** The end of a generated answer whose pieces went out with publishDelta. */
  publishComplete(answered: Answered): void;
  close(): Promise<void>;
}

export interface AssistantServices {
  system: ActorSystem;
  store: Store<Database>;
  keyring: Keyring;
  config: Config;
  assistant: AssistantConfig;
  operators: OperatorAuth;
  limits: RateLimits;
  /** socket.io rooms of this node (set once attached). */
  sockets?: AssistantSockets;
}

export interface AssistantCall<B = any> {
  req: HttpRequest;
  body: B;
  query: URLSearchParams;
  pathParams: Record<string, string>;
  /** The authenticated operator, for routes with `auth: "operator"`. */
  operator: Operator;
  /** The authenticated caller, for routes with `auth: "mobile"`. */
  caller: MobileCaller;
  services: AssistantServices;
}

export interface AssistantRoute {
  method: "GET" | "POST" | "OPTIONS" | "PATCH" | "DELETE";
  /** The full path, with `{name}` segments. */
  path: string;
  /** "mobile": an operator or an agent's end user with a user token. */
  auth: "none" | "operator" | "mobile";
  /** JSON Schema of the body (POST): compiled with the one Ajv at registration. */
  body?: object;
  /** Smaller cap than the server's for this route (413 past it). */
  maxBodyBytes?: number;
  handle(call: AssistantCall): Promise<HttpResult | HttpStream> | HttpResult | HttpStream;
}

interface CompiledRoute {
  method: string;
  path: string;
  spec: AssistantRoute;
  validate?: ValidateFunction;
}

export const UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
const UUID_RE = new RegExp(UUID);

export function isUuid(value: unknown): value is string {
  return typeof value === "string" && UUID_RE.test(value);
}

const JSON_TYPE = { "content-type": "application/json; charset=utf-8" };

export function json(status: number, body: unknown, headers: Record<string, string> = {}): HttpResult {
  return { status, headers: { ...JSON_TYPE, ...headers }, body: JSON.stringify(body) };
}

export const fail = {
  badRequest: (message: string) => new ChorusError("BAD_REQUEST", message, 400),
  notFound: (what: string) => new ChorusError("NOT_FOUND", `${what} not found`, 404),
  forbidden: (code: string, message: string) => new ChorusError(code, message, 403),
  unauthorized: (message: string) => new ChorusError("UNAUTHORIZED", message, 401),
};

/** The assistant's error envelope. 5xx details stay in the log. */
export function errorResult(error: ChorusError, headers: Record<string, string> = {}): HttpResult {
  const extraHeaders = (error.extra.headers ?? {}) as Record<string, string>;
  const retry: Record<string, string> = error.status === 503 ? { "retry-after": String(RETRY_AFTER_SECONDS) } : {};
  return json(error.status, { error: { code: error.code, message: error.message } }, { ...retry, ...headers, ...extraHeaders });
}

export class AssistantApp {
  private readonly router = new Router<CompiledRoute>();

  constructor(readonly services: AssistantServices) {}

  add(...specs: AssistantRoute[]): void {
    for (const spec of specs) {
      this.router.add({ method: spec.method, path: spec.path, spec, validate: spec.body ? ajv.compile(spec.body) : undefined });
    }
  }

  handle = (req: HttpRequest): Promise<HttpResult | HttpStream> => answerErrors(req, () => this.dispatch(req), (error) => errorResult(error));

  private async dispatch(req: HttpRequest): Promise<HttpResult | HttpStream> {
    const path = req.path.replace(/\/+$/, "") || "/";
    const { route, pathParams, allowed } = this.router.match(req.method, path);
    if (!route) {
      if (allowed.length) {
        return errorResult(new ChorusError("METHOD_NOT_ALLOWED", `Method ${req.method} not allowed here`, 405), { allow: allowed.join(", ") });
      }
      throw new ChorusError("NOT_FOUND", `No endpoint ${req.method} ${path}`, 404);
    }
    req.route = route.path;
    const spec = route.spec;
    const operators = this.services.operators;
    const operator = spec.auth === "operator" ? await operators.authenticate(req) : (undefined as unknown as Operator);
    const caller = spec.auth === "mobile" ? await operators.authenticateMobile(req) : (undefined as unknown as MobileCaller);
    const limit = spec.maxBodyBytes ?? this.services.config.maxBodyBytes;
    if (req.body.length > limit) throw new ChorusError("PAYLOAD_TOO_LARGE", `Request body too large (limit: ${limit} bytes)`, 413);
    let body: unknown = undefined;
    if (route.validate) body = parseBody(req, route.validate);
    const query = new URLSearchParams(req.query);
    if (containsNul([...query])) throw new ChorusError("VALIDATION_ERROR", "The query string contains NULL (0x00) characters", 400);
    const result = await spec.handle({ req, body, query, pathParams, operator, caller, services: this.services });
    return result;
  }
}

/** A JSON object body, validated by the route's schema; 415 for other content types, 400 for anything malformed. */
export function parseBody(req: HttpRequest, validate: ValidateFunction, opts: { requireJsonType?: boolean } = {}): unknown {
  const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if ((type || opts.requireJsonType) && type !== "application/json") {
    throw new ChorusError("UNSUPPORTED_MEDIA_TYPE", "Send the body as application/json", 415);
  }
  let body: unknown;
  try {
    body = req.body.length ? JSON.parse(req.body.toString("utf8")) : {};
  } catch {
    throw new ChorusError("INVALID_JSON", "The body is not valid JSON", 400);
  }
  if (!body || typeof body !== "object" || Array.isArray(body)) throw new ChorusError("INVALID_JSON", "The body must be a JSON object", 400);
  if (containsNul(body)) throw new ChorusError("VALIDATION_ERROR", "The body contains NULL (0x00) characters", 400);
  return checkBody(validate, body);
}

/** `body` if the schema accepts it; else 400 VALIDATION_ERROR naming the first offending field. */
export function checkBody<T = any>(validate: ValidateFunction, body: unknown): T {
  if (!validate(body)) {
    const e = validate.errors![0]!;
    const where = e.instancePath ? e.instancePath.slice(1).replace(/\//g, ".") : e.keyword === "required" ? String(e.params.missingProperty) : "body";
    const message = e.keyword === "required" ? "is required" : e.message ?? "is invalid";
    throw new ChorusError("VALIDATION_ERROR", `${where}: ${message}`, 400);
  }
  return body as T;
}
