/**
 * Chat's message log (actors/chat/message-log.ts), one behaviour suite run against every engine: PGlite in memory
 * and a real Postgres at 127.0.0.1:5432 (TEST_PG_URL overrides) in a database created for this run and dropped
 * after. Every test takes its own shards and ids, so nothing one test leaves behind changes what another observes.
 */
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../../../runtime/actor.ts";
import { ChorusError } from "../../../runtime/errors.ts";
import type { Database } from "../../../actors/schema.ts";
import type { SqlStore } from "../../../runtime/store/sql-store.ts";
import { abandonAttempt, MessageLog, type NewMessage } from "../../../actors/chat/message-log.ts";
import { migrations } from "../../../actors/migrations/index.ts";
import pg from "pg";
import { dropStoreDatabase, engines, expectCode, pgUrl, shardLeaser } from "../../support/stores.ts";

const SHARDS = 64;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

afterAll(dropStoreDatabase);

describe.each(engines)("MessageLog on $name", (engineCase) => {
  let store: SqlStore<Database>;
  let log: MessageLog;
  let nextId = 1_000_000;
  let nextName = 0;
  /** A shard no other test uses, and one leased to `node` with its fence. */
  const { shard, fenceOn } = shardLeaser(SHARDS, () => store);

  function message(sendKey: string | null = null, id = nextId++): NewMessage {
    return {
      id,
      realm_id: 1,
      sender_id: 2,
      recipient_type: "stream",
      recipient_id: 3,
      stream_id: 4,
      topic: "contract",
      content: `message ${id}`,
      rendered_content: `<p>message ${id}</p>`,
      date_sent: 1_700_000_000,
      sending_client: "test",
      send_key: sendKey,
    };
  }

  function uniqueKey(label: string): string {
    return `${engineCase.name}-${label}-${nextName++}`;
  }

  async function storedIds(ids: number[]): Promise<number[]> {
    if (!ids.length) return [];
    const rows = await store.db.selectFrom("messages").select("id").where("id", "in", ids).orderBy("id").execute();
    return rows.map((r) => r.id);
  }

  /** The inserting transaction of each row: rows written by one transaction share it. */
  async function transactionsOf(ids: number[]): Promise<Map<number, string>> {
    const { rows } = await sql<{ id: number; x: string }>`
      select id, xmin::text as x from messages where id in (${sql.join(ids)})`.execute(store.db);
    return new Map(rows.map((r) => [Number(r.id), r.x]));
  }

  beforeAll(async () => {
    store = await engineCase.open();
    log = new MessageLog(store);
    await store.migrate(migrations);
    await store.ensureShards(SHARDS);
  });

  afterAll(async () => {
    await store?.close();
  });

  describe("appendMessage", () => {
    /** A new message has none of the bookkeeping an edit or a move adds (migration 2026-11-22T0500-messages), and its first version (2026-12-02T1800). */
    const NEVER_EDITED = { edit_history: null, last_edit_time: null, last_moved_time: null, version: 0 };
    /**
     * Its search document (migration 2026-11-28T0900) and scoped document (2026-12-05T1600), made by the store's
     * triggers from its topic and content, and where it is.
     */
    const SEARCHABLE = { search_document: expect.any(String), scoped_document: expect.stringMatching(/^($|'[sr]\d+:)/) };

    it("stores a message and resolves with its id after commit", async () => {
      const fence = await fenceOn();
      const m = message();
      expect(await log.appendMessage(m, fence)).toBe(m.id);
      const row = await store.db.selectFrom("messages").selectAll().where("id", "=", m.id).executeTakeFirst();
      expect(row).toEqual({ ...m, ...NEVER_EDITED, ...SEARCHABLE });
    });

    it("stores every column exactly, whatever characters its text holds, and a direct message's null channel", async () => {
      const fence = await fenceOn();
      const awkward = ['say "hi"', "back\\slash \\\"", "{braces}, commas", "NULL", "", "  spaced  ", "line\nbreak\ttab", "ünïcødé 👋", "}{\",\\"];
      const messages = awkward.map((text, i) => ({
        ...message(i % 2 ? text : null),
        topic: text,
        content: text,
        rendered_content: `<p>${text}</p>`,
        sending_client: text,
        recipient_type: i % 2 ? "private" : "stream",
        stream_id: i % 2 ? null : 4,
      }));
      const ids = await Promise.all(messages.map((m) => log.appendMessage(m, fence, [{ user_id: 7, flags: 0 }])));
      expect(ids).toEqual(messages.map((m) => m.id));
      const rows = await store.db.selectFrom("messages").selectAll().where("id", "in", ids).orderBy("id").execute();
      expect(rows).toEqual(messages.map((m) => ({ ...m, ...NEVER_EDITED, ...SEARCHABLE })));
    });

    it("stores 200 concurrent appends, resolves each with its own id, and group-commits them", async () => {
      const fence = await fenceOn();
      const messages = Array.from({ length: 200 }, (_, i) => message(i % 2 ? uniqueKey("bulk") : null));
      const ids = await Promise.all(messages.map((m) => log.appendMessage(m, fence)));
      expect(ids).toEqual(messages.map((m) => m.id));
      expect(await storedIds(ids)).toEqual([...ids].sort((a, b) => a - b));
      // The first append commits alone (no added delay when idle); the other 199 arrived during that commit and
      // share the next transaction.
      const transactions = new Set((await transactionsOf(ids)).values());
      expect(transactions.size).toBeLessThanOrEqual(2);
    });

    it("stores a repeated send_key once and resolves every append with the first id (sequentially)", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("send");
      const first = message(key);
      const again = message(key);
      expect(await log.appendMessage(first, fence)).toBe(first.id);
      expect(await log.appendMessage(again, fence)).toBe(first.id);
      // A redelivery carrying the very same message (same id too) is also absorbed.
      expect(await log.appendMessage({ ...first }, fence)).toBe(first.id);
      const rows = await store.db.selectFrom("messages").selectAll().where("send_key", "=", key).execute();
      expect(rows).toEqual([{ ...first, ...NEVER_EDITED, ...SEARCHABLE }]);
      expect(await storedIds([again.id])).toEqual([]);
    });

    it("rejects a commit the database refuses with the database's error, and commits the next one, even as a store's first", async () => {
      // A store of its own, so that the refused commit is the first to run its statement (on PGlite, the batch
      // that also parses it: the next one must not parse it again).
      const fresh = await engineCase.open();
      const freshLog = new MessageLog(fresh);
      try {
        await fresh.migrate(migrations);
        await fresh.ensureShards(SHARDS);
        const s = shard();
        const lease = await fresh.acquireLease(s, "node-a", 60);
        const fence = { shard: s, epoch: lease!.epoch, node: "node-a" };
        // Two messages with one id under different send_keys, committed together: the primary key refuses the batch.
        const clash = message(uniqueKey("clash"));
        const results = await Promise.allSettled([freshLog.appendMessage(clash, fence), freshLog.appendMessage({ ...message(uniqueKey("clash")), id: clash.id }, fence)]);
        for (const r of results) expect(r).toMatchObject({ status: "rejected", reason: { code: "23505" } });
        const next = message();
        expect(await freshLog.appendMessage(next, fence, [{ user_id: 7, flags: 0 }])).toBe(next.id);
        const stored = await fresh.db.selectFrom("messages").select("id").where("id", "in", [clash.id, next.id]).execute();
        expect(stored.map((r) => r.id)).toEqual([next.id]);
      } finally {
        await fresh.close();
      }
    });

    it("commits the recipients' flag rows with the message, and none for a repeated send_key", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("recipients");
      const first = message(key);
      const again = message(key);
      expect(await log.appendMessage(first, fence, [{ user_id: 1, flags: 1 }, { user_id: 2, flags: 0 }])).toBe(first.id);
      expect(await log.appendMessage(again, fence, [{ user_id: 3, flags: 0 }])).toBe(first.id);
      const rows = await store.db
        .selectFrom("user_messages")
        .select(["user_id", "message_id", "flags"])
        .where("message_id", "in", [first.id, again.id])
        .orderBy("user_id")
        .execute();
      expect(rows).toEqual([
        { user_id: 1, message_id: first.id, flags: 1 },
        { user_id: 2, message_id: first.id, flags: 0 },
      ]);
    });

    it("stores a repeated send_key once when the appends are concurrent, in one batch or across two", async () => {
      const fence = await fenceOn();
      // Across batches: the first append flushes alone, the second waits for the next transaction.
      const acrossKey = uniqueKey("across");
      const a1 = message(acrossKey);
      const a2 = message(acrossKey);
      expect(await Promise.all([log.appendMessage(a1, fence), log.appendMessage(a2, fence)])).toEqual([a1.id, a1.id]);
      // In one batch: a filler takes the first transaction, both repeats land in the next one together.
      const withinKey = uniqueKey("within");
      const filler = message();
      const w1 = message(withinKey);
      const w2 = message(withinKey);
      const w3 = message(withinKey);
      const other = message(uniqueKey("other"));
      const results = await Promise.all([filler, w1, w2, other, w3].map((m) => log.appendMessage(m, fence)));
      expect(results).toEqual([filler.id, w1.id, w1.id, other.id, w1.id]);
      for (const key of [acrossKey, withinKey]) {
        const rows = await store.db.selectFrom("messages").select("id").where("send_key", "=", key).execute();
        expect(rows).toHaveLength(1);
      }
      expect(await storedIds([a1.id, a2.id, filler.id, w1.id, w2.id, w3.id, other.id])).toEqual(
        [a1.id, filler.id, w1.id, other.id].sort((a, b) => a - b),
      );
    });

    it("refuses an attempt its gateway abandoned first with NOT_SENT, and commits another attempt of the same key", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("abandoned");
      const attempt = uniqueKey("attempt");
      expect(await abandonAttempt(store.db, key, attempt)).toBeUndefined();
      const late = message(key);
      await expectCode(log.appendMessage(late, fence, [{ user_id: 7, flags: 0 }], attempt), "NOT_SENT");
      expect(await storedIds([late.id])).toEqual([]);
      // The client's retry is a new attempt under the same key: it commits, and the late first attempt still cannot.
      const retry = message(key);
      expect(await log.appendMessage(retry, fence, [{ user_id: 7, flags: 0 }], uniqueKey("attempt"))).toBe(retry.id);
      expect(await log.appendMessage(message(key), fence, undefined, attempt)).toBe(retry.id);
      expect(await abandonAttempt(store.db, key, attempt)).toBe(retry.id);
    });

    it("answers an abandonment with the id of an attempt that committed first, whose redelivery resolves with it too", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("committed");
      const attempt = uniqueKey("attempt");
      const m = message(key);
      expect(await log.appendMessage(m, fence, undefined, attempt)).toBe(m.id);
      expect(await abandonAttempt(store.db, key, attempt)).toBe(m.id);
      expect(await log.appendMessage({ ...m }, fence, undefined, attempt)).toBe(m.id);
    });

    it("records a fan-out as owed with the commit of a message that owes one, by its fence, until fanOutDone", async () => {
      const fence = await fenceOn();
      const owed = async (ids: number[]) =>
        (await store.db.selectFrom("pending_fan_outs").selectAll().where("message_id", "in", ids).orderBy("message_id").execute()).map((r) => ({
          message_id: Number(r.message_id),
          shard: r.shard,
          epoch: Number(r.epoch),
        }));
      const [owing, plain] = [message(uniqueKey("owing")), message(uniqueKey("plain"))];
      await Promise.all([log.appendMessage(owing, fence, [{ user_id: 7, flags: 0 }], undefined, true), log.appendMessage(plain, fence)]);
      expect(await owed([owing.id, plain.id])).toEqual([{ message_id: owing.id, shard: fence.shard, epoch: fence.epoch }]);
      // A repeated send stores nothing, and owes nothing more.
      expect(await log.appendMessage({ ...owing, id: nextId++ }, fence, undefined, undefined, true)).toBe(owing.id);
      expect(await owed([owing.id])).toHaveLength(1);
      // A stale fence commits neither.
      const stale = message(uniqueKey("stale"));
      await expectCode(log.appendMessage(stale, { ...fence, epoch: fence.epoch - 1 }, undefined, undefined, true), "FENCED");
      expect(await owed([stale.id])).toEqual([]);

      log.fanOutDone(owing.id);
      for (let i = 0; i < 100 && (await owed([owing.id])).length; i++) await sleep(20);
      expect(await owed([owing.id])).toEqual([]);

      // Before a handover the rows of the fan-outs done go at once, not after the batch's delay.
      const another = message(uniqueKey("owing-again"));
      await log.appendMessage(another, fence, [{ user_id: 7, flags: 0 }], undefined, true);
      log.fanOutDone(another.id);
      await log.fanOutsDoneNow();
      expect(await owed([another.id])).toEqual([]);
    });

    it("prunes send attempts' rows past the time kept, and keeps the recent ones", async () => {
      const [old, recent] = [uniqueKey("old-attempt"), uniqueKey("recent-attempt")];
      await store.db.insertInto("send_attempts").values([{ attempt: old, abandoned: true }, { attempt: recent, abandoned: false }]).execute();
      await sql`update send_attempts set at = now() - interval '2 days' where attempt = ${old}`.execute(store.db);
      expect(await log.pruneAttempts(24 * 3_600_000)).toBeGreaterThanOrEqual(1);
      const left = await store.db.selectFrom("send_attempts").select("attempt").where("attempt", "in", [old, recent]).execute();
      expect(left.map((r) => r.attempt)).toEqual([recent]);
    });

    it("settles an append racing its abandonment one way: committed and found, or refused and absent", async () => {
      const fence = await fenceOn();
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const key = uniqueKey("race");
          const attempt = uniqueKey("attempt");
          const m = message(key);
          const [appended, found] = await Promise.allSettled([
            log.appendMessage(m, fence, undefined, attempt),
            new Promise((r) => setTimeout(r, i % 3)).then(() => abandonAttempt(store.db, key, attempt)),
          ]);
          const stored = await storedIds([m.id]);
          if (appended.status === "fulfilled") {
            expect(found).toEqual({ status: "fulfilled", value: m.id });
            expect(stored).toEqual([m.id]);
            return "committed";
          }
          expect((appended.reason as ChorusError).code).toBe("NOT_SENT");
          expect(found).toEqual({ status: "fulfilled", value: undefined });
          expect(stored).toEqual([]);
          return "abandoned";
        }),
      );
      expect(outcomes).toHaveLength(20);
    });

    // What the sweep of owed fan-outs relies on (actors/chat/conversations/fan-outs.ts): an append that has read its
    // lease holds the take-over back until it commits. The append here waits, lease read, on a send key another
    // transaction is inserting. PGlite runs one transaction at a time, so only Postgres can show it.
    it.skipIf(engineCase.name === "pglite")("makes a take-over of the shard wait for an append in flight, which then commits", async () => {
      const fence = await fenceOn("node-a");
      const key = uniqueKey("in-flight");
      const blocker = new pg.Client({ connectionString: await pgUrl() });
      await blocker.connect();
      try {
        await blocker.query("begin");
        await blocker.query("insert into messages (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content, rendered_content, date_sent, sending_client, send_key) values ($1, 1, 2, 'stream', 3, 4, 't', 'c', 'c', 1, 'test', $2)", [nextId++, key]);
        const appended = message(key);
        const appending = log.appendMessage(appended, fence);
        await sleep(200);
        let takenOver = false;
        const takeover = store.acquireLease(fence.shard, "node-b", 60, true).then((lease) => ((takenOver = true), lease));
        await sleep(300);
        expect(takenOver).toBe(false);
        await blocker.query("rollback");
        expect(await appending).toBe(appended.id);
        expect(await takeover).toEqual({ shard: fence.shard, epoch: fence.epoch + 1, reclaimed: true });
        expect(await storedIds([appended.id])).toEqual([appended.id]);
      } finally {
        await blocker.end();
      }
    });

    it("rejects a stale fence's appends with FENCED and commits the others of the same batch", async () => {
      const fence = await fenceOn("node-a");
      const staleEpoch: Fence = { ...fence, epoch: fence.epoch - 1 };
      const wrongOwner: Fence = { ...fence, node: "node-b" };
      // Alone.
      const lone = message();
      await expectCode(log.appendMessage(lone, staleEpoch), "FENCED");
      expect(await storedIds([lone.id])).toEqual([]);
      // Mixed into one batch (the filler flushes first, the rest accumulate behind it).
      const filler = message();
      const good1 = message(uniqueKey("good"));
      const bad1 = message(uniqueKey("bad"));
      const good2 = message();
      const bad2 = message();
      const settled = await Promise.allSettled([
        log.appendMessage(filler, fence),
        log.appendMessage(good1, fence),
        log.appendMessage(bad1, staleEpoch),
        log.appendMessage(good2, fence),
        log.appendMessage(bad2, wrongOwner),
      ]);
      expect(settled.map((s) => s.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled", "rejected"]);
      expect((settled[1] as PromiseFulfilledResult<number>).value).toBe(good1.id);
      expect((settled[3] as PromiseFulfilledResult<number>).value).toBe(good2.id);
      for (const s of [settled[2], settled[4]]) {
        const reason = (s as PromiseRejectedResult).reason;
        expect(reason).toBeInstanceOf(ChorusError);
        expect((reason as ChorusError).code).toBe("FENCED");
      }
      expect(await storedIds([filler.id, good1.id, bad1.id, good2.id, bad2.id])).toEqual([filler.id, good1.id, good2.id]);
      const tx = await transactionsOf([good1.id, good2.id]);
      expect(tx.get(good1.id)).toBe(tx.get(good2.id));
      // Fences of other shards in the same batch are judged on their own shard.
      const otherShard = await fenceOn("node-c");
      const mixed = [message(), message(), message()];
      const results = await Promise.allSettled([
        log.appendMessage(mixed[0]!, fence),
        log.appendMessage(mixed[1]!, otherShard),
        log.appendMessage(mixed[2]!, { ...otherShard, shard: fence.shard }),
      ]);
      expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected"]);
      expect(await storedIds(mixed.map((m) => m.id))).toEqual([mixed[0]!.id, mixed[1]!.id]);
    });

    describe("recipient lists", () => {
      /** Recipients of one message as the view, the rows and the lists hold them. */
      async function recipientsOf(messageId: number) {
        const view = await store.db.selectFrom("user_messages").select(["user_id", "flags"]).where("message_id", "=", messageId).orderBy("user_id").execute();
        const rows = await store.db.selectFrom("user_message_rows").select(["user_id", "flags"]).where("message_id", "=", messageId).orderBy("user_id").execute();
        const lists = await store.db.selectFrom("user_message_lists").select(["user_ids", "flags"]).where("message_id", "=", messageId).execute();
        return { view, rows, lists: lists.map((l) => ({ user_ids: l.user_ids.map(Number), flags: l.flags.map(Number) })) };
      }
      /** Two stored messages with these recipient lists left unexpanded, as a process that stopped before expanding them leaves them. */
      async function leftListed(lists: [{ user_ids: number[]; flags: number[] }, { user_ids: number[]; flags: number[] }]) {
        const fence = await fenceOn();
        const messages = [message(), message()] as const;
        for (const [i, m] of messages.entries()) {
          await log.appendMessage(m, fence);
          await sql`insert into user_message_lists (message_id, user_ids, flags) values (${m.id}, ${lists[i]!.user_ids}::integer[], ${lists[i]!.flags}::integer[])`.execute(store.db);
        }
        return { fence, a: messages[0], b: messages[1] };
      }
      const recipients = (n: number, from = 100) => Array.from({ length: n }, (_, i) => ({ user_id: from + i, flags: i % 3 }));

      it("commits a message past recipientListAbove as one list, readable at once, expanded into rows behind, exactly once", async () => {
        // A second log over the same store, listing past 2 recipients and expanding 1 s after the commit, two
        // recipients a step.
        const listing = new MessageLog(store, { recipientListAbove: 2, recipientListDelayMs: 1_000, recipientListStep: 2 });
        const fence = await fenceOn();
        const [big, small, other] = [message(uniqueKey("listed")), message(), message()];
        const [many, few, more] = [recipients(5), recipients(2, 200), recipients(3, 400)];
        // One batch: the first append commits alone, these three together.
        await Promise.all([
          listing.appendMessage(message(), fence),
          listing.appendMessage(big, fence, many),
          listing.appendMessage(small, fence, few),
          listing.appendMessage(other, fence, more),
        ]);
        const asList = (rs: { user_id: number; flags: number }[]) => [{ user_ids: rs.map((r) => r.user_id), flags: rs.map((r) => r.flags) }];
        expect(await recipientsOf(big.id)).toEqual({ view: many, rows: [], lists: asList(many) });
        expect(await recipientsOf(small.id)).toEqual({ view: few, rows: few, lists: [] });
        expect(await recipientsOf(other.id)).toEqual({ view: more, rows: [], lists: asList(more) });
        // A redelivered send commits no second list.
        expect(await listing.appendMessage(message(big.send_key), fence, recipients(5, 300))).toBe(big.id);
        expect((await recipientsOf(big.id)).lists).toHaveLength(1);

        const deadline = Date.now() + 10_000;
        while ((await recipientsOf(big.id)).lists.length && Date.now() < deadline) await sleep(100);
        expect(await recipientsOf(big.id)).toEqual({ view: many, rows: many, lists: [] });
        expect(await recipientsOf(other.id)).toEqual({ view: more, rows: more, lists: [] });
      });

      it("expandRecipientLists in a write expands the messages named, and migrate expands lists left behind", async () => {
        const { fence, a, b } = await leftListed([{ user_ids: [1, 2], flags: [0, 1] }, { user_ids: [3], flags: [8] }]);
        await store.write(fence, (trx) => log.expandRecipientLists(trx, [a.id]));
        expect(await recipientsOf(a.id)).toEqual({ view: [{ user_id: 1, flags: 0 }, { user_id: 2, flags: 1 }], rows: [{ user_id: 1, flags: 0 }, { user_id: 2, flags: 1 }], lists: [] });
        expect(await recipientsOf(b.id)).toEqual({ view: [{ user_id: 3, flags: 8 }], rows: [], lists: [{ user_ids: [3], flags: [8] }] });
        await store.migrate(migrations);
        expect(await recipientsOf(b.id)).toEqual({ view: [{ user_id: 3, flags: 8 }], rows: [{ user_id: 3, flags: 8 }], lists: [] });
      });

      it("expands in steps: the first recipients in message order, the rest still listed and read exactly once", async () => {
        const { a, b } = await leftListed([{ user_ids: [1, 2], flags: [0, 1] }, { user_ids: [3, 4, 5], flags: [8, 0, 1] }]);
        const step = async (limit: number) =>
          Number((await sql<{ left: number }>`select chorus_expand_recipient_lists(${`{${a.id},${b.id}}`}::bigint[], ${limit}::integer) as left`.execute(store.db)).rows[0]!.left);
        const bView = [{ user_id: 3, flags: 8 }, { user_id: 4, flags: 0 }, { user_id: 5, flags: 1 }];
        expect(await step(3)).toBe(2);
        expect(await recipientsOf(a.id)).toEqual({ view: [{ user_id: 1, flags: 0 }, { user_id: 2, flags: 1 }], rows: [{ user_id: 1, flags: 0 }, { user_id: 2, flags: 1 }], lists: [] });
        expect(await recipientsOf(b.id)).toEqual({ view: bView, rows: [{ user_id: 3, flags: 8 }], lists: [{ user_ids: [4, 5], flags: [0, 1] }] });
        expect(await step(1)).toBe(1);
        expect(await recipientsOf(b.id)).toEqual({ view: bView, rows: bView.slice(0, 2), lists: [{ user_ids: [5], flags: [1] }] });
        expect(await step(5)).toBe(0);
        expect(await recipientsOf(b.id)).toEqual({ view: bView, rows: bView, lists: [] });
      });
    });
  });

  describe("appendUserEvent", () => {
    it("stores payloads exactly, keeps a repeated (user, seq) once, and refuses a stale fence", async () => {
      const fence = await fenceOn();
      const userId = nextId++;
      const payloads = [{ text: 'a "quoted" \\ back\\slash, {brace}' }, { list: [1, "NULL", null], nested: { ü: "👋" } }, { empty: "" }];
      await Promise.all(payloads.map((payload, i) => (i === 2 ? log.appendUserEventBehind({ user_id: userId, seq: i + 1, payload }, fence).written : log.appendUserEvent({ user_id: userId, seq: i + 1, payload }, fence))));
      await log.appendUserEvent({ user_id: userId, seq: 1, payload: { text: "a later copy" } }, fence);
      expect(await log.userEventsAfter(userId, 0)).toEqual(payloads.map((payload, i) => ({ user_id: userId, seq: i + 1, payload })));
      await expectCode(log.appendUserEvent({ user_id: userId, seq: 9, payload: {} }, { ...fence, epoch: fence.epoch - 1 }), "FENCED");
      expect(await log.userEventsAfter(userId, 3)).toEqual([]);
    });

    it("writes events behind as one batch per shard and wait: settled once every row is committed, tried again after a failure, refused whole when fenced", async () => {
      const fence = await fenceOn();
      const [ann, bob] = [nextId++, nextId++];
      const first = log.appendUserEventBehind({ user_id: ann, seq: 1, payload: { n: 1 } }, fence);
      const second = log.appendUserEventBehind({ user_id: bob, seq: 1, payload: { n: 2 } }, fence);
      expect(second).toBe(first);
      expect(first.done).toBe(false);
      await first.written;
      expect(first.done).toBe(true);
      expect(await log.userEventsAfter(ann, 0)).toEqual([{ user_id: ann, seq: 1, payload: { n: 1 } }]);
      expect(await log.userEventsAfter(bob, 0)).toEqual([{ user_id: bob, seq: 1, payload: { n: 2 } }]);

      // The store refuses the rows (a constraint stands in for a store that fails): tried again until they are written.
      await sql`alter table user_events add constraint behind_refused check (seq < 1000)`.execute(store.db);
      const refused = log.appendUserEventBehind({ user_id: ann, seq: 1000, payload: { n: 3 } }, fence);
      const alongside = log.appendUserEventBehind({ user_id: bob, seq: 2, payload: { n: 4 } }, fence);
      expect(alongside).toBe(refused);
      await sleep(300);
      expect(refused.done).toBe(false);
      await sql`alter table user_events drop constraint behind_refused`.execute(store.db);
      await refused.written;
      expect(await log.userEventsAfter(ann, 1)).toEqual([{ user_id: ann, seq: 1000, payload: { n: 3 } }]);
      expect(await log.userEventsAfter(bob, 1)).toEqual([{ user_id: bob, seq: 2, payload: { n: 4 } }]);

      // Another epoch of the shard is another batch; a stale one is refused as FENCED, and nothing of it is stored.
      const stale = log.appendUserEventBehind({ user_id: ann, seq: 1001, payload: {} }, { ...fence, epoch: fence.epoch - 1 });
      const current = log.appendUserEventBehind({ user_id: bob, seq: 3, payload: {} }, fence);
      expect(current).not.toBe(stale);
      await expectCode(stale.written, "FENCED");
      expect(stale.done).toBe(true);
      await current.written;
      expect(await log.userEventsAfter(ann, 1000)).toEqual([]);
      expect(await log.userEventsAfter(bob, 2)).toHaveLength(1);
    });
  });

  describe("appendUserEventBehind's keeper", () => {
    it("writes only the rows the keeper still wants when the batch goes, and settles a batch that wants none at once", async () => {
      const fence = await fenceOn();
      const [ann, bob] = [nextId++, nextId++];
      const asked: number[] = [];
      const annKeeper = { rowWanted: (seq: number) => (asked.push(seq), seq !== 1) };
      const batch = log.appendUserEventBehind({ user_id: ann, seq: 1, payload: { n: 1 } }, fence, annKeeper);
      log.appendUserEventBehind({ user_id: ann, seq: 2, payload: { n: 2 } }, fence, annKeeper);
      log.appendUserEventBehind({ user_id: bob, seq: 1, payload: { n: 3 } }, fence);
      expect(asked).toEqual([]); // asked when the batch goes, not when the row joins it
      await batch.written;
      expect(asked).toEqual([1, 2]);
      expect(await log.userEventsAfter(ann, 0)).toEqual([{ user_id: ann, seq: 2, payload: { n: 2 } }]);
      expect(await log.userEventsAfter(bob, 0)).toEqual([{ user_id: bob, seq: 1, payload: { n: 3 } }]);

      const unwanted = log.appendUserEventBehind({ user_id: ann, seq: 3, payload: {} }, fence, { rowWanted: () => false });
      await unwanted.written;
      expect(unwanted.done).toBe(true);
      expect(await log.userEventsAfter(ann, 2)).toEqual([]);
    });
  });

  describe("allocateMessageIds", () => {
    it("hands out disjoint blocks of 256, each above every block before it", async () => {
      const sequential: { first: number; size: number }[] = [];
      for (let i = 0; i < 5; i++) sequential.push(await log.allocateMessageIds());
      for (const block of sequential) {
        expect(block.size).toBe(256);
        expect(Number.isSafeInteger(block.first)).toBe(true);
        expect(block.first).toBeGreaterThan(0);
      }
      for (let i = 1; i < sequential.length; i++) {
        expect(sequential[i]!.first).toBeGreaterThanOrEqual(sequential[i - 1]!.first + sequential[i - 1]!.size);
      }
      const concurrent = await Promise.all(Array.from({ length: 30 }, () => log.allocateMessageIds()));
      const sorted = [...concurrent].sort((a, b) => a.first - b.first);
      expect(sorted[0]!.first).toBeGreaterThanOrEqual(sequential.at(-1)!.first + sequential.at(-1)!.size);
      for (let i = 1; i < sorted.length; i++) {
        expect(sorted[i]!.first).toBeGreaterThanOrEqual(sorted[i - 1]!.first + sorted[i - 1]!.size);
      }
      const highest = sorted.at(-1)!;
      if (engineCase.reopen) {
        // A restarted process continues above everything handed out before.
        const other = await engineCase.reopen();
        try {
          const next = await new MessageLog(other).allocateMessageIds();
          expect(next.first).toBeGreaterThanOrEqual(highest.first + highest.size);
        } finally {
          await other.close();
        }
      }
    });
  });
});
