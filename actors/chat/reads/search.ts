/**
 * `search:` narrows (Zulip's search in zerver/lib/narrow.py, on Postgres full-text search): the words of every
 * positive search operand together, each word stemmed by the realm's language and stop words dropped, a
 * quoted phrase matched as a phrase (its words in order), and the last word as a prefix as well (a query typed so
 * far finds what it starts to spell). Matched against a message's topic and Markdown content through its stored document and GIN index
 * (actors/chat/migrations/2026-11-28T0900-message-search-document.ts), the last word expanded to the stored words it
 * starts (2026-11-28T1200-message-search-words.ts); highlighted in the rendered content and topic (`match_content`,
 * `match_subject`).
 */
import { sql, type Kysely, type RawBuilder, type SqlBool } from "kysely";
import type { Database } from "../../schema.ts";
import type { Narrow } from "../users/user.protocol.ts";

/**
 * The text search configuration a search's words are parsed with: its realm's (migration 2026-12-05T2100), as the
 * realm's messages' documents were. A stable function of a constant: computed once per statement.
 */
export type SearchConfig = RawBuilder<unknown>;
export const realmSearchConfig = (realmId: number): SearchConfig => sql`realm_search_config(${realmId}::bigint)`;
/**
 * The configuration of the expression index of 2026-11-28T0100, as a literal: the index's expression has it as a
 * constant, and so must a query that is to use it. Only a store still filling its documents has that index, and
 * every realm of such a store was English (realms got their own languages later).
 */
const ENGLISH = sql.raw("'english'::regconfig");
/**
 * The document of a message not yet filled (migration 2026-11-28T0900 keeps it in `search_document`; the messages
 * stored before it are filled in the background, actors/chat/search-fill.ts), spelled as the expression index of
 * 2026-11-28T0100 spells it (the planner matches expressions, not meanings).
 */
const PARSED_DOCUMENT = sql`to_tsvector(${ENGLISH}, m.topic || ' ' || m.content)`;
const HIGHLIGHT = 'StartSel="<span class=""highlight"">", StopSel=</span>, HighlightAll=TRUE';
/** A lexeme of a tsquery's text form: quoted, an inner quote doubled. */
const QUOTED_LEXEME = "'(?:[^']|'')*'";

/**
 * At most how many words a prefix is expanded to (search_prefix_query, migration 2026-11-28T1200) before it stays a
 * prefix: a prefix starting more words is short, and its posting lists many whichever way they are read.
 */
const PREFIX_WORDS = 64;

/** What a search operand asks for: its words, its quoted phrases, and the word typed last (matched as a prefix). */
export interface SearchTerms {
  words: string[];
  phrases: string[];
  last?: string;
}

export function searchTerms(operand: string): SearchTerms {
  const terms: SearchTerms = { words: [], phrases: [] };
  const tokens = [...operand.matchAll(/"([^"]+)"|(\S+)/g)];
  tokens.forEach((t, i) => {
    if (t[1] !== undefined) terms.phrases.push(t[1]);
    else if (i === tokens.length - 1) terms.last = t[2]!;
    else terms.words.push(t[2]!);
  });
  return terms;
}

/**
 * The tsquery of a search operand. Each part goes through Postgres's own parser (plainto_tsquery,
 * phraseto_tsquery), so a word is split and stemmed exactly as the indexed document was; the last word's lexemes
 * are then marked as prefixes. A query without a searchable word (only stop words) is empty, and matches nothing.
 */
export function tsquery(operand: string, config: SearchConfig, expand = false): RawBuilder<unknown> {
  const { words, phrases, last } = searchTerms(operand);
  const parts = [
    sql`plainto_tsquery(${config}, ${words.join(" ")})`,
    ...phrases.map((p) => sql`phraseto_tsquery(${config}, ${p})`),
    ...(last === undefined
      ? []
      : expand
        ? // A scalar subquery: computed once per statement, not once per row a walk tests.
          [sql`(select search_prefix_query(plainto_tsquery(${config}, ${last}), ${sql.lit(PREFIX_WORDS)}))`]
        : [sql`regexp_replace(plainto_tsquery(${config}, ${last})::text, ${QUOTED_LEXEME}, '\\&:*', 'g')::tsquery`]),
  ];
  return sql`(${sql.join(parts, sql` && `)})`;
}

