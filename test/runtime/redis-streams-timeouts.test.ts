/**
 * Redis Streams when Redis answers later than the client's command timeout (5 s), as when Redis or this process was
 * stopped for a while. A private redis-server, since the tests pause every client of it (CLIENT PAUSE).
 * - A send to a shard held here appends and takes its entries in one script call (appendAndTake). When that call
 *   fails without an answer while the script still ran, the entries it took are pending for this node: they must
 *   still be handed over, and before the entries sent after them (the contract's order).
 * - A reply that times out is reported and dropped; `reply` still resolves (Transport.reply never rejects: its
 *   callers do not wait for a reply's fate, and a rejection nobody handles ends the process).
 */
import { afterAll, beforeAll, expect, it } from "vitest";
import { connectRedis, type RedisClient } from "../../runtime/transport/redis-connection.ts";
import { RedisStreamsTransport } from "../../runtime/transport/redis-streams.ts";
import type { Entry } from "../../runtime/transport/transport.ts";
import { privateServicesAvailable, startPrivateRedis, type PrivateRedis } from "../support/private-services.ts";

const available = privateServicesAvailable();
let redis: PrivateRedis | undefined;
let admin: RedisClient | undefined;
let transport: RedisStreamsTransport | undefined;
let replier: RedisStreamsTransport | undefined;

beforeAll(async () => {
  if (!available) return;
  redis = await startPrivateRedis({ aof: false });
  admin = connectRedis(redis.url, "takes-admin", () => {});
}, 60_000);

afterAll(async () => {
  await transport?.close().catch(() => {});
  await replier?.close().catch(() => {});
  admin?.disconnect();
  await redis?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it.skipIf(!available)("hands over the entries of a take whose answer was lost, before the entries taken after it", async () => {
  const handed: unknown[] = [];
  // A claim of idle entries would deliver the lost ones too, but only after a minute: the test waits far less. The
  // loop's blocked read outlives the pause (its bound is twice blockMs: 8 s), as when Redis is slow enough to time
  // out a command (5 s) but not the loop's read: were the loop to fail too, its own recovery (a claim of everything
  // pending) would restore the order by itself.
  transport = new RedisStreamsTransport({ url: redis!.url, prefix: "takes", blockMs: 4_000, claimIdleMs: 60_000 });
  await transport.start({ onEntry: async (_shard: number, entry: Entry) => void handed.push(entry.body), onReply: () => {}, onLost: () => {} });
  await transport.acquire(0);
  await transport.send(0, { targets: ["channel:1"], body: "before" });

  // Redis answers nothing for 6.5 s: the first take's call times out on the client (5 s) but runs when the pause ends;
  // the second, sent just before that timeout, is answered, with the first's entry as the one it comes after.
  await admin!.call("CLIENT", "PAUSE", "6500", "ALL");
  const first = transport.send(0, { targets: ["channel:1"], body: "first" }).then(
    () => "answered",
    (err: Error) => err.message,
  );
  await sleep(4_500);
  const second = transport.send(0, { targets: ["channel:1"], body: "second" });
  expect(await first).toMatch(/timed out/i);
  await second;

  // At least once, in order: the pause also failed the acknowledgement of "before", which may come again.
  const deadline = Date.now() + 5_000;
  while (!handed.includes("second") && Date.now() < deadline) await sleep(20);
  await sleep(200);
  expect([...new Set(handed)]).toEqual(["before", "first", "second"]);
}, 30_000);

it.skipIf(!available)("reports and drops a reply Redis does not answer in time, and the reply resolves", async () => {
  const reported: string[] = [];
  replier = new RedisStreamsTransport({ url: redis!.url, prefix: "replies", onError: (err, where) => reported.push(`${where}: ${(err as Error).message}`) });
  await replier.start({ onEntry: async () => {}, onReply: () => {}, onLost: () => {} });
  await admin!.call("CLIENT", "PAUSE", "6000", "ALL");
  const outcome = await replier.reply({ node: "asker", corr: "c1" }, { corr: "c1", value: 1 }).then(
    () => "resolved",
    (err: Error) => `rejected: ${err.message}`,
  );
  expect(outcome).toBe("resolved");
  expect(reported.filter((r) => r.includes("replies to asker"))).toEqual([expect.stringMatching(/timed out/i)]);
}, 30_000);
