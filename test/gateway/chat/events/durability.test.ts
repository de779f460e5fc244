/**
 * Event queues outlive their worker: with Redis Streams and Postgres, every worker is killed (SIGKILL) while a
 * queue holds unacknowledged events; once the workers are back the same queue answers with the same events,
 * under the same ids, and goes on receiving.
 *
 * Events are written behind their delivery (actors/chat/users/user.ts): the crash tests that need it lengthen that window
 * (EVENT_WRITE_DELAY_MS) so that the kill certainly lands while the events exist only in memory. With Redis the
 * unacknowledged deliveries reach the restarted workers again and the queue has every event; on the embedded
 * engine nothing can deliver them again, so the queue answers BAD_EVENT_QUEUE_ID instead of a gap.
 */
import fs from "node:fs";
import path from "node:path";
import pg from "pg";
import { afterAll, expect, it } from "vitest";
import { freePort, startChorus, startDistributed, workerPids } from "../../../support/process.ts";
import { REDIS_URL } from "../../../support/services.ts";
import { api, readZuliprc } from "../../../support/server.ts";

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

type Target = { url: string };

/** Rows of `table` in the deployment's database. */
async function rowsOf(url: string, table: "user_events" | "pending_fan_outs"): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(`select count(*)::int as n from ${table}`)).rows[0].n;
  } finally {
    await client.end();
  }
}
/** Events written to the users' durable streams. */
const storedEvents = (url: string) => rowsOf(url, "user_events");
/** Fan-outs recorded as owed by their message's commit and not done yet. */
const owedFanOuts = (url: string) => rowsOf(url, "pending_fan_outs");
type Owner = ReturnType<typeof readZuliprc>;

const sendTo = (target: Target, owner: Owner, channel: string) => async (content: string) => {
  const res = await api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: channel, topic: "t", content } });
  expect(res.status).toBe(200);
  return res.body.id as number;
};

/**
 * Poll until the restarted deployment answers for the queue (any answer but a connection error or a 5xx), then
 * until that answer holds `expected` events or 10 s have passed. A non-blocking poll may run before the entries
 * Redis delivers again have reached the queue (a poll does not wait behind its shard's entries: System.askTransient),
 * so the first answer can be short; a client that long-polls gets the rest as it comes. The last answer is returned
 * either way: the caller's assertions say what is missing, or what came twice.
 */
async function pollAfterRestart(target: Target, owner: Owner, queue: string, ready: () => boolean, expected: number): Promise<any> {
  const poll = () => api(target, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } }).catch(() => undefined);
  for (let i = 0; i < 150; i++) {
    await new Promise((r) => setTimeout(r, 200));
    if (!ready()) continue;
    let res = await poll();
    if (!res || res.status >= 500) continue;
    for (let waited = 0; res.status === 200 && res.body.events.length < expected && waited < 10_000; waited += 200) {
      await new Promise((r) => setTimeout(r, 200));
      res = (await poll()) ?? res;
    }
    return res;
  }
  throw new Error("the deployment did not answer for the queue after the restart");
}

/** Waits (up to 10 s) for `check` to hold: waiting on an observable fact, not on a guess. */
async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: not within 10 s`);
}

/**
 * Chorus on Redis and Postgres with two workers (short leases, so a killed worker's shards move within seconds),
 * the owner subscribed to `channel` with one queue of message events. `env` adds to the workers' environment.
 */
async function distributedQueue(channel: string, env: Record<string, string> = {}) {
  const server = await startDistributed({ LEASE_SECONDS: "2", ASK_TIMEOUT_MS: "3000", ...env }, cleanups);
  const target = { url: `http://127.0.0.1:${server.port}` };
  const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));
  await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: channel }] } });
  const queue = (await api(target, "POST", "/register", { as: owner, params: { event_types: ["message"] } })).body.queue_id as string;
  /**
   * The queue's events, as a client polls: a 503 (an ask that timed out, ASK_TIMEOUT_MS being short here, on a loaded
   * machine) is polled again, for up to 10 s; CI once had one before any kill.
   */
  const events = async (lastEventId = -1) => {
    const poll = () => api(target, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: lastEventId, dont_block: true } });
    let res = await poll();
    for (let waited = 0; res.status === 503 && waited < 10_000; waited += 200) {
      await new Promise((r) => setTimeout(r, 200));
      res = await poll();
    }
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res;
  };
  /** SIGKILL every worker, then the queue's answer from the restarted ones, once it holds `expected` events. */
  const killAndPoll = async (expected: number) => {
    const killed = workerPids(server);
    for (const pid of killed) process.kill(pid, "SIGKILL");
    return pollAfterRestart(target, owner, queue, () => workerPids(server).length >= killed.length * 2, expected);
  };
  return { server, target, owner, queue, send: sendTo(target, owner, channel), events, killAndPoll };
}

