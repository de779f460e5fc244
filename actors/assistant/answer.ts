/**
 * Retrieval and the extractive answerer. Retrieval is Postgres full-text search over the chunks of one version:
 * the question's words (letters and digits only, so nothing reaches the query parser as syntax) are OR-ed and
 * stemmed by `websearch_to_tsquery('english', …)`, which also drops stop words; chunks are ranked by
 * `ts_rank_cd` over the weighted tsvector (title A, text B).
 *
 * The answer is made of sentences of the retrieved chunks. Each sentence scores by the share of the question's
 * stemmed terms it contains (stemmed by Postgres too, so both sides agree) and by its chunk's rank; sentences are
 * then picked by maximal marginal relevance (score minus similarity to what was already picked), so the answer
 * does not repeat itself. Below `minScore` there is no answer: the service says it does not know.
 */
import { sql, type Kysely } from "kysely";
import type { Source } from "./agent-session.protocol.ts";
import type { Database } from "../schema.ts";

export const DONT_KNOW = "I don't know the answer to that from the information I have.";

export interface AnswerSettings {
  /** Below this best-sentence score the answer is DONT_KNOW. */
  minScore: number;
  maxSentences: number;
  chunks: number;
}

export const DEFAULT_ANSWER_SETTINGS: AnswerSettings = { minScore: 0.3, maxSentences: 3, chunks: 6 };

export interface RetrievedChunk {
  id: number;
  document_id: number;
  title: string;
  text: string;
  rank: number;
}

export interface Answer {
  text: string;
  sources: Source[];
  /** The best sentence's score, 0 when nothing matched. */
  score: number;
}

type DB = Kysely<Database>;

export function questionWords(question: string): string[] {
  const words = question.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
  return [...new Set(words)].slice(0, 64);
}

/** The best chunks for a question, and the question's own lexemes (stemmed in the same query, for scoring). */
export interface Retrieval {
  chunks: RetrievedChunk[];
  questionTerms: string[];
}

export async function retrieve(db: DB, versionId: string, question: string, limit: number): Promise<Retrieval> {
  const words = questionWords(question);
  if (!words.length) return { chunks: [], questionTerms: [] };
  const query = words.join(" or ");
  const { rows } = await sql<RetrievedChunk & { terms: string[] }>`
    with q as (select websearch_to_tsquery('english', ${query}) as q, tsvector_to_array(to_tsvector('english', ${question})) as terms)
    select c.id, c.document_id, c.title, c.text, ts_rank_cd(c.tsv, q.q) as rank, q.terms
    from assistant_chunks c, q
    where c.version_id = ${versionId} and c.tsv @@ q.q
    order by rank desc, c.id
    limit ${limit}`.execute(db);
  return {
    chunks: rows.map(({ terms: _, ...r }) => ({ ...r, rank: Number(r.rank) })),
    questionTerms: rows[0]?.terms ?? [],
  };
}

/** Lexemes of each text, as Postgres' english configuration stems them. */
async function lexemes(db: DB, texts: string[]): Promise<string[][]> {
  if (!texts.length) return [];
  const { rows } = await sql<{ i: number; a: string[] }>`
    select t.i, tsvector_to_array(to_tsvector('english', t.s)) as a
    from unnest(${texts}::text[]) with ordinality as t(s, i)`.execute(db);
  const out: string[][] = texts.map(() => []);
  for (const r of rows) out[Number(r.i) - 1] = r.a;
  return out;
}

