/**
 * Reads of the `messages` table with the reader's `user_messages` flags: GET /messages (a narrow compiled to SQL
 * under the access rule), the messages a route acts on, and message records for rebuilding event queues. Nothing
 * here writes.
 */
import { CompiledQuery, sql, type Kysely, type RawBuilder, type Selectable, type SqlBool } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import { NAMED_STATEMENT, queryPlannedOnce } from "../../../runtime/store/db.ts";
import { ReadBatches } from "../../../runtime/store/read-batches.ts";
import { column } from "../../../runtime/store/group-commit.ts";
import type { Database } from "../../schema.ts";
import type { MessageEditColumns, MessageTable } from "../schema.ts";
import { formatMessage, type FormatOptions, type MessageRecord, type Submessage } from "../rendering/message-format.ts";
import { submessagesOf } from "./submessages.ts";
import { ROLE } from "../organization/groups.ts";
import { dmKey, RECIPIENT_DM } from "../conversations/dm.ts";
import { FLAG_BITS, flagList, HISTORICAL_FLAGS, MENTION_FLAGS } from "../conversations/flags.ts";
import { VISIBILITY } from "../users/user-topics.ts";
import { badNarrow, HAS_CONTENT, operandUsers, RESOLVED_TOPIC_PREFIX } from "./narrow.ts";
import { findStream } from "./channels.ts";
import { EMPTY_TOPIC_DISPLAY_NAME } from "./topics.ts";
import { escapeText } from "../rendering/escape.ts";
import { highlightColumns, notSearchCondition, realmSearchConfig, scopedMatch, searchCondition, searchHighlights, searchOperand, storedMatch, tsquery, type SearchConfig } from "./search.ts";
import { USER_SETTINGS_DEFAULTS, userSetting } from "../users/settings.ts";
import { splitUserRefs, usersByRef, type UserRow } from "./users.ts";
import type { Narrow } from "../users/user.protocol.ts";
import { topicLinks, type CompiledLinkifier } from "../rendering/linkifiers.ts";
import { compiledLinkifiers } from "../organization/linkifiers.ts";
import { MessageRecordCache, type VersionedRecord } from "./message-records.ts";

type DB = Kysely<Database>;

export interface MessageQuery {
  anchor: number | "newest" | "oldest" | "first_unread";
  numBefore: number;
  numAfter: number;
  includeAnchor: boolean;
  narrow: Narrow;
  /** Fetch exactly these (those that exist, are readable and match the narrow) instead of a range. */
  messageIds?: number[];
  format: FormatOptions;
  allowEmptyTopicName: boolean;
}

/** The realm's highest message id, -1 when it has none (POST /register's max_message_id). */
export async function maxMessageId(db: DB, realmId: number): Promise<number> {
  const row = await db
    .selectFrom("messages")
    .select(sql<number>`coalesce(max(id), -1)`.as("max"))
    .where("realm_id", "=", realmId)
    .executeTakeFirst();
  return Number(row?.max ?? -1);
}

/** Zulip's anchor for "newest": above any message id (and returned as such). */
export const LARGER_THAN_MAX_MESSAGE_ID = 10_000_000_000_000_000;


type Cond = RawBuilder<SqlBool>;
const FALSE: Cond = sql<SqlBool>`false`;

/** Users named in a narrow, resolved in the caller's realm; an unknown one is Zulip's BAD_NARROW. */
async function narrowUsers(db: DB, user: UserRow, refs: Array<number | string>): Promise<number[]> {
  return (await usersByRef(db, user.realm_id, refs)).map((row) => {
    if (!row) throw badNarrow("Invalid narrow operator: unknown user");
    return row.id;
  });
}

/**
 * The narrow as SQL over `messages m` left-joined to the reader's `user_messages um`, with the access rule:
 * channel messages of the channels the user may read (with a channel operator: that channel if readable; with
 * `channels:public`: every public channel; otherwise the channels they are subscribed to), only what they
 * received in channels with protected history, and the direct-message conversations they take part in.
 */
async function compileNarrow(db: DB, user: UserRow, narrow: Narrow): Promise<CompiledNarrow> {
  const conds: Cond[] = [];
  const searchConds: Cond[] = [];
  const positive = (op: string) => narrow.find((t) => t.operator === op && !t.negated);
  const channelTerm = positive("channel");
  const publicTerm = narrow.find((t) => t.operator === "channels");
  if (publicTerm?.negated) throw badNarrow("Invalid narrow operator: negated channels:public is not supported");
  const isGuest = user.role === ROLE.guest;
  const channelRef = channelTerm && (typeof channelTerm.operand === "number" ? { id: channelTerm.operand } : { name: String(channelTerm.operand) });
  // One round trip for the access rule: subscribed channels, the user's conversations, and the channel named.
  const kindColumn = (kind: "subscribed" | "left" | "dm" | "named" | "unfilled" | "unscoped") => sql<string>`${sql.lit(kind)}`.as("kind");
  let reachableQuery = db
    .selectFrom("subscriptions")
    .innerJoin("streams", "streams.id", "subscriptions.stream_id")
    .select([kindColumn("subscribed"), "streams.id", "streams.invite_only", "streams.is_web_public", "streams.history_public_to_subscribers"])
    .where("subscriptions.user_id", "=", user.id)
    .where("subscriptions.active", "=", true)
    .unionAll(
      db
        .selectFrom("recipient_members")
        .select([kindColumn("dm"), "recipient_id as id", sql<boolean>`false`.as("invite_only"), sql<boolean>`false`.as("is_web_public"), sql<boolean>`true`.as("history_public_to_subscribers")])
        .where("user_id", "=", user.id),
    );
  if (channelRef) {
    reachableQuery = reachableQuery.unionAll(
      db
        .selectFrom("streams")
        .select([kindColumn("named"), "id", "invite_only", "is_web_public", "history_public_to_subscribers"])
        .where("realm_id", "=", user.realm_id)
        .where(channelRef.id !== undefined ? sql<SqlBool>`id = ${channelRef.id}::bigint` : sql<SqlBool>`lower(name) = ${channelRef.name!.toLowerCase()}`),
    );
  }
  const searches = narrow.some((t) => t.operator === "search");
  // A search without a channel reads what the reader received (below), which may be in a channel they have left.
  const searchesReceived = !!positive("search") && !channelTerm && !publicTerm;
  if (searchesReceived) {
    reachableQuery = reachableQuery.unionAll(
      db
        .selectFrom("subscriptions")
        .select([kindColumn("left"), "stream_id as id", sql<boolean>`false`.as("invite_only"), sql<boolean>`false`.as("is_web_public"), sql<boolean>`false`.as("history_public_to_subscribers")])
        .where("user_id", "=", user.id)
        .where("active", "=", false),
    );
  }
  if (searches) {
    // Whether messages stored before their search documents (scoped documents) were kept are still unfilled
    // (actors/chat/search-fill.ts): in the same round trip, so that a search costs no statement more.
    for (const [kind, below] of [["unfilled", "below"], ["unscoped", "scoped_below"]] as const) {
      reachableQuery = reachableQuery.unionAll(
        db
          .selectFrom("message_search_fill")
          .select([kindColumn(kind), sql<number>`0`.as("id"), sql<boolean>`false`.as("invite_only"), sql<boolean>`false`.as("is_web_public"), sql<boolean>`false`.as("history_public_to_subscribers")])
          .where(below, "is not", null),
      );
    }
  }
  const reachable = await reachableQuery.modifyEnd(sql.raw(NAMED_STATEMENT)).execute();
  const unfilled = reachable.some((r) => r.kind === "unfilled");
  const subscribed = reachable.filter((r) => r.kind === "subscribed");
  const dms = reachable.filter((r) => r.kind === "dm").map((r) => r.id);
  const dmAccess = dms.length ? sql<SqlBool>`(m.stream_id is null and m.recipient_id in (${sql.join(dms)}))` : undefined;
  let open: number[] = [];
  let received: number[] = [];
  let withDms = !channelTerm && !publicTerm;
  if (channelTerm) {
    const named = reachable.find((r) => r.kind === "named");
    if (!named) throw badNarrow("Invalid narrow operator: unknown channel");
    const sub = subscribed.find((s) => s.id === named.id);
    // Without access to its history (Zulip's can_access_stream_history), a channel still shows what the user
    // received in it, like Zulip's search of the user's own messages.
    const history = named.is_web_public || (!named.invite_only && !isGuest) || (sub && named.history_public_to_subscribers);
    if (history) open = [named.id];
    else received = [named.id];
  } else if (publicTerm) {
    if (isGuest) throw badNarrow("Invalid narrow operator: guests cannot search all public channels");
    const rows = await db.selectFrom("streams").select("id").where("realm_id", "=", user.realm_id).where("invite_only", "=", false).execute();
    open = rows.map((r) => r.id);
  } else if (searchesReceived) {
    // What a search may find: every message of the channels the reader is or was in, and their conversations (a
    // superset of what they received, with no flag row in the condition). messageWindow keeps the received ones
    // (`receivedOnly`), testing the flags of the page's candidates only: with the received condition here, the
    // planner walked every flag row of the reader (a search of no match at 1,000,000 messages 3 → 72 ms).
    open = reachable.filter((r) => r.kind === "subscribed" || r.kind === "left").map((r) => r.id);
  }
  // Without a channel operator a narrow reads the reader's own messages, those they received, whichever channel or
  // conversation (Zulip's ok_to_include_history is false, so its query joins UserMessage and nothing else): never
  // a channel's history from before they subscribed, and still what they received in a channel they have left
  // (chat-service.md: "a narrow lacking a channel operator searches the user's own message history"). As the one
  // statement of `narrow=[]` reads it (receivedPage); a search, as its candidates above.
  const ownMessages = !channelTerm && !publicTerm && !searchesReceived;
  const access: Cond[] = [];
  if (ownMessages) access.push(sql<SqlBool>`um.flags is not null`);
  if (open.length) access.push(sql<SqlBool>`m.stream_id in (${sql.join(open)})`);
  if (received.length) access.push(sql<SqlBool>`(m.stream_id in (${sql.join(received)}) and um.flags is not null)`);
  if (withDms && dmAccess && !ownMessages) access.push(dmAccess);
  conds.push(access.length ? sql<SqlBool>`(${sql.join(access, sql` or `)})` : FALSE);

  /** The user a positive dm-including names: its page walks the reader's conversations with them. */
  let including: number | undefined;
  for (const term of narrow) {
    let cond: Cond | undefined;
    switch (term.operator) {
      case "channel": {
        if (term === channelTerm) break;
        const ref = typeof term.operand === "number" ? { id: term.operand } : { name: String(term.operand) };
        const stream = await findStream(db, user.realm_id, ref);
        if (!stream) throw badNarrow("Invalid narrow operator: unknown channel");
        cond = sql<SqlBool>`m.stream_id = ${stream.id}`;
        break;
      }
      case "topic":
        cond = sql<SqlBool>`(m.stream_id is not null and lower(m.topic) = ${String(term.operand).toLowerCase()})`;
        break;
      case "dm": {
        const ids = await narrowUsers(db, user, operandUsers(term.operand));
        const key = dmKey([...ids, user.id]);
        cond = sql<SqlBool>`m.recipient_id = (select id from recipients where type = ${RECIPIENT_DM} and realm_id = ${user.realm_id} and dm_key = ${key})`;
        if (!term.negated) withDms = true;
        break;
      }
      case "dm-including": {
        const [id] = await narrowUsers(db, user, operandUsers(term.operand));
        cond = sql<SqlBool>`m.recipient_id in (select recipient_id from recipient_members where user_id = ${id!})`;
        if (!term.negated) including = id;
        break;
      }
      case "sender": {
        const ids = await narrowUsers(db, user, operandUsers(term.operand));
        cond = sql<SqlBool>`m.sender_id in (${sql.join(ids)})`;
        break;
      }
      case "id":
        cond = sql<SqlBool>`m.id = ${term.operand as number}`;
        break;
      case "is":
        cond = {
          dm: sql<SqlBool>`m.stream_id is null`,
          starred: flagSet(FLAG_BITS.starred, term.negated),
          unread: sql<SqlBool>`(um.flags is not null and (um.flags & ${sql.lit(FLAG_BITS.read)}) = 0)`,
          mentioned: flagSet(MENTION_FLAGS, term.negated),
          alerted: flagSet(FLAG_BITS.has_alert_word, term.negated),
          // A literal pattern: the partial index messages_resolved (migration 2026-12-05T0400) is on this very condition.
          resolved: sql<SqlBool>`m.topic like ${sql.lit(RESOLVED_TOPIC_PREFIX + "%")}`,
          followed: sql<SqlBool>`${topicPolicy(user.id, VISIBILITY.followed)}`,
          // Zulip's is:muted: a muted topic, or a muted channel's topic the user has not unmuted or followed.
          muted: sql<SqlBool>`(${topicPolicy(user.id, VISIBILITY.muted)} or (m.stream_id in (select stream_id from subscriptions where user_id = ${user.id} and is_muted) and not ${topicPolicy(user.id, VISIBILITY.unmuted)} and not ${topicPolicy(user.id, VISIBILITY.followed)}))`,
        }[String(term.operand)];
        // A reader who follows (or mutes) nothing has no such message: no walk past everything they received to find none.
        if ((term.operand === "followed" || term.operand === "muted") && !(await hasVisibility(db, user.id, term.operand))) cond = FALSE;
        break;
      case "search":
        // The positive operands search together (as Zulip joins them), once; each negated one on its own.
        // A negated operand is its own condition (not negated below: see notSearchCondition).
        if (term.negated) {
          const not = notSearchCondition(String(term.operand), realmSearchConfig(user.realm_id), unfilled);
          conds.push(not);
          searchConds.push(not);
        } else if (term === narrow.find((t) => t.operator === "search" && !t.negated)) searchConds.push((cond = searchCondition(searchOperand(narrow), realmSearchConfig(user.realm_id), unfilled)));
        break;
      case "has":
        cond = {
          reaction: sql<SqlBool>`exists (select 1 from reactions r where r.message_id = m.id)`,
          // A literal pattern, as for is:resolved: the partial index messages_has_link is on this condition.
          link: sql<SqlBool>`m.rendered_content ~* ${sql.lit(HAS_CONTENT.link)}`,
          // From the attachment records (the files the message claimed), as Zulip's has_attachment and has_image.
          image: sql<SqlBool>`(m.rendered_content ~* ${HAS_CONTENT.image} or exists (select 1 from attachment_messages am join attachments a on a.id = am.attachment_id where am.message_id = m.id and a.content_type like 'image/%'))`,
          attachment: sql<SqlBool>`exists (select 1 from attachment_messages am where am.message_id = m.id)`,
        }[String(term.operand)];
        if (term.operand === "image") {
          // Few images in the realm (or none): the page reads them by id instead of testing every message it walks.
          const few = await imageMessagesIfFew(db, user.realm_id);
          if (few) cond = few.length ? sql<SqlBool>`m.id = any(${column(few, (id) => id)}::bigint[])` : FALSE;
        }
        break;
    }
    if (cond) conds.push(term.negated ? sql<SqlBool>`not (${cond})` : cond);
  }
  // A dm operator reaches the conversation even with a channel operator beside it (which then matches nothing).
  if (withDms && dmAccess && (channelTerm || publicTerm)) conds[0] = sql<SqlBool>`(${conds[0]} or ${dmAccess})`;
  const byFlag = narrow.some((t) => t.operator === "is" && !t.negated && FLAG_OPERANDS.has(String(t.operand)));
  const byUnread = narrow.some((t) => t.operator === "is" && !t.negated && t.operand === "unread");
  // The access rule names one channel, not the reader's lists: the page's text is the same for every reader.
  const sameText = !!channelTerm && !(withDms && dmAccess);
  // Whether a condition reads the reader's flag row (um): a channel whose history they only see as received, an is: flag.
  const flagTerms = narrow.some((t) => t.operator === "is" && FLAG_OPERANDS.has(String(t.operand)));
  const readsFlags = received.length > 0 || ownMessages || flagTerms;
  // Every message the reader received, and nothing else asked: along the reader's flag rows. Along the messages,
  // with the received condition on every branch, the planner joined every flag row of the reader (8.3-8.6 ms of
  // Postgres a page at 1,000,000 messages, against 0.9-1.0 ms before the condition; docs/reads.md, 2026-12-04).
  const everyReceived = ownMessages && narrow.length === 0;
  // A topic's visibility (is:muted, is:followed) is no index of messages: along the messages the planner merge-joined
  // the reader's flag rows with every message newest first, testing each (is:muted of nothing at 1,000,000 messages:
  // 6.6 s; docs/reads.md, 2026-12-05). Along the reader's own rows a page costs at most what they received.
  const byTopicPolicy = ownMessages && narrow.some((t) => t.operator === "is" && !t.negated && (t.operand === "muted" || t.operand === "followed"));
  const walk: Walk = byUnread ? "unread" : byFlag || everyReceived || byTopicPolicy ? "flags" : positive("search") ? "matches" : "messages";
  const isDm = narrow.some((t) => t.operator === "is" && !t.negated && t.operand === "dm");
  // Walking the reader's own conversations is their access rule (every member received each message), so the walk
  // takes the narrow's other conditions only, which must read the message alone. is:dm walks every conversation of
  // the reader's; dm-including, those the user it names is in (walked along messages' primary key instead, the page
  // tested every message the reader received: 18 ms at 1,000,000 messages, docs/reads.md 2026-12-05).
  const walksConversations = walk === "messages" && (isDm || including !== undefined) && withDms && !flagTerms && received.length === 0 && dms.length > 0;
  const walked = walksConversations ? (isDm ? dms : await conversationsWith(db, dms, including!)) : undefined;
  const conversations = walked && walked.length <= CONVERSATION_WALKS_MAX ? walked : undefined;
  if (conversations) conds[0] = sql<SqlBool>`true`;
  // Along the flag rows a page is what the reader received already.
  const receivedOnly = searchesReceived && !alongFlagRows(walk);
  // The channels and conversations the access rule allows, as the scoped documents name them, when that is all it
  // allows (not what the reader received wherever it is, nor every public channel).
  const scoped = searches && !unfilled && !reachable.some((r) => r.kind === "unscoped") && !ownMessages && !publicTerm;
  const scopes = scoped ? [...open, ...received].map((id) => `s${id}`).concat(withDms ? dms.map((id) => `r${id}`) : []) : undefined;
  return { conds, searchConds, readsFlags, walk, sameText, oneChannel: !!channelTerm, storedSearch: searches && !unfilled, conversations, receivedOnly, scopes };
}

