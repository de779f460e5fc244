/**
 * A send's answer is true, and a retry is safe, through a real server on both engines: a resend with the same
 * `Idempotency-Key` header, or the same `queue_id` + `local_id`, answers the first message's id and stores nothing
 * more; a send whose ask times out is answered with its id when it committed after all, and with NOT_SENT (503,
 * Retry-After) when it did not, in which case it never commits later; a committed message whose fan-out fails is
 * delivered all the same. The slow store is the node's own message log, held back for the test (the ask timeout is
 * short); the failing fan-out, the node's own broadcast failing as it does while Redis cannot be reached.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type Credentials, type TestServer } from "../../../support/server.ts";
import type { MessageLog } from "../../../../actors/chat/message-log.ts";

const ASK_TIMEOUT_MS = 1_500;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(ENGINES)("sends on %s", (engine) => {
  let server: TestServer;
  let owner: Credentials;
  let alice: Credentials;

  beforeAll(async () => {
    server = await startTestServer(engine, { askTimeoutMs: ASK_TIMEOUT_MS });
    owner = server.owner;
    alice = await createUser(server, "alice@example.com");
    for (const who of [owner, alice]) {
      const sub = await api(server, "POST", "/users/me/subscriptions", { as: who, params: { subscriptions: [{ name: "retries" }] } });
      expect(sub.status).toBe(200);
    }
  }, 60_000);

  afterAll(async () => {
    await server?.close();
  });

  const send = (as: Credentials, content: string, params: Record<string, unknown> = {}, headers?: Record<string, string>) =>
    api(server, "POST", "/messages", { as, params: { type: "stream", to: "retries", topic: "t", content, ...params }, headers });

  async function storedWith(content: string): Promise<number[]> {
    const rows = await server.node.store.db.selectFrom("messages").select("id").where("content", "=", content).execute();
    return rows.map((r) => Number(r.id));
  }

  /** Hold the node's message appends back: `beforeCommit` ms before they start, `afterCommit` ms before they answer. */
  function slowStore(delays: { beforeCommit?: number; afterCommit?: number }): () => void {
    const log = server.node.messageLog as MessageLog & { appendMessage: MessageLog["appendMessage"] };
    const original = log.appendMessage;
    log.appendMessage = async (...args) => {
      await sleep(delays.beforeCommit ?? 0);
      const id = await original.apply(log, args);
      await sleep(delays.afterCommit ?? 0);
      return id;
    };
    return () => void (log.appendMessage = original);
  }

  /** The node's message fan-outs fail `times` times first, as a broadcast does while the transport cannot reach Redis. */
  function failingFanOuts(times: number): () => void {
    const system = server.node.system;
    const original = system.broadcast;
    let left = times;
    system.broadcast = (async (...args: Parameters<typeof original>) => {
      if (args[2].op === "deliverMessage" && left-- > 0) {
        throw Object.assign(new Error("Reached the max retries per request limit (which is 3). Refer to \"maxRetriesPerRequest\""), { name: "MaxRetriesPerRequestError" });
      }
      return original.apply(system, args);
    }) as typeof original;
    return () => void (system.broadcast = original);
  }

  it("delivers a committed message whose fan-out failed to the queues (tried again), and answers its id", async () => {
    const queue = await api(server, "POST", "/register", { as: owner, params: { event_types: ["message"] } });
    const restore = failingFanOuts(2);
    let res;
    try {
      res = await send(owner, "fanned out again", {}, { "idempotency-key": "fan-out-retry" });
    } finally {
      restore();
    }
    expect(res.status).toBe(200);
    expect(await storedWith("fanned out again")).toEqual([res.body.id]);
    const polled = await api(server, "GET", "/events", { as: owner, params: { queue_id: queue.body.queue_id, last_event_id: -1 } });
    expect(polled.body.events.map((e: any) => e.message?.id)).toEqual([res.body.id]);
  });

  it("answers a resend with the same queue_id and local_id with the first id, and stores the message once", async () => {
    const queue = await api(server, "POST", "/register", { as: owner, params: { event_types: ["message"] } });
    const local = { queue_id: queue.body.queue_id, local_id: "101.01" };
    const first = await send(owner, "local once", local);
    const again = await send(owner, "local once", local);
    expect(first.status).toBe(200);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(first.body.id);
    expect(await storedWith("local once")).toEqual([first.body.id]);
    // Another local_id is another message.
    const other = await send(owner, "local once", { ...local, local_id: "102.01" });
    expect(other.body.id).not.toBe(first.body.id);
  });

  it("answers concurrent resends with the same Idempotency-Key with one id; the key is the sender's own", async () => {
    const key = { "idempotency-key": "3f1c0d4e-retry" };
    const answers = await Promise.all([1, 2, 3].map(() => send(owner, "keyed once", {}, key)));
    const ids = new Set(answers.map((a) => a.body.id));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(ids.size).toBe(1);
    expect(await storedWith("keyed once")).toEqual([...ids]);
    const direct = await api(server, "POST", "/messages", { as: owner, params: { type: "direct", to: JSON.stringify([alice.email]), content: "keyed dm" }, headers: key });
    // The key names one message of the sender: reused for another conversation, the send is refused, not stored.
    expect(direct.status).toBe(422);
    expect(direct.body).toMatchObject({ result: "error", code: "IDEMPOTENCY_KEY_REUSED" });
    expect(await storedWith("keyed dm")).toEqual([]);
    // Alice's key of the same text is hers.
    const hers = await send(alice, "keyed once", {}, key);
    expect(hers.status).toBe(200);
    expect(hers.body.id).not.toBe(answers[0]!.body.id);
  });

  it("refuses an Idempotency-Key that is empty or too long", async () => {
    for (const bad of [" ", "k".repeat(256)]) {
      const res = await send(owner, "bad key", {}, { "idempotency-key": bad });
      expect(res.status).toBe(400);
      expect(res.body.code).toBe("BAD_REQUEST");
    }
    expect(await storedWith("bad key")).toEqual([]);
  });

  it("answers a send that committed after its ask timed out with its id, not an error", async () => {
    const restore = slowStore({ afterCommit: ASK_TIMEOUT_MS + 500 });
    try {
      const res = await send(owner, "committed late", {}, { "idempotency-key": "late-commit" });
      expect(res.status).toBe(200);
      expect(await storedWith("committed late")).toEqual([res.body.id]);
    } finally {
      restore();
    }
  });

  it("answers a send that had not committed when its ask timed out with NOT_SENT and Retry-After; it never commits; a retry stores it once", async () => {
    const restore = slowStore({ beforeCommit: ASK_TIMEOUT_MS + 500 });
    let answered;
    try {
      answered = await send(owner, "not committed", {}, { "idempotency-key": "never-late" });
      await sleep(1_500); // past the held-back append, which the store then refuses
    } finally {
      restore();
    }
    expect(answered.status).toBe(503);
    expect(answered.body).toMatchObject({ result: "error", code: "NOT_SENT" });
    expect(answered.body.msg).toMatch(/not sent/);
    expect(Number(answered.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(await storedWith("not committed")).toEqual([]);
    const retry = await send(owner, "not committed", {}, { "idempotency-key": "never-late" });
    expect(retry.status).toBe(200);
    expect(await storedWith("not committed")).toEqual([retry.body.id]);
  });
});
