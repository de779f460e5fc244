/**
 * Routing as Zulip's urls.py and rest_dispatch route, through a real server on both engines: `<path:…>` parameters
 * that hold slashes, `<int:…>` ids, repeated slashes merged (as nginx does before Zulip sees a path), 404 for a path
 * no pattern matches and 405 (with each method once) only for a path that exists with other methods.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, ENGINES, startTestServer, type Credentials, type TestServer } from "../support/server.ts";
import { Router, type Routable } from "../../gateway/router.ts";

describe.each(ENGINES)("routing on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;

  beforeAll(async () => {
    server = await startTestServer(engine);
    owner = server.owner;
  });
  afterAll(async () => server?.close());

  /** A request as the Python bindings send it: the path as written, parameters form-encoded in the body. */
  const raw = (method: string, path: string, form?: Record<string, string>) =>
    fetch(`${server.url}/api/v1${path}`, {
      method,
      headers: {
        authorization: `Basic ${Buffer.from(`${owner.email}:${owner.key}`).toString("base64")}`,
        ...(form ? { "content-type": "application/x-www-form-urlencoded" } : {}),
      },
      body: form ? new URLSearchParams(form).toString() : undefined,
    });

  describe("navigation view fragments (Zulip's <path:fragment>)", () => {
    const T = "/navigation_views/{fragment}";

    it("updates and removes a view whose fragment is sent unencoded, slashes and all", async () => {
      const added = await api(server, "POST", "/navigation_views", { as: owner, params: { fragment: "narrow/is/alerted", is_pinned: true, name: "Alert words" } });
      expect(added.status).toBe(200);
      // python_examples.py: client.call_endpoint(url=f"navigation_views/{fragment}", method="PATCH", request=…)
      const patched = await api(server, "PATCH", "/navigation_views/narrow/is/alerted", { as: owner, template: T, params: { is_pinned: false } });
      expect(patched.status).toBe(200);
      const listed = await api(server, "GET", "/navigation_views", { as: owner });
      expect(listed.body.navigation_views).toContainEqual({ fragment: "narrow/is/alerted", is_pinned: false, name: "Alert words" });
      const removed = await api(server, "DELETE", "/navigation_views/narrow/is/alerted", { as: owner, template: T });
      expect(removed.status).toBe(200);
      const after = await api(server, "GET", "/navigation_views", { as: owner });
      expect(after.body.navigation_views.map((v: { fragment: string }) => v.fragment)).not.toContain("narrow/is/alerted");
    });

    it("still accepts the fragment percent-encoded, as one segment", async () => {
      await api(server, "POST", "/navigation_views", { as: owner, params: { fragment: "narrow/channel/9-design", is_pinned: true, name: "Design" } });
      const patched = await api(server, "PATCH", `/navigation_views/${encodeURIComponent("narrow/channel/9-design")}`, { as: owner, template: T, params: { name: "Design team" } });
      expect(patched.status).toBe(200);
      const unknown = await api(server, "PATCH", "/navigation_views/narrow/channel/10-other", { as: owner, template: T, params: { is_pinned: true } });
      expect(unknown.status).toBe(404);
      expect(unknown.body.msg).toBe("Navigation view does not exist.");
    });

    it("reaches the emoji route with a slash in the name (<path:emoji_name>), which answers for that name", async () => {
      const res = await api(server, "DELETE", "/realm/emoji/green/tick", { as: owner, template: "/realm/emoji/{emoji_name}" });
      expect(res.body.msg).toBe("Emoji 'green/tick' does not exist");
    });
  });

  describe("404 and 405", () => {
    it("answers 405 with Zulip's body, each allowed method once, and the Allow header", async () => {
      const res = await raw("PUT", "/navigation_views/narrow/is/starred");
      expect(res.status).toBe(405);
      const body = await res.json();
      expect(body).toEqual({ result: "error", msg: "Method Not Allowed", allowed_methods: ["PATCH", "DELETE"] });
      expect(res.headers.get("allow")).toBe("PATCH, DELETE");
    });

    it("lists HEAD with GET, as rest_dispatch does, and never a method twice", async () => {
      const res = await raw("PUT", "/messages/1");
      expect(res.status).toBe(405);
      const { allowed_methods } = (await res.json()) as { allowed_methods: string[] };
      expect([...allowed_methods].sort()).toEqual(["DELETE", "GET", "HEAD", "PATCH"]);
      expect(res.headers.get("allow")!.split(", ")).toEqual(allowed_methods);
    });

    it("answers a path only with its own methods, not a broader pattern's", async () => {
      // /users/me is its own pattern: PATCH /users/{user_id} does not make PATCH /users/me an update of user "me".
      const res = await raw("PATCH", "/users/me", { full_name: "x" });
      expect(res.status).toBe(405);
      const { allowed_methods } = (await res.json()) as { allowed_methods: string[] };
      expect(allowed_methods).toContain("GET");
      expect(allowed_methods).not.toContain("PATCH");
    });

    it("answers 404 Endpoint not found for unknown sub-paths and ids that are not numbers, whatever the method", async () => {
      for (const [method, path] of [
        ["GET", "/users/me/nothing-here"],
        ["PUT", "/messages/abc"],
        ["GET", "/messages/12/nothing"],
        ["POST", "/users/me/12x/topics"],
        ["PATCH", "/streams/%ZZ"],
      ] as const) {
        const res = await raw(method, path);
        expect(res.status, `${method} ${path}`).toBe(404);
        const body = (await res.json()) as { result: string; msg: string };
        expect(body.result).toBe("error");
        expect(body.msg).toMatch(/^Endpoint not found/);
      }
    });

    it("answers OPTIONS with the path's methods, sorted, and HEAD as GET without a body", async () => {
      const options = await raw("OPTIONS", "/messages");
      expect(options.status).toBe(204);
      expect(options.headers.get("allow")).toBe("GET, HEAD, POST");
      const head = await raw("HEAD", "/users/me");
      expect(head.status).toBe(200);
      expect(await head.text()).toBe("");
      expect((await raw("OPTIONS", "/nothing-here")).status).toBe(404);
    });
  });

  describe("paths as nginx hands them to Zulip", () => {
    it("merges repeated slashes, as nginx does in front of Zulip: /api/v1//users/me is /api/v1/users/me", async () => {
      const res = await api(server, "GET", "//users/me", { as: owner, template: "/users/me" });
      expect(res.status).toBe(200);
      expect(res.body.email).toBe(owner.email);
    });
  });
});

