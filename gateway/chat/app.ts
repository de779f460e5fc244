/**
 * The HTTP application: routing with path parameters, Zulip's parameter decoding and validation, authentication,
 * and the one place errors become Zulip's envelope. Routes hold no state; they call actors and read modules.
 */
import type { MessageFor, ReplyFor } from "../../runtime/protocol.ts";
import { ChorusError, errors, RETRY_AFTER_SECONDS } from "../../runtime/errors.ts";
import { Realm, type RealmProtocol } from "../../actors/chat/organization/realm.protocol.ts";
import type { ActorSystem } from "../../runtime/system.ts";
import type { Config } from "../../runtime/config.ts";
import type { ChatConfig } from "../../actors/chat/config.ts";
import type { Keyring } from "../../runtime/secrets.ts";
import type { Store } from "../../runtime/store/store.ts";
import type { BlobStore } from "../../runtime/blobs/blob-store.ts";
import { basicCredentials, type Authenticator, type AuthUser } from "../auth.ts";
import { isStream, requestBody, type HttpRequest, type HttpResult, type HttpStream, type UploadedFile } from "../http.ts";
import { compileParams, decodeParams, type CompiledParams, type ParamsSchema } from "../params.ts";
import { Router, answerErrors, type Converter } from "../router.ts";
import { clientAddress } from "../rate-limiter.ts";
import type { ChatRateLimits } from "./rate-limits.ts";
import type { Database } from "../../actors/schema.ts";

/** What a route handler gets: its decoded parameters, the caller, and the services. */
export interface Call<P = Record<string, any>> {
  params: P;
  user: AuthUser;
  req: HttpRequest;
  /** Files of a multipart body (parts with a file name), which are not parameters. */
  files: UploadedFile[];
  services: Services;
}

export interface Services {
  system: ActorSystem;
  store: Store<Database>;
  /** Uploaded files' bytes (their records are in the store). */
  blobs: BlobStore;
  keyring: Keyring;
  config: Config;
  /** Chat's own settings (actors/chat/config.ts). */
  chat: ChatConfig;
  auth: Authenticator;
  rateLimits: ChatRateLimits;
  /** The site URL clients should use: the configured one, else built from the request's Host header. */
  siteUrl(host?: string): string;
}

export interface RouteSpec {
  method: "GET" | "POST" | "PATCH" | "PUT" | "DELETE";
  /**
   * Path under /api/v1, with `{name}` segments. An integer parameter matches digits only (Zulip's `<int:…>`), so
   * `/messages/abc` is an unknown endpoint, not a bad id; any other matches one segment without `/`.
   */
  path: string;
  /** The path parameter that may contain slashes, as Zulip's `<path:…>` (navigation view fragments, emoji names). */
  slashesIn?: string;
  /** false: no authentication (server_settings, fetch_api_key). */
  auth?: boolean;
  params: ParamsSchema;
  /** The success body (the envelope is added), or a stream (server-sent events) that answers on its own. */
  handle(call: Call): Promise<Record<string, unknown> | SerializedFields | HttpStream> | Record<string, unknown> | SerializedFields | HttpStream;
}

/**
 * A success body's fields already serialized (JSON object members, without the braces), for answers built from
 * parts that many requests share (GET /events: one message's JSON for every member of its channel): a string, or
 * UTF-8 pieces written to the socket as they are (POST /register's cached lists).
 */
export class SerializedFields {
  constructor(readonly json: string | Buffer[]) {}
}

/**
 * A field's value already serialized, as UTF-8 pieces (POST /register's realm_users and channel lists, cached per
 * realm): fieldsJson passes them on as they are, so megabytes of cached JSON are neither copied into a string nor
 * encoded again.
 */
export class JsonValue {
  constructor(readonly pieces: Buffer[]) {}
}

/** `fields` as SerializedFields: the JsonValue ones as their pieces, the others through JSON.stringify. */
export function fieldsJson(fields: Record<string, unknown>): SerializedFields {
  const plain: Record<string, unknown> = {};
  const spliced: Array<[string, JsonValue]> = [];
  for (const [key, value] of Object.entries(fields)) {
    if (value instanceof JsonValue) spliced.push([key, value]);
    else plain[key] = value;
  }
  const serialized = JSON.stringify(plain).slice(1, -1);
  if (!spliced.length) return new SerializedFields(serialized);
  const pieces: Buffer[] = [Buffer.from(serialized)];
  for (const [key, value] of spliced) pieces.push(Buffer.from(`${pieces.length > 1 || serialized ? "," : ""}${JSON.stringify(key)}:`), ...value.pieces);
  return new SerializedFields(pieces);
}

interface CompiledRoute {
  method: string;
  path: string;
  converters: Record<string, Converter>;
  spec: RouteSpec;
  params: CompiledParams;
}

const JSON_HEADERS = { "content-type": "application/json" };
/** A success body's start, before fields given as pieces (which begin with their own members, never empty). */
const SUCCESS_OPEN = Buffer.from('{"result":"success","msg":"",');
const UNAUTHORIZED_HEADERS = { ...JSON_HEADERS, "www-authenticate": 'Basic realm="zulip"' };

/** Ask the caller's realm actor, as the caller (the realm actor checks `actingId`'s current role). */
export function askRealm<O extends keyof RealmProtocol>(call: Call, message: Omit<MessageFor<RealmProtocol, O>, "actingId"> & { op: O }): Promise<ReplyFor<RealmProtocol, O>> {
  // The compiler cannot see that adding actingId back to the message without it gives the message: say so.
  const asCaller = { actingId: call.user.id, ...message } as unknown as MessageFor<RealmProtocol, O> & { op: O };
  return call.services.system.ref(Realm, call.user.realm_id).ask(asCaller);
}

