/**
 * A large organization generated in SQL (generate_series), for the read scenarios (bench/reads.ts) and the plans
 * in docs/reads.md (bench/explain-reads.ts): users, public channels with their recipients, subscriptions, channel
 * messages over topics and direct messages in two-person conversations, reactions, and the flag rows of the
 * readers. Sending that many messages through the API would take hours; each table here is one statement.
 *
 * Flag rows are written for the readers only (the users the scenarios log in as), not for every subscriber: the
 * reads measured are those readers', and the rows of others would only make the store bigger to fill. The heavy
 * reader is subscribed to `heavyChannels` channels and has the newest `heavyUnread` of its messages unread; the
 * ordinary reader, to `ordinaryChannels` channels with a few unread.
 */
import { sql, type Kysely } from "kysely";
import type { Database } from "../actors/schema.ts";

export interface OrganizationSize {
  users: number;
  channels: number;
  messages: number;
  topicsPerChannel: number;
  /** One message in this many is a direct message. */
  dmEvery: number;
  ordinaryChannels: number;
  heavyChannels: number;
  heavyUnread: number;
}

export const DEFAULT_SIZE: OrganizationSize = {
  users: 10_000,
  channels: 1_000,
  messages: 1_000_000,
  topicsPerChannel: 20,
  dmEvery: 10,
  ordinaryChannels: 50,
  heavyChannels: 500,
  heavyUnread: 100_000,
};

/** Words a generated message is made of, so that searches find some messages and not others. */
export const VOCABULARY = [
  "deploy", "release", "budget", "meeting", "customer", "invoice", "database", "migration", "outage", "roadmap",
  "design", "review", "coffee", "holiday", "hiring", "interview", "benchmark", "latency", "kitchen", "garden",
  "travel", "airport", "weather", "football", "concert", "library", "printer", "network", "security", "password",
];

export interface Organization {
  realmId: number;
  /** Channel ids, in generated order (`gen-0`, `gen-1`, ...). */
  channelIds: number[];
  messages: number;
  seconds: number;
}

/** The name of generated channel i. */
export const channelName = (i: number) => `gen-${i}`;

/**
 * Generate the organization in the realm of `readers` (ordinary first, heavy second: existing users with API keys),
 * unless it is there already. Returns what it made (or found).
 */
