/**
 * `npm run eval [-- --postgres] [--verbose] [--scale N]`: the assistant's answers measured on bench/eval.
 *
 * A real node starts (embedded PGlite by default; `--postgres`: a fresh database on the shared server), the corpus
 * is published as one agent version through the internal endpoints, and every question is asked through
 * POST /api/embed (a follow-up in the session of the question it follows). Printed per split (dev, test):
 *
 * - recall@1 / @3: the gold page is the best retrieved chunk's / among the best three chunks' pages;
 * - answers right / partial / wrong: right when every gold fact (any of its spellings, case and spacing aside) is
 *   in the answer, partial when some are, wrong when none are or the answerable question was declined;
 * - abstention precision (declined questions that were unanswerable) and recall (unanswerable ones declined);
 * - latency p50/p99 of the HTTP answers, and of retrieval alone;
 * - the same for a plain BM25 baseline over the same chunks (unstemmed words, its top chunk as the answer, never
 *   declining), computed here.
 * `--failures` lists each split's questions not answered right (grade, coverage, the pages ranked first), for the
 * failure analysis once the test split has been run.
 * `--settings JSON` publishes the version with those settings (min_score, max_sentences, max_chars). With `--verbose`, each dev question's answer; the coverage sweep (how many dev questions each threshold would
 * decline) is always printed for dev, where the threshold is chosen. `--scale N` then times retrieval over a
 * version of about N chunks (the corpus published again and again).
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "node-html-parser";
import { startTestServer } from "../../test/support/server.ts";
import { call, operatorKey } from "../../test/gateway/assistant/support.ts";
import { insertVersion } from "../../actors/assistant/agent-records.ts";
import { answerSettings } from "../../actors/assistant/agent-session.ts";
import { answerExtractive, DEFAULT_ANSWER_SETTINGS, DONT_KNOW, retrieve, type PreviousTurn } from "../../actors/assistant/answer.ts";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const engine = args.includes("--postgres") ? "redis+postgres" : "embedded";
const verbose = args.includes("--verbose");
const failures = args.includes("--failures");
const scale = args.includes("--scale") ? Number(args[args.indexOf("--scale") + 1]) : 0;
/** The version's settings (`--settings '{"min_score": 0.4}'`), to try other answer settings. */
const settings = args.includes("--settings") ? (JSON.parse(args[args.indexOf("--settings") + 1]!) as Record<string, unknown>) : {};

interface Question {
  id: string;
  question: string;
  document: string | null;
  facts: string[][];
  follows?: string;
  split: "dev" | "test";
}

interface Outcome {
  q: Question;
  answer: string;
  declined: boolean;
  grade: "right" | "partial" | "wrong" | "declined-right" | "answered-wrong";
  top: string[];
  latencyMs: number;
  retrievalMs: number;
  coverage: number;
}

const questions: Question[] = JSON.parse(fs.readFileSync(path.join(HERE, "questions.json"), "utf8"));
const documents = fs
  .readdirSync(path.join(HERE, "corpus"))
  .filter((f) => f.endsWith(".html"))
  .sort()
  .map((file) => {
    const html = fs.readFileSync(path.join(HERE, "corpus", file), "utf8");
    const name = file.replace(/\.html$/, "");
    return { name, title: parse(html).querySelector("title")?.text.trim() || name, text: html, url: `https://www.postgresql.org/docs/15/${file}` };
  });

const normal = (s: string) => s.toLowerCase().replace(/\s+/g, " ");
function grade(q: Question, answer: string, declined: boolean): Outcome["grade"] {
  if (!q.document) return declined ? "declined-right" : "answered-wrong";
  if (declined) return "wrong";
  const text = normal(answer);
  const found = q.facts.filter((alternatives) => alternatives.some((a) => text.includes(normal(a)))).length;
  return found === q.facts.length ? "right" : found ? "partial" : "wrong";
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : NaN;
}