describe("a path two templates match", () => {
  it("is served by the broader template for a method the more specific one lacks, and a 405 names the specific one's methods", () => {
    // Zulip's users/<int:user_id> (GET, PATCH, DELETE) and users/<email> (GET): Chorus serves GET by id or e-mail with
    // one str template beside the int template of PATCH and DELETE.
    const router = new Router<Routable & { name: string }>();
    router.add({ method: "GET", path: "/users/{ref}", name: "get by id or e-mail" });
    router.add({ method: "PATCH", path: "/users/{user_id}", converters: { user_id: "int" }, name: "update" });
    router.add({ method: "GET", path: "/users/me", name: "own" });
    expect(router.match("GET", "/users/6").route?.name).toBe("get by id or e-mail");
    expect(router.match("GET", "/users/6").pathParams).toEqual({ ref: "6" });
    expect(router.match("PATCH", "/users/6").pathParams).toEqual({ user_id: "6" });
    expect(router.match("GET", "/users/ann@example.com").route?.name).toBe("get by id or e-mail");
    expect(router.match("GET", "/users/me").route?.name).toBe("own");
    const wrongMethod = router.match("PUT", "/users/6");
    expect(wrongMethod.route).toBeUndefined();
    expect(wrongMethod.allowed).toEqual(["PATCH"]);
    expect(router.match("PUT", "/users/me").allowed).toEqual(["GET"]);
  });
});
