/**
 * The ranking of one published version's chunks: BM25 over an inverted index kept in memory, built from the
 * lexemes Postgres stored for each chunk (`tsv`: stemmed by the english configuration, with `pg_hba.conf`,
 * versions and other identifiers kept whole as the parser sees them). Questions are stemmed by the same
 * configuration, so both sides agree on every token, on PGlite as on Postgres.
 *
 * In memory rather than in SQL because ranking by term rarity needs each lexeme's document frequency, which
 * full-text search in Postgres does not keep; the index is built once per version and process (a version's
 * chunks never change), on the first question or when the agent's actor sees a version published, and a question
 * then costs one small query (its own lexemes) and a pass over the postings of its terms.
 *
 * Scoring: BM25 (k1 1.2, b 0.75) with title and heading words counted twice; a question term the corpus lacks is
 * matched by prefix ("autovac" → "autovacuum"), else by one edit ("replicaton" → "replic"), at a discount; two
 * question terms adjacent in the question and in the chunk add a phrase bonus.
 */
import { sql, type Kysely } from "kysely";
import type { Database } from "../schema.ts";

type DB = Kysely<Database>;

export interface IndexedChunk {
  id: number;
  document_id: number;
  document_ordinal: number;
  ordinal: number;
  /** The document's title. */
  title: string;
  heading: string;
  url: string | null;
  text: string;
  length: number;
}

/** A term of the query with its weight before IDF (1 for the question's own words, less for context). */
export interface QueryTerm {
  lexeme: string;
  weight: number;
  /** Positions in the question, for the phrase bonus. */
  positions: number[];
  /**
   * Its weight in the question's coverage, before IDF: the question's own words as in ranking; a follow-up's
   * previous question's words more than in ranking (see answer.ts); 0 for words that only help find the place.
   */
  share: number;
}

/** A query term as matched in the index: the lexemes that stand for it, with their discounts. */
export interface MatchedTerm extends QueryTerm {
  idf: number;
  matches: Array<{ lexeme: string; factor: number }>;
}

export interface Ranked {
  chunk: IndexedChunk;
  score: number;
}

interface Posting {
  chunk: number;
  tf: number;
  positions: number[];
}

const K1 = 1.2;
const B = 0.75;
/** Title and heading words count twice (1 and 3 were tried on the evaluation's dev split: fewer right answers). */
const TITLE_FACTOR = 2;
const PREFIX_FACTOR = 0.7;
const TYPO_FACTOR = 0.6;
const PHRASE_BONUS = 0.5;
const PHRASE_POOL = 4;

export class KnowledgeIndex {
  private readonly postings = new Map<string, Posting[]>();
  private readonly vocabulary: string[];
  /** Each chunk's title and heading lexemes, by chunk id (a section's words count for the answer's coverage). */
  private readonly titles = new Map<number, Set<string>>();
  /** Each chunk's BM25 length normalisation, 1 - b + b * length / average length. */
  private readonly norms: Float64Array;

  constructor(
    readonly chunks: IndexedChunk[],
    lexemes: Array<Array<[string, number[], string[]]>>,
  ) {
    let total = 0;
    lexemes.forEach((entries, chunk) => {
      let length = 0;
      const titleWords = new Set<string>();
      this.titles.set(chunks[chunk]!.id, titleWords);
      for (const [lexeme, positions, weights] of entries) {
        const title = weights.filter((w) => w === "A").length;
        if (title) titleWords.add(lexeme);
        const tf = positions.length - title + TITLE_FACTOR * title;
        length += positions.length;
        let list = this.postings.get(lexeme);
        if (!list) this.postings.set(lexeme, (list = []));
        list.push({ chunk, tf, positions });
      }
      chunks[chunk]!.length = length;
      total += length;
    });
    const averageLength = total / Math.max(1, chunks.length) || 1;
    this.norms = Float64Array.from(chunks, (c) => 1 - B + (B * c.length) / averageLength);
    this.vocabulary = [...this.postings.keys()].sort();
  }

  /**
   * BM25's IDF. A lexeme no chunk has weighs as one only a single chunk has: informative, so a question about what
   * the documents never mention covers little of itself (weighing it less was tried on the evaluation's dev split:
   * no better there, and the threshold's margin narrower).
   */
  idf(lexeme: string): number {
    const n = this.chunks.length;
    const df = Math.max(1, this.postings.get(lexeme)?.length ?? 0);
    return Math.log(1 + (n - df + 0.5) / (df + 0.5));
  }

  /** The chunk after (`step` 1) or before (-1) this one in its section (a passage may run into it), if any. */
  neighbour(chunkId: number, step: 1 | -1): IndexedChunk | undefined {
    const i = this.chunks.findIndex((c) => c.id === chunkId);
    const [chunk, next] = [this.chunks[i], this.chunks[i + step]];
    return chunk && next && next.document_id === chunk.document_id && next.heading === chunk.heading ? next : undefined;
  }

  titleLexemes(chunkId: number): Set<string> {
    return this.titles.get(chunkId) ?? new Set();
  }