/** Which of the conversations `dms` (recipient ids) user `member` is in. */
async function conversationsWith(db: DB, dms: number[], member: number): Promise<number[]> {
  const rows = await db.selectFrom("recipient_members").select("recipient_id").where("user_id", "=", member).where("recipient_id", "in", dms).execute();
  return rows.map((r) => r.recipient_id);
}

/**
 * How a narrow's page is found. `messages`: newest (or oldest) first along an index of messages (the primary key,
 * or the channel's, topic's, conversation's or sender's), each checked against the narrow. `flags`: along the
 * reader's flag rows that have the flag (partial indexes), each joined to its message: a starred page would
 * otherwise check every message the reader can read. `unread`: the same along the reader's unread rows
 * (`unread_user_messages`: the unread table and the lists; the flag rows have no index of their unread ones).
 * `matches`: every match of the search from the full-text index, then the page of them: walking messages newest
 * first computed the document of each (3.6 s to find none of 1,000,000).
 */
type Walk = "messages" | "flags" | "unread" | "matches";
/** The walks along the reader's flag rows (or unread rows), each joined to its message. */
const alongFlagRows = (walk: Walk) => walk === "flags" || walk === "unread";
interface CompiledNarrow {
  conds: Cond[];
  /** Those of `conds` that search (the positive operands' together, each negated one). */
  searchConds: Cond[];
  /** Whether a condition reads the reader's flag row (`um`). */
  readsFlags: boolean;
  walk: Walk;
  /** Whether the page's statement has the same text for every reader (then a named statement on Postgres). */
  sameText: boolean;
  /** Whether the narrow names a channel (its messages are walked along messages_stream_id). */
  oneChannel?: boolean;
  /** Whether a search reads the stored documents (every message has one: message_search_fill.below is null). */
  storedSearch?: boolean;
  /**
   * For a search whose access rule is channels and conversations (and every message has its scoped document): those,
   * as the scoped documents name them (`s<stream id>`, `r<recipient id>`; reads/search.ts scopedMatch).
   */
  scopes?: string[];
  /**
   * For an is:dm or dm-including page whose conditions read only the message: the reader's conversations (with the
   * user dm-including names), walked one by one (alongConversations).
   */
  conversations?: number[];
  /**
   * Whether the page keeps only what the reader received, of the messages `conds` allow (a search without a channel:
   * `conds` name the candidates, and the received condition is tested on the page's candidates, RECEIVED).
   */
  receivedOnly?: boolean;
}

/** Whether the reader (the page's `user`, an SQL expression) received message `m`: a flag row, or a place in its recipient list. */
const receivedBy = (reader: number) => sql<SqlBool>`(${sql.raw(readerFlags(String(reader)))} is not null)`;

/**
 * Past this many conversations an is:dm page walks the primary key again: each conversation's walk is an index
 * descent (about 10 µs), and a reader in that many conversations has direct messages close together anyway.
 */
const CONVERSATION_WALKS_MAX = 500;

/** The `is:` operands read from the reader's flags, which a page walks the flag rows for. */
const FLAG_OPERANDS = new Set(["starred", "mentioned", "alerted", "unread"]);

/**
 * The reader has one of these flags on the message. Spelled as the partial indexes of
 * 2026-11-28T0110-message-read-indexes spell their predicates, with the bits as constants, so that a flag-row walk
 * uses them. The form to negate treats a message never received (no flag row) as having no flag set, so that its
 * negation keeps it.
 */
function flagSet(bits: number, negated = false): Cond {
  return negated ? sql<SqlBool>`coalesce((um.flags & ${sql.lit(bits)}) <> 0, false)` : sql<SqlBool>`(um.flags & ${sql.lit(bits)}) <> 0`;
}

/**
 * GET /messages/matches_narrow (Zulip's messages_in_narrow_backend): which of these messages, among those the user
 * received, match the narrow, each with its `match_content` (the rendered content) and `match_subject` (the
 * escaped topic), highlighted where the narrow searches.
 */
export async function messagesMatchingNarrow(db: DB, user: UserRow, ids: number[], narrow: Narrow): Promise<Record<string, { match_content: string; match_subject: string }>> {
  if (!ids.length) return {};
  const { conds } = await compileNarrow(db, user, narrow);
  const rows = await messagesWhere(db, user, [...conds, sql<SqlBool>`um.flags is not null`])
    .select(["m.id", "m.topic", "m.rendered_content"])
    .where("m.id", "in", ids)
    .orderBy("m.id")
    .execute();
  const search = searchOperand(narrow);
  const highlights = search && rows.length ? await searchHighlights(db, rows.map((r) => r.id), search, realmSearchConfig(user.realm_id)) : undefined;
  const matches: Record<string, { match_content: string; match_subject: string }> = {};
  for (const r of rows) {
    const highlighted = highlights?.get(r.id);
    matches[r.id] = highlighted ? { match_content: highlighted.match_content, match_subject: highlighted.match_subject } : { match_content: r.rendered_content, match_subject: escapeText(r.topic) };
  }
  return matches;
}

/**
 * GET /messages/{message_id}/read_receipts (Zulip's read_receipts view): the active users who have the message
 * marked read and share read receipts (`send_read_receipts`), never its sender.
 */
export async function readReceiptUserIds(db: DB, message: { id: number; sender_id: number }): Promise<number[]> {
  const { rows } = await sql<{ user_id: number }>`
    select um.user_id from user_messages um
    join users u on u.id = um.user_id
    where um.message_id = ${message.id} and (um.flags & ${FLAG_BITS.read}) <> 0 and um.user_id <> ${message.sender_id} and u.is_active
      and coalesce((${userSetting(sql.ref("um.user_id"), "send_read_receipts")})::boolean, ${USER_SETTINGS_DEFAULTS.send_read_receipts})
    order by um.user_id`.execute(db);
  return rows.map((r) => r.user_id);
}

/** Whether the user received a message in this topic of the channel (Zulip's user_message_exists_for_topic). */
export async function receivedInTopic(db: DB, userId: number, streamId: number, topic: string): Promise<boolean> {
  const { rows } = await sql`
    select 1 from user_messages um join messages m on m.id = um.message_id
    where um.user_id = ${userId} and m.stream_id = ${streamId} and lower(m.topic) = ${topic.toLowerCase()} limit 1`.execute(db);
  return rows.length > 0;
}

/** Whether the message's topic has this visibility policy for the user (Zulip's UserTopic). */
/** Whether the user follows a topic, or mutes a topic or a channel: whether is:followed / is:muted can match anything. */
/** Up to this many messages with an image in a realm, has:image reads them by id; past it, it tests each message walked. */
export const FEW_IMAGE_MESSAGES = 1_000;