export function sentences(text: string): string[] {
  return text
    .replace(/^#+\s*/gm, "")
    .split(/(?<=[.!?])\s+|\n{2,}|\n(?=[-*]\s)/)
    .map((s) => s.replace(/\s+/g, " ").trim())
    .filter((s) => s.length >= 3);
}

interface Sentence {
  text: string;
  lexemes: Set<string>;
}

/**
 * Chunks never change (a version's knowledge is fixed), so their sentences and lexemes are computed once per
 * process and kept, by store and chunk id, up to SENTENCE_CACHE_CHUNKS chunks a store: a question then costs one
 * small query (its own lexemes) beside retrieval, not the stemming of every candidate sentence again.
 */
const sentenceCaches = new WeakMap<DB, Map<number, Sentence[]>>();
const SENTENCE_CACHE_CHUNKS = 20_000;

/** The sentences of each chunk with their lexemes (from the cache, else stemmed in one query). */
async function sentencesOf(db: DB, chunks: RetrievedChunk[]): Promise<Map<number, Sentence[]>> {
  let sentenceCache = sentenceCaches.get(db);
  if (!sentenceCache) sentenceCaches.set(db, (sentenceCache = new Map()));
  const byChunk = new Map<number, Sentence[]>();
  const missing: Array<{ chunk: RetrievedChunk; texts: string[] }> = [];
  for (const chunk of chunks) {
    const known = sentenceCache.get(chunk.id);
    if (known) byChunk.set(chunk.id, known);
    else missing.push({ chunk, texts: sentences(chunk.text) });
  }
  const terms = await lexemes(db, missing.flatMap((m) => m.texts));
  if (sentenceCache.size + missing.length > SENTENCE_CACHE_CHUNKS) sentenceCache.clear();
  let next = 0;
  for (const { chunk, texts } of missing) {
    const computed = texts.map((text) => ({ text, lexemes: new Set(terms[next++]) }));
    sentenceCache.set(chunk.id, computed);
    byChunk.set(chunk.id, computed);
  }
  return byChunk;
}

function jaccard(a: Set<string>, b: Set<string>): number {
  if (!a.size || !b.size) return 0;
  let both = 0;
  for (const x of a) if (b.has(x)) both++;
  return both / (a.size + b.size - both);
}

/**
 * The extractive answer. `onSentence` hears each sentence as it is picked (with the space that joins it to the
 * previous one), so a stream can send the first sentence before the others are chosen; it is not called for the
 * "I don't know" answer.
 */
export async function answerExtractive(
  db: DB,
  { chunks, questionTerms }: Retrieval,
  settings: AnswerSettings,
  onSentence?: (delta: string) => Promise<void> | void,
): Promise<Answer> {
  const asked = new Set(questionTerms);
  if (!chunks.length || !asked.size) return { text: DONT_KNOW, sources: [], score: 0 };
  const byChunk = await sentencesOf(db, chunks);
  const candidates = chunks.flatMap((chunk) => byChunk.get(chunk.id)!.map((s) => ({ ...s, chunk })));
  const topRank = Math.max(...chunks.map((c) => c.rank)) || 1;
  const scored = candidates.map((c) => {
    const terms = c.lexemes;
    let hits = 0;
    for (const t of asked) if (terms.has(t)) hits++;
    const overlap = hits / asked.size;
    return { ...c, terms, score: hits ? 0.75 * overlap + 0.25 * (c.chunk.rank / topRank) : 0 };
  });
  const best = Math.max(0, ...scored.map((s) => s.score));
  if (best < settings.minScore) return { text: DONT_KNOW, sources: [], score: best };

  const lambda = 0.7;
  const picked: typeof scored = [];
  const pool = scored.filter((s) => s.score >= settings.minScore / 2);
  while (picked.length < settings.maxSentences && pool.length) {
    let bestIndex = -1;
    let bestValue = -Infinity;
    pool.forEach((s, i) => {
      const redundancy = Math.max(0, ...picked.map((p) => jaccard(p.terms, s.terms)));
      const value = lambda * s.score - (1 - lambda) * redundancy;
      if (value > bestValue) [bestValue, bestIndex] = [value, i];
    });
    const [chosen] = pool.splice(bestIndex, 1);
    if (picked.length && Math.max(...picked.map((p) => jaccard(p.terms, chosen!.terms))) > 0.8) continue; // a near-duplicate
    picked.push(chosen!);
    await onSentence?.(picked.length > 1 ? ` ${chosen!.text}` : chosen!.text);
  }
  const sources = new Map<number, Source>();
  for (const p of picked) {
    const known = sources.get(p.chunk.id);
    if (!known || known.score < p.score) {
      sources.set(p.chunk.id, { document_id: p.chunk.document_id, chunk_id: p.chunk.id, title: p.chunk.title, score: round(p.score) });
    }
  }
  return {
    text: picked.map((p) => p.text).join(" "),
    sources: [...sources.values()].sort((a, b) => b.score - a.score),
    score: best,
  };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/** Documents into chunks of about `target` characters, split at paragraphs (and at sentences inside long ones). */
export function chunkDocument(title: string, text: string, target = 800): Array<{ title: string; text: string }> {
  const paragraphs = text
    .split(/\n\s*\n/)
    .map((p) => p.trim())
    .filter(Boolean);
  const pieces: string[] = [];
  for (const p of paragraphs) {
    if (p.length <= target) pieces.push(p);
    else {
      let current = "";
      for (const s of p.split(/(?<=[.!?])\s+/)) {
        if (current && current.length + s.length + 1 > target) {
          pieces.push(current);
          current = "";
        }
        current = current ? `${current} ${s}` : s;
      }
      if (current) pieces.push(current);
    }
  }
  const chunks: Array<{ title: string; text: string }> = [];
  let current = "";
  let heading = "";
  let currentHeading = "";
  for (const piece of pieces) {
    const h = piece.match(/^#{1,6}\s+(.+)$/m);
    if (h && piece.startsWith("#")) heading = h[1]!.trim();
    if (current && current.length + piece.length + 2 > target) {
      chunks.push({ title: currentHeading ? `${title} — ${currentHeading}` : title, text: current });
      current = "";
    }
    if (!current) currentHeading = heading;
    current = current ? `${current}\n\n${piece}` : piece;
  }
  if (current) chunks.push({ title: currentHeading ? `${title} — ${currentHeading}` : title, text: current });
  if (!chunks.length) chunks.push({ title, text: "" });
  return chunks;
}
