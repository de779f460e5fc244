/**
 * `search:` narrows through a real server on both engines (issue 28): Zulip's semantics (every word, stemmed;
 * quoted phrases in order; the last word as a prefix; stop words ignored), the highlighting HTML, every other
 * operator beside a search, the access rules, and the full-text index: used by the query, and built by its
 * migration over a store that already holds messages.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { api, createUser, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { eventually, ids, messageApi, type User } from "../../../support/messages.ts";
import { migrations } from "../../../../actors/migrations/index.ts";
import { realmSearchConfig, searchCondition } from "../../../../actors/chat/reads/search.ts";
import { fillSearchDocuments } from "../../../../actors/chat/search-fill.ts";
import { SEARCH_WINDOWS } from "../../../../actors/chat/reads/messages.ts";
import { HAS_CONTENT, RESOLVED_TOPIC_PREFIX } from "../../../../actors/chat/reads/narrow.ts";

/**
 * The migrations from issue 28's first on (0100), re-run over an existing store. kysely applies migrations in name
 * order and refuses one named before the last applied, so every later migration is re-run with them: each is
 * idempotent.
 */
const READ_MIGRATIONS = Object.keys(migrations).filter((name) => name >= "2026-11-28T0100-message-search");
const READ_INDEXES = ["messages_search", "messages_sender", "user_messages_starred", "user_messages_mentioned", "user_messages_alerted", "messages_search_document", "messages_resolved", "messages_has_link", "messages_has_image", "messages_scoped_document"];
const SEARCH_DOCUMENT_MIGRATION = "2026-11-28T0900-message-search-document";
const SCOPED_DOCUMENT_MIGRATION = "2026-12-05T1600-message-scoped-search";
const REALM_LANGUAGE_MIGRATION = "2026-12-05T2100-realm-search-language";

/** SEARCH_WINDOWS for the test's statements: each test's answers compared with the default windows' (or asserted). */
async function withWindows<T>(windows: Partial<typeof SEARCH_WINDOWS>, read: () => Promise<T>): Promise<T> {
  const defaults = { ...SEARCH_WINDOWS };
  try {
    Object.assign(SEARCH_WINDOWS, windows);
    return await read();
  } finally {
    Object.assign(SEARCH_WINDOWS, defaults);
  }
}
/** The scoped index asked first: the nearby walk's window full at once, and no estimate to choose by. */
const SCOPED_FIRST = { recent: 1, channel: 1, first: "capped", scopes: 1_000 } as const;
/** Never the scoped index. */
const UNSCOPED = { scopes: 0 } as const;