/**
 * The ids of the realm's messages with an image (has:image: the pattern in the rendered content, or an image among the
 * files it claimed), when there are at most FEW_IMAGE_MESSAGES; undefined when there are more. Two bounded reads:
 * the partial index messages_has_image (migration 2026-12-05T0800), and the realm's image attachments' messages. With
 * many, a page's newest-first walk meets its images soon; with few, that walk would test every message the reader can
 * read (167 ms a fetch at 1,000,000 messages with none).
 */
async function imageMessagesIfFew(db: DB, realmId: number): Promise<number[] | undefined> {
  const { rows } = await sql<{ id: string | number }>`
    (select m.id from messages m where m.realm_id = ${realmId} and m.rendered_content ~* ${sql.lit(HAS_CONTENT.image)} limit ${FEW_IMAGE_MESSAGES + 1})
    union
    (select am.message_id from attachment_messages am join attachments a on a.id = am.attachment_id
      where a.realm_id = ${realmId} and a.content_type like 'image/%' limit ${FEW_IMAGE_MESSAGES + 1})`.execute(db);
  return rows.length > FEW_IMAGE_MESSAGES ? undefined : rows.map((r) => Number(r.id));
}

async function hasVisibility(db: DB, userId: number, operand: "followed" | "muted"): Promise<boolean> {
  const policy = operand === "followed" ? VISIBILITY.followed : VISIBILITY.muted;
  const topics = sql<SqlBool>`exists (select 1 from user_topics ut where ut.user_id = ${userId} and ut.visibility_policy = ${policy})`;
  const channels = operand === "muted" ? sql<SqlBool>`exists (select 1 from subscriptions s where s.user_id = ${userId} and s.is_muted)` : FALSE;
  const { rows } = await sql<{ any: boolean }>`select (${topics} or ${channels}) as any`.execute(db);
  return rows[0]!.any;
}

function topicPolicy(userId: number, policy: number): Cond {
  return sql<SqlBool>`exists (select 1 from user_topics ut where ut.user_id = ${userId} and ut.stream_id = m.stream_id and ut.topic_key = lower(m.topic) and ut.visibility_policy = ${policy})`;
}

function messagesWhere(db: DB, user: UserRow, conds: Cond[], walk: Walk = "messages") {
  const where = sql<SqlBool>`${sql.join(conds, sql` and `)}`;
  if (alongFlagRows(walk)) {
    // `+ 0`: the join must not make m.id and um.message_id one ordering, or the planner merge-joins the flag rows
    // with every message newest first (1.3 s for a starred page of 1,000,000 messages) instead of looking each up.
    return db
      .selectFrom(walk === "unread" ? "unread_user_messages as um" : "user_messages as um")
      .innerJoin("messages as m", (j) => j.on(sql<SqlBool>`m.id = um.message_id + 0`))
      .where("um.user_id", "=", user.id)
      .where(where);
  }
  return db
    .selectFrom("messages as m")
    .leftJoin("user_messages as um", (j) => j.onRef("um.message_id", "=", "m.id").on("um.user_id", "=", user.id))
    .where(where);
}

/**
 * An is:dm page's messages: each of the reader's conversations walked along messages_recipient from the anchor,
 * the narrow's conditions tested there, at most the page's limit of each; the page is then the nearest of them.
 * Walked along the primary key instead, the page read past every message of the organization the reader cannot
 * read: 4,439 rows for 21 at 1,000,000 messages (9-12 ms), against 50 short index walks (0.5-0.7 ms), and the
 * former grows with the organization (docs/reads.md, 2026-12-03). Only for conditions that read the message alone:
 * each conversation's first `limit` rows that pass are then all its page can hold.
 */
function alongConversations(db: DB, user: UserRow, conds: Cond[], recipients: number[], side: { op: "<" | ">="; anchor: number; direction: "asc" | "desc"; limit: number }) {
  const walks = sql`(select c_m.* from unnest(${sql.val(recipients)}::int[]) as c(recipient_id) cross join lateral (
      select * from messages m where m.recipient_id = c.recipient_id and ${sql.join(conds, sql` and `)} and m.id ${sql.raw(side.op)} ${side.anchor}
      order by m.id ${sql.raw(side.direction)} limit ${side.limit}) c_m)`;
  // The reader's flags as the channel's page reads them, per row: joined to the flag rows, the planner merge-joined
  // every flag row of the reader (49,550 at 1,000,000 messages) with the page's.
  const flags = sql`(select ${sql.raw(readerFlags("rd.id"))} as flags from (select ${user.id}::int as id) rd)`;
  return (db as Kysely<any>)
    .selectFrom(walks.as("m"))
    .leftJoinLateral(flags.as("um"), (j) => j.onTrue()) as unknown as ReturnType<typeof messagesWhere>;
}

/** Runs `read` in a transaction whose statements run under `setting` (a `set local` statement). */
export function withLocalSetting<T>(db: DB, setting: RawBuilder<unknown>, read: (trx: DB) => Promise<T>): Promise<T> {
  return db.transaction().execute(async (trx) => {
    await setting.execute(trx);
    return read(trx);
  });
}

/**
 * Runs `read` in a transaction without JIT. The conversations' walk (alongConversations) is estimated dear (a limit
 * per conversation, each estimated to walk far), and past `jit_above_cost` Postgres compiled its expressions at every
 * execution: 22 ms a page at 1,000,000 messages, 3 ms without (docs/reads.md, 2026-12-03).
 */
function withoutJit<T>(db: DB, read: (trx: DB) => Promise<T>): Promise<T> {
  return withLocalSetting(db, sql`set local jit = off`, read);
}

/**
 * A search page's `work_mem` (its plans are serial, as every statement's on Postgres: runtime/store/db.ts postgresPool):
 * at the default 4 MB the bitmap of a common word's matches at 10,000,000 messages went lossy, and every row of a lossy
 * block was rechecked (`budget coffee`: 66,228 lossy blocks, 1.6 s; 300 ms exact). A bitmap of 500,000 matches over
 * 120,000 blocks fits in 16 MB; a search that needs less takes less.
 */
const SEARCH_WORK_MEM = "16MB";

/**
 * The bounds of a search page's statements (messageWindow; docs/reads.md "Search words"), an object so that the tests
 * can shrink them and take each statement's path on a small store.
 * - `recent`: how many of the narrow's messages nearest the anchor the nearby walk tests: enough for a word in one
 *   message in twenty to fill a page of 20; a rarer word's page then comes from the index's matches.
 * - `channel`: the same along one channel (messages_stream_id, the channel's messages only): a channel (or topic)
 *   smaller than this is searched by its walk alone, its stored documents tested, whatever the words' frequencies.
 * - `cap`: at most how many matches of the search's index alone the capped statement reads before the narrow's other
 *   conditions: a rare word's, or none; a common word's page is left to the nearby walk or the full plan.
 * - `first`: which of the two comes first: as the planner's estimate of the search's share of messages says (the
 *   nearby walk when it should fill a page), or always one of them (the tests).
 * - `received`: for a search without a channel, how many candidates beyond twice the page's rows the capped and full
 *   statements test for what the reader received before giving way (a reader's matches are mostly in channels they
 *   were in at the time: the candidates nearest the anchor are mostly received).
 * - `scopes`: at most how many channels and conversations a search asks the scoped index for, one index scan each
 *   (reads/search.ts scopedMatch), instead of the capped and full statements; 0: never. Each scope costs its
 *   planning and its scan, about 11 µs even when it holds no match, and the scoped lists together are the reader's
 *   share of the store's: a reader of 500 channels of 1,000 (600 scopes) searched two common words three times
 *   slower scoped at 10,000,000 messages, one of 50 (100 scopes) 3-9 times faster (docs/reads.md, 2026-12-05 15:00).
 */
export const SEARCH_WINDOWS: { recent: number; channel: number; cap: number; first: "estimate" | "nearby" | "capped"; received: number; scopes: number } = {
  recent: 1_000,
  channel: 20_000,
  cap: 25_000,
  first: "estimate",
  received: 50,
  scopes: 200,
};

/**
 * What a page is ordered by, for each walk: the flag rows' message ids (their index's order), or, for the matches
 * of a search, an expression no index is ordered by (`m.id + 0`), so that the planner gathers the matches from the
 * full-text index and sorts them, rather than walking every message newest first to test it.
 */
const ORDER: Record<Walk, RawBuilder<number>> = {
  messages: sql<number>`m.id`,
  flags: sql<number>`um.message_id`,
  unread: sql<number>`um.message_id`,
  matches: sql<number>`m.id + 0`,
};

/**
 * Messages the user can read around an anchor, with Zulip's found_* flags, or the ones named by `messageIds`.
 * Each side is one index range scan limited to what was asked for; senders, conversations and reactions are
 * looked up for the page only.
 */
export async function fetchMessages(db: DB, user: UserRow, asked: MessageQuery) {
  const q = { ...asked, narrow: await withResolved(db, user, asked.narrow) };
  const window = q.messageIds ? undefined : await oneStatementWindow(db, user, q);
  if (window) return fetched(db, user, q, window);
  const compiled = await compileNarrow(db, user, q.narrow);
  const conds = compiled.receivedOnly ? [...compiled.conds, sql<SqlBool>`um.flags is not null`] : compiled.conds;
  if (q.messageIds) {
    const rows = q.messageIds.length
      ? await messagesWhere(db, user, conds).select(pageColumns(searchOperand(q.narrow), realmSearchConfig(user.realm_id))).where("m.id", "in", q.messageIds).orderBy("m.id").execute()
      : [];
    return { messages: await buildMessages(db, user, rows, q), history_limited: false };
  }
  return fetched(db, user, q, await messageWindow(db, user, q, compiled));
}

/** The operators that name a conversation, which a `with` term's message replaces. */
const CONVERSATION_OPERATORS = new Set(["channel", "topic", "dm"]);

/**
 * Zulip's `with` operator (feature level 271: a permalink, which the mobile app sends with a topic's narrow): the
 * narrow's conversation becomes the message's current one, its channel and topic or its direct-message
 * conversation, the other terms kept, so that a permalink still opens the conversation after the message was
 * moved. When the reader may not read the message, a narrow that names a conversation of its own (a `dm`, or a
 * channel and a topic) is read without the term, and any other is invalid (zerver/lib/narrow.py,
 * update_narrow_terms_containing_with_operator).
 */
async function withResolved(db: DB, user: UserRow, narrow: Narrow): Promise<Narrow> {
  const withTerm = narrow.find((t) => t.operator === "with");
  if (!withTerm) return narrow;
  const rest = narrow.filter((t) => t !== withTerm);
  const [message] = await readableMessages(db, user, [withTerm.operand as number]);
  if (!message) {
    const has = (op: string) => rest.some((t) => t.operator === op);
    if (has("dm") || (has("channel") && has("topic"))) return rest;
    throw badNarrow("Invalid narrow operator: Invalid 'with' operator");
  }
  const others = rest.filter((t) => !CONVERSATION_OPERATORS.has(t.operator));
  if (message.stream_id !== null) {
    return [{ operator: "channel", operand: message.stream_id, negated: false }, { operator: "topic", operand: message.topic, negated: false }, ...others];
  }
  // The conversation's other members; the reader's own conversation is named by the reader.
  const members = await db.selectFrom("recipient_members").select("user_id").where("recipient_id", "=", message.recipient_id).orderBy("user_id").execute();
  const peers = members.map((m) => m.user_id).filter((id) => id !== user.id);
  return [{ operator: "dm", operand: peers.length ? peers : [user.id], negated: false }, ...others];
}

/**
 * A narrow whose page is one statement planned once, and whose first_unread anchor is one statement before it
 * (firstUnread): a channel or topic of it, every message or a flag (received), one conversation, every conversation
 * (is:dm), one sender.
 */
type OneStatementNarrow =
  | { channel: number | string; topic?: string }
  | { received: ReceivedNarrow }
  | { conversation: Array<number | string> }
  | { conversations: true }
  | { sender: number | string };

function oneStatementNarrow(narrow: Narrow): OneStatementNarrow | undefined {
  const channel = oneChannelNarrow(narrow);
  if (channel) return channel;
  const received = receivedNarrow(narrow);
  if (received) return { received };
  const conversation = oneConversationNarrow(narrow);
  if (conversation) return { conversation };
  if (onlyConversationsNarrow(narrow)) return { conversations: true };
  const sender = oneSenderNarrow(narrow);
  return sender === undefined ? undefined : { sender };
}

