import { existsSync } from "node:fs";
import { describe, expect, it, vi } from "vitest";
import { ajv } from "../../gateway/validate.ts";
import {
  HAVE_ZULIP_OPENAPI,
  ZULIP_OPENAPI_PATH,
  componentValidator,
  expectZulipResponse,
  responseValidator,
  zulipOpenApi,
} from "./openapi.ts";

type Obj = Record<string, unknown>;

/**
 * Zulip's own example for an operation's success response. openapi-generator hoisted the response schema into
 * `components/schemas/<op>_200_response` = `allOf: [JsonSuccessBase, {additionalProperties: false, example, ...}]`;
 * the example on that allOf member is Zulip's, the one on the component itself is synthetic (see the yaml header).
 */
function zulipExample(method: string, path: string, status = 200): Obj {
  const doc = zulipOpenApi() as unknown as { paths: Obj; components: { schemas: Obj } };
  const op = (doc.paths[path] as Obj)[method] as { responses: Obj };
  const media = ((op.responses[String(status)] as Obj).content as Obj)["application/json"] as Obj;
  const ref = (media.schema as { $ref: string }).$ref;
  const schema = doc.components.schemas[ref.replace("#/components/schemas/", "")] as { allOf: Obj[] };
  const member = schema.allOf.find((m) => m.example !== undefined && m.$ref === undefined);
  if (!member) throw new Error(`no example for ${method} ${path} ${status}`);
  return structuredClone(member.example) as Obj;
}

