/**
 * Zulip's rate limits on /api/v1, on both engines, with small rules so that a test reaches them: per user and per
 * client address, 429 RATE_LIMIT_HIT with `retry-after` and the X-RateLimit-* headers (the error checked against
 * Zulip's RateLimitedError), failed authentications per address and per account, and X-Forwarded-For believed from
 * trusted proxies only. Each test is its own client address (X-Forwarded-For, the server trusting loopback).
 */
import crypto from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROLE } from "../../../actors/chat/organization/groups.ts";
import type { RateLimitRules } from "../../../runtime/config.ts";
import { hashPassword } from "../../../runtime/secrets.ts";
import { redisKeys } from "../../../runtime/transport/redis-keys.ts";
import type { HttpRequest } from "../../../gateway/http.ts";
import { clientAddress } from "../../../gateway/rate-limiter.ts";
import { api, createUserWithRole, ENGINES, GENEROUS_RATE_LIMITS, startTestServer, type Credentials, type TestServer } from "../../support/server.ts";
import { componentValidator, HAVE_ZULIP_OPENAPI } from "../../support/openapi.ts";

const RULES: RateLimitRules = {
  apiByUser: [{ seconds: 60, calls: 5 }],
  apiByIp: [{ seconds: 60, calls: 3 }],
  authenticateByUsername: [{ seconds: 1800, calls: 2 }],
  authenticateByIp: [{ seconds: 1800, calls: 4 }],
};

/** A client address of its own for each call site (documentation range 203.0.113.0/24 and beyond). */
let nextClient = 1;
const newClient = () => ({ "x-forwarded-for": `198.51.${Math.floor(nextClient / 250)}.${(nextClient++ % 250) + 1}` });

function expectRateLimitHit(res: { status: number; headers: Headers; body: any }, limit: number) {
  expect(res.status, JSON.stringify(res.body)).toBe(429);
  expect(res.body).toMatchObject({ result: "error", code: "RATE_LIMIT_HIT", msg: "API usage exceeded rate limit" });
  expect(Number.isInteger(res.body["retry-after"])).toBe(true);
  expect(res.body["retry-after"]).toBeGreaterThanOrEqual(1);
  expect(res.headers.get("retry-after")).toBe(String(res.body["retry-after"]));
  expect(res.headers.get("x-ratelimit-limit")).toBe(String(limit));
  expect(res.headers.get("x-ratelimit-remaining")).toBe("0");
  if (HAVE_ZULIP_OPENAPI) expect(componentValidator("RateLimitedError")(res.body)).toEqual([]);
}