/** The window of a narrow whose page is one statement (oneStatementNarrow), or undefined for the general path. */
async function oneStatementWindow(db: DB, user: UserRow, q: MessageQuery): Promise<Awaited<ReturnType<typeof messageWindow>> | undefined> {
  const narrow = oneStatementNarrow(q.narrow);
  if (!narrow) return undefined;
  const anchor = q.anchor === "first_unread" ? await firstUnread(db, user, narrow) : fixedAnchor(q.anchor);
  if ("channel" in narrow) return channelPage(db, user, q, anchor, narrow);
  if ("received" in narrow) return receivedPage(db, user, q, anchor, narrow.received);
  if ("conversation" in narrow) return conversationPage(db, user, q, anchor, narrow.conversation);
  if ("conversations" in narrow) return conversationsPage(db, user, q, anchor);
  return senderPage(db, user, q, anchor, narrow.sender);
}

/** Which first unread message a statement looks for: each kind has a text of its own (firstUnreadText). */
type FirstUnreadKind = { byId: boolean; topic: boolean } | { flags: number } | { conversation: true } | { conversations: true } | { sender: true };

/**
 * The statement of a first_unread anchor, for the reader ($1): their first unread message of the narrow, along
 * unread_messages' key (it holds exactly the unread flag rows, with each message's channel, topic and recipient) and
 * the recipient lists not yet expanded. The narrow: a channel of the realm ($2) named by id or lower-cased name ($3,
 * and topic $4, lower-cased); the reader's messages with the flags; the conversation of the reader and the users
 * named in the realm ($2) by id ($3) or lower-cased e-mail ($4), found by its key as conversationPage finds it;
 * every conversation (no channel); or a sender of the realm ($2) named by id ($3) or lower-cased e-mail ($4), each
 * unread row's message looked up for its sender. Answers the anchor (LARGER_THAN_MAX_MESSAGE_ID when nothing is unread, as Zulip's)
 * and, for a channel, its id (null: no such channel). One text per kind, its conditions spelled out: with every
 * kind's conditions in one text behind `$n is null or …`, the generic plan read all of unread_messages (13 ms at
 * 10,000,000 messages, docs/reads.md 2026-12-05).
 */
function firstUnreadText(kind: FirstUnreadKind): string {
  const channel = "byId" in kind ? kind : undefined;
  const flags = "flags" in kind && kind.flags ? kind.flags : 0;
  const inNarrow = (stream: string, topic: string, recipient: string, sender: string) =>
    channel
      ? ` and ${stream} = (select c.id from named c)${channel.topic ? ` and lower(${topic}) = $4::text` : ""}`
      : "conversation" in kind
        ? ` and ${recipient} = (select c.id from conversation c)`
        : "conversations" in kind
          ? ` and ${stream} is null`
          : "sender" in kind
            ? ` and ${sender} = (select n.id from named n)`
            : "";
  const ctes = channel
    ? `with named as (select s.id from streams s where s.realm_id = $2::bigint and ${channel.byId ? "s.id = $3::bigint" : "lower(s.name) = $3::text"})`
    : "conversation" in kind
      ? `with ${conversationCtes("$2::bigint", "$1::int", "$3::int[]", "$4::text[]")}`
      : "sender" in kind
        ? `with ${namedUserCte("$2::bigint", "$3::int", "$4::text")}`
        : "";
  // A sender's unread messages: each of the reader's unread rows in order, its message looked up (`+ 0`: not merged
  // with every message of the sender).
  const rows = "sender" in kind ? "unread_messages r join messages rm on rm.id = r.message_id + 0" : "unread_messages r";
  return `${ctes}
  select ${channel ? "(select c.id from named c)" : "null::bigint"} as channel_id, coalesce(min(f.id), ${LARGER_THAN_MAX_MESSAGE_ID}::bigint) as anchor from (
    (select r.message_id as id from ${rows}
      where r.user_id = $1::int${flags ? ` and (r.flags & ${flags}) <> 0` : ""}${inNarrow("r.stream_id", "r.topic", "r.recipient_id", "rm.sender_id")}
      order by r.message_id limit 1)
    union all
    (select l.message_id from user_message_lists l join messages m on m.id = l.message_id
      where exists (select 1 from unnest(l.user_ids, l.flags) as x(user_id, flags)
          where x.user_id = $1::int and (x.flags & ${FLAG_BITS.read}) = 0${flags ? ` and (x.flags & ${flags}) <> 0` : ""})${inNarrow("m.stream_id", "m.topic", "m.recipient_id", "m.sender_id")}
      order by l.message_id limit 1)
  ) f`;
}

const FIRST_UNREAD_TEXTS = new Map<string, string>();

/**
 * The first_unread anchor of a one-statement page (firstUnreadText). Every unread message's, a conversation's and
 * every conversation's are planned once (each plan is the walk of the reader's rows, or the conversation's lookup,
 * whatever the values); a channel's, a flag's or a sender's is planned for its values: a generic plan cannot know
 * how few of the reader's rows the channel, flag or sender keeps, and took the sequential scan.
 */
async function firstUnread(db: DB, user: UserRow, narrow: OneStatementNarrow): Promise<number> {
  let kind: FirstUnreadKind;
  const values: unknown[] = [user.id];
  if ("channel" in narrow) {
    kind = { byId: typeof narrow.channel === "number", topic: narrow.topic !== undefined };
    values.push(user.realm_id, typeof narrow.channel === "number" ? narrow.channel : narrow.channel.toLowerCase());
    if (narrow.topic !== undefined) values.push(narrow.topic.toLowerCase());
  } else if ("received" in narrow) kind = { flags: RECEIVED_FLAG_BITS[narrow.received] };
  else if ("conversation" in narrow) {
    kind = { conversation: true };
    values.push(user.realm_id, ...splitUserRefs(narrow.conversation));
  } else if ("sender" in narrow) {
    kind = { sender: true };
    values.push(user.realm_id, ...userRefValues(narrow.sender));
  } else kind = { conversations: true };
  const key = JSON.stringify(kind);
  const text = FIRST_UNREAD_TEXTS.get(key) ?? FIRST_UNREAD_TEXTS.set(key, firstUnreadText(kind)).get(key)!;
  type Row = { channel_id: number | null; anchor: string | number };
  const forItsValues = "byId" in kind || "sender" in kind || ("flags" in kind && kind.flags !== 0);
  const rows = forItsValues ? (await db.executeQuery<Row>(CompiledQuery.raw(text, values))).rows : await queryPlannedOnce<Row>(db, text, values);
  if ("channel" in narrow && rows[0]!.channel_id === null) throw badNarrow("Invalid narrow operator: unknown channel");
  return Number(rows[0]!.anchor);
}

/** GET /messages' answer for a window of rows. */
async function fetched(db: DB, user: UserRow, q: MessageQuery, w: Awaited<ReturnType<typeof messageWindow>>) {
  return {
    anchor: w.anchor,
    found_anchor: w.found_anchor,
    found_oldest: w.found_oldest,
    found_newest: w.found_newest,
    history_limited: false,
    messages: await buildMessages(db, user, w.rows, q),
  };
}

/**
 * What a fetch reads of each message: the message object's fields, the reader's flags, and what the message object
 * takes from other tables (sender, channel name or conversation members, reactions), as subqueries of the page's
 * own statement: Postgres evaluates them for the rows of the page only, and the page is one round trip. Without
 * `related`, those columns are null: for a caller that wants the ids alone (up to 5,000 of them).
 */
function pageColumns(search: string, config: SearchConfig, related = true) {
  const [matchContent, matchSubject] =
    search && related ? highlightColumns(search, config) : [sql<string | null>`null`.as("match_content"), sql<string | null>`null`.as("match_subject")];
  const ifRelated = <T>(expression: string) => (related ? sql.raw<T>(expression) : sql<T>`null`);
  return [
    ...MESSAGE_COLUMNS,
    "um.flags",
    ifRelated<[string, string] | null>(RELATED.sender).as("sender"),
    ifRelated<string | null>(RELATED.streamName).as("stream_name"),
    ifRelated<Person[] | null>(RELATED.people).as("people"),
    ifRelated<unknown[] | null>(RELATED.reactions).as("reactions"),
    ifRelated<Submessage[] | null>(RELATED.submessages).as("submessages"),
    matchContent,
    matchSubject,
  ] as const;
}

/** The message's own columns a page reads. */
const MESSAGE_COLUMNS = [
  "m.id",
  "m.sender_id",
  "m.recipient_id",
  "m.stream_id",
  "m.topic",
  "m.content",
  "m.rendered_content",
  "m.date_sent",
  "m.sending_client",
  "m.edit_history",
  "m.last_edit_time",
  "m.last_moved_time",
] as const;

/** What the message object takes from other tables, as subqueries of the page's statement (SQL text, no parameters). */
const RELATED = {
  sender: `(select json_build_array(u.email, u.full_name) from users u where u.id = m.sender_id)`,
  streamName: `(select s.name from streams s where s.id = m.stream_id)`,
  people: `case when m.stream_id is null then (
      select json_agg(json_build_object('id', u.id, 'email', u.email, 'full_name', u.full_name, 'is_mirror_dummy', false) order by u.id)
      from recipient_members rm join users u on u.id = rm.user_id where rm.recipient_id = m.recipient_id) end`,
  reactions: `(
      select json_agg(json_build_object('emoji_name', r.emoji_name, 'emoji_code', r.emoji_code, 'reaction_type', r.reaction_type, 'user_id', r.user_id) order by r.created)
      from reactions r where r.message_id = m.id)`,
  submessages: `(
      select json_agg(json_build_object('msg_type', s.msg_type, 'content', s.content, 'message_id', s.message_id, 'sender_id', s.sender_id, 'id', s.id) order by s.id)
      from submessages s where s.message_id = m.id)`,
};

type Person = { id: number; email: string; full_name: string; is_mirror_dummy: boolean };

/** The range of a narrow GET /messages and POST /messages/flags/narrow both act on. */
export type MessageRange = Pick<MessageQuery, "anchor" | "numBefore" | "numAfter" | "includeAnchor" | "narrow">;

/**
 * The ids of the messages the user can read in a range of a narrow, oldest first, with Zulip's found_* flags:
 * the messages POST /messages/flags/narrow updates (Zulip's fetch_messages, as GET /messages reads them).
 */
export async function messageIdsInRange(db: DB, user: UserRow, asked: MessageRange) {
  const q = { ...asked, narrow: await withResolved(db, user, asked.narrow) };
  const w = await messageWindow(db, user, q, await compileNarrow(db, user, q.narrow), false);
  return { ids: w.rows.map((r) => r.id), found_oldest: w.found_oldest, found_newest: w.found_newest };
}

