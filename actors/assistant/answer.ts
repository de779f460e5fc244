/**
 * Retrieval and the extractive answerer.
 *
 * Retrieval ranks the published version's chunks by BM25 (knowledge-index.ts) for the question's lexemes, stemmed
 * by Postgres as the index is. A follow-up (a short question, or one that points back: "does it…", "that
 * option") in a session is asked together with the previous exchange: the previous question's words at a lower
 * weight, the previous answer's lower still, so "what does that option cost?" finds what "that option" was. Its
 * coverage is that of both questions, the previous question's words counting as covered where the passage or the
 * previous answer holds them, unless the follow-up has a word the documents lack (see CONTEXT_QUESTION_SHARE).
 *
 * The answer is plain text (no markup: documents are ingested as text, see ingest.ts) made of whole sentences of
 * the best chunks. A sentence scores by the share of the question's weight (IDF) it holds, plus a little of its
 * chunk's rank; the best one is taken, then sentences that add question words not yet covered, up to
 * `maxSentences` and `maxChars` (the bound never cuts a sentence). A picked sentence brings the one it depends on
 * (it opens with "This", "However", "Subsequently"…, or follows a colon), and the answer reads in document order.
 *
 * "I don't know": the answer's coverage, the share of the question's IDF weight its sentences (and their section
 * titles) contain, is below `minScore`. Words the corpus lacks weigh as the rarest words do, so a question about
 * something the documents never mention covers little. The default threshold was chosen on the evaluation's
 * development split (bench/eval, docs/assistant.md).
 */
import { sql, type Kysely } from "kysely";
import type { Source } from "./agent-session.protocol.ts";
import type { Database } from "../schema.ts";
import { chunkSections, documentSections, splitSentences, type DocumentFormat } from "./ingest.ts";
import { knowledgeIndex, textLexemes, type IndexedChunk, type KnowledgeIndex, type MatchedTerm, type QueryTerm } from "./knowledge-index.ts";
import { metrics, secondsSince } from "../../runtime/metrics.ts";

export const DONT_KNOW = "I don't know the answer to that from the information I have.";

export interface AnswerSettings {
  /** Below this coverage of the question's weight the answer is DONT_KNOW. */
  minScore: number;
  maxSentences: number;
  /** The answer's length bound in characters, reached by whole sentences only (a first sentence may exceed it). */
  maxChars: number;
  chunks: number;
}

export const DEFAULT_ANSWER_SETTINGS: AnswerSettings = { minScore: 0.45, maxSentences: 10, maxChars: 900, chunks: 6 };

export interface RetrievedChunk extends IndexedChunk {
  rank: number;
}

/** The previous exchange of the session, for follow-up questions. */
export interface PreviousTurn {
  question: string;
  answer: string;
}

export interface Retrieval {
  question: string;
  chunks: RetrievedChunk[];
  terms: MatchedTerm[];
  /**
   * A follow-up's context: the previous question's words the previous answer holds (not this question's own). They
   * count as covered: the conversation has answered them already, and the passage need not repeat them.
   */
  answeredBefore?: Set<string>;
  index?: KnowledgeIndex;
}

export interface Answer {
  text: string;
  sources: Source[];
  /** The answer's coverage of the question's weight, 0 when nothing matched. */
  score: number;
}

type DB = Kysely<Database>;