describe.each(ENGINES)("search on %s", (engine) => {
  let server: TestServer;
  let alice: User;
  let bob: User;
  let carol: User;
  const { send, toChannel, get, subscribe } = messageApi(() => server);
  const search = (as: User, operand: string, more: unknown[] = [], params: Record<string, unknown> = {}) =>
    get(as, { narrow: [...more, { operator: "search", operand }], ...params });
  const m: Record<string, number> = {};

  beforeAll(async () => {
    server = await startTestServer(engine);
    alice = await createUser(server, "alice@example.com", "Alice");
    bob = await createUser(server, "bob@example.com", "Bob");
    carol = await createUser(server, "carol@example.com", "Carol");
    await subscribe(alice, ["kitchen", "garden"], { principals: [alice.id, bob.id] });
    await subscribe(alice, ["secret"], { principals: [alice.id], invite_only: true });
    m.walked = await toChannel(alice, "walks", "We walked the dog yesterday", "kitchen");
    m.walking = await toChannel(bob, "plans", "Walking to the development meeting", "kitchen");
    m.york = await toChannel(alice, "travel", "Flights to New York are cheap", "garden");
    m.yorkNew = await toChannel(bob, "travel", "york is not new", "garden");
    m.ovens = await toChannel(alice, "Ovens & <grills>", "The **ovens** were cleaned", "kitchen");
    m.secret = await toChannel(alice, "hidden", "the secret development plan", "secret");
    m.dm = (await send(alice, { type: "direct", to: JSON.stringify([bob.id]), content: "development of the oven" })).body.id;
  });
  afterAll(async () => server?.close());

  it("finds every word, stemmed, in topic or content", async () => {
    // walked, walking and the topic "walks" share the stem walk.
    expect(ids(await search(bob, "walk"))).toEqual([m.walked, m.walking]);
    expect(ids(await search(bob, "walks dog"))).toEqual([m.walked]);
    expect(ids(await search(bob, "travel cheap"))).toEqual([m.york]);
    // Every word must match: one missing word drops the message.
    expect(ids(await search(bob, "walked dog cat"))).toEqual([]);
  });

  it("matches a quoted phrase in order, and the last word as a prefix", async () => {
    expect(ids(await search(bob, '"new york"'))).toEqual([m.york]);
    expect(ids(await search(bob, "york new"))).toEqual([m.york, m.yorkNew]);
    expect(ids(await search(bob, '"york new"'))).toEqual([]);
    // "deve" starts "development" as the last word typed; a word before the last must match whole.
    expect(ids(await search(bob, "deve"))).toEqual([m.walking, m.dm]);
    expect(ids(await search(bob, "deve meeting"))).toEqual([]);
    expect(ids(await search(bob, "meeting deve"))).toEqual([m.walking]);
    // Stop words alone search for nothing, and find nothing; beside a word they are ignored.
    expect(ids(await search(bob, "the"))).toEqual([]);
    expect(ids(await search(bob, "the dog"))).toEqual([m.walked]);
    // Search terms of one narrow search together.
    const two = await get(bob, { narrow: [{ operator: "search", operand: "walked" }, { operator: "search", operand: "dog" }] });
    expect(ids(two)).toEqual([m.walked]);
  });

  it("highlights the matches in the rendered content and the escaped topic", async () => {
    const res = await search(bob, "oven", [{ operator: "channel", operand: "kitchen" }], { apply_markdown: true });
    expect(ids(res)).toEqual([m.ovens]);
    const [message] = res.body.messages;
    expect(message.match_content).toBe('<p>The <strong><span class="highlight">ovens</span></strong> were cleaned</p>');
    expect(message.match_subject).toBe('<span class="highlight">Ovens</span> &amp; &lt;grills&gt;');
    const phrase = (await search(bob, '"new york" fli', [], { apply_markdown: true })).body.messages[0];
    expect(phrase.match_content).toBe('<p><span class="highlight">Flights</span> to <span class="highlight">New</span> <span class="highlight">York</span> are cheap</p>');
    expect(phrase.match_subject).toBe("travel");
    // GET /messages/matches_narrow highlights the same way.
    const matches = await api(server, "GET", "/messages/matches_narrow", { as: bob, params: { msg_ids: [m.walked, m.york], narrow: [{ operator: "search", operand: "dogs" }] } });
    expect(matches.body.messages).toEqual({ [m.walked]: { match_content: '<p>We walked the <span class="highlight">dog</span> yesterday</p>', match_subject: "walks" } });
  });

  it("combines with every other operator, negation included", async () => {
    const narrowed = async (more: unknown[], operand = "development") => ids(await search(bob, operand, more));
    expect(await narrowed([])).toEqual([m.walking, m.dm]);
    expect(await narrowed([{ operator: "channel", operand: "kitchen" }])).toEqual([m.walking]);
    expect(await narrowed([{ operator: "channel", operand: "kitchen" }, { operator: "topic", operand: "plans" }])).toEqual([m.walking]);
    expect(await narrowed([{ operator: "channel", operand: "kitchen" }, { operator: "topic", operand: "walks" }])).toEqual([]);
    expect(await narrowed([{ operator: "sender", operand: alice.id }])).toEqual([m.dm]);
    expect(await narrowed([{ operator: "sender", operand: alice.id, negated: true }])).toEqual([m.walking]);
    expect(await narrowed([{ operator: "dm", operand: [alice.id] }])).toEqual([m.dm]);
    expect(await narrowed([{ operator: "is", operand: "dm" }])).toEqual([m.dm]);
    expect(await narrowed([{ operator: "dm-including", operand: alice.id }])).toEqual([m.dm]);
    expect(await narrowed([{ operator: "id", operand: m.walking }])).toEqual([m.walking]);
    expect(await narrowed([{ operator: "has", operand: "link" }])).toEqual([]);
    expect(await narrowed([{ operator: "search", operand: "meeting", negated: true }])).toEqual([m.dm]);
    expect(await narrowed([{ operator: "channels", operand: "public" }])).toEqual([m.walking]);
    // Flags: bob received the DM unread; starring the channel message makes it the starred one.
    expect(await narrowed([{ operator: "is", operand: "unread" }])).toContain(m.dm);
    const star = await api(server, "POST", "/messages/flags", { as: bob, params: { messages: [m.walking], op: "add", flag: "starred" } });
    expect(star.status).toBe(200);
    expect(await narrowed([{ operator: "is", operand: "starred" }])).toEqual([m.walking]);
    expect(await narrowed([{ operator: "is", operand: "starred", negated: true }])).toEqual([m.dm]);
    // Anchored fetches page through the matches alone.
    const page = await get(bob, { narrow: [{ operator: "search", operand: "development" }], anchor: m.walking, num_before: 0, num_after: 1, include_anchor: false });
    expect(ids(page)).toEqual([m.dm]);
    expect(page.body).toMatchObject({ found_newest: true, found_anchor: true });
  });

  it("finds only what the reader may read", async () => {
    expect(ids(await search(alice, "secret"))).toEqual([m.secret]);
    expect(ids(await search(bob, "secret"))).toEqual([]);
    expect(ids(await search(bob, "secret", [{ operator: "channels", operand: "public" }]))).toEqual([]);
    expect((await search(bob, "secret", [{ operator: "channel", operand: "secret" }])).body.messages).toEqual([]);
    // Carol is in no channel and no conversation: only channels:public reaches the public history.
    expect(ids(await search(carol, "development"))).toEqual([]);
    expect(ids(await search(carol, "development", [{ operator: "channels", operand: "public" }]))).toEqual([m.walking]);
  });

  it("answers a search through the full-text index", async () => {
    const db = server.node.store.db;
    const { realm_id: realmId } = await db.selectFrom("users").select("realm_id").where("id", "=", alice.id).executeTakeFirstOrThrow();
    const plan = await db.transaction().execute(async (trx) => {
      // On a table this small a sequential scan is cheaper; forbidding it shows whether the index can serve the query.
      await sql`set local enable_seqscan = off`.execute(trx);
      const explain = async (unfilled: boolean) =>
        (await sql<{ "QUERY PLAN": string }>`explain select m.id from messages m where ${searchCondition('walking "new york" deve', realmSearchConfig(realmId), unfilled)}`.execute(trx)).rows
          .map((r) => r["QUERY PLAN"])
          .join("\n");
      return { filled: await explain(false) };
    });
    // The stored document's index. The expression's index (for a store whose documents are not all filled yet) is
    // dropped on a store that has them all: an insert computes its document once.
    expect(plan.filled).toContain("messages_search_document");
    expect(plan.filled).not.toMatch(/messages_search\b(?!_)/);
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_indexes where indexname = 'messages_search'`.execute(db);
    expect(rows[0]!.n).toBe(0);
  });

  it("expands the last word to the stored words it starts, or leaves a prefix that starts too many", async () => {
    const db = server.node.store.db;
    const expanded = async (text: string, most: number) =>
      (await sql<{ q: string }>`select search_prefix_query(plainto_tsquery('english', ${text}), ${most})::text as q`.execute(db)).rows[0]!.q;
    expect(await expanded("deve", 64)).toBe("'deve' | 'develop'");
    expect(await expanded("deve", 0)).toBe("'deve':*");
    expect(await expanded("zzz", 64)).toBe("'zzz'");
    // A word split in parts (as the document's parser splits it) expands each part.
    expect(await expanded("walk-dev", 64)).toBe("'walk-dev' & 'walk' & ( 'dev' | 'develop' )");
    // Words sent later are known as they commit.
    await toChannel(alice, "words", "quixotically", "garden");
    expect(await expanded("quix", 64)).toBe("'quix' | 'quixot'");
    // Numbers are not kept: a prefix of digits stays a prefix, and finds them.
    const numbered = await toChannel(alice, "words", "ticket 40417 closed", "garden");
    expect(await expanded("404", 64)).toBe("'404':*");
    expect((await sql<{ n: number }>`select count(*)::int as n from search_words where word = '40417'`.execute(db)).rows[0]!.n).toBe(0);
    expect(ids(await search(alice, "ticket 404"))).toEqual([numbered]);
  });

  it("gives the same answers through each of a search page's statements (nearby walk, capped matches, every match, scoped matches)", async () => {
    // A channel bob has left: a search without a channel still finds what he received in it.
    await subscribe(alice, ["attic"], { principals: [alice.id, bob.id] });
    m.attic = await toChannel(alice, "boxes", "the lantern is in the attic", "attic");
    expect((await api(server, "DELETE", "/users/me/subscriptions", { as: bob, params: { subscriptions: ["attic"] } })).status).toBe(200);
    const cases: Array<[User, string, unknown[]]> = [
      [bob, "walk", []],
      [bob, "deve", []],
      [bob, "development", [{ operator: "channel", operand: "kitchen" }]],
      [bob, "development", [{ operator: "sender", operand: alice.id, negated: true }]],
      [bob, "development", [{ operator: "search", operand: "meeting", negated: true }]],
      [bob, "development", [{ operator: "is", operand: "dm" }]],
      [bob, "york new", []],
      [bob, "secret", []],
      [alice, "secret", []],
      [carol, "development", [{ operator: "channels", operand: "public" }]],
      [bob, "zanzibar", []],
      // A phrase's order, which the scoped documents do not keep.
      [bob, '"new york"', []],
      [bob, '"york new"', []],
      [bob, "lantern", []],
      [bob, "lantern", [{ operator: "channel", operand: "attic" }]],
      [alice, "development", [{ operator: "dm", operand: [bob.id] }]],
      [bob, "york", [{ operator: "channel", operand: "garden" }, { operator: "topic", operand: "travel" }]],
    ];
    const answers = async () => Promise.all(cases.map(async ([as, operand, more]) => ids(await search(as, operand, more))));
    const expected = await withWindows(UNSCOPED, answers);
    expect(expected.slice(-6)).toEqual([[m.york], [], [m.attic], [m.attic], [m.dm], [m.york, m.yorkNew]]);
    // The nearby walk's window full at once (one message), so that the capped matches answer; then capped too; in
    // either order; and the nearby walk after the capped matches; the scoped matches first, then after the nearby walk.
    for (const windows of [
      { recent: 1, channel: 1, cap: 1_000, first: "nearby" as const, scopes: 0 },
      { recent: 1, channel: 1, cap: 1_000, first: "capped" as const, scopes: 0 },
      { recent: 1, channel: 1, cap: 0, first: "nearby" as const, scopes: 0 },
      { recent: 1, channel: 1, cap: 0, first: "capped" as const, scopes: 0 },
      { recent: 1_000, channel: 1_000, cap: 0, first: "capped" as const, scopes: 0 },
      SCOPED_FIRST,
      { recent: 1, channel: 1, first: "nearby" as const, scopes: 1_000 },
      {},
    ]) {
      expect(await withWindows(windows, answers)).toEqual(expected);
    }
  }, 120_000);

  it("asks the scoped index for a search's channels and conversations, kept through moves and filled for an older store", async () => {
    const db = server.node.store.db;
    const scoped = (as: User, operand: string, more: unknown[] = []) => withWindows(SCOPED_FIRST, async () => ids(await search(as, operand, more)));
    const unscoped = (as: User, operand: string, more: unknown[] = []) => withWindows(UNSCOPED, async () => ids(await search(as, operand, more)));
    // The scoped index is what answers: a message whose scoped document is emptied behind Chorus's back is not found.
    await sql`update messages set scoped_document = ''::tsvector where id = ${m.york}`.execute(db);
    expect(await scoped(bob, "cheap")).toEqual([]);
    expect(await scoped(bob, "cheap", [{ operator: "channel", operand: "garden" }])).toEqual([]);
    expect(await unscoped(bob, "cheap")).toEqual([m.york]);
    await sql`update messages set scoped_document = message_scoped_document(search_document, stream_id, recipient_id) where id = ${m.york}`.execute(db);
    expect(await scoped(bob, "cheap")).toEqual([m.york]);
    // A message moved to another channel is found in that channel's scope, and no longer in the first one's.
    const moved = await toChannel(alice, "errands", "a brass telescope", "kitchen");
    const streams = (await api(server, "GET", "/streams", { as: alice })).body.streams as Array<{ name: string; stream_id: number }>;
    const garden = streams.find((c) => c.name === "garden")!.stream_id;
    const move = await api(server, "PATCH", `/messages/${moved}`, { as: alice, params: { stream_id: garden, propagate_mode: "change_one" }, template: "/messages/{message_id}" });
    expect(move.status).toBe(200);
    expect(await scoped(bob, "telescope", [{ operator: "channel", operand: "garden" }])).toEqual([moved]);
    expect(await scoped(bob, "telescope", [{ operator: "channel", operand: "kitchen" }])).toEqual([]);
    expect(await scoped(bob, "telescope")).toEqual([moved]);
    // A store that held messages before the scoped documents: searches answer without them while they are filled.
    const unfilledCount = async () => (await sql<{ n: number }>`select count(*)::int as n from messages where scoped_document is null`.execute(db)).rows[0]!.n;
    const questions: Array<[User, string, unknown[]]> = [
      [bob, "cheap", []],
      [bob, "telescope", [{ operator: "channel", operand: "garden" }]],
      [bob, "deve", []],
      [alice, "secret", []],
      [alice, "development", [{ operator: "dm", operand: [bob.id] }]],
    ];
    const answers = () => Promise.all(questions.map(([as, operand, more]) => scoped(as, operand, more)));
    const expected = await answers();
    expect(expected.map((a) => a.length)).toEqual([1, 1, 2, 1, 1]);
    await sql`drop trigger messages_search_document_scoped on messages`.execute(db);
    await sql`alter table messages drop column scoped_document`.execute(db);
    await migrations[SCOPED_DOCUMENT_MIGRATION]!.up(db);
    const stored = (await sql<{ n: number }>`select count(*)::int as n from messages`.execute(db)).rows[0]!.n;
    expect(await unfilledCount()).toBe(stored);
    expect(await answers()).toEqual(expected);
    expect(await fillSearchDocuments(db, 3, "scoped")).toBe("filled");
    expect(await unfilledCount()).toBe(stored - 3);
    expect(await answers()).toEqual(expected);
    while ((await fillSearchDocuments(db, 3, "scoped")) === "filled");
    expect(await unfilledCount()).toBe(0);
    expect((await sql<{ below: unknown }>`select scoped_below as below from message_search_fill`.execute(db)).rows[0]!.below).toBeNull();
    expect(await answers()).toEqual(expected);
    // Filled, the scoped index answers again (emptied, not found).
    await sql`update messages set scoped_document = ''::tsvector where id = ${m.york}`.execute(db);
    expect(await scoped(bob, "cheap")).toEqual([]);
    await sql`update messages set scoped_document = message_scoped_document(search_document, stream_id, recipient_id) where id = ${m.york}`.execute(db);
    // Sent after the migration: the trigger keeps it.
    const later = await toChannel(alice, "errands", "a second telescope", "garden");
    expect(await scoped(bob, "telescope", [{ operator: "channel", operand: "garden" }])).toEqual([moved, later]);
  }, 120_000);

  it("builds the index over the messages a store already holds", async () => {
    const db = server.node.store.db;
    // The store as it was before the migrations: no index, the migrations not applied. (kysely runs migrations in
    // name order only: while these are the last ones, forgetting them lets them run again.)
    for (const index of READ_INDEXES) await sql`drop index if exists ${sql.id(index)}`.execute(db);
    await sql`delete from kysely_migration where name in (${sql.join(READ_MIGRATIONS)})`.execute(db);
    await server.node.store.migrate(migrations);
    // The stored documents' index; the parsed expression's (0100) dropped again, every document being stored and
    // its words known (1200).
    const index = async (name: string) => (await sql<{ indexdef: string }>`select indexdef from pg_indexes where indexname = ${name}`.execute(db)).rows[0]?.indexdef;
    expect(await index("messages_search_document")).toContain("gin");
    expect(await index("messages_search")).toBeUndefined();
    // The partial indexes' predicates are the pages' conditions (reads/messages.ts), which the planner must match.
    expect(await index("messages_resolved")).toContain(`'${RESOLVED_TOPIC_PREFIX}%'`);
    expect(await index("messages_has_link")).toContain(`'${HAS_CONTENT.link}'`);
    expect(await index("messages_has_image")).toContain(`'${HAS_CONTENT.image}'`);
    expect(await index("messages_scoped_document")).toContain("gin");
    expect(ids(await search(bob, "walk"))).toEqual([m.walked, m.walking]);
    // A message sent after the migration is indexed as it commits.
    const later = await toChannel(alice, "walks", "walking again", "kitchen");
    expect(ids(await search(bob, "walk"))).toEqual([m.walked, m.walking, later]);
    m.later = later;
  });

  it("keeps each message's search document: filled for a store that held messages before, kept by sends and edits", async () => {
    const db = server.node.store.db;
    const state = async () => {
      const below = (await sql<{ below: string | number | null }>`select below from message_search_fill`.execute(db)).rows[0]?.below;
      return below === null || below === undefined ? null : Number(below);
    };
    const unfilledCount = async () => (await sql<{ n: number }>`select count(*)::int as n from messages where search_document is null`.execute(db)).rows[0]!.n;
    const before = ids(await search(bob, "walk"));
    const deve = ids(await search(bob, "deve"));
    const notMeeting = ids(await search(bob, "development", [{ operator: "search", operand: "meeting", negated: true }]));
    // The store as it was before the migration: no column. Its migration run as migrateToLatest runs it (the
    // background fill of a server's start is not started by this: the test fills by steps itself).
    await sql`drop trigger messages_search_document on messages`.execute(db);
    await sql`alter table messages drop column search_document`.execute(db);
    await migrations[SEARCH_DOCUMENT_MIGRATION]!.up(db);
    // A later migration replaces the document's trigger function (the realm's language): as migrateToLatest would.
    await migrations[REALM_LANGUAGE_MIGRATION]!.up(db);
    const stored = (await sql<{ n: number; top: string }>`select count(*)::int as n, max(id)::text as top from messages`.execute(db)).rows[0]!;
    expect(await unfilledCount()).toBe(stored.n);
    expect(await state()).toBe(Number(stored.top) + 1);
    // Rows not filled yet are found, by every form of search (the expression, parsed again, for every row).
    expect(ids(await search(bob, "walk"))).toEqual(before);
    expect(ids(await search(bob, "deve"))).toEqual(deve);
    expect(ids(await search(bob, "development", [{ operator: "search", operand: "meeting", negated: true }]))).toEqual(notMeeting);
    // A message sent meanwhile has its document as it commits.
    const sent = await toChannel(alice, "errands", "walking once more", "kitchen");
    expect(await unfilledCount()).toBe(stored.n);
    expect(ids(await search(bob, "walk"))).toEqual([...before, sent]);
    // Filled newest first, a few rows a step; a search in the middle of it finds filled and unfilled rows alike.
    expect(await fillSearchDocuments(db, 3)).toBe("filled");
    expect(await unfilledCount()).toBe(stored.n - 3);
    expect(await state()).toBeLessThan(Number(stored.top) + 1);
    expect(ids(await search(bob, "walk"))).toEqual([...before, sent]);
    let steps = 1;
    while ((await fillSearchDocuments(db, 3)) === "filled") steps++;
    expect(steps).toBeGreaterThanOrEqual(Math.ceil(stored.n / 3) - 1);
    expect(await unfilledCount()).toBe(0);
    expect(await state()).toBeNull();
    expect(await fillSearchDocuments(db, 3)).toBe("done");
    // Done: the expression's index is dropped, and the words of every document are known (the prefix expanded).
    expect((await sql<{ n: number }>`select count(*)::int as n from pg_indexes where indexname = 'messages_search'`.execute(db)).rows[0]!.n).toBe(0);
    expect((await sql<{ n: number }>`select count(*)::int as n from search_words where word in ('develop', 'walk', 'york')`.execute(db)).rows[0]!.n).toBe(3);
    // Filled: the same answers, from the stored documents alone.
    expect(ids(await search(bob, "walk"))).toEqual([...before, sent]);
    expect(ids(await search(bob, "deve"))).toEqual(deve);
    expect(ids(await search(bob, "development", [{ operator: "search", operand: "meeting", negated: true }]))).toEqual(notMeeting);
    // An edit of the content, and a move to another topic, change the document.
    const edit = (id: number, params: Record<string, unknown>) => api(server, "PATCH", `/messages/${id}`, { as: alice, params, template: "/messages/{message_id}" });
    expect((await edit(sent, { content: "running once more" })).status).toBe(200);
    expect(ids(await search(bob, "walk"))).toEqual(before);
    expect(ids(await search(bob, "run"))).toEqual([sent]);
    expect((await edit(sent, { topic: "zeppelins", propagate_mode: "change_one" })).status).toBe(200);
    expect(ids(await search(bob, "zeppelin"))).toContain(sent); // with the move's notification, where there is one
    expect(ids(await search(bob, "zeppelin running"))).toEqual([sent]);
    expect(await unfilledCount()).toBe(0);
  });
  it("stems in the realm's language: a new language has the messages sent before it parsed again", async () => {
    const realm = (params: Record<string, unknown>) => api(server, "PATCH", "/realm", { as: server.owner, params, validate: false });
    const db = server.node.store.db;
    const restemsLeft = async () => (await sql<{ n: number }>`select count(*)::int as n from search_restems`.execute(db)).rows[0]!.n;
    const earlier = await toChannel(alice, "Bauten", "Die Häuser wurden gestern gebaut", "garden");
    // In English neither of "Häuser" and "Haus" stems to the other.
    expect(ids(await search(alice, "Haus"))).toEqual([]);
    expect((await realm({ default_language: "de" })).status).toBe(200);
    const later = await toChannel(alice, "Bauten", "Ein Haus mit Gärten", "garden");
    // The later message is parsed in German as it commits; the earlier one once the background fill parsed it again.
    expect(await eventually(async () => (await restemsLeft()) === 0)).toBe(true);
    expect(ids(await search(alice, "Haus"))).toEqual([earlier, later]);
    expect(ids(await search(alice, "Gärten gebaut"))).toEqual([]);
    expect(ids(await search(alice, "Garten"))).toEqual([later]);
    // Highlighted as German stems them.
    const [first] = (await search(alice, "Haus")).body.messages;
    expect(first.match_content).toBe('<p>Die <span class="highlight">Häuser</span> wurden gestern gebaut</p>');
    const registered = await api(server, "POST", "/register", { as: alice });
    expect(registered.body.realm_default_language).toBe("de");
    const refused = await realm({ default_language: "not a language" });
    expect([refused.status, refused.body.msg]).toEqual([400, "Invalid language 'not a language'"]);
    // Back to English, parsed again: the plural is no longer the singular's.
    expect((await realm({ default_language: "en" })).status).toBe(200);
    expect(await eventually(async () => (await restemsLeft()) === 0)).toBe(true);
    expect(ids(await search(alice, "Haus"))).toEqual([later]);
  });
});