/** The rows of a range of the narrow (compiled) around its anchor, oldest first. */
async function messageWindow(db: DB, user: UserRow, q: MessageRange, { conds, searchConds, readsFlags, walk, sameText, oneChannel, storedSearch, conversations, receivedOnly, scopes }: CompiledNarrow, related = true) {
  let anchor: number;
  if (q.anchor === "first_unread") {
    // Along the reader's unread rows, whatever the narrow's own walk.
    const first = await messagesWhere(db, user, conds, "unread")
      .select("um.message_id as id")
      .orderBy("um.message_id")
      .limit(1)
      .executeTakeFirst();
    anchor = first?.id ?? LARGER_THAN_MAX_MESSAGE_ID;
  } else anchor = fixedAnchor(q.anchor);
  const order = ORDER[walk];
  const columns = pageColumns(searchOperand(q.narrow), realmSearchConfig(user.realm_id), related);
  // The conversations' walk in a transaction without JIT (withoutJit); the records after it, outside it (on PGlite a
  // statement outside a transaction waits for it to end).
  const page = async (op: "<" | ">=", direction: "asc" | "desc", limit: number): Promise<MessageRow[]> => {
    const read = <T>(statement: (on: DB) => Promise<T>) =>
      conversations ? withoutJit(db, statement) : statement(db);
    const rows = (on: DB) =>
      (conversations ? alongConversations(on, user, conds, conversations, { op, anchor, direction, limit }) : messagesWhere(on, user, conds, walk).where(order, op, anchor))
        .orderBy(order, direction)
        .limit(limit)
        .modifyEnd(sql.raw(sameText ? NAMED_STATEMENT : ""));
    // The ids, versions and flags, and the kept records (a search's pages read their rows whole: their highlighting
    // is the reader's).
    if (!related) return read((on) => rows(on).select(columns).execute() as Promise<MessageRow[]>);
    const refs = await read((on) =>
      rows(on)
        .select([
          "m.id",
          "m.version",
          "um.flags",
          sql.raw<string | null>(RELATED.streamName).as("stream_name"),
          sql.raw<string>(REALM_USER_VERSION(String(user.realm_id))).as("user_version"),
        ])
        .execute(),
    );
    return withRecords(db, refs, refs[0]?.user_version ?? "0");
  };
  // A search's page, in up to three statements, each the page when it can tell (docs/reads.md "Search words"). The
  // messages a statement tests are in a derived table; the reader's flags and the related columns are joined to the
  // page's rows only (joined to every message, the planner hashed or merged all of the reader's flag rows).
  // 1. `nearby`: the narrow's nearest messages from the anchor without the search (SEARCH_WINDOWS.recent, or
  //    SEARCH_WINDOWS.channel along one channel the scoped index is not asked for), newest (or oldest) first, tested
  //    against the stored document: the page when they hold enough (a common word), or when the window is not full
  //    (every message of the narrow on that side was tested: a channel or topic smaller than the window). The
  //    window's last row comes back as a sentinel (`window_rank`) to tell.
  // 2. `capped`: the search's matches from its index alone, at most SEARCH_WINDOWS.cap + 1 of them, streamed through
  //    the narrow's other conditions (an aggregate: their count, and the page's ids among those that pass); when they
  //    were not more than the cap (a rare word, or none), the page is those ids' messages (no statement for none).
  //    Rather than the planner ANDing the search's matches with the bitmap of every message the reader can read
  //    (495,000 of them at 10,000,000 messages: 200-300 ms to build).
  // 3. every match, from the indexes as the planner likes (the BitmapAnd of the search and the reader's access),
  //    sorted (`m.id + 0`, as ORDER says).
  // With `scopes` (the access rule's channels and conversations, at most SEARCH_WINDOWS.scopes of them), every match
  // from the scoped index instead of 2 and 3: a scan per scope, each reading the scope's share of the words' posting
  // lists, where the document's index reads them whole (two common words rare together at 10,000,000 messages:
  // 58-64 → 7 ms; docs/reads.md, 2026-12-05 15:00).
  // A search without a channel (`receivedOnly`) keeps what the reader received: the nearby walk tests it on the
  // window's matches; the capped and full statements take more candidates than the page (receivedCandidates), test
  // them, and give way when too few were received (then the full statement with the received condition in it).
  const otherConds = conds.filter((c) => !searchConds.includes(c));
  const receivedCandidates = (limit: number) => limit * 2 + SEARCH_WINDOWS.received;
  const all = (list: Cond[]) => (list.length ? sql<SqlBool>`${sql.join(list, sql` and `)}` : sql<SqlBool>`true`);
  type Rows = Awaited<ReturnType<typeof page>>;
  const strip = (rows: Array<Record<string, unknown>>) => rows.map(({ window_rank: _r, matched: _m, ...row }) => row) as unknown as Rows;
  const nearbyPage = async (on: DB, searchConds: Cond[], op: "<" | ">=", direction: "asc" | "desc", limit: number, window: number) => {
    const walked = (readsFlags ? messagesWhere(on, user, otherConds) : on.selectFrom("messages as m").where(all(otherConds)))
      .selectAll("m")
      .where("m.id", op, anchor)
      .orderBy(sql`m.id`, direction)
      .limit(window);
    // Numbered in the walk's order, and ordered so at this level too: the planner then knows the rows come in the
    // page's order (no sort of the whole window, and the page's limit stops the walk).
    const ranked = (on as Kysely<any>)
      .selectFrom(walked.as("m"))
      .selectAll("m")
      .select(sql<number>`row_number() over (order by m.id ${sql.raw(direction)})`.as("window_rank"))
      .orderBy("m.id", direction);
    const kept = all(receivedOnly ? [...searchConds, receivedBy(user.id)] : searchConds);
    const rows = (await (on as Kysely<any>)
      .selectFrom(ranked.as("m"))
      .leftJoin("user_messages as um", (j) => j.onRef("um.message_id", "=", "m.id").on("um.user_id", "=", user.id))
      .where(sql<SqlBool>`(${kept}) or m.window_rank = ${window}`)
      .select([...(columns as readonly any[]), sql<number>`m.window_rank`.as("window_rank"), sql<boolean>`${kept}`.as("matched")])
      .orderBy("m.id", direction)
      .limit(limit + 1)
      .execute()) as Array<Record<string, unknown>>;
    const matched = rows.filter((r) => r.matched).slice(0, limit);
    const full = rows.some((r) => Number(r.window_rank) === window);
    return matched.length >= limit || !full ? strip(matched) : undefined;
  };
  const cappedPage = async (on: DB, searchConds: Cond[], op: "<" | ">=", direction: "asc" | "desc", limit: number) => {
    // Not for the parsed documents (a store still filling them), nor a narrow whose conditions read the reader's flags.
    if (!storedSearch || readsFlags) return undefined;
    const cap = SEARCH_WINDOWS.cap;
    // Planned without sequential scans: the query is computed at run time, its selectivity a guess, and a scan of the
    // table that stops at the limit can look cheap (for a rare word it reads the whole table). Set back as the
    // statement's result (after its planning), for the page's statement.
    await sql`select set_config('enable_seqscan', 'off', true)`.execute(on);
    const candidates = receivedOnly ? receivedCandidates(limit) : limit;
    const passes = sql<SqlBool>`m.id ${sql.raw(op)} ${anchor} and ${all(otherConds)}`;
    const { rows } = await sql<{ n: string | number; passing: string | number; ids: Array<string | number> | null }>`
      select count(*) as n, count(*) filter (where ${passes}) as passing,
        (array_agg(m.id order by m.id ${sql.raw(direction)}) filter (where ${passes}))[1:${candidates}] as ids,
        set_config('enable_seqscan', 'on', true) as restored
      from (select * from messages m where ${all(searchConds)} limit ${cap + 1}) m`.execute(on);
    if (Number(rows[0]!.n) > cap) return undefined;
    const ids = (rows[0]!.ids ?? []).map(Number);
    if (!ids.length) return [] as unknown as Rows;
    const page = await pageOfIds(on, ids, direction, limit);
    return page.length < limit && Number(rows[0]!.passing) > ids.length ? undefined : page;
  };
  /** The page of these candidates (ids in the page's order): of them, what the reader received when `receivedOnly`. */
  const pageOfIds = (on: DB, ids: number[], direction: "asc" | "desc", limit: number) =>
    (on as Kysely<any>)
      .selectFrom("messages as m")
      .leftJoin("user_messages as um", (j) => j.onRef("um.message_id", "=", "m.id").on("um.user_id", "=", user.id))
      .where(sql<SqlBool>`m.id = any(${ids}::bigint[])`)
      .$if(!!receivedOnly, (b) => b.where(receivedBy(user.id)))
      .select(columns as any)
      .orderBy("m.id", direction)
      .limit(limit)
      .execute() as Promise<Rows>;
  /**
   * A search's page without a channel from every match: the nearest candidates (receivedCandidates of them, their
   * flags tested after the limit), or, when too few of those were received, the received condition in the statement.
   */
  const everyReceivedMatch = async (on: DB, searchConds: Cond[], op: "<" | ">=", direction: "asc" | "desc", limit: number) => {
    const candidates = receivedCandidates(limit);
    const nearest = nearestMatches(on, searchConds, op, direction, candidates, readsFlags).select("m.id");
    const tested = await (on as Kysely<any>)
      .selectFrom(nearest.as("m"))
      .select(["m.id", receivedBy(user.id).as("received")])
      .orderBy("m.id", direction)
      .execute();
    if (tested.length < candidates || tested.filter((r) => r.received).length >= limit) {
      const ids = tested.filter((r) => r.received).map((r) => Number(r.id));
      return ids.length ? pageOfIds(on, ids, direction, limit) : ([] as unknown as Rows);
    }
    return everyMatch(on, [...searchConds, sql<SqlBool>`um.flags is not null`], op, direction, limit, true);
  };
  /** The narrow's matches nearest the anchor (its other conditions and these of the search), from the indexes, sorted. */
  const nearestMatches = (on: DB, searchConds: Cond[], op: "<" | ">=", direction: "asc" | "desc", limit: number, withFlags: boolean) => {
    const conds = [...otherConds, ...searchConds];
    return (withFlags ? messagesWhere(on, user, conds) : on.selectFrom("messages as m").where(all(conds)))
      .where("m.id", op, anchor)
      .orderBy(ORDER.matches, direction)
      .limit(limit);
  };
  /**
   * A search's page from the scoped index (`scoped`: scopedMatch): its matches in a derived table the planner may
   * neither merge into the statement nor push conditions into (`offset 0`), planned with sequential scans off, then
   * the narrow's conditions, the stored query and (without a channel) what the reader received tested on each,
   * sorted; then the page of those ids, planned as usual. Given every condition in one statement at 10,000,000
   * messages, the planner ANDed the document's index with the channels' instead (240 ms): GIN's cost estimate made
   * each scope's scan of a few entries cost more than a common word's whole list. With sequential scans still off,
   * the page's join to the reader's flags read all 495,000 of them (1.1 s).
   */
  const scopedPage = async (on: DB, searchConds: Cond[], scoped: Cond, op: "<" | ">=", direction: "asc" | "desc", limit: number) => {
    const matches = sql`(select * from messages m where ${scoped} offset 0)`.as("m");
    const conds = [...otherConds, ...searchConds, ...(receivedOnly ? [receivedBy(user.id)] : [])];
    // JIT off too: each scope's query gets a default share in the estimate, which can pass JIT's threshold.
    await sql`select set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`.execute(on);
    const rows = await (on as Kysely<any>).selectFrom(matches).select("m.id").where(all(conds)).where("m.id", op, anchor).orderBy(ORDER.matches, direction).limit(limit).execute();
    await sql`select set_config('enable_seqscan', 'on', true)`.execute(on);
    return rows.length ? pageOfIds(on, rows.map((r) => Number(r.id)), direction, limit) : ([] as unknown as Rows);
  };
  const everyMatch = (on: DB, searchConds: Cond[], op: "<" | ">=", direction: "asc" | "desc", limit: number, withFlags = readsFlags) => {
    const rows = nearestMatches(on, searchConds, op, direction, limit, withFlags).selectAll("m");
    return (on as Kysely<any>)
      .selectFrom(rows.as("m"))
      .leftJoin("user_messages as um", (j) => j.onRef("um.message_id", "=", "m.id").on("um.user_id", "=", user.id))
      .select(columns as any)
      .orderBy("m.id", direction)
      .limit(limit)
      .execute() as ReturnType<typeof page>;
  };
  // A search page's transaction: SEARCH_WORK_MEM, and in the same statement, for the stored
  // documents, the search's tsquery computed once (the last word expanded to its words: search_prefix_query) and
  // sent back as text, to be a constant of the statements after it (the planner estimates a constant from its
  // statistics; a computed query gets a fixed guess), and the share of messages it matches, as estimated.
  const searchSettings = async (trx: DB): Promise<{ conds: Cond[]; share?: number; query?: string }> => {
    const settings = sql`set_config('work_mem', ${SEARCH_WORK_MEM}, true)`;
    if (!storedSearch) {
      await sql`select ${settings}`.execute(trx);
      return { conds: searchConds };
    }
    const negated = q.narrow.filter((t) => t.operator === "search" && t.negated).map((t) => sql`(${tsquery(String(t.operand), realmSearchConfig(user.realm_id), true)})::text`);
    const { rows } = await sql<{ query: string; share: number | string; negated: string[] }>`
      select ${settings}, x.q::text as query, search_share(x.q) as share,
        ${negated.length ? sql`array[${sql.join(negated)}]` : sql`'{}'::text[]`} as negated
      from (select ${tsquery(searchOperand(q.narrow), realmSearchConfig(user.realm_id), true)} as q) x`.execute(trx);
    const row = rows[0]!;
    return { conds: [storedMatch(row.query), ...row.negated.map((n) => sql<SqlBool>`not (${storedMatch(n)})`)], share: Number(row.share), query: row.query };
  };
  const side = (op: "<" | ">=", direction: "asc" | "desc", limit: number) =>
    limit <= 0
      ? Promise.resolve([])
      : walk === "matches"
        ? db.transaction().execute(async (trx) => {
            const search = await searchSettings(trx);
            // A query of stop words alone is empty text (it matches nothing): no scoped form to ask.
            const scoped = scopes && scopes.length <= SEARCH_WINDOWS.scopes && search.query && !readsFlags;
            // A channel's walk is long only to spare the capped and full statements; after it the scoped index reads
            // the channel's share of the words' lists alone.
            const window = oneChannel && !scoped ? SEARCH_WINDOWS.channel : SEARCH_WINDOWS.recent;
            // The nearest messages first when the search is common enough to fill a page among them, as the
            // planner estimates; its index first otherwise (a rare word, or words rare together).
            const nearbyFirst = SEARCH_WINDOWS.first === "estimate" ? search.share === undefined || search.share * window >= limit : SEARCH_WINDOWS.first === "nearby";
            const nearby = () => nearbyPage(trx, search.conds, op, direction, limit, window);
            const capped = () => cappedPage(trx, search.conds, op, direction, limit);
            if (scoped) return (nearbyFirst ? await nearby() : undefined) ?? scopedPage(trx, search.conds, scopedMatch(search.query!, scopes), op, direction, limit);
            return (
              (await (nearbyFirst ? nearby() : capped())) ??
              (await (nearbyFirst ? capped() : nearby())) ??
              (receivedOnly ? everyReceivedMatch : everyMatch)(trx, search.conds, op, direction, limit)
            );
          })
        : page(op, direction, limit);
  // One extra row on each side tells whether the oldest / newest match was reached.
  const limits = sideLimits(q, anchor);
  const [before, atAndAfter] = await Promise.all([side("<", "desc", limits.before), side(">=", "asc", limits.atAndAfter)]);
  return windowAround(q, anchor, before, atAndAfter);
}

