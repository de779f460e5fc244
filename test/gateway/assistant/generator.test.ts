/**
 * The optional generator against a local OpenAI-compatible server (a real HTTP server on 127.0.0.1 speaking
 * `/chat/completions` with `stream: true`), on both engines: grounded prompts, tokens streamed as they come over
 * SSE and socket.io, the extractive fallback when it fails before the first token, no call when nothing was
 * retrieved, and the call aborted when the client goes away.
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { EventSource } from "eventsource";
import { io } from "socket.io-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENGINES, startTestServer, type TestServer } from "../../support/server.ts";
import { call, operatorKey, publishedAgent } from "./support.ts";

const TOKENS = ["Refunds take ", "14 days", "."];

interface LlmCall {
  body: any;
  closedEarly: boolean;
  sent: number;
}

async function startFakeLlm() {
  const calls: LlmCall[] = [];
  const server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", async () => {
      const body = JSON.parse(raw);
      const record: LlmCall = { body, closedEarly: false, sent: 0 };
      calls.push(record);
      const question: string = body.messages.at(-1).content;
      if (req.url !== "/v1/chat/completions" || req.headers.authorization !== "Bearer llm-key") return res.writeHead(401).end();
      if (question.includes("fail")) return res.writeHead(500).end("boom");
      res.writeHead(200, { "content-type": "text/event-stream" });
      let finished = false;
      res.on("close", () => {
        if (!finished) record.closedEarly = true;
      });
      const tokens = question.includes("slow") ? Array.from({ length: 200 }, (_, i) => `t${i} `) : TOKENS;
      for (const token of tokens) {
        if (record.closedEarly) return;
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: token } }] })}\n\n`);
        record.sent++;
        if (question.includes("slow")) await new Promise((r) => setTimeout(r, 20));
      }
      finished = true;
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, calls, close: () => new Promise<void>((r) => server.close(() => r())) };
}

function streamEvents(url: string, body: Record<string, unknown>, stopAfter = Infinity): Promise<any[]> {
  return new Promise((resolve, reject) => {
    const events: any[] = [];
    const source = new EventSource(url, {
      fetch: (input, init) => fetch(input, { ...init, method: "POST", headers: { ...init?.headers, "content-type": "application/json" }, body: JSON.stringify({ ...body, stream: true }) }),
    });
    const timer = setTimeout(() => (source.close(), reject(new Error(`no done event: ${JSON.stringify(events)}`))), 8000);
    source.onmessage = (e) => {
      const data = JSON.parse(e.data);
      events.push(data);
      if (data.done || events.length >= stopAfter) {
        clearTimeout(timer);
        source.close();
        resolve(events);
      }
    };
    source.onerror = (e) => (clearTimeout(timer), source.close(), reject(new Error(String((e as { message?: string }).message))));
  });
}

describe.each(ENGINES)("generator on %s", (engine) => {
  let server: TestServer;
  let llm: Awaited<ReturnType<typeof startFakeLlm>>;
  let key: string;
  let agent: Awaited<ReturnType<typeof publishedAgent>>;
  const saved: Record<string, string | undefined> = {};

  beforeAll(async () => {
    llm = await startFakeLlm();
    const env = { LLM_BASE_URL: llm.url, LLM_API_KEY: "llm-key", LLM_MODEL: "test-model" };
    for (const [k, v] of Object.entries(env)) (saved[k] = process.env[k]), (process.env[k] = v);
    server = await startTestServer(engine);
    key = await operatorKey(server);
    // The words the fake generator reacts to ("fail", "slow") are not in the handbook: a lower "I don't know"
    // threshold keeps them from making the extractive fallback decline.
    agent = await publishedAgent(server, key, {}, { settings: { min_score: 0.3 } });
  });
  afterAll(async () => {
    await server?.close();
    await llm?.close();
    for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  });
  const embedUrl = () => `${server.url}/api/embed/${agent.agent_key}`;

  it("streams the generator's tokens as SSE events, grounded on the retrieved chunks, and records the answer", async () => {
    const before = llm.calls.length;
    const events = await streamEvents(embedUrl(), { question: "How long do refunds take?" });
    expect(events.slice(0, -1)).toEqual(TOKENS.map((answer) => ({ answer, done: false })));
    const done = events.at(-1);
    expect(done).toMatchObject({ answer: "", done: true, session_id: expect.any(String) });
    expect(done.sources[0]).toMatchObject({ title: "Refund policy" });
    const sent = llm.calls[before]!.body;
    expect(sent).toMatchObject({ model: "test-model", stream: true });
    expect(sent.messages[0].role).toBe("system");
    expect(sent.messages[0].content).toContain("Refunds are processed within 14 days");
    expect(sent.messages.at(-1)).toEqual({ role: "user", content: "How long do refunds take?" });
    const stored = await server.node.store.db.selectFrom("assistant_messages").select(["role", "content"]).where("session_id", "=", done.session_id).orderBy("seq").execute();
    expect(stored).toEqual([
      { role: "user", content: "How long do refunds take?" },
      { role: "assistant", content: TOKENS.join("") },
    ]);
    // the next question of the session carries its history
    const next = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "And refunds to my card?", session_id: done.session_id } });
    expect(next.body.answer).toBe(TOKENS.join(""));
    expect(llm.calls.at(-1)!.body.messages.slice(1, 3)).toEqual([
      { role: "user", content: "How long do refunds take?" },
      { role: "assistant", content: TOKENS.join("") },
    ]);
  });

  it("falls back to the extractive answer when the generator fails before its first token", async () => {
    const res = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "fail: how long do refunds take?" } });
    expect(res.status).toBe(200);
    expect(res.body.answer).toContain("Refunds are processed within 14 days");
  });

  it("does not call the generator when nothing relevant was retrieved", async () => {
    const before = llm.calls.length;
    const res = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: "What is the airspeed of a swallow?" } });
    expect(res.body.answer).toMatch(/don't know/);
    expect(llm.calls.length).toBe(before);
  });

  it("aborts the generator when the SSE client goes away, and records what was generated", async () => {
    const before = llm.calls.length;
    const events = await streamEvents(embedUrl(), { question: "slow: how long do refunds take?" }, 3);
    expect(events.every((e) => !e.done)).toBe(true);
    const deadline = Date.now() + 3000;
    while (!llm.calls[before]?.closedEarly && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(llm.calls[before]!.closedEarly).toBe(true);
    expect(llm.calls[before]!.sent).toBeLessThan(200);
    let partial: { content: string } | undefined;
    while (!partial && Date.now() < deadline + 3000) {
      partial = await server.node.store.db.selectFrom("assistant_messages").select("content").where("content", "like", "t0 t1 t2%").executeTakeFirst();
      if (!partial) await new Promise((r) => setTimeout(r, 20));
    }
    expect(partial!.content.split(" ").filter(Boolean).length).toBeLessThan(200);
  });

  it("streams the generator's tokens to the session's sockets for mobile messages", async () => {
    const created = await call(server, "POST", "/chat/sessions", { key, body: { agent_id: agent.agent_id } });
    const socket = io(server.url, { transports: ["websocket"], auth: { token: key }, reconnection: false, forceNew: true });
    try {
      await new Promise((resolve, reject) => (socket.once("connect", () => resolve(undefined)), socket.once("connect_error", reject)));
      await socket.timeout(3000).emitWithAck("join-conversation", { session_id: created.body.session_id });
      const deltas: any[] = [];
      socket.on("message-streaming", (d) => deltas.push(d));
      const complete = new Promise<any>((resolve) => socket.once("message-complete", resolve));
      const sent = await call(server, "POST", "/chat/message", { key, body: { session_id: created.body.session_id, content: "How long do refunds take?" } });
      expect(sent.body.reply.content).toBe(TOKENS.join(""));
      const done = await complete;
      expect(done.content).toBe(TOKENS.join(""));
      expect(deltas.map((d) => d.delta)).toEqual(TOKENS);
      expect(deltas.map((d) => d.seq)).toEqual([1, 2, 3]);
      expect(deltas[0].message_id).toBe(sent.body.reply.id);
    } finally {
      socket.close();
    }
  });
});
