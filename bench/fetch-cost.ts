/**
 * `npx tsx bench/fetch-cost.ts <database url> [fetches] [narrow]`: what one GET /messages costs in CPU, on a
 * generated organization left by `npx tsx bench/explain-reads.ts --keep` (its ordinary reader: bench/kept-store.ts):
 * this process's CPU (fetchMessages and serializing its answer, as the gateway does) and the database's Postgres
 * backends' (/proc of each: the database must run on this machine) per fetch, and the statements per fetch.
 * `narrow` is one of NARROWS' names (default `channel`: the newest 20 of a channel, the bench's reads-fetch), or
 * `every` for each in turn. One fetch at a time on one connection: CPU time, not wall time, so that a loaded
 * machine shifts it less. Runs from any checkout (with bench/kept-store.ts beside it: it uses only fetchMessages,
 * findUserById and openDatabase), so that two builds can take turns on one database: the A/B of docs/reads.md.
 */
import fs from "node:fs";
import { sql, type Kysely } from "kysely";
import { openDatabase } from "../runtime/store/db.ts";
import { fetchMessages, type MessageQuery } from "../actors/chat/reads/messages.ts";
import { channelName } from "./organization.ts";
import { keptReader } from "./kept-store.ts";

const url = process.argv[2];
if (!url) throw new Error("usage: npx tsx bench/fetch-cost.ts <database url> [fetches] [narrow|every]");
const fetches = Number(process.argv[3] ?? 2000);
const which = process.argv[4] ?? "channel";

const db = (await openDatabase({ databaseUrl: url, dataDir: "/tmp", poolSize: 1 })).db as Kysely<any>;
const reader = await keptReader(db, "ordinary");
/** A direct-message peer of the reader's: the other member of a one-to-one conversation of theirs, the busiest. */
const peer = (
  await sql<{ user_id: number }>`
    select p.user_id from recipient_members p
    where p.user_id <> ${reader.id} and p.recipient_id in (
      select recipient_id from recipient_members group by recipient_id having count(*) = 2 and bool_or(user_id = ${reader.id}))
    order by (select count(*) from messages m where m.recipient_id = p.recipient_id) desc limit 1`.execute(db)
).rows[0]!.user_id;
const channel = { operator: "channel", operand: channelName(7), negated: false };
/** A sender whose messages the reader reads: of the newest message of that channel. */
const sender = (
  await sql<{ sender_id: number }>`select m.sender_id from messages m join streams s on s.id = m.stream_id where s.name = ${channelName(7)} order by m.id desc limit 1`.execute(db)
).rows[0]!.sender_id;
const is = (operand: string) => ({ operator: "is", operand, negated: false });
/** The narrows, as Zulip's clients ask for them: the newest 20, or 10 each side of the first unread message. */
const NARROWS: Record<string, { narrow: MessageQuery["narrow"]; firstUnread?: boolean }> = {
  channel: { narrow: [channel] },
  all: { narrow: [] },
  dm: { narrow: [{ operator: "dm", operand: [peer], negated: false }] },
  "is:dm": { narrow: [is("dm")] },
  sender: { narrow: [{ operator: "sender", operand: sender, negated: false }] },
  "is:starred": { narrow: [is("starred")] },
  "is:mentioned": { narrow: [is("mentioned")] },
  "is:unread": { narrow: [is("unread")] },
  "channel,first_unread": { narrow: [channel], firstUnread: true },
  "all,first_unread": { narrow: [], firstUnread: true },
  "dm,first_unread": { narrow: [{ operator: "dm", operand: [peer], negated: false }], firstUnread: true },
  "is:dm,first_unread": { narrow: [is("dm")], firstUnread: true },
  "sender,first_unread": { narrow: [{ operator: "sender", operand: sender, negated: false }], firstUnread: true },
  // Narrows still on the general path (compileNarrow and messageWindow).
  "channel,sender": { narrow: [channel, { operator: "sender", operand: sender, negated: false }] },
  "channel,is:unread": { narrow: [channel, is("unread")] },
  topic: { narrow: [{ operator: "topic", operand: "topic 3", negated: false }] },
  "dm-including": { narrow: [{ operator: "dm-including", operand: [peer], negated: false }] },
  "has:link": { narrow: [{ operator: "has", operand: "link", negated: false }] },
  "has:attachment": { narrow: [{ operator: "has", operand: "attachment", negated: false }] },
  "has:image": { narrow: [{ operator: "has", operand: "image", negated: false }] },
  "is:resolved": { narrow: [is("resolved")] },
  "is:followed": { narrow: [is("followed")] },
  "is:muted": { narrow: [is("muted")] },
};
const queryOf = (name: string): MessageQuery => {
  const narrow = NARROWS[name];
  if (!narrow) throw new Error(`unknown narrow ${name}: one of ${Object.keys(NARROWS).join(", ")}, or every`);
  return {
    anchor: narrow.firstUnread ? "first_unread" : "newest",
    numBefore: narrow.firstUnread ? 10 : 20,
    numAfter: narrow.firstUnread ? 10 : 0,
    includeAnchor: true,
    narrow: narrow.narrow,
    format: { applyMarkdown: true, clientGravatar: true },
    allowEmptyTopicName: false,
  };
};
/** This database's backends (a channel's page runs on connections of its own: queryPlannedOnce), after the warm-up. */
let backendPids: number[] = [];
/** Their CPU milliseconds so far (utime + stime, clock ticks of 10 ms). */
const backendCpuMs = () =>
  backendPids.reduce((total, pid) => {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return total + (Number(fields[11]) + Number(fields[12])) * 10;
  }, 0);

// As the gateway writes the answer: the messages come as JSON texts (since 2026-12-03; objects before, in older checkouts).
const once = async (query: MessageQuery) => {
  const { messages, ...fields } = await fetchMessages(db, reader, query);
  const list = (messages as unknown[]).every((m) => typeof m === "string") ? `[${messages.join(",")}]` : JSON.stringify(messages);
  return { count: messages.length, bytes: `{"result":"success","msg":"",${JSON.stringify(fields).slice(1, -1)},"messages":${list}}`.length };
};
for (const name of which === "every" ? Object.keys(NARROWS) : [which]) {
  const query = queryOf(name);
  for (let i = 0; i < Math.min(200, fetches); i++) await once(query); // warm: named statements prepared, code optimized
  backendPids = (await sql<{ pid: number }>`select pid from pg_stat_activity where datname = current_database() and backend_type = 'client backend'`.execute(db)).rows.map((r) => r.pid);
  const cpu0 = process.cpuUsage();
  const backend0 = backendCpuMs();
  const t0 = performance.now();
  let answer = { count: 0, bytes: 0 };
  for (let i = 0; i < fetches; i++) answer = await once(query);
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const backendMs = backendCpuMs() - backend0;
  // No count of statements: pg_stat_database hears of a busy backend's transactions only when it reports, which
  // Postgres 15 does at most every second while busy and 10 s after it goes idle; the count read here missed the
  // planned-once pool's (-0.00 a fetch on 2026-12-04).
  const load = fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  console.log(
    `${name}: ${fetches} fetches (${answer.count} messages, ${answer.bytes} bytes): node ${((cpu.user + cpu.system) / fetches).toFixed(0)} µs CPU/fetch, ` +
      `Postgres backend ${((backendMs * 1000) / fetches).toFixed(0)} µs CPU/fetch, ` +
      `wall ${((wallMs * 1000) / fetches).toFixed(0)} µs/fetch; load average ${load}`,
  );
}
await db.destroy();