/** An anchor other than first_unread as a message id: "newest" above every message, "oldest" below. */
function fixedAnchor(anchor: Exclude<MessageQuery["anchor"], "first_unread">): number {
  return anchor === "newest" ? LARGER_THAN_MAX_MESSAGE_ID : anchor === "oldest" ? 0 : anchor;
}

/**
 * The rows each side of an anchor reads: one more than asked tells whether the oldest / newest match was reached
 * (and the anchor itself, on the upper side). Nothing is at or above "newest", nothing below "oldest": those sides
 * read nothing.
 */
function sideLimits(q: Pick<MessageRange, "numBefore" | "numAfter">, anchor: number) {
  return { before: anchor === 0 ? 0 : q.numBefore + 1, atAndAfter: anchor === LARGER_THAN_MAX_MESSAGE_ID ? 0 : q.numAfter + 2 };
}

/** The window from the rows below the anchor (newest first) and at or above it (oldest first), with Zulip's found_* flags. */
function windowAround<R extends { id: number }>(q: Pick<MessageRange, "numBefore" | "numAfter" | "includeAnchor">, anchor: number, before: R[], atAndAfter: R[]) {
  const anchorRow = atAndAfter[0]?.id === anchor ? atAndAfter[0] : undefined;
  const after = atAndAfter.filter((r) => r.id > anchor);
  const rows = [...before.slice(0, q.numBefore).reverse(), ...(anchorRow && q.includeAnchor ? [anchorRow] : []), ...after.slice(0, q.numAfter)];
  return { anchor, found_anchor: !!anchorRow, found_oldest: before.length <= q.numBefore, found_newest: after.length <= q.numAfter, rows };
}

/**
 * A narrow whose access rule is one channel's: the channel (by id or name), and at most a topic of it. Its page
 * needs nothing of the reader's other channels or conversations, so the channel's access and both sides of the page
 * are one statement (channelPage), rather than the access rule's statement and then the page's.
 */
function oneChannelNarrow(narrow: Narrow): { channel: number | string; topic?: string } | undefined {
  if (narrow.length > 2 || narrow.some((t) => t.negated)) return undefined;
  const channel = narrow.find((t) => t.operator === "channel");
  const topic = narrow.find((t) => t.operator === "topic");
  if (!channel || (narrow.length === 2 && !topic)) return undefined;
  return { channel: typeof channel.operand === "number" ? channel.operand : String(channel.operand), topic: topic && String(topic.operand) };
}

/**
 * The statement of a one-channel page: the channel and whether the reader may read its history (as compileNarrow
 * decides it), then, for each side of the anchor, the ids, versions and reader's flags of the channel's (and
 * topic's) messages the reader may read, in one text (pageRefsText). The channel's row comes back even when the
 * page is empty (its refs null), and no row at all when there is no such channel. It answers a batch of pages
 * (ReadBatches): its parameters are arrays, one value per page of each of the realm, the channel's id or lower-cased
 * name, the reader, whether the reader is a guest, the anchor, each side's limit, and the lower-cased topic; each
 * row names its page (`n`). One text per way of naming the channel, with or without a topic, built once, and run
 * planned once per connection (queryPlannedOnce: its generic plan, which is the walk of the channel's index per page
 * for any values).
 *
 * Each side is two branches, of which the channel's access runs one: the whole history, or only what the reader
 * received. Spelled as one condition (`ch.history or um.flags is not null`) over a join to the flag rows, the
 * planner hash-joined every flag row of the reader with every message of the channel and sorted them (24 ms on
 * 300,000 messages, against a walk of the channel's index that stops at the page); a condition on the channel alone
 * is a one-time filter on the branch. The reader's flags are a subquery, not a join: a named statement's generic
 * plan knows neither the anchor nor the limit, and chose for the side after the anchor to merge-join the messages
 * with every flag row of the index; a subquery leaves the page one plan, the walk of the channel's index.
 */
function channelPageText(byId: boolean, topic: boolean): string {
  const branch = (access: string, op: "<" | ">=", direction: "asc" | "desc", limit: string) => `(
    select m.id, m.version, ${readerFlags("q.reader")} as flags
    from messages m
    where m.stream_id = ch.id and ${access}${topic ? " and lower(m.topic) = q.topic" : ""} and m.id ${op} q.anchor
    order by m.id ${direction} limit ${limit})`;
  const side = (op: "<" | ">=", direction: "asc" | "desc", limit: string) =>
    `${branch("ch.history", op, direction, limit)} union all ${branch(`not ch.history and ${readerFlags("q.reader")} is not null`, op, direction, limit)}`;
  // The batch's parameters: one array per column, [name, type].
  const columns = [["realm", "bigint"], ["channel", byId ? "bigint" : "text"], ["reader", "bigint"], ["guest", "boolean"], ["anchor", "bigint"], ["before", "int"], ["after", "int"], ...(topic ? [["topic", "text"]] : [])];
  return `select q.n::int as n, ch.name as stream_name, ch.user_version,
    ${pageRefsText(`${side("<", "desc", "q.before")} union all ${side(">=", "asc", "q.after")}`)} as refs
  from unnest(${columns.map(([, type], i) => `$${i + 1}::${type}[]`).join(", ")}) with ordinality as q(${columns.map(([name]) => name).join(", ")}, n)
  cross join lateral (
    select s.id, s.name, s.is_web_public or (not s.invite_only and not q.guest) or (sub.user_id is not null and s.history_public_to_subscribers) as history,
      ${REALM_USER_VERSION("q.realm")} as user_version
    from streams s left join subscriptions sub on sub.user_id = q.reader and sub.stream_id = s.id and sub.active
    where s.realm_id = q.realm and ${byId ? "s.id = q.channel" : "lower(s.name) = q.channel"}) ch`;
}

/**
 * A page's messages (a statement of rows `id, version, flags`) as one text: `id version flags` each, comma-separated,
 * flags empty where null (parsePageRefs reads it). One row a page instead of one a message: pg's parsing of 21 rows
 * of 7 fields was a fifth of the server's CPU for a channel's page (docs/reads.md, 2026-12-05 17:55). Null when the
 * page is empty. The order of the text is not the page's: pageWindow sorts.
 */
const pageRefsText = (rows: string) => `(select string_agg(r.id || ' ' || r.version || ' ' || coalesce(r.flags::text, ''), ',') from (${rows}) r)`;

/** pageRefsText's text as the page's refs, each in the channel `streamName` (null: none). */
function parsePageRefs(text: string | null, streamName: string | null): PageRef[] {
  if (!text) return [];
  return text.split(",").map((one) => {
    const [id, version, flags] = one.split(" ");
    return { id: Number(id), version: Number(version), flags: flags ? Number(flags) : null, stream_name: streamName };
  });
}

/**
 * The flags of `reader` (an SQL expression) on message `m` (null: never received), as the view `user_messages` holds them: a reader
 * has either a flag row or a place in the message's recipient list, never both (an expansion moves the reader), so
 * the list is read only when there is no row. Through the view's union every message cost a probe of both tables
 * (docs/reads.md, 2026-12-03 13:30).
 */
const readerFlags = (reader: string) => `coalesce(
      (select r.flags from user_message_rows r where r.user_id = ${reader} and r.message_id = m.id),
      (select x.flags from user_message_lists l cross join lateral unnest(l.user_ids, l.flags) as x(user_id, flags) where l.message_id = m.id and x.user_id = ${reader}))`;

/** The realm's version of its users (what a message's sender fields are read from), as text. */
const REALM_USER_VERSION = (realm: string) => `coalesce((select v.version from realm_user_versions v where v.realm_id = ${realm}), 0)::text`;

/** What a page shows of a message that does not depend on the reader, by id, with its versions (message-records.ts). */
const PAGE_RECORDS_TEXT = `select ${MESSAGE_COLUMNS.join(", ")}, m.version, ${RELATED.sender} as sender, ${RELATED.people} as people,
    ${RELATED.reactions} as reactions, ${RELATED.submessages} as submessages, ${REALM_USER_VERSION("m.realm_id")} as user_version
  from messages m where m.id = any($1::bigint[])`;

/** A message's record as a page reads it: its row without the reader's flags and what the page itself names. */
type PageRecord = Omit<MessageRow, "flags" | "stream_name" | "match_content" | "match_subject"> & VersionedRecord;

/**
 * A page's row of a kept record, with the reader's flags. Spelled field by field: spreading the record (a row object
 * of pg's) into a new object cost a channel's page 13% of the server's CPU (a CPU profile of reads-fetch).
 */
function pageRow(r: PageRecord, ref: PageRef): MessageRow {
  return {
    id: r.id,
    sender_id: r.sender_id,
    recipient_id: r.recipient_id,
    stream_id: r.stream_id,
    topic: r.topic,
    content: r.content,
    rendered_content: r.rendered_content,
    date_sent: r.date_sent,
    sending_client: r.sending_client,
    edit_history: r.edit_history,
    last_edit_time: r.last_edit_time,
    last_moved_time: r.last_moved_time,
    flags: ref.flags,
    sender: r.sender,
    stream_name: ref.stream_name,
    people: r.people,
    reactions: r.reactions,
    submessages: r.submessages,
    match_content: null,
    match_subject: null,
    record: r,
  };
}

/** What a page's statement reads of a message: its id, its version, the reader's flags, and its channel's name. */
interface PageRef {
  id: number;
  version: number;
  flags: number | null;
  stream_name: string | null;
}

/** The page's rows in its order, from its refs (read at the realm's `userVersion`) and the records kept or read. */
async function withRecords(db: DB, refs: PageRef[], userVersion: string): Promise<MessageRow[]> {
  if (!refs.length) return [];
  const records = await pageRecords.current(db, refs, userVersion);
  const rows: MessageRow[] = [];
  for (const ref of refs) {
    const record = records.get(ref.id);
    if (record) rows.push(pageRow(record, ref)); // else deleted between the two statements
  }
  return rows;
}

const pageRecords = new MessageRecordCache<PageRecord>((db, ids) => queryPlannedOnce<PageRecord>(db, PAGE_RECORDS_TEXT, [ids]));

/** A channel page's statement (channelPageText), its reads batched: one per way of naming the channel, with or without a topic. */
type PageStatementRow = { n: number; stream_name: string; user_version: string; refs: string | null };
const CHANNEL_PAGES = [false, true].map((byId) =>
  [false, true].map((topic) => {
    const text = channelPageText(byId, topic);
    return new ReadBatches<PageStatementRow>((db, columns) => queryPlannedOnce<PageStatementRow>(db, text, columns));
  }),
);

async function channelPage(db: DB, user: UserRow, q: MessageRange, anchor: number, narrow: { channel: number | string; topic?: string }) {
  const byId = typeof narrow.channel === "number";
  const limits = sideLimits(q, anchor);
  const values: unknown[] = [user.realm_id, byId ? narrow.channel : String(narrow.channel).toLowerCase(), user.id, user.role === ROLE.guest, anchor, limits.before, limits.atAndAfter];
  if (narrow.topic !== undefined) values.push(narrow.topic.toLowerCase());
  // No row: no such channel.
  const [page] = await CHANNEL_PAGES[Number(byId)]![Number(narrow.topic !== undefined)]!.read(db, values);
  if (!page) throw badNarrow("Invalid narrow operator: unknown channel");
  return pageWindow(db, q, anchor, parsePageRefs(page.refs, page.stream_name), page.user_version);
}

/**
 * A narrow that is one direct-message conversation (`dm:` and its users, nothing else): the users named, by id or
 * API e-mail. Its page needs nothing of the reader's channels or other conversations (conversationPage).
 */
