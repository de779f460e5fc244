/**
 * Bad input never answers 500, on either face and engine: a NUL character anywhere a string is read (the path, the
 * query, a JSON body, a Zulip parameter's JSON, HTTP Basic credentials) is a 400 (401 for credentials) in the face's
 * envelope, and a URL past the limit is a 414 answer, not a dropped connection.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_URL_BYTES } from "../../gateway/http.ts";
import { api, ENGINES, type TestServer } from "../support/server.ts";
import { startOperatorServer } from "../support/operator.ts";
import { call, createAgent } from "./assistant/support.ts";

describe.each(ENGINES)("bad input on %s", (engine) => {
  let server: TestServer;
  let key: string;

  beforeAll(async () => void ({ server, key } = await startOperatorServer(engine)));
  afterAll(async () => server?.close());

  const assistantError = (res: { status: number; body: any }, status: number) => {
    expect(res.status, JSON.stringify(res.body)).toBe(status);
    expect(res.body.error.message).toMatch(/NULL \(0x00\)/);
  };

  it("refuses a NUL in the path of either face", async () => {
    assistantError(await call(server, "OPTIONS", "/api/embed/%00"), 400);
    assistantError(await call(server, "POST", "/api/embed/x%00y", { body: { message: "hi" } }), 400);
    const zulip = await api(server, "GET", "/users/%00", { as: server.owner });
    expect(zulip.status).toBe(400);
    expect(zulip.body.msg).toMatch(/NULL \(0x00\)/);
  });

  it("refuses a NUL in an assistant JSON body or query string", async () => {
    assistantError(await call(server, "POST", "/api/internal/auth/login", { body: { email: "a\u0000b@example.com", password: "x" } }), 400);
    const agent = await createAgent(server, key);
    const version = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, {
      key,
      body: { documents: [{ title: "T", text: "Some text." }], instructions: "Be brief.\u0000" },
    });
    assistantError(version, 400);
    assistantError(await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, { key, body: { documents: [{ title: "T\u0000", text: "x" }] } }), 400);
    assistantError(await call(server, "GET", `/api/internal/rag/runtime-manifest?agent_id=%00`, { key }), 400);
  });

  it("refuses a NUL inside a Zulip parameter's JSON, and in Basic credentials", async () => {
    const sent = await api(server, "POST", "/messages", { as: server.owner, params: { type: "stream", to: ["gen\u0000eral"], topic: "t", content: "c" } });
    expect(sent.status).toBe(400);
    expect(sent.body.msg).toBe("to contains NULL (0x00) characters.");
    const me = await api(server, "GET", "/users/me", { as: { email: `a\u0000${server.owner.email}`, key: server.owner.key } });
    expect(me.status).toBe(401);
    expect(me.body.code).toBe("UNAUTHORIZED");
  });

  it("answers a URL over the limit with 414 in the face's envelope", async () => {
    const long = "a".repeat(MAX_URL_BYTES);
    const zulip = await api(server, "GET", `/users/me?x=${long}`, { as: server.owner });
    expect(zulip.status).toBe(414);
    expect(zulip.body).toMatchObject({ result: "error", code: "BAD_REQUEST" });
    expect(zulip.body.msg).toMatch(/URL is too long/);
    const assistant = await call(server, "GET", `/api/internal/rag/agents?x=${long}`, { key });
    expect(assistant.status).toBe(414);
    expect(assistant.body.error.message).toMatch(/URL is too long/);
    const justUnder = await api(server, "GET", `/users/me?x=${"a".repeat(MAX_URL_BYTES - 100)}`, { as: server.owner });
    expect(justUnder.status).toBe(200);
  });
});