describe.each(ENGINES)("chat API rate limits on %s", (engine) => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer(engine, { rateLimits: RULES, trustedProxies: ["loopback"] });
  });
  afterAll(async () => server?.close());

  const member = async (): Promise<Credentials & { id: number }> => createUserWithRole(server, `m-${crypto.randomUUID().slice(0, 8)}@example.com`, ROLE.member);
  const withPassword = async (password: string) => {
    const user = await member();
    await server.node.store.db.updateTable("users").set({ password_hash: await hashPassword(password) }).where("id", "=", user.id).execute();
    return user;
  };

  it("limits each user's requests, with X-RateLimit-* headers, and not another user's", async () => {
    const alice = await member();
    const bob = await member();
    const before = Math.floor(Date.now() / 1000);
    for (let i = 0; i < 5; i++) {
      const res = await api(server, "GET", "/users/me", { as: alice, headers: newClient() });
      expect(res.status).toBe(200);
      expect(res.headers.get("x-ratelimit-limit")).toBe("5");
      expect(res.headers.get("x-ratelimit-remaining")).toBe(String(4 - i));
      const reset = Number(res.headers.get("x-ratelimit-reset"));
      expect(reset).toBeGreaterThanOrEqual(before);
      expect(reset).toBeLessThanOrEqual(Math.ceil(Date.now() / 1000) + 60); // the window's end, a minute at most
    }
    expectRateLimitHit(await api(server, "GET", "/users/me", { as: alice, headers: newClient() }), 5);
    expectRateLimitHit(await api(server, "POST", "/messages", { as: alice, params: { type: "private", to: [bob.id], content: "hi" } }), 5);
    expect((await api(server, "GET", "/users/me", { as: bob })).status).toBe(200);
  });

  it("does not count long-polls", async () => {
    const carol = await member();
    const registered = await api(server, "POST", "/register", { as: carol, params: { event_types: ["message"] } });
    for (let i = 0; i < 6; i++) {
      const polled = await api(server, "GET", "/events", { as: carol, params: { queue_id: registered.body.queue_id, last_event_id: -1, dont_block: true } });
      expect(polled.status).toBe(200);
    }
    expect((await api(server, "GET", "/users/me", { as: carol })).status).toBe(200);
  });

  it("limits unauthenticated requests per client address", async () => {
    const client = newClient();
    for (let i = 0; i < 3; i++) expect((await api(server, "GET", "/server_settings", { headers: client })).status).toBe(200);
    expectRateLimitHit(await api(server, "GET", "/server_settings", { headers: client }), 3);
    expect((await api(server, "GET", "/server_settings", { headers: newClient() })).status).toBe(200);
  });

  it("locks an account's password logins after repeated failures, even with the right password", async () => {
    const dave = await withPassword("right-password");
    const login = (password: string) => api(server, "POST", "/fetch_api_key", { params: { username: dave.email, password }, headers: newClient() });
    expect((await login("wrong-1")).status).toBe(401);
    expect((await login("wrong-2")).status).toBe(401);
    expectRateLimitHit(await login("wrong-3"), 2);
    expectRateLimitHit(await login("right-password"), 2);
    // The account is locked, not the addresses: another account logs in from the same address.
    const erin = await withPassword("erin-password");
    expect((await api(server, "POST", "/fetch_api_key", { params: { username: erin.email, password: "erin-password" }, headers: newClient() })).status).toBe(200);
  });

  it("limits failed authentications per address and per account; a right API key still works", async () => {
    const frank = await member();
    const client = newClient();
    const stranger = () => ({ email: `${crypto.randomUUID()}@example.com`, key: "x" });
    for (let i = 0; i < 4; i++) expect((await api(server, "GET", "/users/me", { as: stranger(), headers: client })).status).toBe(401);
    expectRateLimitHit(await api(server, "GET", "/users/me", { as: stranger(), headers: client }), 4);
    expect((await api(server, "GET", "/users/me", { as: frank, headers: client })).status).toBe(200);

    const wrong = { email: frank.email, key: "not-the-key" };
    for (let i = 0; i < 2; i++) expect((await api(server, "GET", "/users/me", { as: wrong, headers: newClient() })).status).toBe(401);
    expectRateLimitHit(await api(server, "GET", "/users/me", { as: wrong, headers: newClient() }), 2);
    expect((await api(server, "GET", "/users/me", { as: frank, headers: newClient() })).status).toBe(200);
    // Wrong API keys do not lock the account's password logins.
    const frankPassword = "frank-password";
    await server.node.store.db.updateTable("users").set({ password_hash: await hashPassword(frankPassword) }).where("id", "=", frank.id).execute();
    expect((await api(server, "POST", "/fetch_api_key", { params: { username: frank.email, password: frankPassword }, headers: newClient() })).status).toBe(200);
  });

  it.runIf(engine === "redis+postgres")("counts in Redis, so every worker shares the limits", async () => {
    const redis = new Redis(server.node.config.redisUrl!, { protocol: 2 });
    try {
      expect((await redis.keys(`${redisKeys(server.node.config.redisPrefix).rateLimit("5:60")}:api_by_user:*`)).length).toBeGreaterThan(0);
    } finally {
      redis.disconnect();
    }
  });
});

describe("the client's address", () => {
  const request = (remoteAddress: string, forwarded?: string) => ({ remoteAddress, headers: forwarded ? { "x-forwarded-for": forwarded } : {} }) as unknown as HttpRequest;

  it("is the socket's unless the socket is a trusted proxy", () => {
    expect(clientAddress(request("127.0.0.1", "203.0.113.9"), { trustedProxies: [] })).toBe("127.0.0.1");
    expect(clientAddress(request("127.0.0.1", "203.0.113.9"), { trustedProxies: ["loopback"] })).toBe("203.0.113.9");
    expect(clientAddress(request("192.0.2.7", "203.0.113.9"), { trustedProxies: ["loopback"] })).toBe("192.0.2.7");
    // A client's own X-Forwarded-For entries before the proxies' are not believed: the rightmost untrusted hop counts.
    expect(clientAddress(request("10.0.0.2", "1.2.3.4, 203.0.113.9, 10.0.0.1"), { trustedProxies: ["10.0.0.0/8"] })).toBe("203.0.113.9");
    expect(clientAddress(request("127.0.0.1", "not an address"), { trustedProxies: ["loopback"] })).toBe("127.0.0.1");
  });

  it("test support's generous limits are far above any test's traffic", () => {
    expect(GENEROUS_RATE_LIMITS.apiByUser[0]!.calls).toBeGreaterThanOrEqual(100_000);
  });
});