const FOLLOW_UP_WORDS = /\b(it|its|it's|that|this|these|those|they|them|their|there|same|one|ones|also|else)\b/i;
const CONTEXT_QUESTION_WEIGHT = 0.5;
const CONTEXT_ANSWER_WEIGHT = 0.2;
/**
 * A follow-up is the previous question continued ("does that work with every kind of archive?"): its coverage is
 * measured against both questions' words, the previous one's at this share, since its own few new words are often
 * not the manual's ("every kind" for "only the custom and directory formats"). Not when one of its own words is
 * unknown to the documents: then the previous question's words count as in ranking, and the previous answer does
 * not cover them, or every follow-up about something else ("does that work the same way on MySQL?") would be
 * answered on the strength of the previous question. (On the evaluation's dev split, against 0.5 and no previous
 * answer, the share they had before: its six answerable follow-ups cover 0.05–0.19 more, its three unanswerable
 * ones 0–0.02 more; no dev answer changed.)
 */
const CONTEXT_QUESTION_SHARE = 1;
/** The previous answer lends only its rarest words (what it was about), not its every word. */
const CONTEXT_ANSWER_TERMS = 10;
/**
 * Words that frame a question rather than say what it is about ("how long does it take", "what is the difference",
 * "how do I make…"), as the english configuration stems them: they weigh little in ranking and coverage, or a small
 * knowledge base, where every word is rare, would decline "how long do refunds take?" for lacking "long" and "take".
 */
const QUESTION_FRAME = new Set(
  "long take make get use need way work mani much happen mean differ possibl want tell explain find help know go give keep let see show allow best good".split(" "),
);
const FRAME_WEIGHT = 0.3;
/** A sentence's score: this share from the question weight it holds, the rest from its chunk's rank. */
const SENTENCE_SHARE = 0.4;
/** A question asking for an amount prefers sentences with a number in them. */
const QUANTITY_QUESTION = /\b(how (many|much|long|often|big|large|old)|what (size|port|number|limit)|default|maximum|minimum|at most|at least)\b/i;
const NUMBER = /\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|twelve|hundred|thousand)\b/i;
const QUANTITY_BONUS = 0.1;
/** A sentence from elsewhere joins the answer when it scores at least this share of the best one. */
const OTHER_PLACE_SHARE = 0.85;
/**
 * The second chunk lends its best sentence when it is of the best one's document and ranks at least this share of
 * it (0.8 and 0.9 were tried on the evaluation's dev split: one right answer fewer; 0.5 and any document: the same).
 */
const SECOND_CHUNK_SHARE = 0.7;

/** A question that needs the previous turn: a pointing word, or too few words to stand alone. */
export function isFollowUp(question: string): boolean {
  const words = question.match(/[\p{L}\p{N}_.-]+/gu) ?? [];
  return words.length <= 2 || (words.length <= 16 && FOLLOW_UP_WORDS.test(question));
}

export async function retrieve(db: DB, versionId: string, question: string, limit: number, previous?: PreviousTurn): Promise<Retrieval> {
  const started = performance.now();
  try {
    return await retrieveRanked(db, versionId, question, limit, previous);
  } finally {
    metrics().retrievalSeconds.observe(secondsSince(started));
  }
}

async function retrieveRanked(db: DB, versionId: string, question: string, limit: number, previous?: PreviousTurn): Promise<Retrieval> {
  const [index, own] = await Promise.all([knowledgeIndex(db, versionId), textLexemes(db, question.slice(0, 4000))]);
  const terms = new Map<string, QueryTerm>();
  const add = (lexeme: string, weight: number, positions: number[], share: number) => {
    const known = terms.get(lexeme);
    if (!known) terms.set(lexeme, { lexeme, weight, positions, share });
    else if (known.weight < weight) Object.assign(known, { weight, positions, share: Math.max(share, known.share) });
  };
  for (const t of own.slice(0, 64)) {
    const weight = QUESTION_FRAME.has(t.lexeme) ? FRAME_WEIGHT : 1;
    add(t.lexeme, weight, t.positions, weight);
  }
  let answeredBefore: Set<string> | undefined;
  if (previous && isFollowUp(question)) {
    const [asked, answered] = await Promise.all([
      textLexemes(db, previous.question.slice(0, 4000)),
      previous.answer === DONT_KNOW ? [] : textLexemes(db, previous.answer.slice(0, 4000)),
    ]);
    // An own word the documents lack altogether ("MySQL", "email") says the follow-up asks about something they do
    // not cover: the context then may not make up for it (see CONTEXT_QUESTION_SHARE).
    const strange = [...terms.values()].some((t) => index.match(t).matches.length === 0);
    const share = strange ? CONTEXT_QUESTION_WEIGHT : CONTEXT_QUESTION_SHARE;
    for (const t of asked.slice(0, 64)) add(t.lexeme, CONTEXT_QUESTION_WEIGHT, [], QUESTION_FRAME.has(t.lexeme) ? Math.min(FRAME_WEIGHT, share) : share);
    const rarest = answered.map((t) => t.lexeme).sort((a, b) => index.idf(b) - index.idf(a));
    for (const lexeme of rarest.slice(0, CONTEXT_ANSWER_TERMS)) add(lexeme, CONTEXT_ANSWER_WEIGHT, [], 0);
    const mine = new Set(own.map((t) => t.lexeme));
    const previousAnswer = new Set(answered.map((t) => t.lexeme));
    if (!strange) answeredBefore = new Set(asked.map((t) => t.lexeme).filter((l) => !mine.has(l) && previousAnswer.has(l)));
  }
  const matched = [...terms.values()].map((t) => index.match(t));
  const ranked = index.search(matched, limit);
  return { question, chunks: ranked.map((r) => ({ ...r.chunk, rank: r.score })), terms: matched, answeredBefore, index };
}

