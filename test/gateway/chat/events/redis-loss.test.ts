/**
 * Event queues when Redis loses its data (FLUSHALL, or a restart without persistence): deliveries still waiting in
 * the lost streams reach no one, so a queue kept as it was could miss a message without a word. Instead every queue
 * of the deployment is refused with BAD_EVENT_QUEUE_ID once the node notices, and its client registers again (what
 * Zulip's clients do); queues registered after that work as ever.
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { deleteRedisKeys } from "../../../../runtime/transport/redis-connection.ts";
import { api, startTestServer, type TestServer } from "../../../support/server.ts";
import { REDIS_URL } from "../../../support/services.ts";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer("redis+postgres");
});
afterAll(async () => server?.close());

const register = async () => (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id as string;
const poll = (queueId: string, lastEventId: number, dontBlock: boolean) =>
  api(server, "GET", "/events", { as: server.owner, params: { queue_id: queueId, last_event_id: lastEventId, dont_block: dontBlock } });
const sendToSelf = async (content: string) =>
  (await api(server, "POST", "/messages", { as: server.owner, params: { type: "private", to: JSON.stringify([server.owner.email]), content } })).body.id as number;

it("refuses the queues that existed when Redis lost its data (a parked poll and a later one), and serves new ones", async () => {
  const parkedOn = await register();
  const polledLater = await register();
  const first = await sendToSelf("before the loss");
  expect((await poll(polledLater, -1, true)).body.events.map((e: any) => e.message?.id)).toEqual([first]);
  const seen = (await poll(parkedOn, -1, true)).body.events;
  expect(seen.map((e: any) => e.message?.id)).toEqual([first]);
  const parked = poll(parkedOn, seen[0].id, false);

  await deleteRedisKeys(REDIS_URL, server.node.config.redisPrefix!);

  // The node notices within a read or two of its reply stream (blockMs): waited for, not guessed.
  const refused = await parked;
  expect(refused.status).toBe(400);
  expect(refused.body).toMatchObject({ result: "error", code: "BAD_EVENT_QUEUE_ID", queue_id: parkedOn });
  const later = await poll(polledLater, seen[0].id, true);
  expect(later.status).toBe(400);
  expect(later.body.code).toBe("BAD_EVENT_QUEUE_ID");

  const fresh = await register();
  const after = await sendToSelf("after the loss");
  expect((await poll(fresh, -1, true)).body.events.map((e: any) => e.message?.id)).toEqual([after]);
}, 30_000);