  /** The lexemes a query term matches: itself, else the vocabulary's words it begins, else those one edit away. */
  match(term: QueryTerm): MatchedTerm {
    const idf = this.idf(term.lexeme);
    if (this.postings.has(term.lexeme)) return { ...term, idf, matches: [{ lexeme: term.lexeme, factor: 1 }] };
    if (term.lexeme.length < 4) return { ...term, idf, matches: [] };
    const prefixed: string[] = [];
    let i = lowerBound(this.vocabulary, term.lexeme);
    while (i < this.vocabulary.length && this.vocabulary[i]!.startsWith(term.lexeme) && prefixed.length < 3) prefixed.push(this.vocabulary[i++]!);
    if (prefixed.length) return { ...term, idf, matches: prefixed.map((lexeme) => ({ lexeme, factor: PREFIX_FACTOR })) };
    if (term.lexeme.length < 5 || /\d/.test(term.lexeme)) return { ...term, idf, matches: [] };
    const near = this.vocabulary.filter((v) => Math.abs(v.length - term.lexeme.length) <= 1 && oneEditApart(v, term.lexeme)).slice(0, 3);
    return { ...term, idf, matches: near.map((lexeme) => ({ lexeme, factor: TYPO_FACTOR })) };
  }

  /** The best `limit` chunks for the matched terms, best first (ties: document order). */
  search(terms: MatchedTerm[], limit: number): Ranked[] {
    const scores = new Float64Array(this.chunks.length);
    for (const term of terms) {
      for (const { lexeme, factor } of term.matches) {
        const idf = this.idf(lexeme) * term.weight * factor;
        for (const p of this.postings.get(lexeme) ?? []) scores[p.chunk]! += (idf * p.tf * (K1 + 1)) / (p.tf + K1 * this.norms[p.chunk]!);
      }
    }
    // The phrase bonus is given among the best few only: it reorders them, it does not bring a chunk from far away.
    const byScore = (a: number, b: number) => scores[b]! - scores[a]! || a - b;
    const best: number[] = [];
    scores.forEach((score, i) => {
      if (score > 0) best.push(i);
    });
    best.sort(byScore).splice(limit * PHRASE_POOL);
    this.phraseBonus(terms, best, scores);
    return best
      .sort(byScore)
      .slice(0, limit)
      .map((i) => ({ chunk: this.chunks[i]!, score: scores[i]! }));
  }

  /** Terms next to each other in the question and in a chunk ("connection limit", "pg_dump format"). */
  private phraseBonus(terms: MatchedTerm[], chunks: number[], scores: Float64Array): void {
    for (const a of terms) {
      for (const b of terms) {
        if (a === b || !a.positions.some((p) => b.positions.includes(p + 1))) continue;
        const bonus = PHRASE_BONUS * Math.min(a.idf, b.idf) * Math.min(a.weight, b.weight);
        for (const chunk of chunks) {
          const first = this.posting(a.lexeme, chunk);
          const second = first && this.posting(b.lexeme, chunk);
          if (second && first.positions.some((p) => second.positions.includes(p + 1))) scores[chunk]! += bonus;
        }
      }
    }
  }

  /** A lexeme's posting in one chunk (postings are in chunk order). */
  private posting(lexeme: string, chunk: number): Posting | undefined {
    const list = this.postings.get(lexeme);
    if (!list) return undefined;
    let [lo, hi] = [0, list.length];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid]!.chunk < chunk) lo = mid + 1;
      else hi = mid;
    }
    return list[lo]?.chunk === chunk ? list[lo] : undefined;
  }
}

function lowerBound(sorted: string[], key: string): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid]! < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Levenshtein distance exactly one (a substitution, insertion or deletion), in one pass. */
function oneEditApart(a: string, b: string): boolean {
  if (a === b) return false;
  if (a.length > b.length) [a, b] = [b, a];
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return a.length === b.length ? a.slice(i + 1) === b.slice(i + 1) : a.slice(i) === b.slice(i + 1);
}

/**
 * One index per version and store, built once (concurrent first questions share the build); the last
 * INDEXES_KEPT versions of a store are kept, most recently used last.
 */
const indexes = new WeakMap<DB, Map<string, Promise<KnowledgeIndex>>>();
const INDEXES_KEPT = 16;

export function knowledgeIndex(db: DB, versionId: string): Promise<KnowledgeIndex> {
  let byVersion = indexes.get(db);
  if (!byVersion) indexes.set(db, (byVersion = new Map()));
  let index = byVersion.get(versionId);
  if (index) {
    byVersion.delete(versionId);
    byVersion.set(versionId, index);
    return index;
  }
  index = buildIndex(db, versionId);
  byVersion.set(versionId, index);
  index.catch(() => byVersion.delete(versionId)); // a failed build is tried again by the next question
  if (byVersion.size > INDEXES_KEPT) byVersion.delete(byVersion.keys().next().value!);
  return index;
}

async function buildIndex(db: DB, versionId: string): Promise<KnowledgeIndex> {
  const { rows } = await sql<Omit<IndexedChunk, "length"> & { lexemes: Array<[string, number[], string[]]> }>`
    select c.id, c.document_id, d.ordinal as document_ordinal, c.ordinal, d.title, c.heading, d.url, c.text,
      (select coalesce(json_agg(json_build_array(u.lexeme, u.positions, u.weights)), '[]'::json) from unnest(c.tsv) u) as lexemes
    from assistant_chunks c join assistant_documents d on d.id = c.document_id
    where c.version_id = ${versionId}
    order by d.ordinal, c.ordinal`.execute(db);
  return new KnowledgeIndex(
    rows.map(({ lexemes: _, ...chunk }) => ({ ...chunk, length: 0 })),
    rows.map((r) => r.lexemes),
  );
}

/** The lexemes of a text with their positions, as the english configuration makes them (stop words dropped). */
export async function textLexemes(db: DB, text: string): Promise<Array<{ lexeme: string; positions: number[] }>> {
  if (!text.trim()) return [];
  const { rows } = await sql<{ lexeme: string; positions: number[] | null }>`
    select lexeme, positions from unnest(to_tsvector('english', ${text}))`.execute(db);
  return rows.map((r) => ({ lexeme: r.lexeme, positions: r.positions ?? [] }));
}
