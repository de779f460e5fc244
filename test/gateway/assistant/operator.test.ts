/**
 * The operator console through a real server on both engines: login (cookie + CSRF), API keys, agents, versions,
 * publish / rollback rules, and the runtime manifest (deterministic, with an ETag).
 */
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createUser, ENGINES, type TestServer } from "../../support/server.ts";
import { startOperatorServer } from "../../support/operator.ts";
import { call, createAgent, createVersion, HANDBOOK, OWNER_PASSWORD } from "./support.ts";
import { Agent, type CreateAgent } from "../../../actors/assistant/agent.protocol.ts";

describe.each(ENGINES)("assistant operator endpoints on %s", (engine) => {
  let server: TestServer;
  let key: string;

  beforeAll(async () => void ({ server, key } = await startOperatorServer(engine)));
  afterAll(async () => server?.close());

  describe("authentication", () => {
    it("answers 401 with the assistant's envelope without a cookie or key", async () => {
      for (const [method, path] of [
        ["POST", "/api/internal/rag/agents"],
        ["POST", "/api/internal/rag/publish"],
        ["GET", "/api/internal/rag/runtime-manifest?agent_id=00000000-0000-0000-0000-000000000000"],
        ["GET", "/chat/agents"],
        ["POST", "/api/internal/api-keys"],
      ] as const) {
        const res = await call(server, method, path, method === "POST" ? { body: {} } : {});
        expect(res.status, path).toBe(401);
        expect(res.body).toEqual({ error: { code: "UNAUTHORIZED", message: expect.any(String) } });
      }
      const wrong = await call(server, "GET", "/chat/agents", { key: "chorus_not-a-key" });
      expect(wrong.status).toBe(401);
      const basic = await call(server, "GET", "/chat/agents", { headers: { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` } });
      expect(basic.status).toBe(401);
    });

    it("logs in with the password, sets an HttpOnly SameSite cookie, and demands the CSRF token for writes", async () => {
      const bad = await call(server, "POST", "/api/internal/auth/login", { body: { email: server.owner.email, password: "wrong" } });
      expect(bad.status).toBe(401);
      expect(bad.headers.get("set-cookie")).toBeNull();
      const login = await call(server, "POST", "/api/internal/auth/login", { body: { email: server.owner.email, password: OWNER_PASSWORD } });
      expect(login.status).toBe(200);
      const setCookie = login.headers.get("set-cookie")!;
      expect(setCookie).toMatch(/^chorus_console=[\w-]{20,};/);
      expect(setCookie).toMatch(/HttpOnly/);
      expect(setCookie).toMatch(/SameSite=Strict/);
      expect(login.body.csrf_token).toMatch(/^[\w-]{20,}$/);
      const cookie = setCookie.split(";")[0]!;

      const read = await call(server, "GET", "/chat/agents", { headers: { cookie } });
      expect(read.status).toBe(200);
      const noCsrf = await call(server, "POST", "/api/internal/rag/agents", { body: { name: "x" }, headers: { cookie } });
      expect(noCsrf.status).toBe(403);
      expect(noCsrf.body.error.code).toBe("CSRF_FAILED");
      const wrongCsrf = await call(server, "POST", "/api/internal/rag/agents", { body: { name: "x" }, headers: { cookie, "x-csrf-token": "nope" } });
      expect(wrongCsrf.status).toBe(403);
      const ok = await call(server, "POST", "/api/internal/rag/agents", { body: { name: "x" }, headers: { cookie, "x-csrf-token": login.body.csrf_token } });
      expect(ok.status).toBe(201);
      const forged = await call(server, "GET", "/chat/agents", { headers: { cookie: "chorus_console=forged-token-value" } });
      expect(forged.status).toBe(401);
    });

    it("refuses the console to members, who are not operators", async () => {
      const member = await createUser(server, `member-${engine.length}@example.com`);
      const res = await call(server, "POST", "/api/internal/auth/login", { body: { email: member.email, password: "pw-" + member.email } });
      expect(res.status).toBe(403);
      expect(res.body.error.code).toBe("NOT_AN_OPERATOR");
    });

    it("stores API keys hashed: the key itself is nowhere in the database", async () => {
      const rows = await server.node.store.db.selectFrom("operator_api_keys").select("key_hash").execute();
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.map((r) => r.key_hash)).not.toContain(key);
      expect(JSON.stringify(rows)).not.toContain(key.slice(7));
    });
  });

  describe("agents, versions, publish, rollback, manifest", () => {
    it("creates an agent with a public key and a secret, and validates the body", async () => {
      const agent = await createAgent(server, key, { allowed_origins: ["example.com"], rate_limit_per_minute: 30 });
      expect(agent.agent_id).toMatch(/^[0-9a-f-]{36}$/);
      expect(agent.agent_key).toMatch(/^ak_/);
      expect(agent.secret).toMatch(/^[0-9a-f]{64}$/);
      const row = await server.node.store.db.selectFrom("assistant_agents").selectAll().where("id", "=", agent.agent_id).executeTakeFirstOrThrow();
      expect(JSON.stringify(row)).not.toContain(agent.secret);

      for (const body of [{}, { name: "" }, { name: "x", rate_limit_per_minute: 0 }, { name: "x", allowed_origins: ["not a host"] }]) {
        const res = await call(server, "POST", "/api/internal/rag/agents", { key, body });
        expect(res.status, JSON.stringify(body)).toBe(400);
        expect(res.body.error.code).toBe("VALIDATION_ERROR");
      }
      const notJson = await call(server, "POST", "/api/internal/rag/agents", { key, raw: "{nope", headers: { "content-type": "application/json" } });
      expect(notJson.status).toBe(400);
      expect(notJson.body.error.code).toBe("INVALID_JSON");
      const form = await call(server, "POST", "/api/internal/rag/agents", { key, raw: "name=x", headers: { "content-type": "application/x-www-form-urlencoded" } });
      expect(form.status).toBe(415);
    });

    it("answers a redelivered create with the same agent and secrets", async () => {
      const id = crypto.randomUUID();
      const create: CreateAgent = { op: "create", realmId: 1, name: "Twice", allowedOrigins: [], rateLimitPerMinute: 5, mobileWebhookUrl: null };
      const once = await server.node.system.ref(Agent, id).ask(create);
      const twice = await server.node.system.ref(Agent, id).ask(create);
      expect(twice).toEqual(once);
      const rows = await server.node.store.db.selectFrom("assistant_agents").select("id").where("id", "=", id).execute();
      expect(rows).toHaveLength(1);
    });

    it("publishes versions, refuses repeats and strangers, and rolls back one step per call", async () => {
      const agent = await createAgent(server, key);
      const other = await createAgent(server, key);
      const v1 = await createVersion(server, key, agent.agent_id);
      const v2 = await createVersion(server, key, agent.agent_id, [{ title: "Only", text: "Version two." }]);
      const foreign = await createVersion(server, key, other.agent_id);
      const publish = (version_id: string, agent_id = agent.agent_id) => call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id, version_id } });
      const rollback = () => call(server, "POST", "/api/internal/rag/rollback", { key, body: { agent_id: agent.agent_id } });

      expect((await rollback()).status).toBe(409);
      expect((await publish(foreign)).status).toBe(404);
      expect((await publish("00000000-0000-4000-8000-000000000000")).status).toBe(404);
      expect((await publish(v1, "00000000-0000-4000-8000-000000000000")).status).toBe(404);
      expect((await publish("not-a-uuid")).status).toBe(400);
      const first = await publish(v1);
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ agent_id: agent.agent_id, version_id: v1 });
      const again = await publish(v1);
      expect(again.status).toBe(409);
      expect(again.body.error.code).toBe("CONFLICT");
      expect((await publish(v2)).status).toBe(200);

      const manifest = await call(server, "GET", `/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { key });
      expect(manifest.status).toBe(200);
      expect(manifest.body).toMatchObject({ agent_id: agent.agent_id, version_id: v2 });

      const back = await rollback();
      expect(back.status).toBe(200);
      expect(back.body.version_id).toBe(v1);
      const after = await call(server, "GET", `/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { key });
      expect(after.body.version_id).toBe(v1);
      expect((await rollback()).status).toBe(409);
    });

    it("serves the manifest as deterministic JSON with an ETag and 304 on If-None-Match", async () => {
      const agent = await createAgent(server, key);
      const unpublished = await call(server, "GET", `/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`, { key });
      expect(unpublished.status).toBe(404);
      const v = await createVersion(server, key, agent.agent_id, HANDBOOK, { instructions: "Be brief.", settings: { b: 1, a: { d: 2, c: 3 } } });
      await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: v } });
      const url = `${server.url}/api/internal/rag/runtime-manifest?agent_id=${agent.agent_id}`;
      const one = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
      const text = await one.text();
      const etag = one.headers.get("etag")!;
      expect(etag).toMatch(/^"[\w-]+"$/);
      const parsed = JSON.parse(text);
      expect(parsed).toMatchObject({ agent_id: agent.agent_id, version_id: v, instructions: "Be brief.", settings: { a: { c: 3, d: 2 }, b: 1 } });
      expect(parsed.knowledge.documents.map((d: any) => d.title)).toEqual(HANDBOOK.map((d) => d.title));
      expect(text).toContain('"settings":{"a":{"c":3,"d":2},"b":1}'); // keys sorted at every level
      expect(Object.keys(parsed)).toEqual([...Object.keys(parsed)].sort());
      expect(text).not.toContain("secret");

      const two = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
      expect(await two.text()).toBe(text);
      expect(two.headers.get("etag")).toBe(etag);
      const cached = await fetch(url, { headers: { authorization: `Bearer ${key}`, "if-none-match": etag } });
      expect(cached.status).toBe(304);
      const missing = await call(server, "GET", "/api/internal/rag/runtime-manifest", { key });
      expect(missing.status).toBe(400);
    });

    it("answers 404 in the assistant's envelope for unknown paths and agents", async () => {
      const res = await call(server, "GET", "/nothing/here");
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe("NOT_FOUND");
      const versions = await call(server, "POST", "/api/internal/rag/agents/00000000-0000-4000-8000-000000000000/versions", { key, body: { documents: [] } });
      expect(versions.status).toBe(404);
      const method = await call(server, "DELETE", "/api/internal/rag/publish", { key });
      expect(method.status).toBe(405);
    });
  });

  describe("password guessing", () => {
    it("throttles logins per client address with 429 and Retry-After (runs last: it uses up the budget)", async () => {
      const statuses: number[] = [];
      for (let i = 0; i < 11; i++) {
        statuses.push((await call(server, "POST", "/api/internal/auth/login", { body: { email: "nobody@example.com", password: `guess-${i}` } })).status);
      }
      expect(statuses.slice(0, 5)).toEqual([401, 401, 401, 401, 401]);
      const refused = await call(server, "POST", "/api/internal/auth/login", { body: { email: server.owner.email, password: OWNER_PASSWORD } });
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
      // API keys are unaffected
      expect((await call(server, "GET", "/chat/agents", { key })).status).toBe(200);
    });
  });
});
