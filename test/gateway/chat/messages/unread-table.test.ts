/**
 * The `unread_messages` table (migrations 2026-11-28T0800-unread-messages, 1600-unread-triggers-linear,
 * 2026-12-01T2330-unread-rows-by-flag-rows) follows every writer of the unread flag, and the `unread_user_messages`
 * view over it and the recipient lists (2026-12-02T0330) is exactly the unread rows of `user_messages`,
 * through a real server on both engines: after each kind of write, the table equals the unread flag rows joined to
 * their messages, and POST /register's `unread_msgs` lists exactly the unread messages the flags (rows and recipient
 * lists, through the `user_messages` view) say, in the channel and topic where they are now. And the migration
 * fills the table from a store that already holds flag rows.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { api, createUser, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { messageApi, type User } from "../../../support/messages.ts";
import { migrations } from "../../../../actors/migrations/index.ts";

/** What an unread message is filed under in `unread_msgs`: its channel and topic, or "dm". */
type Place = [id: number, place: string];

describe.each(ENGINES)("the unread table on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  let general: number;
  let other: number;
  const { send, toChannel, subscribe, patch } = messageApi(() => server);
  const db = () => server.node.store.db;
  const flag = (as: User, messages: number[], op: "add" | "remove", name = "read") =>
    api(server, "POST", "/messages/flags", { as, params: { messages, op, flag: name } });

  /** The table equals the unread flag rows (expanded ones: listed recipients have no row yet) with their messages. */
  async function expectTableFollowsFlags(): Promise<number> {
    const table = await sql`
      select user_id, message_id::int as message_id, stream_id, recipient_id, topic, flags from unread_messages order by 1, 2`.execute(db());
    const truth = await sql`
      select um.user_id, um.message_id::int as message_id, m.stream_id, m.recipient_id, m.topic, um.flags
      from user_message_rows um join messages m on m.id = um.message_id where (um.flags & 1) = 0 order by 1, 2`.execute(db());
    expect(table.rows).toEqual(truth.rows);
    // The view the unread reads walk: every unread flag of a message, rows and listed recipients alike.
    const walked = await sql`select user_id, message_id::int as message_id, flags from unread_user_messages order by 1, 2`.execute(db());
    const unread = await sql`
      select user_id, message_id::int as message_id, flags from user_messages um
      where (flags & 1) = 0 and exists (select 1 from messages m where m.id = um.message_id) order by 1, 2`.execute(db());
    expect(walked.rows).toEqual(unread.rows);
    return table.rows.length;
  }

  /** `unread_msgs` files every unread message of the flags (subscribed channels and conversations) where it is now. */
  async function expectStateFollowsFlags(user: User): Promise<Place[]> {
    const res = await api(server, "POST", "/register", { as: user, params: { fetch_event_types: ["update_message_flags"] } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const state = res.body.unread_msgs;
    const listed: Place[] = [
      ...state.streams.flatMap((s: any) => s.unread_message_ids.map((id: number) => [id, `${s.stream_id}/${s.topic.toLowerCase()}`])),
      ...[...state.pms, ...state.huddles].flatMap((c: any) => c.unread_message_ids.map((id: number) => [id, "dm"])),
    ];
    const { rows } = await sql<{ id: number; place: string }>`
      select um.message_id::int as id, coalesce(m.stream_id || '/' || lower(m.topic), 'dm') as place
      from user_messages um join messages m on m.id = um.message_id
      left join subscriptions s on s.user_id = um.user_id and s.stream_id = m.stream_id
      where um.user_id = ${user.id} and (um.flags & 1) = 0 and coalesce(s.active, true)`.execute(db());
    const byId = (a: Place, b: Place) => a[0] - b[0];
    expect(listed.sort(byId)).toEqual(rows.map((r): Place => [r.id, r.place]).sort(byId));
    return listed;
  }

  async function expectFollowed(...users: User[]): Promise<void> {
    await expectTableFollowsFlags();
    for (const user of users) await expectStateFollowsFlags(user);
  }

  beforeAll(async () => {
    // Past two recipients a message's flags stay a recipient list (never expanded in the background here): a flag
    // write expands the messages it touches, and the test expands the rest by hand.
    server = await startTestServer(engine, { recipientListAbove: 2, recipientListDelayMs: 3_600_000 });
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    ({ general, other } = await subscribe(server.owner, ["general", "other"], { principals: [alice.id, bob.id, carol.id] }));
  });
  afterAll(async () => server?.close());

  it("follows sends (rows and recipient lists) and the lists' expansion", async () => {
    const listed = await toChannel(alice, "plans", "to everyone: a recipient list");
    const dm = (await send(alice, { type: "direct", to: JSON.stringify([carol.id]), content: "two recipients: rows" })).body.id;
    const group = (await send(alice, { type: "direct", to: JSON.stringify([bob.id, carol.id]), content: "three: a list" })).body.id;
    expect((await db().selectFrom("user_message_lists").select("message_id").execute()).map((r) => Number(r.message_id)).sort()).toEqual([listed, group].sort());
    await expectTableFollowsFlags();
    expect((await expectStateFollowsFlags(carol)).map(([id]) => id).sort((a, b) => a - b)).toEqual([listed, dm, group]);
    await sql`select chorus_expand_recipient_lists(null, null)`.execute(db());
    // Every unread recipient of the three, now as rows: bob and carol of `listed` and `group`, carol of `dm`.
    expect(await expectTableFollowsFlags()).toBe(5);
    await expectFollowed(alice, bob, carol);
  });

  it("follows marking read and unread, and flags that change on unread messages", async () => {
    const a = await toChannel(alice, "flags", "one");
    const b = await toChannel(alice, "flags", "two @**Carol**");
    // Marking read a listed message expands it first; marking it unread again brings its row back.
    expect((await flag(carol, [a, b], "add")).status).toBe(200);
    await expectFollowed(carol);
    expect((await flag(carol, [a], "remove")).status).toBe(200);
    expect((await expectStateFollowsFlags(carol)).map(([id]) => id)).toContain(a);
    // Starring an unread message changes its flags, not its unreadness.
    expect((await flag(bob, [b], "add", "starred")).status).toBe(200);
    const { flags } = await db().selectFrom("unread_messages").select("flags").where("user_id", "=", bob.id).where("message_id", "=", b).executeTakeFirstOrThrow();
    expect(flags & 2).toBe(2);
    // Editing the content changes who is mentioned.
    expect((await patch(alice, b, { content: "two @**Bob**" })).status).toBe(200);
    const bobs = await db().selectFrom("unread_messages").select("flags").where("user_id", "=", bob.id).where("message_id", "=", b).executeTakeFirstOrThrow();
    expect(bobs.flags & 8).toBe(8);
    await expectFollowed(bob, carol);
  });

  it("follows marking everything, a channel and a topic read", async () => {
    await toChannel(alice, "topic one", "x");
    await toChannel(alice, "topic two", "y");
    await toChannel(alice, "elsewhere", "z", "other");
    expect((await api(server, "POST", "/mark_topic_as_read", { as: bob, params: { stream_id: general, topic_name: "topic one" } })).status).toBe(200);
    await expectFollowed(bob);
    expect((await api(server, "POST", "/mark_stream_as_read", { as: bob, params: { stream_id: general } })).status).toBe(200);
    // Bob's direct messages stay unread.
    expect((await expectStateFollowsFlags(bob)).map(([, place]) => place).filter((p) => p !== "dm")).toEqual([`${other}/elsewhere`]);
    expect((await api(server, "POST", "/mark_all_as_read", { as: bob })).status).toBe(200);
    expect(await expectStateFollowsFlags(bob)).toEqual([]);
    await expectTableFollowsFlags();
  });

  // Moves without Notification Bot's notice: it is sent after the move's answer (told, not asked), and a register
  // made before it landed and the flags read after it disagreed (the full suite saw it twice, on a loaded machine).
  const quietly = { send_notification_to_new_thread: false };

  it("follows topic and channel moves, and deletions", async () => {
    const first = await toChannel(alice, "before", "one");
    const second = await toChannel(alice, "before", "two");
    expect((await patch(server.owner, first, { topic: "after", propagate_mode: "change_all", ...quietly })).status).toBe(200);
    expect(await expectStateFollowsFlags(carol)).toEqual(expect.arrayContaining([[first, `${general}/after`], [second, `${general}/after`]]));
    await expectTableFollowsFlags();
    expect((await patch(server.owner, second, { stream_id: other, propagate_mode: "change_one", ...quietly })).status).toBe(200);
    expect(await expectStateFollowsFlags(carol)).toEqual(expect.arrayContaining([[first, `${general}/after`], [second, `${other}/after`]]));
    await expectTableFollowsFlags();
    expect((await api(server, "DELETE", `/messages/${first}`, { as: server.owner, template: "/messages/{message_id}" })).status).toBe(200);
    expect((await expectStateFollowsFlags(carol)).map(([id]) => id)).not.toContain(first);
    expect(await db().selectFrom("unread_messages").select("user_id").where("message_id", "=", first).execute()).toEqual([]);
    await expectFollowed(alice, bob, carol);
  });

  // Only Postgres runs two transactions at once. An expansion of a message's list in another transaction (a
  // shard take-over's recovery, the background expansion) wrote its rows with the topic it read before the move;
  // the move must not update the table before that expansion commits, or those rows keep the old topic.
  it.runIf(engine === "redis+postgres")("follows a move made while another transaction expands the moved message's list", async () => {
    const listed = await toChannel(alice, "racing", "moved while its list expands");
    let moved: Promise<{ status: number }> | undefined;
    await db().transaction().execute(async (trx) => {
      await sql`select chorus_expand_recipient_lists(${`{${listed}}`}::bigint[], null)`.execute(trx);
      moved = patch(server.owner, listed, { topic: "raced", propagate_mode: "change_all", ...quietly });
      // The move waits for this expansion to commit; were it not to, it ends well within this time.
      await Promise.race([moved, new Promise((resolve) => setTimeout(resolve, 2_000))]);
    });
    expect((await moved!).status).toBe(200);
    expect(await expectStateFollowsFlags(carol)).toContainEqual([listed, `${general}/raced`]);
    await expectFollowed(alice, bob, carol);
  });

  it("keeps an unsubscribed channel's rows out of the state, and back after subscribing again", async () => {
    const kept = await toChannel(alice, "while away", "still unread", "other");
    expect((await api(server, "DELETE", "/users/me/subscriptions", { as: carol, params: { subscriptions: ["other"] } })).status).toBe(200);
    // Zulip keeps the flags of a channel one left: the row stays (once its list is expanded), the state leaves it out.
    await sql`select chorus_expand_recipient_lists(null, null)`.execute(db());
    expect((await db().selectFrom("unread_messages").select("message_id").where("user_id", "=", carol.id).where("message_id", "=", kept).execute()).length).toBe(1);
    expect((await expectStateFollowsFlags(carol)).map(([id]) => id)).not.toContain(kept);
    await subscribe(carol, ["other"]);
    expect((await expectStateFollowsFlags(carol)).map(([id]) => id)).toContain(kept);
    await expectTableFollowsFlags();
  });

  it("follows a user's deactivation and reactivation", async () => {
    const before = await toChannel(alice, "absence", "before");
    expect((await api(server, "DELETE", `/users/${carol.id}`, { as: server.owner, template: "/users/{user_id}" })).status).toBe(200);
    await toChannel(alice, "absence", "while deactivated");
    await expectTableFollowsFlags();
    expect((await api(server, "POST", `/users/${carol.id}/reactivate`, { as: server.owner, template: "/users/{user_id}/reactivate" })).status).toBe(200);
    expect((await expectStateFollowsFlags(carol)).map(([id]) => id)).toContain(before);
    await sql`select chorus_expand_recipient_lists(null, null)`.execute(db());
    await expectFollowed(alice, bob, carol);
  });

  // The triggers' statements run once per writing statement, on plans made once per session that take a transition
  // table for one row: a statement joining two transition tables, or looking one up per row of another, was
  // quadratic (13,000 flag rows in one group commit: 9.2 s; this test's writes took minutes, past the test's timeout).
  // Writes of tens of thousands of rows at once are every day's: a busy channel's group commit, marking everything read.
  // Linear, the test took 5.9 s on PGlite on 2026-11-28's machine and 16-30 s on 2026-12-01's slower one beside a full
  // run: its own timeout, 90 s, is still far below what the quadratic plans took.
  it("follows writes of tens of thousands of rows in one statement each: inserted, read, unread, moved, deleted", async () => {
    const template = await toChannel(alice, "bulk", "the template");
    const first = 2_000_000_000; // far above the ids the server hands out; below 2^31, as expectTableFollowsFlags reads ids as int
    const count = 15_000;
    const ids = sql`between ${first}::bigint and ${first + count - 1}::bigint`;
    await sql`
      insert into messages (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content, rendered_content, date_sent, sending_client)
      select ${first}::bigint + g, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, 'bulk ' || g, rendered_content, date_sent, sending_client
      from messages, generate_series(0, ${count - 1}) g where id = ${template}`.execute(db());
    // Unread for bob and carol, read for alice, the sender: 45,000 rows.
    await sql`
      insert into user_message_rows (user_id, message_id, flags)
      select u.id, ${first}::bigint + g, case when u.id = ${alice.id} then 1 else 0 end
      from generate_series(0, ${count - 1}) g, (values (${alice.id}::int), (${bob.id}::int), (${carol.id}::int)) u(id)`.execute(db());
    expect(await expectTableFollowsFlags()).toBeGreaterThanOrEqual(2 * count);
    await sql`update user_message_rows set flags = flags | 1 where message_id ${ids}`.execute(db());
    await expectTableFollowsFlags();
    await sql`update user_message_rows set flags = (flags & ~1) | 2 where message_id ${ids}`.execute(db());
    expect(await db().selectFrom("unread_messages").select("message_id").where("flags", "=", 2).where("message_id", ">=", first).execute()).toHaveLength(3 * count);
    await expectTableFollowsFlags();
    await sql`update messages set topic = 'bulk moved', stream_id = ${other} where id ${ids}`.execute(db());
    await expectTableFollowsFlags();
    await sql`delete from user_message_rows where message_id ${ids} and user_id = ${bob.id}`.execute(db());
    await expectTableFollowsFlags();
    await sql`delete from messages where id ${ids}`.execute(db());
    expect(await db().selectFrom("unread_messages").select("message_id").where("message_id", ">=", first).execute()).toEqual([]);
    await expectFollowed(alice, bob, carol);
  }, 90_000);

  it("is filled by its migration from the flag rows a store already holds", async () => {
    // The store as before the migration: no table, no triggers, the migration not applied. (kysely runs migrations
    // in name order only: forgetting it and the later ones lets them run again; the later ones are idempotent.)
    await sql`drop table unread_messages cascade`.execute(db()); // and the view over it (0330)
    for (const [trigger, table] of [
      ["unread_messages_flags_insert", "user_message_rows"], ["unread_messages_flags_update", "user_message_rows"], ["unread_messages_flags_delete", "user_message_rows"],
      ["unread_messages_moves", "messages"], ["unread_messages_deletions", "messages"],
    ]) {
      await sql`drop trigger ${sql.id(trigger!)} on ${sql.table(table!)}`.execute(db());
    }
    const unseen = (await send(bob, { type: "direct", to: JSON.stringify([carol.id]), content: "written before the table" })).body.id;
    await sql`delete from kysely_migration where name >= '2026-11-28T0800-unread-messages'`.execute(db());
    await server.node.store.migrate(migrations);
    expect(await expectTableFollowsFlags()).toBeGreaterThan(0);
    // Moves and deletions reach the rows through the flag rows: the table has its primary key alone (2330).
    const indexes = await sql<{ indexname: string }>`select indexname from pg_indexes where tablename = 'unread_messages' order by 1`.execute(db());
    expect(indexes.rows.map((r) => r.indexname)).toEqual(["unread_messages_pkey"]);
    // The flag rows keep no index of their unread ones: the unread reads walk the table (0330).
    const flagIndexes = await sql<{ indexname: string }>`select indexname from pg_indexes where tablename = 'user_message_rows'`.execute(db());
    expect(flagIndexes.rows.map((r) => r.indexname)).not.toContain("user_messages_unread");
    expect(await expectStateFollowsFlags(carol)).toContainEqual([unseen, "dm"]);
    // And the triggers are back.
    const next = (await send(bob, { type: "direct", to: JSON.stringify([carol.id]), content: "after" })).body.id;
    expect(await expectStateFollowsFlags(carol)).toContainEqual([next, "dm"]);
    await expectTableFollowsFlags();
  });
});