export async function generateOrganization(db: Kysely<Database>, readers: { ordinary: number; heavy: number }, size: OrganizationSize): Promise<Organization> {
  const t0 = performance.now();
  const realm = await db.selectFrom("users").select("realm_id").where("id", "=", readers.ordinary).executeTakeFirstOrThrow();
  const realmId = realm.realm_id;
  const existing = await db.selectFrom("streams").select("id").where("realm_id", "=", realmId).where("name", "like", "gen-%").orderBy("id").execute();
  if (existing.length >= size.channels) {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from messages where realm_id = ${realmId}`.execute(db);
    return { realmId, channelIds: existing.map((r) => r.id), messages: rows[0]!.n, seconds: 0 };
  }
  const now = Math.floor(Date.now() / 1000);
  const words = `array[${VOCABULARY.map((w) => `'${w}'`).join(",")}]`;
  await db.transaction().execute(async (trx) => {
    const run = (q: ReturnType<typeof sql>) => q.execute(trx);
    const firstUser = await sql<{ id: number }>`
      insert into users (realm_id, email, delivery_email, full_name, role, is_active, is_bot, api_key_hash, api_key_enc, date_joined)
      select ${realmId}::int, 'gen-' || g || '@bench.example', 'gen-' || g || '@bench.example', 'Generated ' || g, 400, true, false,
        'generated-' || g, 'generated', ${now}::bigint
      from generate_series(0, ${size.users - 1}) g
      returning id`.execute(trx);
    const userBase = Math.min(...firstUser.rows.map((r) => r.id));
    await run(sql`
      insert into streams (realm_id, name, date_created)
      select ${realmId}::int, 'gen-' || g, ${now}::bigint from generate_series(0, ${size.channels - 1}) g`);
    await run(sql`
      insert into recipients (realm_id, type, type_id)
      select realm_id, 2, id from streams where realm_id = ${realmId} and name like 'gen-%' order by id`);
    // A table of the generated channels by their index: gen-i is ch.i.
    await run(sql`
      create temporary table gen_channels on commit drop as
      select (substr(s.name, 5))::int as i, s.id as stream_id, r.id as recipient_id
      from streams s join recipients r on r.type = 2 and r.type_id = s.id
      where s.realm_id = ${realmId} and s.name like 'gen-%'`);
    await run(sql`create index on gen_channels (i)`);
    // Each generated user in 20 channels; the readers in theirs.
    await run(sql`
      insert into subscriptions (user_id, stream_id, color)
      select distinct ${userBase} + u, c.stream_id, '#76ce90'
      from generate_series(0, ${size.users - 1}) u cross join generate_series(0, 19) k
      join gen_channels c on c.i = (u * 7 + k * 53) % ${size.channels}`);
    await run(sql`
      insert into subscriptions (user_id, stream_id, color)
      select ${readers.ordinary}::int, stream_id, '#76ce90' from gen_channels where i < ${size.ordinaryChannels}
      union all
      select ${readers.heavy}::int, stream_id, '#76ce90' from gen_channels where i < ${size.heavyChannels}
      on conflict do nothing`);
    // Two-person conversations: each reader with 50 generated users, and 1,000 among generated users.
    await run(sql`
      create temporary table gen_dms on commit drop as
      select row_number() over () - 1 as i, a, b from (
        select ${readers.ordinary}::int as a, ${userBase} + g as b from generate_series(0, 49) g
        union all select ${readers.heavy}::int, ${userBase} + 50 + g from generate_series(0, 49) g
        union all select ${userBase} + g, ${userBase} + (g + 1) % ${size.users} from generate_series(100, 1099) g
      ) pairs`);
    await run(sql`alter table gen_dms add column recipient_id integer`);
    await run(sql`
      with made as (
        insert into recipients (realm_id, type, dm_key)
        select ${realmId}::int, 3, least(a, b) || ',' || greatest(a, b) from gen_dms
        on conflict do nothing
        returning id, dm_key
      )
      update gen_dms d set recipient_id = made.id from made where made.dm_key = least(d.a, d.b) || ',' || greatest(d.a, d.b)`);
    await run(sql`
      insert into recipient_members (recipient_id, user_id)
      select recipient_id, a from gen_dms where recipient_id is not null
      union select recipient_id, b from gen_dms where recipient_id is not null
      on conflict do nothing`);
    await run(sql`create index on gen_dms (i)`);
    const { rows: dmCount } = await sql<{ n: number }>`select count(*)::int as n from gen_dms where recipient_id is not null`.execute(trx);
    // Ids from a block range of the message id sequence nobody else holds (see allocateMessageIds).
    const { rows: first } = await sql<{ id: number }>`select nextval('message_id_blocks') as id`.execute(trx);
    const base = Number(first[0]!.id);
    await run(sql`select setval('message_id_blocks', ${base + Math.ceil(size.messages / 256) * 256})`);
    // Message g: a direct message every dmEvery-th, else in channel (g * 7919) mod channels, one of its topics.
    await run(sql`
      insert into messages (id, realm_id, sender_id, recipient_type, recipient_id, stream_id, topic, content, rendered_content, date_sent, sending_client)
      select ${base} + g, ${realmId}::int,
        case when dm then d.a else ${userBase} + (g * 31) % ${size.users} end,
        case when dm then 'private' else 'stream' end,
        case when dm then d.recipient_id else c.recipient_id end,
        case when dm then null else c.stream_id end,
        case when dm then '' else 'topic ' || (g % ${size.topicsPerChannel}) end,
        body, '<p>' || body || '</p>', ${now - size.messages} + g, 'bench'
      from (
        select g, g % ${size.dmEvery} = 0 as dm,
          'message ' || g || ' about ' || (${sql.raw(words)})[1 + g % ${VOCABULARY.length}] || ' and ' || (${sql.raw(words)})[1 + (g / ${VOCABULARY.length}) % ${VOCABULARY.length}] as body
        from generate_series(0, ${size.messages - 1}) g
      ) gen
      left join gen_channels c on not dm and c.i = (g::bigint * 7919) % ${size.channels}
      left join gen_dms d on dm and d.i = g % ${dmCount[0]!.n}`);
    // The readers' flag rows: every message of their channels and conversations; read, except the heavy reader's
    // newest heavyUnread and the ordinary reader's newest 50; one in 500 mentioning them, one in 1,000 starred.
    for (const [reader, channels, unread] of [
      [readers.ordinary, size.ordinaryChannels, 50],
      [readers.heavy, size.heavyChannels, size.heavyUnread],
    ] as const) {
      await run(sql`
        insert into user_message_rows (user_id, message_id, flags)
        select ${reader}::int, id,
          case when row_number() over (order by id desc) <= ${unread} then 0 else 1 end
          | case when id % 500 = 0 then 8 else 0 end | case when id % 1000 = 1 then 2 else 0 end
        from messages m
        where m.realm_id = ${realmId} and (
          m.stream_id in (select stream_id from gen_channels where i < ${channels})
          or m.recipient_id in (select recipient_id from recipient_members where user_id = ${reader}))`);
    }
    await run(sql`
      insert into reactions (message_id, user_id, emoji_name, emoji_code, reaction_type)
      select ${base} + g, ${userBase} + g % ${size.users}, 'thumbs_up', '1f44d', 'unicode_emoji'
      from generate_series(0, ${size.messages - 1}, 100) g`);
  });
  for (const table of ["users", "streams", "subscriptions", "recipients", "recipient_members", "messages", "user_message_rows", "unread_messages", "reactions", "search_words"]) {
    await sql`analyze ${sql.table(table)}`.execute(db);
  }
  const channelIds = (await db.selectFrom("streams").select("id").where("realm_id", "=", realmId).where("name", "like", "gen-%").orderBy("id").execute()).map((r) => r.id);
  return { realmId, channelIds, messages: size.messages, seconds: Math.round((performance.now() - t0) / 100) / 10 };
}
