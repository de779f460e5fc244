/**
 * `npx tsx bench/explain-reads.ts [--messages N] [--embedded] [--keep] [--database URL] [--unread]`: the plan of every statement GET /messages runs for each common
 * narrow, and of the register's unread state, on a generated organization (bench/organization.ts) in a fresh
 * Postgres database (or PGlite with --embedded), with EXPLAIN ANALYZE. What docs/reads.md records. The statements are the read functions' own,
 * taken from kysely's query log as they run. `--database`: a database an earlier `--keep` run left (10,000,000
 * messages take most of an hour to generate on 2 busy cores), its readers found again, nothing generated.
 */
import fs from "node:fs";
import path from "node:path";
import os from "node:os";
import { CompiledQuery, type Kysely, type KyselyPlugin } from "kysely";
import type { Database } from "../actors/schema.ts";
import { openDatabase } from "../runtime/store/db.ts";
import { fetchMessages, type MessageQuery } from "../actors/chat/reads/messages.ts";
import { unreadMessages } from "../actors/chat/reads/unreads.ts";
import { findUserById } from "../actors/chat/reads/users.ts";
import type { Janitor } from "./janitor.ts";
import { KEPT_DATABASE_FILE } from "./kept-store.ts";
import { Population, startEngine, type Engine } from "./scenarios.ts";
import { channelName, DEFAULT_SIZE, generateOrganization } from "./organization.ts";

const arg = (name: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : undefined;
};
const size = { ...DEFAULT_SIZE, messages: arg("messages") ?? DEFAULT_SIZE.messages, users: arg("users") ?? DEFAULT_SIZE.users };

const stops: Array<() => Promise<void>> = [];
// Cleaned up in this process alone (no janitor child): an interrupted run may leave its database behind.
const janitor: Janitor = { watch: () => {}, release: () => {} };
let engine: Engine | undefined;
const databaseUrl = process.argv.includes("--database") ? process.argv[process.argv.indexOf("--database") + 1]! : undefined;

/** The readers of an organization generated earlier: the users who are not generated, by their number of channels. */
async function existingOrganization(db: Kysely<Database>) {
  const rows = await db
    .selectFrom("subscriptions as s")
    .innerJoin("users as u", "u.id", "s.user_id")
    .select(["u.id", "u.realm_id", (eb) => eb.fn.countAll<number>().as("n")])
    .where("u.email", "not like", "gen-%")
    .groupBy(["u.id", "u.realm_id"])
    .having((eb) => eb.fn.countAll(), "in", [size.ordinaryChannels, size.heavyChannels])
    .execute();
  const reader = (channels: number) => rows.find((r) => Number(r.n) === channels)!;
  const realmId = reader(size.ordinaryChannels).realm_id;
  return { ordinary: { id: reader(size.ordinaryChannels).id }, heavy: { id: reader(size.heavyChannels).id }, org: await generateOrganization(db, { ordinary: reader(size.ordinaryChannels).id, heavy: 0 }, size), realmId };
}