interface Sentence {
  text: string;
  lexemes: Set<string>;
  paragraph: number;
}

/** Each index's chunks' sentences with their lexemes, stemmed on first use (chunks never change). */
const sentenceCaches = new WeakMap<KnowledgeIndex, Map<number, Sentence[]>>();

export function chunkSentences(text: string): Array<{ text: string; paragraph: number }> {
  return text.split(/\n{2,}/).flatMap((p, paragraph) => splitSentences(p.replace(/\s+/g, " ").trim()).map((s) => ({ text: s, paragraph })));
}

async function sentencesOf(db: DB, index: KnowledgeIndex | undefined, chunks: RetrievedChunk[]): Promise<Map<number, Sentence[]>> {
  const cache = index ? (sentenceCaches.get(index) ?? new Map<number, Sentence[]>()) : new Map<number, Sentence[]>();
  if (index) sentenceCaches.set(index, cache);
  const missing = chunks.filter((c) => !cache.has(c.id));
  if (missing.length) {
    const split = missing.map((c) => chunkSentences(c.text));
    const texts = split.flat().map((s) => s.text);
    const lexemes = await sentenceLexemes(db, texts);
    let next = 0;
    missing.forEach((chunk, i) => cache.set(chunk.id, split[i]!.map((s) => ({ ...s, lexemes: new Set(lexemes[next++]) }))));
  }
  return new Map(chunks.map((c) => [c.id, cache.get(c.id)!]));
}

/** Lexemes of each text, as Postgres' english configuration stems them, in one query. */
async function sentenceLexemes(db: DB, texts: string[]): Promise<string[][]> {
  const { rows } = await sql<{ i: number; a: string[] }>`
    select t.i, tsvector_to_array(to_tsvector('english', t.s)) as a
    from unnest(${texts}::text[]) with ordinality as t(s, i)`.execute(db);
  const out: string[][] = texts.map(() => []);
  for (const r of rows) out[Number(r.i) - 1] = r.a;
  return out;
}

/** A sentence that cannot stand alone: it continues the one before it. */
const DEPENDENT_OPENING = /^(this|these|that|those|it|its|they|such|however|but|also|subsequently|then|thus|hence|therefore|otherwise|instead|in (this|that|such) case|in addition|for example|for instance|here|similarly|likewise|consequently|as a result)\b/i;

interface Candidate extends Sentence {
  chunk: RetrievedChunk;
  position: number;
  score: number;
}

/**
 * The extractive answer. `onSentence` hears each sentence of the answer in reading order (with the space that
 * joins it to the previous one), once the answer is chosen; it is not called for the "I don't know" answer.
 */