/** Plain BM25 (k1 1.2, b 0.75) over lower-cased, unstemmed words of each chunk's title and text. */
function bm25Baseline(chunks: Array<{ document: string; text: string }>) {
  const words = (s: string) => s.toLowerCase().match(/[\p{L}\p{N}_]+/gu) ?? [];
  const docs = chunks.map((c) => {
    const tf = new Map<string, number>();
    const w = words(c.text);
    for (const x of w) tf.set(x, (tf.get(x) ?? 0) + 1);
    return { tf, length: w.length };
  });
  const df = new Map<string, number>();
  for (const d of docs) for (const x of d.tf.keys()) df.set(x, (df.get(x) ?? 0) + 1);
  const avg = docs.reduce((n, d) => n + d.length, 0) / docs.length;
  return (question: string) => {
    const terms = [...new Set(words(question))];
    const scored = docs.map((d, i) => {
      let score = 0;
      for (const t of terms) {
        const f = d.tf.get(t);
        if (!f) continue;
        const n = df.get(t)!;
        const idf = Math.log(1 + (docs.length - n + 0.5) / (n + 0.5));
        score += (idf * f * 2.2) / (f + 1.2 * (0.25 + (0.75 * d.length) / avg));
      }
      return { i, score };
    });
    scored.sort((a, b) => b.score - a.score || a.i - b.i);
    return scored.slice(0, 3).map((s) => chunks[s.i]!);
  };
}

function summary(label: string, outcomes: Outcome[], withLatency: boolean): string {
  const answerable = outcomes.filter((o) => o.q.document);
  const unanswerable = outcomes.filter((o) => !o.q.document);
  const count = (g: Outcome["grade"]) => outcomes.filter((o) => o.grade === g).length;
  const declined = outcomes.filter((o) => o.declined);
  const r1 = answerable.filter((o) => o.top[0] === o.q.document).length / answerable.length;
  const r3 = answerable.filter((o) => o.top.slice(0, 3).includes(o.q.document!)).length / answerable.length;
  const precision = declined.length ? declined.filter((o) => !o.q.document).length / declined.length : NaN;
  const recall = unanswerable.filter((o) => o.declined).length / unanswerable.length;
  const wronglyDeclined = answerable.filter((o) => o.declined).length;
  const parts = [
    `${label.padEnd(9)} recall@1 ${r1.toFixed(2)}  recall@3 ${r3.toFixed(2)}`,
    `right ${count("right")}/${answerable.length}  partial ${count("partial")}  wrong ${count("wrong")}`,
    `declined ${unanswerable.filter((o) => o.declined).length}/${unanswerable.length} unanswerable, ${wronglyDeclined} answerable`,
    `abstention P ${Number.isNaN(precision) ? "-" : precision.toFixed(2)} R ${recall.toFixed(2)}`,
  ];
  if (withLatency) {
    parts.push(
      `latency p50 ${percentile(outcomes.map((o) => o.latencyMs), 50).toFixed(1)} p99 ${percentile(outcomes.map((o) => o.latencyMs), 99).toFixed(1)} ms` +
        ` (retrieval p50 ${percentile(outcomes.map((o) => o.retrievalMs), 50).toFixed(1)} p99 ${percentile(outcomes.map((o) => o.retrievalMs), 99).toFixed(1)} ms)`,
    );
  }
  return parts.join(" | ");
}