try {
  let db: Kysely<Database>;
  let readers: { ordinary: { id: number }; heavy: { id: number } };
  let org: Awaited<ReturnType<typeof generateOrganization>>;
  if (databaseUrl) {
    const opened = await openDatabase({ databaseUrl, dataDir: os.tmpdir() });
    db = opened.db as unknown as Kysely<Database>;
    stops.push(() => db.destroy());
    const existing = await existingOrganization(db);
    readers = existing;
    org = existing.org;
  } else {
    engine = await startEngine(process.argv.includes("--embedded") ? "embedded" : "redis+postgres", (stop) => stops.push(stop), janitor);
    const population = new Population(engine);
    const [ordinary, heavy] = await population.users("readers", 2);
    readers = { ordinary: ordinary!, heavy: heavy! };
    db = engine.node.store.db;
    org = await generateOrganization(db, { ordinary: ordinary!.id, heavy: heavy!.id }, size);
  }
  const ordinary = readers.ordinary;
  const heavy = readers.heavy;
  console.log(`generated ${org.messages.toLocaleString("en")} messages in ${org.seconds} s`);

  // Every statement the reads run, compiled as they run them (a plugin sees each query before it is sent).
  const captured: CompiledQuery[] = [];
  const capture: KyselyPlugin = {
    transformQuery: (args) => (captured.push(db.getExecutor().compileQuery(args.node, args.queryId)), args.node),
    transformResult: async (args) => args.result,
  };
  // A statement compiled once and run as it is (db.executeQuery) passes no plugin: taken as it is run.
  const withPlugin = db.withPlugin(capture);
  const logged = new Proxy(withPlugin, {
    get: (target, key) => {
      if (key === "executeQuery") return (q: CompiledQuery) => (captured.push(q), target.executeQuery(q));
      const value = Reflect.get(target, key);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const query = async (text: string, values: unknown[] = []) => (await db.executeQuery(CompiledQuery.raw(text, values))).rows as Array<Record<string, any>>;
  const reader = (await findUserById(logged, org.realmId, ordinary!.id))!;
  const heavyReader = (await findUserById(logged, org.realmId, heavy!.id))!;
  const dmPeer = await query(`select user_id from recipient_members where recipient_id in (select recipient_id from recipient_members where user_id = $1) and user_id <> $1 limit 1`, [reader.id]);
  const base: Omit<MessageQuery, "narrow"> = { anchor: "newest", numBefore: 20, numAfter: 0, includeAnchor: true, format: { applyMarkdown: true, clientGravatar: true }, allowEmptyTopicName: false };
  const channel = { operator: "channel", operand: channelName(7), negated: false };
  const cases: Array<[string, MessageQuery["narrow"], Partial<MessageQuery>?]> = [
    ["all messages, newest 20", []],
    ["channel, newest 20", [channel]],
    ["topic, newest 20", [channel, { operator: "topic", operand: "topic 3", negated: false }]],
    ["dm, newest 20", [{ operator: "dm", operand: [dmPeer[0].user_id], negated: false }]],
    ["is:dm, newest 20", [{ operator: "is", operand: "dm", negated: false }]],
    ["sender, newest 20", [{ operator: "sender", operand: dmPeer[0].user_id, negated: false }]],
    ["is:starred, newest 20", [{ operator: "is", operand: "starred", negated: false }]],
    ["is:mentioned, newest 20", [{ operator: "is", operand: "mentioned", negated: false }]],
    ["is:unread, newest 20", [{ operator: "is", operand: "unread", negated: false }]],
    ["channel, first_unread anchor, 10 before and after", [channel], { anchor: "first_unread", numBefore: 10, numAfter: 10 }],
    ["channel, oldest 20", [channel], { anchor: "oldest", numBefore: 0, numAfter: 20 }],
    ["search, common word", [{ operator: "search", operand: "budget", negated: false }]],
    ["search, two words", [{ operator: "search", operand: "budget coffee", negated: false }]],
    ["search, a word and a prefix (the bench's)", [{ operator: "search", operand: "budget coff", negated: false }]],
    ["search, rare word (no match)", [{ operator: "search", operand: "zanzibar", negated: false }]],
    ["channel + search, prefix", [channel, { operator: "search", operand: "datab", negated: false }]],
    ["is:resolved, newest 20", [{ operator: "is", operand: "resolved", negated: false }]],
    ["has:link, newest 20", [{ operator: "has", operand: "link", negated: false }]],
  ];
  const explain = async (title: string, run: () => Promise<unknown>) => {
    captured.length = 0;
    const t0 = performance.now();
    await run();
    const ms = performance.now() - t0;
    // The plugin also sees the branches of a union as they are built: keep the statements sent.
    const sent = captured.filter((q) => !captured.some((other) => other !== q && other.sql.includes(q.sql)));
    // A read's own settings (`set local`, `set_config`: withoutJit, the search's work_mem) are no statement to explain, but apply to the statements after them.
    const settings = sent.filter((q) => /^\s*(set |select set_config\()/i.test(q.sql));
    const statements = sent.filter((q) => !settings.includes(q));
    console.log(`\n### ${title}: ${statements.length} statement(s), ${ms.toFixed(1)} ms in all`);
    // The settings in force when a statement ran: the setting statements sent before it, and the literal
    // set_config calls of the statements before it (a statement that sets one back as its result).
    const settingsBefore = (q: CompiledQuery) =>
      sent.slice(0, sent.indexOf(q)).flatMap((earlier) =>
        settings.includes(earlier)
          ? [earlier]
          : [...earlier.sql.matchAll(/set_config\('[a-z_]+', '[^']*', true\)/g)].map((m) => CompiledQuery.raw(`select ${m[0]}`, [])),
      );
    for (const q of statements) {
      // A query built as a part of another (a subquery spliced into a sql template, numbered alone) fails alone: skipped.
      const rows = await db
        .transaction()
        .execute(async (trx) => {
          for (const setting of settingsBefore(q)) await trx.executeQuery(CompiledQuery.raw(setting.sql, [...setting.parameters]));
          // With costs (then taken out of each line): Postgres prints whether the statement was JIT-compiled, and
          // what that took, only when costs are on. A generic plan past jit_above_cost compiles at every execution.
          return (await trx.executeQuery(CompiledQuery.raw(`explain (analyze, timing off, summary on) ${q.sql}`, [...q.parameters]))).rows as Array<Record<string, any>>;
        })
        .catch(() => undefined);
      if (!rows) continue;
      const lines = rows.map((r) => (r["QUERY PLAN"] as string).replace(/\s+\(cost=[^)]*\)/, ""));
      console.log("```");
      console.log(q.sql.length > 300 ? q.sql.slice(0, 300) + " …" : q.sql);
      console.log("--");
      console.log(lines.join("\n"));
      console.log("```");
    }
  };
  // --unread: the register's unread state alone.
  if (!process.argv.includes("--unread")) for (const [title, narrow, more] of cases) await explain(title, () => fetchMessages(logged, reader, { ...base, ...more, narrow }));
  await explain("register: unread_msgs of the heavy reader", () => unreadMessages(logged, heavyReader.id, { emptyTopicName: false }));
  await explain("register: unread_msgs of the ordinary reader", () => unreadMessages(logged, reader.id, { emptyTopicName: false }));
} finally {
  // --keep: leave the database for a closer look (its URL is printed; drop it by hand), and the Redis keys with it.
  if (process.argv.includes("--keep")) {
    console.log(`kept: ${engine?.node.config.databaseUrl}`);
    if (engine?.node.config.databaseUrl) {
      // What a bench run on this store needs (READS_STORE: bench/kept-store.ts).
      fs.writeFileSync(path.join(engine.node.config.dataDir, KEPT_DATABASE_FILE), engine.node.config.databaseUrl);
      console.log(`to run the bench on it: READS_STORE=${engine.node.config.dataDir} npm run bench -- --engine redis+postgres --scenario reads-fetch,…`);
    }
    await engine?.node.close();
  } else for (const stop of stops.reverse()) await stop();
}