/** A connection to the deployment's database, for what the test does behind Chorus' back; closed at the end. */
async function adminClient(url: string): Promise<pg.Client> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  cleanups.push(() => admin.end());
  return admin;
}

it("restores a queue with its unacknowledged events after every worker is killed", async () => {
  const { server, target, owner, send, events, killAndPoll } = await distributedQueue("durable");
  const sent = [await send("one"), await send("two")];
  const before = await events();
  expect(before.body.events.map((e: any) => e.message.id)).toEqual(sent);
  // A queue's event rows are written just behind the poll that returns them (EVENT_WRITE_DELAY_MS): a kill inside
  // that window redelivers the event under a new id (the "repeated" case docs/chaos.md counts). This test is about
  // events already stored, so it kills once both rows are.
  await eventually("both message events stored", async () => (await storedEvents(server.databaseUrl)) >= 2);

  const after = await killAndPoll(before.body.events.length);
  expect(after.status).toBe(200);
  expect(after.body.events).toEqual(before.body.events);

  const lastId = after.body.events.at(-1).id;
  const m3 = await send("three");
  const next = await events(lastId);
  expect(next.body.events.map((e: any) => e.message.id)).toEqual([m3]);
  expect(next.body.events[0].id).toBeGreaterThan(lastId);

  const unknown = await api(target, "GET", "/events", { as: owner, params: { queue_id: "never-registered", last_event_id: -1, dont_block: true } });
  expect(unknown.body.code).toBe("BAD_EVENT_QUEUE_ID");
}, 90_000);

it("gives restored events ids above every one used before the crash, past a block of reserved ids", async () => {
  // A busy user's actor reserves its next block of event ids while the current one lasts (actors/chat/users/user.ts). Here
  // no event row is written before the crash, so the events delivered again get new ids from where the stored
  // reservation ends: it must be past every id used, also those of the block reserved in the background.
  const { server, send, events, killAndPoll } = await distributedQueue("busy", { EVENT_WRITE_DELAY_MS: "60000" });
  const total = 1600; // one and a half blocks of 1,024
  const sent: number[] = [];
  for (let i = 0; i < total; i += 40) sent.push(...(await Promise.all(Array.from({ length: Math.min(40, total - i) }, (_, k) => send(`m${i + k}`)))));
  const before = await events();
  expect(before.body.events).toHaveLength(total);
  expect(await storedEvents(server.databaseUrl)).toBe(0);
  const lastId = Math.max(...before.body.events.map((e: any) => e.id));

  const after = await killAndPoll(total);
  expect(after.status).toBe(200);
  const restored = after.body.events;
  expect(new Set(restored.map((e: any) => e.message.id))).toEqual(new Set(sent));
  expect(restored).toHaveLength(total);
  for (const e of restored) expect(e.id).toBeGreaterThan(lastId);
}, 90_000);

// On one shard the channel and its subscriber are on the same worker, and the message reaches the queue without the
// transport (System.broadcastHeld): what Redis delivers again is then the send's entry, held until the rows are.
it.each([
  { shards: 16, how: "the deliveries' entries" },
  { shards: 1, how: "the send's entry, its delivery made without the transport" },
])("gives a restored queue every event that was only in memory when the workers died, $shards shard(s) (Redis delivers $how again)", async ({ shards }) => {
  const { server, send, events, killAndPoll } = await distributedQueue("behind", { EVENT_WRITE_DELAY_MS: "5000", SHARDS: String(shards) });
  const sent = [await send("one"), await send("two"), await send("three")];
  const before = await events();
  expect(before.body.events.map((e: any) => e.message.id)).toEqual(sent);
  // Nothing of it is in the store yet: the queue holds it in memory only.
  expect(await storedEvents(server.databaseUrl)).toBe(0);

  const after = await killAndPoll(sent.length);
  expect(after.status).toBe(200);
  const ids = after.body.events.map((e: any) => e.message.id);
  expect(new Set(ids)).toEqual(new Set(sent));
  expect(ids).toHaveLength(sent.length);
  // The events' new ids are above every id handed out before the crash: a client that acknowledged those still
  // receives these.
  const lastSeen = before.body.events.at(-1).id;
  for (const e of after.body.events) expect(e.id).toBeGreaterThan(lastSeen);
}, 90_000);

