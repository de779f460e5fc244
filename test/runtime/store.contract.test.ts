/**
 * The store contract (runtime/store/store.ts), one behaviour suite run against every engine: PGlite in memory and
 * a real Postgres at 127.0.0.1:5432 (TEST_PG_URL overrides) in a database created for this run and dropped after.
 * Every test takes its own shards and ids, so nothing one test leaves behind changes what another observes.
 */
import { sql } from "kysely";
import { migrations } from "../../runtime/store/migrations/index.ts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Fence } from "../../runtime/actor.ts";
import { ChorusError } from "../../runtime/errors.ts";
import { openDatabase, type Engine } from "../../runtime/store/db.ts";
import { SqlStore } from "../../runtime/store/sql-store.ts";
import type { NewMessage } from "../../runtime/store/store.ts";
import pg from "pg";
import { freshDatabase, PG_ADMIN_URL } from "../support/services.ts";

const SHARDS = 64;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let pgDatabase: Awaited<ReturnType<typeof freshDatabase>> | undefined;
async function pgUrl(): Promise<string> {
  pgDatabase ??= await freshDatabase();
  return pgDatabase.url;
}

interface EngineCase {
  name: Engine;
  open(): Promise<SqlStore>;
  /** A second, independent store over the same data (a restarted process), where the engine allows one. */
  reopen?: () => Promise<SqlStore>;
}

const engines: EngineCase[] = [
  {
    name: "pglite",
    open: async () => new SqlStore(await openDatabase({ dataDir: "memory://" })),
  },
  {
    name: "postgres",
    open: async () => new SqlStore(await openDatabase({ databaseUrl: await pgUrl(), dataDir: "unused" })),
    reopen: async () => new SqlStore(await openDatabase({ databaseUrl: await pgUrl(), dataDir: "unused", poolSize: 2 })),
  },
];

afterAll(async () => {
  await pgDatabase?.drop();
});

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected a rejection, got a result");
    },
    (err: unknown) => err,
  );
}

async function expectCode(p: Promise<unknown>, code: string): Promise<void> {
  const err = await rejection(p);
  expect(err).toBeInstanceOf(ChorusError);
  expect((err as ChorusError).code).toBe(code);
}