/**
 * Whether message `m` matches a search operand: its stored document (the partial GIN index messages_search_document),
 * or, while the store still has `unfilled` messages (message_search_fill.below is not null), the document parsed
 * again, as before it was stored (the expression index messages_search, which covers every row): OR-ing both forms
 * (stored where filled, parsed where not) gathered both indexes' matches, 5-6 s for a rare pair of common words at
 * 10,000,000 messages half filled, against 0.3-0.4 s for the expression alone.
 */
export function searchCondition(operand: string, config: SearchConfig, unfilled = false): RawBuilder<SqlBool> {
  return unfilled ? sql<SqlBool>`${PARSED_DOCUMENT} @@ ${tsquery(operand, ENGLISH)}` : sql<SqlBool>`m.search_document @@ ${tsquery(operand, config, true)}`;
}

/** Whether message `m`'s stored document matches a tsquery given as its text (one computed by `tsquery(…, true)`). */
export function storedMatch(query: string): RawBuilder<SqlBool> {
  return sql<SqlBool>`m.search_document @@ ${query}::tsquery`;
}

/** A lexeme of a tsquery's text form, or one of its phrase operators (`<->`, `<2>`). */
const LEXEME_OR_PHRASE = new RegExp(`(${QUOTED_LEXEME})|<(?:-|\\d+)>`, "g");

/**
 * Whether message `m` may match a stored query (its text, as `tsquery(…, true)` computes it) in one of these scopes,
 * `s<stream id>` or `r<recipient id>`, through the scoped documents (migration 2026-12-05T1600): the query asked
 * once per scope, each lexeme prefixed with it, a phrase's order not kept (a scoped lexeme has no position). A
 * message of one of the scopes that matches the query matches its scoped form, so this only narrows the candidates:
 * the stored query is tested beside it. One array parameter: one bitmap index scan walks its queries in turn, each
 * reading the scope's share of its words' posting lists.
 */
export function scopedMatch(query: string, scopes: string[]): RawBuilder<SqlBool> {
  const queries = scopes.map((scope) => query.replace(LEXEME_OR_PHRASE, (part, lexeme?: string) => (lexeme ? `'${scope}:${lexeme.slice(1)}` : "&")));
  return sql<SqlBool>`m.scoped_document @@ any(${queries}::tsquery[])`;
}

/**
 * Whether message `m` does not match a search operand (a negated search operand). Never null: every row has its
 * document once the fill is done (its trigger fills each new row), and the parsed one before.
 */
export function notSearchCondition(operand: string, config: SearchConfig, unfilled = false): RawBuilder<SqlBool> {
  return sql<SqlBool>`not (${searchCondition(operand, config, unfilled)})`;
}

/** The operand the narrow's positive search terms make together ("" without one), as Zulip joins them. */
export function searchOperand(narrow: Narrow): string {
  return narrow
    .filter((t) => t.operator === "search" && !t.negated)
    .map((t) => String(t.operand))
    .join(" ");
}

/**
 * Zulip's `match_content` / `match_subject` for a search, as columns of a select over messages `m`: the rendered
 * content and the HTML-escaped topic with the matched words wrapped in `<span class="highlight">`. Postgres computes
 * them for the rows a page returns only (after its sort and limit).
 */
export function highlightColumns(operand: string, config: SearchConfig) {
  const query = tsquery(operand, config);
  return [
    sql<string | null>`ts_headline(${config}, m.rendered_content, ${query}, ${HIGHLIGHT})`.as("match_content"),
    sql<string | null>`ts_headline(${config}, replace(replace(replace(m.topic, '&', '&amp;'), '<', '&lt;'), '>', '&gt;'), ${query}, ${HIGHLIGHT})`.as("match_subject"),
  ] as const;
}

export type Highlights = Map<number, { match_content: string; match_subject: string }>;

/** The highlighted matches of a search in these messages, by id. */
export async function searchHighlights(db: Kysely<Database>, ids: number[], operand: string, config: SearchConfig): Promise<Highlights> {
  if (!ids.length) return new Map();
  const rows = await db.selectFrom("messages as m").select(["m.id", ...highlightColumns(operand, config)]).where("m.id", "in", ids).execute();
  return new Map(rows.map((r) => [Number(r.id), { match_content: r.match_content ?? "", match_subject: r.match_subject ?? "" }]));
}