function deepFreeze<T>(v: T): T {
  if (typeof v === "object" && v !== null) {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

// Without the yaml (a fresh clone) there is nothing to check; global-setup.ts says so once.
describe.skipIf(!HAVE_ZULIP_OPENAPI)("Zulip OpenAPI response validator", () => {
  it("finds zulip.yaml relative to the module, beside the repository", () => {
    expect(ZULIP_OPENAPI_PATH).toMatch(/shared[\\/]zulip[\\/]zulip\.yaml$/);
    expect(existsSync(ZULIP_OPENAPI_PATH)).toBe(true);
    expect(zulipOpenApi()).toBe(zulipOpenApi()); // parsed once
  });

  it.each([
    ["post", "/messages"],
    ["get", "/server_settings"],
    ["post", "/register"],
    ["get", "/messages"],
    ["get", "/events"],
    ["post", "/fetch_api_key"],
    ["get", "/users/me"],
    ["post", "/users"],
    ["post", "/users/me/subscriptions"],
  ])("accepts Zulip's own example for %s %s 200", (method, path) => {
    expect(responseValidator(method, path, 200)(zulipExample(method, path))).toEqual([]);
    expect(() => expectZulipResponse(method, path, 200, zulipExample(method, path))).not.toThrow();
  });

  it("accepts minimal bodies with only the required fields", () => {
    expect(responseValidator("post", "/messages", 200)({ result: "success", msg: "", id: 1 })).toEqual([]);
    expect(responseValidator("get", "/events", 200)({ result: "success", msg: "", events: [] })).toEqual([]);
    expect(
      responseValidator("post", "/users/me/subscriptions", 200)({
        result: "success",
        msg: "",
        subscribed: { "10": ["general"] },
        already_subscribed: {},
      }),
    ).toEqual([]);
  });

  it("rejects a missing required field", () => {
    const { id: _id, ...body } = zulipExample("post", "/messages");
    const errors = responseValidator("post", "/messages", 200)(body);
    expect(errors.join("\n")).toMatch(/^\/: must have required property 'id'/m);
    const { api_key: _key, ...noKey } = zulipExample("post", "/fetch_api_key");
    expect(responseValidator("post", "/fetch_api_key", 200)(noKey).join("\n")).toMatch(/'api_key'/);
    const { result: _result, ...noResult } = zulipExample("get", "/server_settings");
    expect(responseValidator("get", "/server_settings", 200)(noResult).join("\n")).toMatch(/'result'/);
  });

  it("rejects an undocumented property on additionalProperties:false objects, top level and nested", () => {
    const top = { ...zulipExample("post", "/messages"), sender_id: 5 };
    expect(responseValidator("post", "/messages", 200)(top)).toEqual([
      expect.stringMatching(/^\/: must NOT have undocumented property "sender_id"/),
    ]);

    const messages = zulipExample("get", "/messages");
    (messages.messages as Obj[])[0]!.stream_name = "Denmark";
    expect(responseValidator("get", "/messages", 200)(messages).join("\n")).toMatch(
      /^\/messages\/0: must NOT have undocumented property "stream_name"/m,
    );

    const register = zulipExample("post", "/register");
    register.chorus_extension = true;
    expect(responseValidator("post", "/register", 200)(register).join("\n")).toMatch(/"chorus_extension"/);
  });

  it("rejects a wrong type and reports the JSON pointer and the value", () => {
    const body = { ...zulipExample("post", "/messages"), id: "42" };
    expect(responseValidator("post", "/messages", 200)(body)).toEqual([
      expect.stringMatching(/^\/id: must be integer \(got "42"\)/),
    ]);
    const settings = { ...zulipExample("get", "/server_settings"), zulip_feature_level: "420" };
    expect(responseValidator("get", "/server_settings", 200)(settings).join("\n")).toMatch(
      /^\/zulip_feature_level: must be integer/m,
    );
    expect(responseValidator("post", "/messages", 200)({ result: "ok", msg: "", id: 1 }).join("\n")).toMatch(
      /^\/result: must be equal to one of the allowed values \["success"\]/m,
    );
  });

  it("rejects null where the schema is not nullable, and accepts it where it is", () => {
    const messages = zulipExample("get", "/messages");
    const first = (messages.messages as Obj[])[0]!;
    first.avatar_url = null; // nullable: true in MessagesBase
    expect(responseValidator("get", "/messages", 200)(messages)).toEqual([]);
    first.content = null;
    expect(responseValidator("get", "/messages", 200)(messages).join("\n")).toMatch(
      /^\/messages\/0\/content: must be string \(got null\)/m,
    );

    const settings = { ...zulipExample("get", "/server_settings"), realm_name: null };
    expect(responseValidator("get", "/server_settings", 200)(settings).join("\n")).toMatch(/^\/realm_name: /m);
    const register = { ...zulipExample("post", "/register"), last_event_id: null };
    expect(responseValidator("post", "/register", 200)(register).join("\n")).toMatch(/^\/last_event_id: /m);
  });

  it("validates each event against its own variant (type, then op)", () => {
    const v = responseValidator("get", "/events", 200);
    const heartbeat = { type: "heartbeat", id: 7 };
    expect(v({ result: "success", msg: "", events: [heartbeat], queue_id: "q" })).toEqual([]);
    expect(v({ result: "success", msg: "", events: [{ ...heartbeat, extra: 1 }] })).toEqual([
      expect.stringMatching(/^\/events\/0: must NOT have undocumented property "extra"/),
    ]);
    expect(v({ result: "success", msg: "", events: [{ type: "no_such_event", id: 1 }] })).toEqual([
      expect.stringMatching(/^\/events\/0\/type: must be equal to one of the allowed values/),
    ]);

    const example = zulipExample("get", "/events");
    const message = (example.events as Obj[]).find((e) => e.type === "message")!;
    expect(message).toBeDefined();
    (message.message as Obj).sender_id = "10";
    expect(v(example)).toEqual([expect.stringMatching(/^\/events\/\d+\/message\/sender_id: must be integer/)]);

    // `op` selects among the variants of one type.
    const peerAdd = { type: "subscription", op: "peer_add", stream_ids: [9], user_ids: [12], id: 3 };
    expect(v({ result: "success", msg: "", events: [peerAdd] })).toEqual([]);
    expect(v({ result: "success", msg: "", events: [{ ...peerAdd, op: "peer_added" }] })).toEqual([
      expect.stringMatching(/^\/events\/0\/op: must be equal to one of the allowed values/),
    ]);
  });

  it("validates error responses against the status's schema", () => {
    const badQueue = {
      result: "error",
      msg: "Bad event queue ID: abc",
      code: "BAD_EVENT_QUEUE_ID",
      queue_id: "abc",
    };
    expect(responseValidator("get", "/events", 400)(badQueue)).toEqual([]);
    expect(responseValidator("get", "/events", 400)({ ...badQueue, retry: true }).join("\n")).toMatch(/"retry"/);
    const { code: _code, ...noCode } = badQueue;
    expect(responseValidator("get", "/events", 400)(noCode).join("\n")).toMatch(/'code'/);

    // POST /messages 400 is a oneOf of error schemas (several identical CodedError entries): any one may match.
    const v = responseValidator("post", "/messages", 400);
    expect(v({ result: "error", msg: "Invalid message type", code: "BAD_REQUEST" })).toEqual([]);
    expect(
      v({ result: "error", msg: "Channel 'nope' does not exist", code: "STREAM_DOES_NOT_EXIST", stream: "nope" }),
    ).toEqual([]);
    expect(v({ result: "error", msg: "x", code: "BAD_REQUEST", extra: 1 })).not.toEqual([]);
    expect(v({ result: "success", msg: "", code: "BAD_REQUEST" })).not.toEqual([]);

    expect(
      componentValidator("MissingArgumentError")({
        result: "error",
        msg: "Missing 'content' argument",
        code: "REQUEST_VARIABLE_MISSING",
        var_name: "content",
      }),
    ).toEqual([]);
  });

  it("throws a clear error when the yaml documents no such operation or status", () => {
    expect(() => responseValidator("get", "/messages", 401)).toThrow(
      /no 401 response for GET \/messages \(documented: 200\)/,
    );
    expect(() => responseValidator("get", "/no/such/endpoint", 200)).toThrow(/no operation GET \/no\/such\/endpoint/);
    expect(() => responseValidator("frobnicate", "/messages", 200)).toThrow(/Not an HTTP method/);
    expect(() => componentValidator("NoSuchSchema")).toThrow(/NoSuchSchema/);
  });

  it("matches concrete and prefixed paths to the yaml's templates", () => {
    const user = { result: "success", msg: "", user: { user_id: 12, full_name: 5 } };
    const byTemplate = responseValidator("get", "/users/{user_id}", 200)(user);
    expect(byTemplate.join("\n")).toMatch(/^\/user\/full_name: must be string/m);
    expect(responseValidator("GET", "/api/v1/users/12", 200)(user)).toEqual(byTemplate);
    expect(responseValidator("post", "/api/v1/messages", 200)({ result: "success", msg: "", id: 1 })).toEqual([]);
  });

  it("compiles each operation once and never mutates the body", () => {
    responseValidator("post", "/register", 200);
    const addSchema = vi.spyOn(ajv, "addSchema");
    try {
      const v = responseValidator("post", "/register", 200);
      expect(addSchema).not.toHaveBeenCalled();
      const body = deepFreeze(zulipExample("post", "/register"));
      const before = JSON.stringify(body);
      expect(v(body)).toEqual([]);
      expect(JSON.stringify(body)).toBe(before);
    } finally {
      addSchema.mockRestore();
    }
  });

  it("expectZulipResponse throws with every error line", () => {
    expect(() =>
      expectZulipResponse("post", "/fetch_api_key", 200, { result: "success", msg: "", email: 3, api_key: "k" }),
    ).toThrow(/POST \/fetch_api_key 200:\n {2}\/email: must be string \(got 3\)/);
  });
});