/**
 * Lock the messages table in `admin`'s transaction, make `send`, and return once its commit waits on the lock: the
 * send's promise, wrapped (an async function's answer would wait for it), settled once `admin` commits.
 */
async function sendBehindLock(admin: pg.Client, send: () => Promise<unknown>): Promise<{ hung: Promise<unknown> }> {
  await admin.query("begin");
  await admin.query("lock table messages in share mode");
  const hung = send().catch(() => undefined);
  await eventually("the commit waits on the lock", async () => {
    const { rows } = await admin.query("select count(*)::int as n from pg_locks where relation = 'messages'::regclass and not granted");
    return rows[0].n > 0;
  });
  return { hung };
}

/** SIGKILL the one worker of `server`, then start another on the same stores and port. */
async function killAndStartOne(server: Awaited<ReturnType<typeof startDistributed>>, env: Record<string, string>): Promise<void> {
  process.kill(server.proc.pid!, "SIGKILL");
  await new Promise((resolve) => server.proc.once("exit", resolve));
  const next = await startChorus(
    { REDIS_URL, DATABASE_URL: server.databaseUrl, REDIS_PREFIX: server.redisPrefix, PORT: String(server.port), METRICS_PORT: String(await freePort()), LEASE_SECONDS: "2", ASK_TIMEOUT_MS: "3000", ...env },
    server.dataDir,
  );
  cleanups.push(() => next.stop());
}

// With one worker every send reaches its channel without the transport (System.askDirect): no entry of the send is
// left for Redis to deliver again. The commit's record of the owed fan-out (pending_fan_outs) is what the next
// process delivers the messages from, and the record goes once the restored events are written.
it("gives a restored queue the messages of sends that came without the transport, from their owed fan-outs", async () => {
  const env = { EVENT_WRITE_DELAY_MS: "5000", WORKERS: "1" };
  const { server, target, owner, queue, send, events } = await distributedQueue("direct", env);
  // Ten: were a redelivery to wait for its rows (a write-behind of up to 5 s here), the last would come after 45 s.
  const sent: number[] = [];
  for (let i = 0; i < 10; i++) sent.push(await send(`m${i}`));
  const before = await events();
  expect(before.body.events.map((e: any) => e.message.id)).toEqual(sent);
  expect(await storedEvents(server.databaseUrl)).toBe(0);
  expect(await owedFanOuts(server.databaseUrl)).toBe(sent.length); // the events' rows are not written yet

  await killAndStartOne(server, env);
  const after = await pollAfterRestart(target, owner, queue, () => true, sent.length);
  expect(after.status).toBe(200);
  const ids = after.body.events.map((e: any) => e.message.id);
  expect(ids).toEqual(sent);
  for (const e of after.body.events) expect(e.id).toBeGreaterThan(before.body.events.at(-1).id);
  await eventually("the owed fan-outs are done", async () => (await owedFanOuts(server.databaseUrl)) === 0);
  expect(await storedEvents(server.databaseUrl)).toBe(sent.length);
}, 90_000);

it("keeps no owed fan-out once a send's events are written", async () => {
  const { server, send, events } = await distributedQueue("done", { WORKERS: "1" });
  const sent = [await send("one"), await send("two")];
  expect((await events()).body.events.map((e: any) => e.message.id)).toEqual(sent);
  await eventually("the owed fan-outs are done", async () => (await owedFanOuts(server.databaseUrl)) === 0);
  // Nor does the process read the table again once its shards were found clean at their epochs: under load the table
  // is thousands of live records and many more dead ones. So three seconds come without a read of it, within 20 s
  // (a shard taken late is read once; Postgres reports an idle connection's reads up to 10 s late). A sweep every
  // second, as before, never leaves three.
  const admin = await adminClient(server.databaseUrl);
  const reads = async () =>
    Number((await admin.query("select seq_scan + coalesce(idx_scan, 0) as n from pg_stat_user_tables where relname = 'pending_fan_outs'")).rows[0].n);
  let quietSince = { at: Date.now(), reads: await reads() };
  for (const until = Date.now() + 20_000; Date.now() - quietSince.at < 3_000; ) {
    expect(Date.now() < until, "three seconds without a read of pending_fan_outs, within 20 s").toBe(true);
    await new Promise((r) => setTimeout(r, 250));
    const now = await reads();
    if (now !== quietSince.reads) quietSince = { at: Date.now(), reads: now };
  }
}, 60_000);