describe.each(engines)("Store on $name", (engineCase) => {
  let store: SqlStore;
  let nextShard = 0;
  let nextId = 1_000_000;
  let nextName = 0;

  /** A shard no other test uses. */
  function shard(): number {
    if (nextShard >= SHARDS) throw new Error("raise SHARDS");
    return nextShard++;
  }

  /** A fresh shard leased to `node`, and its fence. */
  async function fenceOn(node = "node-a"): Promise<Fence> {
    const s = shard();
    const lease = await store.acquireLease(s, node, 60);
    if (!lease) throw new Error(`shard ${s} not free`);
    return { shard: s, epoch: lease.epoch, node };
  }

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

  async function realmNamed(stringId: string) {
    return store.db.selectFrom("realms").selectAll().where("string_id", "=", stringId).executeTakeFirst();
  }

  function realmRow(stringId: string) {
    return { string_id: stringId, name: stringId, date_created: 1_700_000_000, settings: "{}" };
  }

  beforeAll(async () => {
    store = await engineCase.open();
    await store.migrate();
    await store.ensureShards(SHARDS);
  });

  afterAll(async () => {
    await store?.close();
  });

  describe("migrate", () => {
    it("reports its engine and runs again without error, keeping the data", async () => {
      expect(store.engine).toBe(engineCase.name);
      const fence = await fenceOn();
      const key = uniqueKey("migrate");
      await store.write(fence, (trx) => trx.insertInto("realms").values(realmRow(key)).execute());
      await store.migrate();
      await store.migrate();
      expect(await realmNamed(key)).toBeDefined();
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from kysely_migration`.execute(store.db);
      expect(rows[0]!.n).toBe(Object.keys(migrations).length); // each applied once
    });
  });

  describe("write", () => {
    it("commits before it resolves and returns what fn returned", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("commit");
      const id = await store.write(fence, async (trx) => {
        const row = await trx.insertInto("realms").values(realmRow(key)).returning("id").executeTakeFirstOrThrow();
        return row.id;
      });
      expect(typeof id).toBe("number");
      expect((await realmNamed(key))?.id).toBe(id);
      if (engineCase.reopen) {
        // Seen from another process's connections too: it is committed, not merely visible to its own session.
        const other = await engineCase.reopen();
        try {
          const row = await other.db.selectFrom("realms").select("id").where("string_id", "=", key).executeTakeFirst();
          expect(row?.id).toBe(id);
        } finally {
          await other.close();
        }
      }
    });

    it.runIf(engineCase.name === "postgres")("survives Postgres closing its idle connections, and writes again", async () => {
      const fence = await fenceOn();
      await store.write(fence, (trx) => sql`select 1`.execute(trx));
      const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
      await admin.connect();
      try {
        const { rows } = await admin.query(
          "select count(pg_terminate_backend(pid))::int as n from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()",
          [new URL(await pgUrl()).pathname.slice(1)],
        );
        expect(rows[0].n).toBeGreaterThan(0);
      } finally {
        await admin.end();
      }
      await sleep(200); // the pool's 'error' event arrives meanwhile; unhandled, it would end the test process
      const value = await store.write(fence, async (trx) => (await sql<{ v: number }>`select 41 + 1 as v`.execute(trx)).rows[0]!.v);
      expect(value).toBe(42);
    });

    it("rolls back everything fn wrote when fn throws, and rejects with fn's error", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("rollback");
      const boom = new Error("boom");
      const err = await rejection(
        store.write(fence, async (trx) => {
          await trx.insertInto("realms").values(realmRow(key)).execute();
          await trx.insertInto("realms").values(realmRow(`${key}-second`)).execute();
          throw boom;
        }),
      );
      expect(err).toBe(boom);
      expect(await realmNamed(key)).toBeUndefined();
      expect(await realmNamed(`${key}-second`)).toBeUndefined();
    });

    it("refuses a fence with a stale epoch, a wrong owner or an unknown shard with FENCED, without running fn", async () => {
      const fence = await fenceOn("node-a");
      const stale: Fence[] = [
        { ...fence, epoch: fence.epoch - 1 },
        { ...fence, epoch: fence.epoch + 1 },
        { ...fence, node: "node-b" },
        { shard: SHARDS + 1000, epoch: 1, node: "node-a" },
      ];
      for (const bad of stale) {
        const key = uniqueKey("fenced");
        let ran = false;
        await expectCode(
          store.write(bad, async (trx) => {
            ran = true;
            await trx.insertInto("realms").values(realmRow(key)).execute();
          }),
          "FENCED",
        );
        expect(ran).toBe(false);
        expect(await realmNamed(key)).toBeUndefined();
      }
      // The right fence still writes.
      const key = uniqueKey("fence-ok");
      await store.write(fence, (trx) => trx.insertInto("realms").values(realmRow(key)).execute());
      expect(await realmNamed(key)).toBeDefined();
    });

    it("makes a takeover wait for a write in flight, so that write never lands behind its successor", async () => {
      const fence = await fenceOn("node-a");
      const key = uniqueKey("inflight");
      let openGate!: () => void;
      const gate = new Promise<void>((r) => (openGate = r));
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      const writing = store.write(fence, async (trx) => {
        await trx.insertInto("realms").values(realmRow(key)).execute();
        entered();
        await gate;
        return "written";
      });
      await inside;
      let takenOver = false;
      const takeover = store.acquireLease(fence.shard, "node-b", 60, true).then((lease) => {
        takenOver = true;
        return lease;
      });
      await sleep(100);
      expect(takenOver).toBe(false);
      openGate();
      expect(await writing).toBe("written");
      expect(await takeover).toEqual({ shard: fence.shard, epoch: fence.epoch + 1, reclaimed: true });
      expect(await realmNamed(key)).toBeDefined();
      // And from now on the old owner is refused.
      await expectCode(store.write(fence, async () => undefined), "FENCED");
    });
  });

  describe("appendMessage", () => {
    /** A new message has none of the bookkeeping an edit or a move adds (migration 2026-11-22T0500-messages). */
    const NEVER_EDITED = { edit_history: null, last_edit_time: null, last_moved_time: null };

    it("stores a message and resolves with its id after commit", async () => {
      const fence = await fenceOn();
      const m = message();
      expect(await store.appendMessage(m, fence)).toBe(m.id);
      const row = await store.db.selectFrom("messages").selectAll().where("id", "=", m.id).executeTakeFirst();
      expect(row).toEqual({ ...m, ...NEVER_EDITED });
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
      const ids = await Promise.all(messages.map((m) => store.appendMessage(m, fence, [{ user_id: 7, flags: 0 }])));
      expect(ids).toEqual(messages.map((m) => m.id));
      const rows = await store.db.selectFrom("messages").selectAll().where("id", "in", ids).orderBy("id").execute();
      expect(rows).toEqual(messages.map((m) => ({ ...m, ...NEVER_EDITED })));
    });

    it("stores 200 concurrent appends, resolves each with its own id, and group-commits them", async () => {
      const fence = await fenceOn();
      const messages = Array.from({ length: 200 }, (_, i) => message(i % 2 ? uniqueKey("bulk") : null));
      const ids = await Promise.all(messages.map((m) => store.appendMessage(m, fence)));
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
      expect(await store.appendMessage(first, fence)).toBe(first.id);
      expect(await store.appendMessage(again, fence)).toBe(first.id);
      // A redelivery carrying the very same message (same id too) is also absorbed.
      expect(await store.appendMessage({ ...first }, fence)).toBe(first.id);
      const rows = await store.db.selectFrom("messages").selectAll().where("send_key", "=", key).execute();
      expect(rows).toEqual([{ ...first, ...NEVER_EDITED }]);
      expect(await storedIds([again.id])).toEqual([]);
    });

    it("rejects a commit the database refuses with the database's error, and commits the next one, even as a store's first", async () => {
      // A store of its own, so that the refused commit is the first to run its statement (on PGlite, the batch
      // that also parses it: the next one must not parse it again).
      const fresh = await engineCase.open();
      try {
        await fresh.migrate();
        await fresh.ensureShards(SHARDS);
        const s = shard();
        const lease = await fresh.acquireLease(s, "node-a", 60);
        const fence = { shard: s, epoch: lease!.epoch, node: "node-a" };
        // Two messages with one id under different send_keys, committed together: the primary key refuses the batch.
        const clash = message(uniqueKey("clash"));
        const results = await Promise.allSettled([fresh.appendMessage(clash, fence), fresh.appendMessage({ ...message(uniqueKey("clash")), id: clash.id }, fence)]);
        for (const r of results) expect(r).toMatchObject({ status: "rejected", reason: { code: "23505" } });
        const next = message();
        expect(await fresh.appendMessage(next, fence, [{ user_id: 7, flags: 0 }])).toBe(next.id);
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
      expect(await store.appendMessage(first, fence, [{ user_id: 1, flags: 1 }, { user_id: 2, flags: 0 }])).toBe(first.id);
      expect(await store.appendMessage(again, fence, [{ user_id: 3, flags: 0 }])).toBe(first.id);
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
      expect(await Promise.all([store.appendMessage(a1, fence), store.appendMessage(a2, fence)])).toEqual([a1.id, a1.id]);
      // In one batch: a filler takes the first transaction, both repeats land in the next one together.
      const withinKey = uniqueKey("within");
      const filler = message();
      const w1 = message(withinKey);
      const w2 = message(withinKey);
      const w3 = message(withinKey);
      const other = message(uniqueKey("other"));
      const results = await Promise.all([filler, w1, w2, other, w3].map((m) => store.appendMessage(m, fence)));
      expect(results).toEqual([filler.id, w1.id, w1.id, other.id, w1.id]);
      for (const key of [acrossKey, withinKey]) {
        const rows = await store.db.selectFrom("messages").select("id").where("send_key", "=", key).execute();
        expect(rows).toHaveLength(1);
      }
      expect(await storedIds([a1.id, a2.id, filler.id, w1.id, w2.id, w3.id, other.id])).toEqual(
        [a1.id, filler.id, w1.id, other.id].sort((a, b) => a - b),
      );
    });

    it("rejects a stale fence's appends with FENCED and commits the others of the same batch", async () => {
      const fence = await fenceOn("node-a");
      const staleEpoch: Fence = { ...fence, epoch: fence.epoch - 1 };
      const wrongOwner: Fence = { ...fence, node: "node-b" };
      // Alone.
      const lone = message();
      await expectCode(store.appendMessage(lone, staleEpoch), "FENCED");
      expect(await storedIds([lone.id])).toEqual([]);
      // Mixed into one batch (the filler flushes first, the rest accumulate behind it).
      const filler = message();
      const good1 = message(uniqueKey("good"));
      const bad1 = message(uniqueKey("bad"));
      const good2 = message();
      const bad2 = message();
      const settled = await Promise.allSettled([
        store.appendMessage(filler, fence),
        store.appendMessage(good1, fence),
        store.appendMessage(bad1, staleEpoch),
        store.appendMessage(good2, fence),
        store.appendMessage(bad2, wrongOwner),
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
        store.appendMessage(mixed[0]!, fence),
        store.appendMessage(mixed[1]!, otherShard),
        store.appendMessage(mixed[2]!, { ...otherShard, shard: fence.shard }),
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
          await store.appendMessage(m, fence);
          await sql`insert into user_message_lists (message_id, user_ids, flags) values (${m.id}, ${lists[i]!.user_ids}::integer[], ${lists[i]!.flags}::integer[])`.execute(store.db);
        }
        return { fence, a: messages[0], b: messages[1] };
      }
      const recipients = (n: number, from = 100) => Array.from({ length: n }, (_, i) => ({ user_id: from + i, flags: i % 3 }));

      it("commits a message past recipientListAbove as one list, readable at once, expanded into rows behind, exactly once", async () => {
        // A second store over the same database, listing past 2 recipients and expanding 1 s after the commit, two
        // recipients a step.
        const listing = new SqlStore(store, { recipientListAbove: 2, recipientListDelayMs: 1_000, recipientListStep: 2 });
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
        await store.write(fence, (trx) => store.expandRecipientLists(trx, [a.id]));
        expect(await recipientsOf(a.id)).toEqual({ view: [{ user_id: 1, flags: 0 }, { user_id: 2, flags: 1 }], rows: [{ user_id: 1, flags: 0 }, { user_id: 2, flags: 1 }], lists: [] });
        expect(await recipientsOf(b.id)).toEqual({ view: [{ user_id: 3, flags: 8 }], rows: [], lists: [{ user_ids: [3], flags: [8] }] });
        await store.migrate();
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
      await Promise.all(payloads.map((payload, i) => store.appendUserEvent({ user_id: userId, seq: i + 1, payload }, fence, { behind: i === 2 })));
      await store.appendUserEvent({ user_id: userId, seq: 1, payload: { text: "a later copy" } }, fence);
      expect(await store.userEventsAfter(userId, 0)).toEqual(payloads.map((payload, i) => ({ user_id: userId, seq: i + 1, payload })));
      await expectCode(store.appendUserEvent({ user_id: userId, seq: 9, payload: {} }, { ...fence, epoch: fence.epoch - 1 }), "FENCED");
      expect(await store.userEventsAfter(userId, 3)).toEqual([]);
    });
  });

  describe("allocateMessageIds", () => {
    it("hands out disjoint blocks of 256, each above every block before it", async () => {
      const sequential: { first: number; size: number }[] = [];
      for (let i = 0; i < 5; i++) sequential.push(await store.allocateMessageIds());
      for (const block of sequential) {
        expect(block.size).toBe(256);
        expect(Number.isSafeInteger(block.first)).toBe(true);
        expect(block.first).toBeGreaterThan(0);
      }
      for (let i = 1; i < sequential.length; i++) {
        expect(sequential[i]!.first).toBeGreaterThanOrEqual(sequential[i - 1]!.first + sequential[i - 1]!.size);
      }
      const concurrent = await Promise.all(Array.from({ length: 30 }, () => store.allocateMessageIds()));
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
          const next = await other.allocateMessageIds();
          expect(next.first).toBeGreaterThanOrEqual(highest.first + highest.size);
        } finally {
          await other.close();
        }
      }
    });
  });

  describe("snapshots", () => {
    it("loads an absent snapshot as undefined", async () => {
      expect(await store.loadSnapshot("channel", uniqueKey("absent"))).toBeUndefined();
    });

    it("creates version 1 from expected 0, then increments only from the stored version", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("snap");
      const v1 = { name: "general", members: [1, 2, 3], nested: { topic: "ünïcode ✓" } };
      expect(await store.saveSnapshot("channel", key, 0, v1, fence)).toBe(1);
      expect(await store.loadSnapshot("channel", key)).toEqual({ version: 1, state: v1 });
      // The same key under another kind is another snapshot.
      expect(await store.loadSnapshot("user", key)).toBeUndefined();

      expect(await store.saveSnapshot("channel", key, 1, { name: "v2" }, fence)).toBe(2);
      expect(await store.saveSnapshot("channel", key, 2, { name: "v3" }, fence)).toBe(3);
      expect(await store.loadSnapshot("channel", key)).toEqual({ version: 3, state: { name: "v3" } });

      for (const wrong of [0, 1, 2, 4]) {
        await expectCode(store.saveSnapshot("channel", key, wrong, { name: `wrong ${wrong}` }, fence), "CONFLICT");
      }
      expect(await store.loadSnapshot("channel", key)).toEqual({ version: 3, state: { name: "v3" } });
    });

    it("refuses an expected version on an absent snapshot with CONFLICT and creates nothing", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("absent-expected");
      await expectCode(store.saveSnapshot("channel", key, 3, { x: 1 }, fence), "CONFLICT");
      expect(await store.loadSnapshot("channel", key)).toBeUndefined();
    });

    it("lets exactly one of several concurrent saves from the same version win", async () => {
      const fence = await fenceOn();
      const key = uniqueKey("race");
      for (const expected of [0, 1]) {
        const settled = await Promise.allSettled(
          Array.from({ length: 5 }, (_, i) => store.saveSnapshot("channel", key, expected, { writer: i }, fence)),
        );
        const won = settled.filter((s) => s.status === "fulfilled");
        expect(won).toHaveLength(1);
        expect((won[0] as PromiseFulfilledResult<number>).value).toBe(expected + 1);
        for (const s of settled) {
          if (s.status === "rejected") expect((s.reason as ChorusError).code).toBe("CONFLICT");
        }
        const winner = settled.findIndex((s) => s.status === "fulfilled");
        expect(await store.loadSnapshot("channel", key)).toEqual({ version: expected + 1, state: { writer: winner } });
      }
    });

    it("refuses a stale fence with FENCED and leaves the snapshot as it was", async () => {
      const fence = await fenceOn("node-a");
      const key = uniqueKey("snap-fenced");
      const newKey = uniqueKey("snap-fenced-new");
      await store.saveSnapshot("user", key, 0, { n: 1 }, fence);
      for (const bad of [{ ...fence, epoch: fence.epoch + 1 }, { ...fence, node: "node-b" }]) {
        await expectCode(store.saveSnapshot("user", key, 1, { n: 2 }, bad), "FENCED");
        await expectCode(store.saveSnapshot("user", newKey, 0, { n: 2 }, bad), "FENCED");
      }
      expect(await store.loadSnapshot("user", key)).toEqual({ version: 1, state: { n: 1 } });
      expect(await store.loadSnapshot("user", newKey)).toBeUndefined();
    });
  });

  describe("leases", () => {
    it("ensureShards creates free lease rows idempotently", async () => {
      const s = shard();
      await store.ensureShards(SHARDS);
      await store.ensureShards(SHARDS + 4);
      await store.ensureShards(SHARDS + 4);
      const rows = await store.db.selectFrom("shard_leases").select(["shard", "owner", "epoch"]).orderBy("shard").execute();
      expect(rows.map((r) => r.shard)).toEqual(Array.from({ length: SHARDS + 4 }, (_, i) => i));
      // A held lease survives ensureShards.
      const lease = await store.acquireLease(s, "node-a", 60);
      await store.ensureShards(SHARDS + 4);
      const row = await store.db.selectFrom("shard_leases").selectAll().where("shard", "=", s).executeTakeFirstOrThrow();
      expect(row.owner).toBe("node-a");
      expect(row.epoch).toBe(lease!.epoch);
      // The new rows are free.
      expect(await store.acquireLease(SHARDS + 2, "node-a", 60)).toEqual({ shard: SHARDS + 2, epoch: 1, reclaimed: false });
    });

    it("gives a free shard epoch 1 and refuses a second node while the lease is live", async () => {
      const s = shard();
      expect(await store.acquireLease(s, "node-a", 60)).toEqual({ shard: s, epoch: 1, reclaimed: false });
      expect(await store.acquireLease(s, "node-b", 60)).toBeUndefined();
      // Concurrent attempts on a free shard: exactly one owner.
      const t = shard();
      const attempts = await Promise.all(["n1", "n2", "n3", "n4"].map((n) => store.acquireLease(t, n, 60)));
      expect(attempts.filter((a) => a !== undefined)).toEqual([{ shard: t, epoch: 1, reclaimed: false }]);
      expect(await store.leasesHeldBy("node-a")).toContainEqual({ shard: s, epoch: 1 });
    });

    it("renews a held lease, and releasing lets another node take it at once with the next epoch", async () => {
      const s = shard();
      const lease = (await store.acquireLease(s, "node-a", 60))!;
      expect(await store.renewLease(lease, "node-a", 60)).toBe(true);
      expect(await store.renewLease(lease, "node-b", 60)).toBe(false);
      expect(await store.renewLease({ ...lease, epoch: lease.epoch + 1 }, "node-a", 60)).toBe(false);
      // Releasing as someone else, or with a wrong epoch, does nothing.
      await store.releaseLease(lease, "node-b");
      await store.releaseLease({ ...lease, epoch: lease.epoch + 1 }, "node-a");
      expect(await store.acquireLease(s, "node-b", 60)).toBeUndefined();
      await store.releaseLease(lease, "node-a");
      expect(await store.leasesHeldBy("node-a")).not.toContainEqual(lease);
      const next = await store.acquireLease(s, "node-b", 60);
      // Released: the next holder knows nothing was left behind.
      expect(next).toEqual({ shard: s, epoch: lease.epoch + 1, reclaimed: false });
      expect(await store.renewLease(lease, "node-a", 60)).toBe(false);
      await expectCode(store.write({ shard: s, epoch: lease.epoch, node: "node-a" }, async () => undefined), "FENCED");
      await store.write({ shard: s, epoch: next!.epoch, node: "node-b" }, async () => undefined);
    });

    it("with force, takes even a live lease and bumps the epoch, fencing the previous holder", async () => {
      const s = shard();
      const old = (await store.acquireLease(s, "node-a", 60))!;
      const forced = await store.acquireLease(s, "node-b", 60, true);
      // Never released: the new holder knows it took over from a holder that may have left work unfinished.
      expect(forced).toEqual({ shard: s, epoch: old.epoch + 1, reclaimed: true });
      expect(await store.renewLease(old, "node-a", 60)).toBe(false);
      await expectCode(store.write({ shard: s, epoch: old.epoch, node: "node-a" }, async () => undefined), "FENCED");
      await expectCode(store.appendMessage(message(), { shard: s, epoch: old.epoch, node: "node-a" }), "FENCED");
      // A restarted single process forcing its own shard back also gets a new epoch.
      expect(await store.acquireLease(s, "node-b", 60, true)).toEqual({ shard: s, epoch: old.epoch + 2, reclaimed: true });
    });

    it("after expiry: another node takes over with epoch + 1, the old holder can neither renew nor write; heartbeats expire too", async () => {
      const s = shard();
      const old = (await store.acquireLease(s, "node-a", 1))!;
      const oldFence: Fence = { shard: s, epoch: old.epoch, node: "node-a" };
      expect(await store.acquireLease(s, "node-b", 1)).toBeUndefined();
      const hbKey = uniqueKey("hb");
      expect(await store.heartbeat(`${hbKey}-old`, 90, 1)).toContain(90);
      await sleep(1100); // the one wait of the suite: the lease and the heartbeat above are now older than 1 s

      const taken = await store.acquireLease(s, "node-b", 60);
      expect(taken).toEqual({ shard: s, epoch: old.epoch + 1, reclaimed: true });
      expect(await store.renewLease(old, "node-a", 60)).toBe(false);
      const key = uniqueKey("after-takeover");
      await expectCode(
        store.write(oldFence, (trx) => trx.insertInto("realms").values(realmRow(key)).execute()),
        "FENCED",
      );
      expect(await realmNamed(key)).toBeUndefined();
      const m = message();
      await expectCode(store.appendMessage(m, oldFence), "FENCED");
      expect(await storedIds([m.id])).toEqual([]);
      await expectCode(store.saveSnapshot("channel", key, 0, {}, oldFence), "FENCED");
      // The new holder writes.
      const n = message();
      expect(await store.appendMessage(n, { shard: s, epoch: taken!.epoch, node: "node-b" })).toBe(n.id);
      expect(await store.leasesHeldBy("node-b")).toContainEqual({ shard: s, epoch: taken!.epoch });
      expect(await store.leasesHeldBy("node-a")).not.toContainEqual(old);

      const alive = await store.heartbeat(`${hbKey}-new`, 91, 1);
      expect(alive.has(91)).toBe(true);
      expect(alive.has(90)).toBe(false);
    });
  });

  describe("heartbeat", () => {
    it("returns the set of worker indexes seen alive, including the caller's", async () => {
      const key = uniqueKey("hb-live");
      const first = await store.heartbeat(`${key}-0`, 0, 60);
      expect(first).toBeInstanceOf(Set);
      expect(first.has(0)).toBe(true);
      await store.heartbeat(`${key}-1`, 1, 60);
      const seen = await store.heartbeat(`${key}-2`, 2, 60);
      for (const i of [0, 1, 2]) expect(seen.has(i)).toBe(true);
      expect(seen.has(5)).toBe(false);
      // A repeated heartbeat keeps one entry for the node.
      const again = await store.heartbeat(`${key}-0`, 0, 60);
      for (const i of [0, 1, 2]) expect(again.has(i)).toBe(true);
      const rows = await store.db.selectFrom("cluster_nodes").select("node_id").where("node_id", "=", `${key}-0`).execute();
      expect(rows).toHaveLength(1);
    });
  });
});