export async function answerExtractive(
  db: DB,
  { question, chunks, terms, answeredBefore, index }: Retrieval,
  settings: AnswerSettings,
  onSentence?: (delta: string) => Promise<void> | void,
): Promise<Answer> {
  const covered = coverageOf(terms);
  if (!chunks.length || !covered.total) return { text: DONT_KNOW, sources: [], score: 0 };
  const byChunk = await sentencesOf(db, index, chunks);
  const topRank = chunks[0]!.rank || 1;
  const quantity = QUANTITY_QUESTION.test(question);
  const scored = (chunk: RetrievedChunk, sentences: Sentence[]): Candidate[] =>
    sentences.map((s, position) => ({
      ...s,
      chunk,
      position,
      score: SENTENCE_SHARE * covered(s.lexemes) + (1 - SENTENCE_SHARE) * (chunk.rank / topRank) + (quantity && NUMBER.test(s.text) ? QUANTITY_BONUS : 0),
    }));
  const candidates = chunks.flatMap((chunk) => scored(chunk, byChunk.get(chunk.id)!));
  // The ranking chooses the place (the best chunk), the sentences the passage in it.
  const bestOf = (chunk: RetrievedChunk | undefined) =>
    candidates.filter((c) => c.chunk === chunk).reduce<Candidate | undefined>((a, c) => (!a || c.score > a.score ? c : a), undefined);
  const best = bestOf(chunks[0]);
  if (!best) return { text: DONT_KNOW, sources: [], score: 0 };

  const picked = new Set<Candidate>([best]);
  const length = () => [...picked].reduce((n, p) => n + p.text.length + 1, 0);
  const fits = (c: Candidate) => length() + c.text.length + 1 <= settings.maxChars;
  withDependencies(best, candidates, picked, settings.maxChars);
  // The second chunk, when it is of the same document and ranks close, lends its best sentence first: a page often
  // says a thing in two places (the reference and its notes), and the passage around the best fills the room left.
  // The borrowed sentences do not count in the coverage, which stays the best chunk's.
  const second = chunks[1];
  const own = new Set(picked);
  if (second && second.document_id === best.chunk.document_id && second.rank >= SECOND_CHUNK_SHARE * best.chunk.rank) {
    const lent = bestOf(second);
    if (lent && fits(lent)) {
      picked.add(lent);
      withDependencies(lent, candidates, picked, settings.maxChars);
    }
  }
  const borrowed = new Set([...picked].filter((p) => !own.has(p)));
  // The passage: the best sentence with its neighbours in the chunk (what follows first: a setting's default, the
  // example), kept contiguous, while it fits.
  const following = index?.neighbour(best.chunk.id, 1);
  let runOn: Candidate[] = []; // the sentences of the section's next chunk, retrieved or not
  if (following) {
    const retrieved = candidates.filter((c) => c.chunk.id === following.id);
    const chunk = { ...following, rank: 0 };
    runOn = retrieved.length ? retrieved : scored(chunk, (await sentencesOf(db, index, [chunk])).get(chunk.id)!);
  }
  const around = [...candidates.filter((c) => c.chunk === best.chunk), ...runOn];
  let [first, last] = [around.indexOf(best), around.indexOf(best)];
  for (const p of picked) if (around.includes(p)) [first, last] = [Math.min(first, around.indexOf(p)), Math.max(last, around.indexOf(p))];
  while (picked.size < settings.maxSentences) {
    const after = around[last + 1];
    const before = around[first - 1];
    if (after && fits(after)) picked.add(around[++last]!);
    else if (before && fits(before)) picked.add(around[--first]!);
    else break;
  }
  const passage = new Set([...[...picked].filter((p) => !borrowed.has(p)).flatMap((p) => [...p.lexemes]), ...(index?.titleLexemes(best.chunk.id) ?? [])]);
  // Coverage is the best chunk's (its title and every sentence), a steadier measure than the few sentences quoted.
  const held = new Set([...passage, ...candidates.filter((c) => c.chunk === best.chunk).flatMap((c) => [...c.lexemes]), ...(answeredBefore ?? [])]);
  const coverage = covered(held);
  if (coverage < settings.minScore) return { text: DONT_KNOW, sources: [], score: round(coverage) };
  // Another place, when a sentence nearly as good as the best holds question words the passage lacks.
  for (const c of [...candidates].sort((a, b) => b.score - a.score)) {
    if (picked.size >= settings.maxSentences || c.score < OTHER_PLACE_SHARE * best.score) break;
    if (picked.has(c) || !fits(c) || covered([...c.lexemes].filter((l) => !passage.has(l))) < 0.15) continue;
    picked.add(c);
    c.lexemes.forEach((l) => passage.add(l));
    withDependencies(c, candidates, picked, settings.maxChars);
  }

  const ordered = [...picked].sort(
    (a, b) => a.chunk.document_ordinal - b.chunk.document_ordinal || a.chunk.ordinal - b.chunk.ordinal || a.position - b.position,
  );
  for (const [i, p] of ordered.entries()) await onSentence?.(i ? ` ${p.text}` : p.text);
  return { text: ordered.map((p) => p.text).join(" "), sources: sectionSources(ordered.map((p) => ({ chunk: p.chunk, snippet: p.text, score: p.score }))), score: round(coverage) };
}