function oneConversationNarrow(narrow: Narrow): Array<number | string> | undefined {
  if (narrow.length !== 1 || narrow[0]!.operator !== "dm" || narrow[0]!.negated) return undefined;
  return operandUsers(narrow[0]!.operand);
}

/**
 * The statement of a conversation's page, for the reader ($2) in the realm ($1): the users named, as usersByRef
 * finds them (ids $3, lower-cased API e-mails $4); the conversation of those users and the reader (its key is
 * dmKey's: the ids in order, comma-separated), which the reader takes part in by its key; then, for each side of the
 * anchor ($5, limits $6 and $7), the ids, versions and reader's flags of its messages, along messages_recipient. One
 * row of nulls when the page is empty. The same text for every reader, run planned once per connection: the plan
 * is the walk of the conversation's index whatever the values.
 */
const conversationCtes = (realm: string, reader: string, ids: string, emails: string) => `named as (
    select u.id, lower(u.email) as email from users u
    where u.realm_id = ${realm} and (u.id = any(${ids}) or lower(u.email) = any(${emails}))
  ),
  conversation as (
    select r.id from recipients r
    where r.type = ${RECIPIENT_DM} and r.realm_id = ${realm}
      and r.dm_key = (select string_agg(k.id::text, ',' order by k.id) from (select id from named union select ${reader}) k)
  )`;

const CONVERSATION_PAGE_TEXT = `with ${conversationCtes("$1::bigint", "$2::int", "$3::int[]", "$4::text[]")}
  select (select coalesce(array_agg(n.id), '{}') from named n) as named_ids, (select coalesce(array_agg(n.email), '{}') from named n) as named_emails,
    ${REALM_USER_VERSION("$1::bigint")} as user_version, null::text as stream_name, p.*
  from (select 1) one
  left join lateral (
    (select m.id, m.version, ${readerFlags("$2::bigint")} as flags from messages m
      where m.recipient_id = (select c.id from conversation c) and m.id < $5::bigint order by m.id desc limit $6::int)
    union all
    (select m.id, m.version, ${readerFlags("$2::bigint")} as flags from messages m
      where m.recipient_id = (select c.id from conversation c) and m.id >= $5::bigint order by m.id asc limit $7::int)
  ) p on true`;

type ConversationPageRow = Omit<PageRef, "id"> & { id: number | null; named_ids: number[]; named_emails: string[]; user_version: string };

/** A `dm:` narrow's page in one statement (CONVERSATION_PAGE_TEXT); an unknown user is Zulip's BAD_NARROW, as compileNarrow's. */
async function conversationPage(db: DB, user: UserRow, q: MessageRange, anchor: number, refs: Array<number | string>) {
  const [ids, emails] = splitUserRefs(refs);
  const limits = sideLimits(q, anchor);
  const rows = await queryPlannedOnce<ConversationPageRow>(db, CONVERSATION_PAGE_TEXT, [user.realm_id, user.id, ids, emails, anchor, limits.before, limits.atAndAfter]);
  const found = rows[0]!;
  const namedIds = new Set(found.named_ids.map(Number));
  const namedEmails = new Set(found.named_emails);
  for (const ref of refs) if (typeof ref === "number" ? !namedIds.has(ref) : !namedEmails.has(ref.toLowerCase())) throw badNarrow("Invalid narrow operator: unknown user");
  return pageWindow(db, q, anchor, rows, found.user_version);
}

/** The user a narrow names by id or lower-cased API e-mail (one of them null), as usersByRef finds them: `named`. */
const namedUserCte = (realm: string, id: string, email: string) =>
  `named as (select u.id from users u where u.realm_id = ${realm} and (u.id = ${id} or lower(u.email) = ${email}) limit 1)`;

/** A user reference as namedUserCte's parameters: [id, lower-cased e-mail], one of them null. */
const userRefValues = (ref: number | string): [number | null, string | null] => (typeof ref === "number" ? [ref, null] : [null, ref.toLowerCase()]);

/** A narrow that is one sender (`sender:` and one user, by id or API e-mail, nothing else): senderPage. */
function oneSenderNarrow(narrow: Narrow): number | string | undefined {
  if (narrow.length !== 1 || narrow[0]!.operator !== "sender" || narrow[0]!.negated) return undefined;
  const refs = operandUsers(narrow[0]!.operand);
  return refs.length === 1 ? refs[0] : undefined;
}

/**
 * The statement of a sender's page, for the reader ($2) in the realm ($1): the user named, as usersByRef finds them
 * (id $3 or lower-cased API e-mail $4); then, for each side of the anchor ($5, limits $6 and $7), the ids, versions
 * and reader's flags of the sender's messages that the reader received (a narrow without a channel reads nothing
 * else: compileNarrow), along messages_sender newest (or oldest) first, stopping at the page. The general path took
 * every message of the sender from a bitmap and probed each one's flag row before sorting to the page (1,000 probes
 * for 21 rows at 10,000,000 messages: docs/reads.md, 2026-12-04). One row of nulls when the page is empty. The same
 * text for every reader, run planned once per connection.
 */
const SENDER_PAGE_TEXT = (() => {
  const side = (op: "<" | ">=", direction: "asc" | "desc", limit: string) => `(
    select m.id, m.version, f.flags, (select s.name from streams s where s.id = m.stream_id) as stream_name
    from messages m cross join lateral (select ${readerFlags("$2::bigint")} as flags) f
    where m.sender_id = (select n.id from named n) and m.id ${op} $5::bigint and f.flags is not null
    order by m.id ${direction} limit ${limit})`;
  return `with ${namedUserCte("$1::bigint", "$3::int", "$4::text")}
  select (select n.id from named n) as named_id, ${REALM_USER_VERSION("$1::bigint")} as user_version, p.*
  from (select 1) one
  left join lateral (${side("<", "desc", "$6::int")} union all ${side(">=", "asc", "$7::int")}) p on true`;
})();

/** A `sender:` narrow's page in one statement (SENDER_PAGE_TEXT); an unknown user is Zulip's BAD_NARROW, as compileNarrow's. */
async function senderPage(db: DB, user: UserRow, q: MessageRange, anchor: number, ref: number | string) {
  const limits = sideLimits(q, anchor);
  const rows = await queryPlannedOnce<Omit<PageRef, "id"> & { id: number | null; named_id: number | null; user_version: string }>(db, SENDER_PAGE_TEXT, [
    user.realm_id,
    user.id,
    ...userRefValues(ref),
    anchor,
    limits.before,
    limits.atAndAfter,
  ]);
  if (rows[0]!.named_id === null) throw badNarrow("Invalid narrow operator: unknown user");
  return pageWindow(db, q, anchor, rows, rows[0]!.user_version);
}

/** `is:dm` alone: every conversation of the reader's (conversationsPage). */
function onlyConversationsNarrow(narrow: Narrow): boolean {
  return narrow.length === 1 && narrow[0]!.operator === "is" && narrow[0]!.operand === "dm" && !narrow[0]!.negated;
}

/**
 * The statement of an `is:dm` page for the reader ($1) of the realm ($2): each conversation the reader takes part in
 * walked along messages_recipient from the anchor ($3), at most the side's limit ($4 before, $5 at and after) of
 * each, the nearest of them kept, then their versions and the reader's flags. As alongConversations, with the
 * reader's conversations read in the same statement, so that its text is the same for every reader and it runs
 * planned once per connection. Past CONVERSATION_WALKS_MAX conversations it walks nothing and answers `walked`
 * false (one row of nulls), and the general path pages instead. One row of nulls when the page is empty.
 */
const CONVERSATIONS_PAGE_TEXT = (() => {
  const side = (op: "<" | ">=", direction: "asc" | "desc", limit: string) => `(
    select w.id from mine c cross join lateral (
      select m.id from messages m where m.recipient_id = c.recipient_id and m.id ${op} $3::bigint order by m.id ${direction} limit ${limit}) w
    where (select walked from counted)
    order by w.id ${direction} limit ${limit})`;
  return `with mine as (select rm.recipient_id from recipient_members rm where rm.user_id = $1::int),
  counted as (select count(*) <= ${CONVERSATION_WALKS_MAX} as walked from mine)
  select (select walked from counted) as walked, ${REALM_USER_VERSION("$2::bigint")} as user_version, null::text as stream_name, p.*
  from (select 1) one
  left join lateral (
    select m.id, m.version, ${readerFlags("$1::bigint")} as flags
    from (${side("<", "desc", "$4::int")} union all ${side(">=", "asc", "$5::int")}) page join messages m on m.id = page.id
  ) p on true`;
})();

type ConversationsPageRow = Omit<PageRef, "id"> & { id: number | null; walked: boolean; user_version: string };

/** An `is:dm` page in one statement (CONVERSATIONS_PAGE_TEXT); undefined for a reader in too many conversations. */
async function conversationsPage(db: DB, user: UserRow, q: MessageRange, anchor: number) {
  const limits = sideLimits(q, anchor);
  const rows = await queryPlannedOnce<ConversationsPageRow>(db, CONVERSATIONS_PAGE_TEXT, [user.id, user.realm_id, anchor, limits.before, limits.atAndAfter]);
  if (!rows[0]!.walked) return undefined;
  return pageWindow(db, q, anchor, rows, rows[0]!.user_version);
}

/**
 * The narrows that read the reader's own rows and nothing else: every message they received (Zulip's narrow `[]`),
 * or those with a flag (`is:` alone): receivedPage.
 */
type ReceivedNarrow = "every" | "starred" | "mentioned" | "alerted" | "unread";

function receivedNarrow(narrow: Narrow): ReceivedNarrow | undefined {
  if (narrow.length === 0) return "every";
  if (narrow.length !== 1 || narrow[0]!.operator !== "is" || narrow[0]!.negated) return undefined;
  const operand = String(narrow[0]!.operand);
  return operand === "starred" || operand === "mentioned" || operand === "alerted" || operand === "unread" ? operand : undefined;
}

/** The flags a received narrow's messages have (0: any; unread is their lack of the read flag, receivedRows). */
const RECEIVED_FLAG_BITS: Record<ReceivedNarrow, number> = { every: 0, unread: 0, starred: FLAG_BITS.starred, mentioned: MENTION_FLAGS, alerted: FLAG_BITS.has_alert_word };

/**
 * Where a received narrow's rows are: [the reader's rows, walked along an index of theirs (user_messages_pk, a flag's
 * partial index, unread_messages' key), which list entries count]. A flag's condition has its bits as constants, as
 * the partial indexes' predicates spell them (flagSet).
 */
function receivedRows(narrow: ReceivedNarrow): { rows: string; listed: string } {
  // unread_messages holds exactly the unread flag rows (its triggers: migration 2026-11-28T0800).
  if (narrow === "unread") return { rows: "unread_messages r where true", listed: `(x.flags & ${FLAG_BITS.read}) = 0` };
  const bits = RECEIVED_FLAG_BITS[narrow];
  return bits ? { rows: `user_message_rows r where (r.flags & ${bits}) <> 0`, listed: `(x.flags & ${bits}) <> 0` } : { rows: "user_message_rows r where true", listed: "true" };
}

/**
 * The statement of the page of the messages the reader ($1) of the realm ($2) received, every one (Zulip's narrow
 * `[]`: its query joins UserMessage and nothing else, so a channel the reader has left still shows what they
 * received in it) or those with a flag (`is:starred` and the like: Zulip's join to UserMessage with the flag). For
 * each side of the anchor ($3, limits $4 and $5), the reader's rows along their index (receivedRows) and the
 * messages listing the reader in a recipient list not yet expanded (few: a list is expanded soon after its commit),
 * the nearest of them kept with the reader's flags as the walk read them, then their versions. One row of nulls
 * when the page is empty. The same text for every reader: planned once per connection, where the general path read
 * the access rule first and planned a page whose text named the reader's channels and conversations at every fetch.
 */