/** A 503 (a worker, the store or the transport out of reach) tells the client when to try again. */
const UNAVAILABLE_HEADERS = { ...JSON_HEADERS, "retry-after": String(RETRY_AFTER_SECONDS) };

/** Zulip's error envelope; an error's `extra.headers` (a rate limit's) are response headers, not body fields. */
export function envelope(error: ChorusError): HttpResult {
  const { headers, ...extra } = error.extra as { headers?: Record<string, string> };
  const body: Record<string, unknown> = { result: "error", msg: error.message, code: error.code, ...extra };
  const base = error.status === 401 ? UNAUTHORIZED_HEADERS : error.status === 503 ? UNAVAILABLE_HEADERS : JSON_HEADERS;
  return { status: error.status, headers: headers ? { ...base, ...headers } : base, body: JSON.stringify(body) };
}

export class App {
  private readonly router = new Router<CompiledRoute>();

  constructor(readonly services: Services) {}

  add(...specs: RouteSpec[]): void {
    for (const spec of specs) {
      this.router.add({ method: spec.method, path: spec.path, converters: convertersOf(spec), spec, params: compileParams(spec.params) });
    }
  }

  handle = (req: HttpRequest): Promise<HttpResult | HttpStream> => answerErrors(req, () => this.dispatch(req), envelope);

  private async dispatch(req: HttpRequest): Promise<HttpResult | HttpStream> {
    const prefix = "/api/v1";
    // Repeated slashes are one, as nginx (merge_slashes) gives Zulip its paths: a client joining a base URL that ends
    // in "/" and a path that starts with one sends /api/v1//users/me. (python-zulip-api's urljoin collapses them.)
    const merged = req.path.replace(/\/{2,}/g, "/");
    if (!merged.startsWith(prefix + "/")) return envelope(new ChorusError("BAD_REQUEST", "Not Found", 404));
    const path = merged.slice(prefix.length).replace(/\/+$/, "") || "/";
    // As Zulip's rest_dispatch: HEAD is answered as GET without the body, OPTIONS lists the methods.
    const head = req.method === "HEAD";
    const { route, pathParams, allowed } = this.router.match(head ? "GET" : req.method, path);
    if (!route) {
      if (!allowed.length) return envelope(new ChorusError("BAD_REQUEST", `Endpoint not found: ${req.method} ${path}`, 404));
      const methods = allowed.includes("GET") ? [...allowed, "HEAD"] : allowed;
      if (req.method === "OPTIONS") return { status: 204, headers: { allow: [...methods].sort().join(", ") }, body: "" };
      const body = { result: "error", msg: "Method Not Allowed", allowed_methods: methods };
      return { status: 405, headers: { ...JSON_HEADERS, allow: methods.join(", ") }, body: JSON.stringify(body) };
    }
    req.route = prefix + route.path;
    const spec = route.spec;
    const user = spec.auth === false ? (undefined as unknown as AuthUser) : await this.authenticate(req);
    const limits = this.services.rateLimits;
    // A long-poll is not counted: it answers when events come, and refusing it would only delay their delivery.
    const rateHeaders =
      spec.auth === false ? await limits.anonymous(clientAddress(req, this.services.config)) : route.path === "/events" && route.method === "GET" ? {} : await limits.user(user.id);
    const sent = requestBody(req.body, req.headers["content-type"]);
    if (!sent) throw errors.badRequest("Unsupported Content-Type: send application/x-www-form-urlencoded or multipart/form-data");
    const { params, ignored } = decodeParams(route.params, req.query, sent.fields, pathParams);
    const result = await spec.handle({ params, user, req, files: sent.files, services: this.services });
    if (head) return { status: isStream(result) ? result.status : 200, headers: isStream(result) ? result.headers : JSON_HEADERS, body: "" };
    if (isStream(result)) return result;
    if (result instanceof SerializedFields) {
      const extra = ignored.length ? `,"ignored_parameters_unsupported":${JSON.stringify(ignored)}` : "";
      const headers = { ...JSON_HEADERS, ...rateHeaders };
      if (typeof result.json !== "string") return { status: 200, headers, body: [SUCCESS_OPEN, ...result.json, Buffer.from(`${extra}}`)] };
      return { status: 200, headers, body: `{"result":"success","msg":""${result.json ? `,${result.json}` : ""}${extra}}` };
    }
    const body: Record<string, unknown> = { result: "success", msg: "", ...result };
    if (ignored.length) body.ignored_parameters_unsupported = ignored;
    return { status: 200, headers: { ...JSON_HEADERS, ...rateHeaders }, body: JSON.stringify(body) };
  }

  /** HTTP Basic, with a failure counted against the address and the account it named (429 once over a limit). */
  private async authenticate(req: HttpRequest): Promise<AuthUser> {
    try {
      return await this.services.auth.authenticate(req.headers.authorization);
    } catch (err) {
      if (err instanceof ChorusError && err.status === 401 && req.headers.authorization) {
        await this.services.rateLimits.failed("api_key", clientAddress(req, this.services.config), basicCredentials(req.headers.authorization)?.email);
      }
      throw err;
    }
  }
}

/** Each path parameter's converter: `int` for an integer parameter, `path` for the one that may hold slashes. */
function convertersOf(spec: RouteSpec): Record<string, Converter> {
  const names = [...spec.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]!);
  return Object.fromEntries(
    names.map((name): [string, Converter] => [name, name === spec.slashesIn ? "path" : spec.params.properties[name]?.type === "integer" ? "int" : "str"]),
  );
}