// The send's steps after its delivery (here the sender's automatic follow of a topic they start) are made again with
// the fan-out: the process died after the commit, before them.
it("follows the topic a send started for its sender when the process died between the send's commit and its answer", async () => {
  const env = { WORKERS: "1" };
  const { server, target, owner, queue } = await distributedQueue("started", env);
  const admin = await adminClient(server.databaseUrl);
  // The commit waits on a lock; the process dies meanwhile; released, the orphaned statement commits the message.
  const { hung } = await sendBehindLock(admin, () => api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: "started", topic: "fresh", content: "first" } }));
  const restarted = killAndStartOne(server, env);
  await admin.query("commit");
  await hung;
  await restarted;

  const after = await pollAfterRestart(target, owner, queue, () => true, 1);
  expect(after.body.events.map((e: any) => e.message.content)).toEqual(["first"]);
  const followed = async () => {
    const { rows } = await admin.query("select t.visibility_policy from user_topics t join users u on u.id = t.user_id where u.email = $1 and t.topic_key = 'fresh'", [owner.email]);
    return rows.map((r) => Number(r.visibility_policy));
  };
  await eventually("the sender follows the topic they started", async () => (await followed()).length > 0);
  expect(await followed()).toEqual([3]); // VISIBILITY.followed: the default automatically_follow_topics_policy, on initiation
}, 90_000);

it("delivers a message its worker stored but died before delivering (the send's entry is left to the next holder)", async () => {
  const { server, target, owner, send, killAndPoll } = await distributedQueue("stored");
  const admin = await adminClient(server.databaseUrl);
  const stored = async (content: string) =>
    (await admin.query("select id from messages where content = $1", [content])).rows.map((r) => Number(r.id));
  const first = await send("one");

  // The commit of the next message waits on a lock: its turn has long ended (and its entry would have been
  // acknowledged) when the workers are killed. Released afterwards, the orphaned statement commits the message.
  const { hung } = await sendBehindLock(admin, () => api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: "stored", topic: "t", content: "two" } }));
  await new Promise((r) => setTimeout(r, 300));
  const restarted = killAndPoll(2);
  await admin.query("commit");
  await eventually("the orphaned commit lands", async () => (await stored("two")).length === 1);
  await hung;

  const after = await restarted;
  expect(after.status).toBe(200);
  const [second] = await stored("two");
  expect(after.body.events.map((e: any) => e.message.id)).toEqual([first, second]);
  expect(await stored("two")).toEqual([second]); // delivered again, not stored again
}, 90_000);

it("answers BAD_EVENT_QUEUE_ID, never a gap, for a queue whose events died with the embedded process", async () => {
  const env = { EVENT_WRITE_DELAY_MS: "5000" };
  const first = await startChorus(env);
  const dataDir = first.dataDir;
  cleanups.push(async () => fs.rmSync(dataDir, { recursive: true, force: true }));
  const target = { url: `http://127.0.0.1:${first.port}` };
  const owner = readZuliprc(path.join(dataDir, "zuliprc"));
  await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "embedded" }] } });
  const lost = (await api(target, "POST", "/register", { as: owner, params: { event_types: ["message"] } })).body.queue_id;
  const id = await sendTo(target, owner, "embedded")("only in memory");
  const before = await api(target, "GET", "/events", { as: owner, params: { queue_id: lost, last_event_id: -1, dont_block: true } });
  expect(before.body.events.map((e: any) => e.message.id)).toEqual([id]);
  const pids = workerPids(first);
  expect(pids).toHaveLength(1);
  process.kill(pids[0]!, "SIGKILL");
  await first.stop();

  const second = await startChorus(env, dataDir);
  cleanups.push(async () => void (await second.stop()));
  const again = { url: `http://127.0.0.1:${second.port}` };
  const after = await api(again, "GET", "/events", { as: owner, params: { queue_id: lost, last_event_id: -1, dont_block: true } });
  expect(after.status).toBe(400);
  expect(after.body.code).toBe("BAD_EVENT_QUEUE_ID");
  // A queue registered now works as usual, and the message itself was kept.
  const fresh = (await api(again, "POST", "/register", { as: owner, params: { event_types: ["message"] } })).body.queue_id;
  const next = await sendTo(again, owner, "embedded")("after the restart");
  const events = await api(again, "GET", "/events", { as: owner, params: { queue_id: fresh, last_event_id: -1, dont_block: true } });
  expect(events.body.events.map((e: any) => e.message.id)).toEqual([next]);
  const stored = await api(again, "GET", "/messages", { as: owner, params: { anchor: "newest", num_before: 5, num_after: 0, narrow: [{ operator: "channel", operand: "embedded" }] } });
  expect(stored.body.messages.map((m: any) => m.id)).toEqual([id, next]);
}, 90_000);