function receivedPageText(narrow: ReceivedNarrow): string {
  const { rows, listed } = receivedRows(narrow);
  const listedCondition = narrow === "every" ? "$1::int = any(l.user_ids)" : `exists (select 1 from unnest(l.user_ids, l.flags) as x(user_id, flags) where x.user_id = $1::int and ${listed})`;
  const listedFlags = "(select x.flags from unnest(l.user_ids, l.flags) as x(user_id, flags) where x.user_id = $1::int limit 1)";
  const side = (op: "<" | ">=", direction: "asc" | "desc", limit: string) => `(
    select w.id, w.flags from (
      (select r.message_id as id, r.flags from ${rows} and r.user_id = $1::int and r.message_id ${op} $3::bigint order by r.message_id ${direction} limit ${limit})
      union all
      (select l.message_id, ${listedFlags} from user_message_lists l where ${listedCondition} and l.message_id ${op} $3::bigint order by l.message_id ${direction} limit ${limit})
    ) w order by w.id ${direction} limit ${limit})`;
  // The flags are the ones the walk read (unread_messages keeps each unread row's flags as its flag row has them), not
  // probed again per message: that second probe was 21 index scans a page.
  return `select ${REALM_USER_VERSION("$2::bigint")} as user_version, p.*
  from (select 1) one
  left join lateral (
    select m.id, m.version, page.flags, (select s.name from streams s where s.id = m.stream_id) as stream_name
    from (${side("<", "desc", "$4::int")} union all ${side(">=", "asc", "$5::int")}) page join messages m on m.id = page.id
  ) p on true`;
}

const RECEIVED_PAGE_TEXTS = Object.fromEntries((Object.keys(RECEIVED_FLAG_BITS) as ReceivedNarrow[]).map((n) => [n, receivedPageText(n)])) as Record<ReceivedNarrow, string>;

/** A received narrow's page in one statement (receivedPageText). */
async function receivedPage(db: DB, user: UserRow, q: MessageRange, anchor: number, narrow: ReceivedNarrow) {
  const limits = sideLimits(q, anchor);
  const rows = await queryPlannedOnce<Omit<PageRef, "id"> & { id: number | null; user_version: string }>(db, RECEIVED_PAGE_TEXTS[narrow], [user.id, user.realm_id, anchor, limits.before, limits.atAndAfter]);
  return pageWindow(db, q, anchor, rows, rows[0]!.user_version);
}

/**
 * The window around `anchor` of a page statement's rows (one row of nulls when the page is empty), each side put in
 * its order here: a statement's rows come in no order unless it sorts them last.
 */
async function pageWindow(db: DB, q: MessageRange, anchor: number, rows: Array<Omit<PageRef, "id"> & { id: number | null }>, userVersion: string) {
  const messages = rows.filter((r): r is PageRef => r.id !== null);
  const before: MessageRow[] = [];
  const atAndAfter: MessageRow[] = [];
  for (const row of await withRecords(db, messages, userVersion)) (row.id < anchor ? before : atAndAfter).push(row);
  before.sort((a, b) => b.id - a.id);
  atAndAfter.sort((a, b) => a.id - b.id);
  return windowAround(q, anchor, before, atAndAfter);
}

/** A message row as a fetch reads it (pageColumns), with the reader's flags (null: a message the reader never received). */
type MessageRow = Pick<Selectable<MessageTable & MessageEditColumns>, (typeof MESSAGE_COLUMNS)[number] extends `m.${infer C}` ? C & keyof (MessageTable & MessageEditColumns) : never> & {
  flags: number | null;
  sender: [string, string] | null;
  stream_name: string | null;
  people: Person[] | null;
  reactions: unknown[] | null;
  submessages: Submessage[] | null;
  match_content: string | null;
  match_subject: string | null;
  /** The kept record the row was made of (pageRow): what its reader-independent JSON is kept with. */
  record?: PageRecord;
};

/** The message record of a row: Zulip's message fields that do not depend on the reader. */
function recordOf(
  r: Pick<MessageRow, "id" | "sender_id" | "recipient_id" | "stream_id" | "topic" | "content" | "rendered_content" | "date_sent" | "sending_client">,
  realmStr: string,
  sender: { email: string; full_name: string } | undefined,
  displayRecipient: string | Person[],
): MessageRecord {
  return {
    id: r.id,
    type: r.stream_id !== null ? "stream" : "private",
    sender_id: r.sender_id,
    sender_email: sender?.email ?? "",
    sender_full_name: sender?.full_name ?? "",
    sender_realm_str: realmStr,
    recipient_id: r.recipient_id,
    stream_id: r.stream_id,
    display_recipient: displayRecipient,
    subject: r.topic,
    content: r.content,
    rendered_content: r.rendered_content,
    timestamp: r.date_sent,
    client: r.sending_client,
  };
}

/**
 * The reader-independent part of messages (sender, conversation, raw topic), for rows read without the page's
 * subqueries (message events rebuilt from their references): one query per kind of thing looked up.
 */
async function messageRecordsOf(db: DB, rows: Parameters<typeof recordOf>[0][], realmStr: string): Promise<MessageRecord[]> {
  if (!rows.length) return [];
  const streamIds = [...new Set(rows.map((r) => r.stream_id).filter((s): s is number => s !== null))];
  const dmRecipients = [...new Set(rows.filter((r) => r.stream_id === null).map((r) => r.recipient_id))];
  const [streams, members] = await Promise.all([
    streamIds.length ? db.selectFrom("streams").select(["id", "name"]).where("id", "in", streamIds).execute() : [],
    dmRecipients.length
      ? db.selectFrom("recipient_members").select(["recipient_id", "user_id"]).where("recipient_id", "in", dmRecipients).orderBy("user_id").execute()
      : [],
  ]);
  const userIds = [...new Set([...rows.map((r) => r.sender_id), ...members.map((m) => m.user_id)])];
  const users = new Map(
    (await db.selectFrom("users").select(["id", "email", "full_name"]).where("id", "in", userIds).execute()).map((u) => [u.id, u]),
  );
  const streamNames = new Map(streams.map((s): [number, string] => [s.id, s.name]));
  const people = new Map<number, Person[]>();
  for (const m of members) {
    const u = users.get(m.user_id);
    if (u) people.set(m.recipient_id, [...(people.get(m.recipient_id) ?? []), { id: u.id, email: u.email, full_name: u.full_name, is_mirror_dummy: false }]);
  }
  return rows.map((r) =>
    recordOf(r, realmStr, users.get(r.sender_id), r.stream_id !== null ? (streamNames.get(r.stream_id) ?? "") : (people.get(r.recipient_id) ?? [])),
  );
}

/**
 * Message records by id, as message events carry them (raw topic), for rebuilding event queues from the stream of
 * message references. Ids with no message (deleted since) are left out.
 */
export async function messageRecords(db: DB, ids: number[]): Promise<Map<number, MessageRecord>> {
  if (!ids.length) return new Map();
  const rows = await db
    .selectFrom("messages as m")
    .innerJoin("realms as r", "r.id", "m.realm_id")
    .select(["m.id", "m.sender_id", "m.recipient_id", "m.stream_id", "m.topic", "m.content", "m.rendered_content", "m.date_sent", "m.sending_client", "r.string_id"])
    .where("m.id", "in", ids)
    .execute();
  const byRealm = new Map<string, typeof rows>();
  for (const r of rows) byRealm.set(r.string_id, [...(byRealm.get(r.string_id) ?? []), r]);
  const [records, submessages] = await Promise.all([
    Promise.all([...byRealm].map(([realmStr, realmRows]) => messageRecordsOf(db, realmRows, realmStr))),
    submessagesOf(db, ids),
  ]);
  for (const record of records.flat()) record.submessages = submessages.get(record.id);
  return new Map(records.flat().map((r) => [r.id, r]));
}

/**
 * Zulip's message objects for a page of rows, with the reader's flags, each as its JSON text: what GET /messages
 * writes. What does not depend on the reader is serialized once per kept record and format (keptHeads), and the
 * reader's flags joined to it, so that a warm page is twenty string joins rather than twenty objects built and
 * serialized (formatting and JSON.stringify were a third of a channel page's server CPU, docs/reads.md 2026-12-03).
 */
async function buildMessages(db: DB, user: UserRow, rows: MessageRow[], q: Pick<MessageQuery, "format" | "allowEmptyTopicName">): Promise<MessageJson[]> {
  if (!rows.length) return [];
  const linkifiers = await compiledLinkifiers.get(db, user.realm_id);
  // Written out, not spread: a spread object per request keeps what it refers to alive through young GCs (performance.md).
  const format: HeadFormat = { format: q.format, allowEmptyTopicName: q.allowEmptyTopicName, linkifiers, realmStr: user.realm_str };
  const slot = (q.format.applyMarkdown ? 4 : 0) + (q.format.clientGravatar ? 2 : 0) + (q.allowEmptyTopicName ? 1 : 0);
  return rows.map((r) => {
    let json = `${r.record ? keptHead(r, r.record, slot, format) : messageHead(r, format)},"flags":${flagsJson(r.flags)}`;
    if (r.match_content !== null) json += `,"match_content":${JSON.stringify(r.match_content)},"match_subject":${JSON.stringify(r.match_subject)}`;
    return json + "}";
  });
}

/** A message object as JSON text (buildMessages). */
export type MessageJson = string;

/** What a message's JSON is built for, apart from the message: the request's format, and the realm's linkifiers and name. */
type HeadFormat = Pick<MessageQuery, "format" | "allowEmptyTopicName"> & { linkifiers: CompiledLinkifier[]; realmStr: string };

/**
 * The message object's JSON without the reader's flags and without its closing brace: everything of it that does
 * not depend on the reader.
 */
function messageHead(r: MessageRow, f: HeadFormat): string {
  const sender = r.sender ? { email: r.sender[0], full_name: r.sender[1] } : undefined;
  const record = recordOf(r, f.realmStr, sender, r.stream_id !== null ? (r.stream_name ?? "") : (r.people ?? []));
  if (record.type === "stream") record.topic_links = topicLinks(f.linkifiers, r.topic);
  if (record.type === "stream" && r.topic === "" && !f.allowEmptyTopicName) record.subject = EMPTY_TOPIC_DISPLAY_NAME;
  const message = formatMessage(record, f.format);
  message.reactions = r.reactions ?? [];
  if (r.submessages) message.submessages = r.submessages;
  if (r.edit_history) message.edit_history = r.edit_history;
  if (r.last_edit_time !== null) message.last_edit_timestamp = r.last_edit_time;
  if (r.last_moved_time !== null) message.last_moved_timestamp = r.last_moved_time;
  return JSON.stringify(message).slice(0, -1);
}

/**
 * A kept record's head (messageHead), per format (`slot`), built again when what it was built with changed: the
 * channel's name (a page reads it, a rename does not change the message's version), the realm's name, its
 * linkifiers (a new compiled list on every change). It lives as long as the record does: a new version is a new
 * record.
 */
function keptHead(r: MessageRow, record: PageRecord, slot: number, f: HeadFormat): string {
  let heads = keptHeads.get(record);
  if (!heads) keptHeads.set(record, (heads = []));
  const kept = heads[slot];
  if (kept && kept.streamName === r.stream_name && kept.realmStr === f.realmStr && kept.linkifiers === f.linkifiers) return kept.head;
  const head = messageHead(r, f);
  heads[slot] = { head, streamName: r.stream_name, realmStr: f.realmStr, linkifiers: f.linkifiers };
  return head;
}

const keptHeads = new WeakMap<PageRecord, Array<{ head: string; streamName: string | null; realmStr: string; linkifiers: CompiledLinkifier[] } | undefined>>();

/** The reader's flags as JSON, per flag bits (a few dozen combinations occur). */
function flagsJson(bits: number | null): string {
  if (bits === null) return HISTORICAL_FLAGS_JSON;
  let json = flagsJsonByBits.get(bits);
  if (json === undefined) flagsJsonByBits.set(bits, (json = JSON.stringify(flagList(bits))));
  return json;
}

const flagsJsonByBits = new Map<number, string>();
const HISTORICAL_FLAGS_JSON = JSON.stringify(HISTORICAL_FLAGS);

/**
 * One message the user may read, for the routes that act on a message (edit, delete, react, flags): the row and
 * the actor owning it. An unreadable message is Zulip's "Invalid message(s)", indistinguishable from a missing one.
 */
export async function readableMessage(db: DB, user: UserRow, id: number) {
  const [row] = await readableMessages(db, user, [id]);
  if (!row) throw errors.badRequest("Invalid message(s)");
  return row;
}

export async function readableMessages(db: DB, user: UserRow, ids: number[]) {
  if (!ids.length) return [];
  const { conds } = await compileNarrow(db, user, []);
  // Public channels the user is not subscribed to are readable too (their history is public to members).
  const open = user.role === ROLE.guest ? [] : [sql<SqlBool>`m.stream_id in (select id from streams where realm_id = ${user.realm_id} and not invite_only)`];
  return messagesWhere(db, user, [sql<SqlBool>`(${sql.join([conds[0]!, ...open], sql` or `)})`])
    .leftJoin("recipients as r", "r.id", "m.recipient_id")
    .select(["m.id", "m.sender_id", "m.stream_id", "m.topic", "m.recipient_id", "m.content", "r.dm_key", "um.flags"])
    .where("m.id", "in", ids)
    .orderBy("m.id")
    .execute();
}