/**
 * The coverage of a set of lexemes: the share of the question's weight (each counted term's IDF times its query
 * weight) they hold. A term found only through a lexeme it matched by prefix or typo counts at that match's discount
 * (a near word is weaker evidence: "accent" is not "accept"), and once however many of its matches are present.
 */
function coverageOf(terms: MatchedTerm[]): ((lexemes: Iterable<string>) => number) & { total: number } {
  const counted = terms.filter((t) => t.share > 0);
  const total = counted.reduce((sum, t) => sum + t.idf * t.share, 0);
  const byLexeme = new Map<string, Array<{ term: number; weight: number }>>();
  counted.forEach((t, term) => {
    const matches = t.matches.length ? t.matches : [{ lexeme: t.lexeme, factor: 1 }];
    for (const { lexeme, factor } of matches) {
      const list = byLexeme.get(lexeme) ?? [];
      list.push({ term, weight: t.idf * t.share * factor });
      byLexeme.set(lexeme, list);
    }
  });
  const covered = (lexemes: Iterable<string>) => {
    const held = new Map<number, number>();
    for (const lexeme of lexemes) for (const { term, weight } of byLexeme.get(lexeme) ?? []) held.set(term, Math.max(held.get(term) ?? 0, weight));
    let sum = 0;
    for (const weight of held.values()) sum += weight;
    return total ? sum / total : 0;
  };
  return Object.assign(covered, { total });
}

/**
 * Add the sentence `c` depends on (the one before it, when `c` continues it or it ends with a colon), and the one
 * after it that continues it ("This form of the command…", or what a colon introduces).
 */
function withDependencies(c: Candidate, all: Candidate[], picked: Set<Candidate>, maxChars: number): void {
  const length = () => [...picked].reduce((n, p) => n + p.text.length + 1, 0);
  const same = all.filter((x) => x.chunk === c.chunk);
  const before = same.find((x) => x.position === c.position - 1);
  const after = same.find((x) => x.position === c.position + 1);
  const room = (x: Candidate) => length() + x.text.length + 1 <= maxChars * 1.5;
  if (before && !picked.has(before) && (DEPENDENT_OPENING.test(c.text) || /:$/.test(before.text)) && room(before)) picked.add(before);
  if (after && !picked.has(after) && (/:$/.test(c.text) || DEPENDENT_OPENING.test(after.text)) && room(after)) picked.add(after);
}

const SNIPPET_CHARS = 200;

/** One source per document section (the best score first), with its heading, a snippet and the document's URL. */
export function sectionSources(hits: Array<{ chunk: RetrievedChunk; snippet: string; score: number }>): Source[] {
  const sections = new Map<string, Source>();
  const top = Math.max(0, ...hits.map((h) => h.score)) || 1;
  for (const { chunk, snippet, score } of hits) {
    const key = `${chunk.document_id}\n${chunk.heading}`;
    const known = sections.get(key);
    const relative = round(score / top);
    if (known) {
      known.score = Math.max(known.score, relative);
      continue;
    }
    sections.set(key, {
      document_id: chunk.document_id,
      chunk_id: chunk.id,
      title: chunk.title,
      heading: chunk.heading,
      snippet: shorten(snippet, SNIPPET_CHARS),
      ...(chunk.url ? { url: chunk.url } : {}),
      score: relative,
    });
  }
  return [...sections.values()].sort((a, b) => b.score - a.score);
}

function shorten(text: string, max: number): string {
  if (text.length <= max) return text;
  const cut = text.slice(0, max);
  return `${cut.slice(0, Math.max(cut.lastIndexOf(" "), max / 2)).trimEnd()}…`;
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/**
 * A document into chunks (ingest.ts: HTML and Markdown read as text with their headings). A chunk's title is
 * the document's with the section's heading (searched at a higher weight); its heading is kept apart for sources.
 */
export function chunkDocument(title: string, text: string, format?: DocumentFormat): Array<{ title: string; heading: string; text: string }> {
  const chunks = chunkSections(documentSections(text, format)).map((c) => ({
    title: c.heading && c.heading !== title ? `${title} — ${c.heading}` : title,
    heading: c.heading,
    text: c.text,
  }));
  return chunks.length ? chunks : [{ title, heading: "", text: "" }];
}