it("keeps an embedded queue's events, under the same ids, across a graceful restart", async () => {
  const first = await startChorus();
  const dataDir = first.dataDir;
  cleanups.push(async () => fs.rmSync(dataDir, { recursive: true, force: true }));
  const target = { url: `http://127.0.0.1:${first.port}` };
  const owner = readZuliprc(path.join(dataDir, "zuliprc"));
  await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: [{ name: "graceful" }] } });
  const queue = (await api(target, "POST", "/register", { as: owner, params: { event_types: ["message"] } })).body.queue_id;
  const send = sendTo(target, owner, "graceful");
  const sent = [await send("one"), await send("two")];
  const before = await api(target, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } });
  expect(before.body.events.map((e: any) => e.message.id)).toEqual(sent);
  expect(await first.stop()).toBe(0);

  const second = await startChorus({}, dataDir);
  cleanups.push(async () => void (await second.stop()));
  const again = { url: `http://127.0.0.1:${second.port}` };
  const after = await api(again, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } });
  expect(after.status).toBe(200);
  expect(after.body.events).toEqual(before.body.events);
  const next = await sendTo(again, owner, "graceful")("three");
  const more = await api(again, "GET", "/events", { as: owner, params: { queue_id: queue, last_event_id: before.body.events.at(-1).id, dont_block: true } });
  expect(more.body.events.map((e: any) => e.message.id)).toEqual([next]);
}, 90_000);

it("writes no row for an event every queue acknowledged before its batch went, and restores the rest", async () => {
  // A batch goes 1.5 s after its first row: the first message is acknowledged within that window, the second not.
  const { server, send, events, killAndPoll } = await distributedQueue("acked", { EVENT_WRITE_DELAY_MS: "1500" });
  const first = await send("one");
  const heard = (await events()).body.events;
  expect(heard.map((e: any) => e.message.id)).toEqual([first]);
  const second = await send("two");
  // The next poll acknowledges the first event only (it asks for what came after it).
  expect((await events(heard[0].id)).body.events.map((e: any) => e.message.id)).toEqual([second]);
  await eventually("the second event's row is written", async () => (await storedEvents(server.databaseUrl)) >= 1);
  await new Promise((r) => setTimeout(r, 300));
  expect(await storedEvents(server.databaseUrl)).toBe(1);

  // An acknowledgement past every id handed out covers those only: the next event's row is written.
  const acknowledgedAhead = await events(1_000_000_000);
  expect(acknowledgedAhead.status).toBe(200);
  const third = await send("three");
  await eventually("the third event's row is written", async () => (await storedEvents(server.databaseUrl)) === 2);

  // Asked from the start, the rebuilt queue has what has rows: not the first event, acknowledged before its batch.
  const after = await killAndPoll(2);
  expect(after.status).toBe(200);
  expect(after.body.events.map((e: any) => e.message.id)).toEqual([second, third]);
}, 90_000);

it("keeps writing a delivered event while the store refuses it, and holds its entry until it is written", async () => {
  const { server, send, events, killAndPoll } = await distributedQueue("refused");
  const admin = await adminClient(server.databaseUrl);
  // A real failure of the events table, not of the shard: every new row breaks this check until it is dropped.
  const refuseEventRows = (on: boolean) =>
    admin.query(on ? "alter table user_events add constraint refused check (seq < 0) not valid" : "alter table user_events drop constraint refused");

  // While the store refuses the row, the queue has the event; once it accepts rows again, the row is written.
  await refuseEventRows(true);
  const first = await send("one");
  expect((await events()).body.events.map((e: any) => e.message.id)).toEqual([first]);
  await new Promise((r) => setTimeout(r, 300));
  expect(await storedEvents(server.databaseUrl)).toBe(0);
  await refuseEventRows(false);
  await eventually("the refused row is written", async () => (await storedEvents(server.databaseUrl)) === 1);

  // A worker that dies while its write is refused had not acknowledged the delivery: the next one gets it again.
  await refuseEventRows(true);
  const second = await send("two");
  await new Promise((r) => setTimeout(r, 300));
  const restarted = killAndPoll(2);
  await refuseEventRows(false);
  const after = await restarted;
  expect(after.status).toBe(200);
  expect(after.body.events.map((e: any) => e.message.id)).toEqual([first, second]);
}, 90_000);
