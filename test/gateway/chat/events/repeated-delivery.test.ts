/**
 * A delivery made again (a redelivery of an owed fan-out: after a crash, one whose ask timed out is asked again)
 * reaches a queue that already has the message. The queue drops the repeat, and the repeat must not let the
 * message's record of its owed fan-out go before the first delivery's event row is written: until then a crash
 * would lose the event (actors/chat/users/user.ts, holdForRowsInFlight). Through a real server on Redis Streams and
 * Postgres, with the rows written behind for a few seconds so that the repeat lands while the first row waits.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { Channel } from "../../../../actors/chat/conversations/channel.protocol.ts";
import { api, startTestServer, type TestServer } from "../../../support/server.ts";

const EVENT_WRITE_DELAY_MS = 4_000;
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer("redis+postgres", { eventWriteDelayMs: EVENT_WRITE_DELAY_MS });
}, 60_000);
afterAll(async () => {
  await server?.close();
});

/** The message's owed-fan-out record and the event rows written for it, read together. */
async function recordAndRows(messageId: number): Promise<{ owed: number; rows: number }> {
  const db = server.node.store.db;
  const owed = await db.selectFrom("pending_fan_outs").select(db.fn.countAll<string>().as("n")).where("message_id", "=", messageId).executeTakeFirstOrThrow();
  const rows = await db.selectFrom("user_events").select(db.fn.countAll<string>().as("n")).executeTakeFirstOrThrow();
  return { owed: Number(owed.n), rows: Number(rows.n) };
}

it("keeps a message's owed fan-out while the event row of its first delivery waits, when the delivery is made again", async () => {
  const owner = server.owner;
  expect((await api(server, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "again" }] } })).status).toBe(200);
  const queue = await api(server, "POST", "/register", { as: owner, params: { event_types: ["message"] } });
  expect(queue.status).toBe(200);
  const sent = await api(server, "POST", "/messages", { as: owner, params: { type: "stream", to: "again", topic: "t", content: "once" } });
  expect(sent.status).toBe(200);
  const messageId = sent.body.id as number;
  expect(await recordAndRows(messageId)).toEqual({ owed: 1, rows: 0 });

  const streamId = (await api(server, "GET", "/get_stream_id", { as: owner, params: { stream: "again" } })).body.stream_id as number;
  await server.node.system.ref(Channel, streamId).ask({ op: "redeliver", messageIds: [messageId] });
  // The repeat landed while the first delivery's row still waited: otherwise this test would prove nothing.
  expect((await recordAndRows(messageId)).rows).toBe(0);

  // The record stays until the row is written (it is read first: a record gone implies a row written by then).
  let state = await recordAndRows(messageId);
  for (const until = Date.now() + EVENT_WRITE_DELAY_MS + 10_000; state.owed === 1 && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 50));
    state = await recordAndRows(messageId);
  }
  expect(state.rows, "the owed fan-out went before its event row was written").toBe(1);
  expect(state.owed).toBe(0);

  // The queue holds the message once.
  const polled = await api(server, "GET", "/events", { as: owner, params: { queue_id: queue.body.queue_id, last_event_id: -1, dont_block: true } });
  expect(polled.body.events.map((e: { message?: { id: number } }) => e.message?.id)).toEqual([messageId]);
}, 60_000);