async function main() {
  const server = await startTestServer(engine);
  try {
    const key = await operatorKey(server);
    const agent = (await call(server, "POST", "/api/internal/rag/agents", { key, body: { name: "PostgreSQL manual", rate_limit_per_minute: 100_000 } })).body;
    const version = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, {
      key,
      body: { settings, documents: documents.map(({ title, text, url }) => ({ title, text, url })) },
    });
    if (version.status !== 201) throw new Error(`version: ${version.status} ${JSON.stringify(version.body)}`);
    const versionId = version.body.version_id as string;
    await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: versionId } });
    const db = server.node.store.db;
    const docNames = new Map<number, string>();
    const docRows = await db.selectFrom("assistant_documents").select(["id", "ordinal"]).where("version_id", "=", versionId).execute();
    for (const d of docRows) docNames.set(d.id, documents[d.ordinal]!.name);
    const chunkRows = await db.selectFrom("assistant_chunks").select(["document_id", "title", "text"]).where("version_id", "=", versionId).orderBy("id").execute();
    console.log(`engine ${engine}: ${documents.length} documents, ${chunkRows.length} chunks, ${questions.length} questions`);
    const baseline = bm25Baseline(chunkRows.map((c) => ({ document: docNames.get(c.document_id)!, text: `${c.title}\n${c.text}` })));

    const ours: Outcome[] = [];
    const theirs: Outcome[] = [];
    const sessions = new Map<string, { session: string; turn: PreviousTurn }>();
    const answering = answerSettings(settings);
    const noThreshold = { ...answering, minScore: 0 };
    for (const q of questions) {
      const before = q.follows ? sessions.get(q.follows) : undefined;
      const started = performance.now();
      const res = await call(server, "POST", `/api/embed/${agent.agent_key}`, { body: { question: q.question, ...(before ? { session_id: before.session } : {}) } });
      const latencyMs = performance.now() - started;
      if (res.status !== 200) throw new Error(`${q.id}: ${res.status} ${JSON.stringify(res.body)}`);
      const answer = res.body.answer as string;
      sessions.set(q.id, { session: res.body.session_id, turn: { question: q.question, answer } });
      const retrievalStarted = performance.now();
      const retrieved = await retrieve(db, versionId, q.question, answering.chunks, before?.turn);
      const retrievalMs = performance.now() - retrievalStarted;
      const { score: coverage } = await answerExtractive(db, retrieved, noThreshold);
      const declined = answer === DONT_KNOW;
      ours.push({ q, answer, declined, grade: grade(q, answer, declined), top: retrieved.chunks.slice(0, 3).map((c) => docNames.get(c.document_id)!), latencyMs, retrievalMs, coverage });
      const top = baseline(q.question);
      const passage = top[0]?.text ?? "";
      theirs.push({ q, answer: passage, declined: false, grade: grade(q, passage, false), top: top.map((c) => c.document), latencyMs: 0, retrievalMs: 0, coverage: 0 });
    }

    for (const split of ["dev", "test"] as const) {
      console.log(`\n${split} (${questions.filter((q) => q.split === split).length} questions)`);
      console.log(summary("chorus", ours.filter((o) => o.q.split === split), true));
      console.log(summary("bm25 top", theirs.filter((o) => o.q.split === split), false));
    }
    const dev = ours.filter((o) => o.q.split === "dev");
    console.log("\ndev coverage sweep (threshold: unanswerable declined / answerable declined)");
    console.log(
      [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7]
        .map((t) => `${t}: ${dev.filter((o) => !o.q.document && o.coverage < t).length}/${dev.filter((o) => o.q.document && o.coverage < t).length}`)
        .join("  "),
    );
    if (failures) {
      for (const o of ours.filter((o) => o.grade !== "right" && o.grade !== "declined-right")) {
        console.log(`${o.q.split} ${o.q.id} ${o.grade} cov ${o.coverage.toFixed(2)} top ${o.top.join(",")} | ${o.q.question}`);
      }
    }
    if (verbose) {
      for (const o of dev) console.log(`\n[${o.q.id} ${o.grade} cov ${o.coverage.toFixed(2)} top ${o.top.join(",")}] ${o.q.question}\n  ${o.answer}`);
    }
    if (scale) await timeAtScale(server, key, scale);
  } finally {
    await server.close();
  }
}

/** Retrieval timed over a version of about `target` chunks: the corpus published as many times as it takes. */
async function timeAtScale(server: Awaited<ReturnType<typeof startTestServer>>, key: string, target: number) {
  const db = server.node.store.db;
  const agent = (await call(server, "POST", "/api/internal/rag/agents", { key, body: { name: "scale" } })).body;
  const perCopy = await db.selectFrom("assistant_chunks").select((eb) => eb.fn.countAll<number>().as("n")).executeTakeFirstOrThrow();
  const copies = Math.max(1, Math.ceil(target / Number(perCopy.n)));
  const docs = Array.from({ length: copies }, (_, i) => documents.map(({ title, text }) => ({ title: `${title} (${i + 1})`, text }))).flat();
  // Straight into the store as the management CLI does (one request this large would exceed the body limit).
  const versionId = crypto.randomUUID();
  const added = await db.transaction().execute((trx) => insertVersion(trx, agent.agent_id, { versionId, instructions: "", settings: {}, documents: docs }));
  const built = performance.now();
  await retrieve(db, versionId, "warm up", 6);
  const buildMs = performance.now() - built;
  const times: number[] = [];
  const rankingTimes: number[] = [];
  for (let round = 0; round < 3; round++) {
    for (const q of questions) {
      const started = performance.now();
      const { terms, index } = await retrieve(db, versionId, q.question, DEFAULT_ANSWER_SETTINGS.chunks);
      times.push(performance.now() - started);
      const ranking = performance.now();
      index!.search(terms, DEFAULT_ANSWER_SETTINGS.chunks);
      rankingTimes.push(performance.now() - ranking);
    }
  }
  const figures = (t: number[]) => `p50 ${percentile(t, 50).toFixed(1)} p99 ${percentile(t, 99).toFixed(1)} ms`;
  console.log(
    `\nscale: ${added.chunks} chunks; index built in ${buildMs.toFixed(0)} ms; retrieval ${figures(times)} (the ranking in memory alone ${figures(rankingTimes)}) over ${times.length} questions`,
  );
}

await main();
