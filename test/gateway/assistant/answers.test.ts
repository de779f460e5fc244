/**
 * Answers people can trust (issue 23): HTML and Markdown ingested as plain text with headings; through a real
 * server on both engines, answers without markup, ranked by rare words over common ones, identifiers matched as
 * the index stores them, in document order, within their length bound, "I don't know" for what the knowledge does
 * not cover, follow-ups answered with the previous turn, and one source per section with heading, snippet and URL.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chunkDocument, DONT_KNOW } from "../../../actors/assistant/answer.ts";
import { documentSections } from "../../../actors/assistant/ingest.ts";
import { ENGINES, startTestServer, type TestServer } from "../../support/server.ts";
import { call, createAgent, createVersion, operatorKey } from "./support.ts";

const CONFIG_HTML = `<!DOCTYPE html><html><head><title>ignored</title><style>p { color: red }</style></head><body>
<nav>Home | Docs | Blog</nav>
<h1>Server configuration</h1>
<h2>Connections</h2>
<dl>
  <dt>port (<code>integer</code>)</dt><dd><p>The TCP port the server listens on; 5432 by default.</p></dd>
  <dt>max_connections (<code>integer</code>)</dt><dd><p>Determines the largest number of concurrent connections.</p></dd>
</dl>
<h2>Client authentication</h2>
<p>Client authentication is controlled by the <code>pg_hba.conf</code> file. It is stored in the data directory,
next to the <em>other</em> configuration files.</p>
<table><tr><th>Method</th><th>Meaning</th></tr><tr><td>trust</td><td>anyone may connect</td></tr></table>
<script>document.write("<b>not text</b>")</script>
</body></html>`;

const BACKUPS_MD = `# Backups

## Dumps

Use \`pg_dump\` to write a dump: it is a [plain SQL script](https://example.com/sql) that you reload with **psql**.
Run pg_dump weekly on small servers.

| Format | Parallel |
|---|---|
| directory | yes |

\`\`\`sh
pg_dump mydb > dump.sql
\`\`\`

## Vacuum

Vacuum reclaims the space of deleted rows. This keeps tables small. Run it nightly on busy tables.
`;

/** Common words everywhere, so that they weigh little: the rare word of a question must decide. */
const FILLER = Array.from({ length: 8 }, (_, i) => ({
  title: `Server notes ${i + 1}`,
  text: `The server keeps its data in files. Each server file holds data of the server. Settings of the server are read from files when the server starts (note ${i + 1}).`,
}));

const DOCUMENTS = [
  { title: "Server configuration", text: CONFIG_HTML, url: "https://docs.example.com/config" },
  { title: "Backups", text: BACKUPS_MD, format: "markdown", url: "https://docs.example.com/backups" },
  ...FILLER,
];

const MARKUP = /[`<>|]|\*\*|\]\(|^#|\s#\s/m;

describe("ingestion of HTML and Markdown", () => {
  it("reads HTML as sections of plain text: headings, a definition's term with its text, table rows; no navigation, script or style", () => {
    const sections = documentSections(CONFIG_HTML);
    expect(sections.map((s) => s.heading)).toEqual(["Connections", "Client authentication"]);
    expect(sections[0]!.paragraphs[0]).toBe("port (integer): The TCP port the server listens on; 5432 by default.");
    const text = sections.flatMap((s) => s.paragraphs).join("\n");
    expect(text).toContain("Client authentication is controlled by the pg_hba.conf file. It is stored in the data directory, next to the other configuration files.");
    expect(text).toContain("trust: anyone may connect");
    expect(text).not.toMatch(/Home|not text|color|</);
  });

  it("reads Markdown as sections of plain text: no backticks, link targets, emphasis or table pipes", () => {
    const sections = documentSections(BACKUPS_MD);
    expect(sections.map((s) => s.heading)).toEqual(["Dumps", "Vacuum"]);
    expect(sections[0]!.paragraphs).toEqual([
      "Use pg_dump to write a dump: it is a plain SQL script that you reload with psql. Run pg_dump weekly on small servers.",
      "Format: Parallel",
      "directory: yes",
      "pg_dump mydb > dump.sql",
    ]);
  });

  it("titles chunks with the document's title and the heading, once when they are the same", () => {
    const chunks = chunkDocument("Backups", "# Backups\n\nAll about backups.\n\n## Dumps\n\nUse pg_dump.");
    expect(chunks.map((c) => [c.title, c.heading])).toEqual([
      ["Backups", "Backups"],
      ["Backups — Dumps", "Dumps"],
    ]);
  });
});

describe.each(ENGINES)("answers on %s", (engine) => {
  let server: TestServer;
  let key: string;
  let agentKey: string;
  const ask = (body: Record<string, unknown>, agent = agentKey) => call(server, "POST", `/api/embed/${agent}`, { body });

  async function publish(documents: unknown[], settings: Record<string, unknown> = {}) {
    const agent = await createAgent(server, key);
    const versionId = await createVersion(server, key, agent.agent_id, documents as never, { settings });
    const res = await call(server, "POST", "/api/internal/rag/publish", { key, body: { agent_id: agent.agent_id, version_id: versionId } });
    expect(res.status).toBe(200);
    return agent.agent_key;
  }

  beforeAll(async () => {
    server = await startTestServer(engine);
    key = await operatorKey(server);
    agentKey = await publish(DOCUMENTS);
  });
  afterAll(async () => server?.close());

  it("answers in plain text and cites one source per section, with its heading, a snippet and the document's URL", async () => {
    const res = await ask({ question: "Which port does the server listen on?" });
    expect(res.status).toBe(200);
    expect(res.body.answer).toContain("5432 by default");
    expect(res.body.answer).not.toMatch(MARKUP);
    const [first, ...others] = res.body.sources;
    expect(first).toMatchObject({ title: "Server configuration", heading: "Connections", url: "https://docs.example.com/config", score: 1 });
    expect(first.snippet).toContain("5432");
    const sections = res.body.sources.map((s: { document_id: number; heading: string }) => `${s.document_id}/${s.heading}`);
    expect(new Set(sections).size).toBe(sections.length);
    expect(others.every((s: { score: number }) => s.score <= 1)).toBe(true);
  });

  it("matches identifiers as the index stores them and ranks the rare word above the common ones", async () => {
    // "server", "file" and "data" are in every filler note; pg_hba.conf is in one section only.
    const res = await ask({ question: "Which server file is pg_hba.conf, and where is that data file kept?" });
    expect(res.body.sources[0]).toMatchObject({ title: "Server configuration", heading: "Client authentication" });
    expect(res.body.answer).toContain("data directory");
  });

  it("reads in document order: a sentence comes with the one it depends on, before it", async () => {
    const res = await ask({ question: "Where is the pg_hba.conf file stored?" });
    const answer: string = res.body.answer;
    expect(answer.indexOf("controlled by the pg_hba.conf file")).toBeGreaterThanOrEqual(0);
    expect(answer.indexOf("controlled by the pg_hba.conf file")).toBeLessThan(answer.indexOf("It is stored in the data directory"));
  });

  it("brings the sentence that continues a picked one, even past max_sentences", async () => {
    const single = await publish(DOCUMENTS, { max_sentences: 1 });
    const res = await ask({ question: "What does vacuum reclaim?" }, single);
    expect(res.body.answer).toBe("Vacuum reclaims the space of deleted rows. This keeps tables small.");
  });

  it("says it does not know what the knowledge does not cover, without sources", async () => {
    const res = await ask({ question: "How do I bake sourdough bread with rye flour?" });
    expect(res.body).toMatchObject({ answer: DONT_KNOW, sources: [] });
  });

  it("answers a follow-up with the previous turn: 'it' is what the session was talking about", async () => {
    const first = await ask({ question: "What does vacuum reclaim?" });
    expect(first.body.answer).toContain("space of deleted rows");
    const next = await ask({ question: "How often should it run?", session_id: first.body.session_id });
    expect(next.body.answer).toContain("nightly");
    expect(next.body.sources[0]).toMatchObject({ title: "Backups", heading: "Vacuum" });
  });

  it("answers a follow-up whose own words the passage lacks (the previous question's words count, as the previous answer held them), not one about what the documents lack", async () => {
    // "every kind of archive" is not the manual's wording (its words are elsewhere in the documents); the follow-up is
    // still about the parallel restore the previous answer was about, and the passage that answers it ("only the
    // custom and directory formats") is found.
    const restoring = await publish([
      ...DOCUMENTS,
      { title: "Numbering", text: "Every note has a number." },
      { title: "Files", text: "Each kind of note is a file." },
      {
        title: "Restoring",
        format: "markdown",
        text: `# Restoring\n\n## Parallel restore\n\nUse the jobs option for a faster restore.\n\n## Formats\n\nOnly the custom and directory archive formats work with the jobs option.\n`,
      },
    ]);
    const first = await ask({ question: "How do I make a restore faster?" }, restoring);
    expect(first.body.answer).toBe("Use the jobs option for a faster restore.");
    const next = await ask({ question: "Does that work with every kind of archive?", session_id: first.body.session_id }, restoring);
    expect(next.body.answer).toContain("custom and directory");
    const alone = await ask({ question: "Does that work with every kind of archive?" }, restoring);
    expect(alone.body.answer).toBe(DONT_KNOW);
    // A follow-up about what the documents never mention is declined, however well the previous question was answered.
    const again = await ask({ question: "How do I make a restore faster?" }, restoring);
    const other = await ask({ question: "And MySQL?", session_id: again.body.session_id }, restoring);
    expect(other.body).toMatchObject({ answer: DONT_KNOW, sources: [] });
  });

  it("keeps answers within max_chars by whole sentences, and streams the same plain text as JSON", async () => {
    const bounded = await publish(DOCUMENTS, { max_chars: 100 });
    const res = await ask({ question: "What does vacuum do to tables?" }, bounded);
    expect(res.body.answer.length).toBeLessThanOrEqual(100);
    expect(res.body.answer).toMatch(/[.!?]$/);
    const streamed = await fetch(`${server.url}/api/embed/${bounded}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ question: "What does vacuum do to tables?", stream: true }),
    });
    const events = (await streamed.text())
      .split("\n")
      .filter((l) => l.startsWith("data: "))
      .map((l) => JSON.parse(l.slice(6)));
    expect(events.map((e) => e.answer).join("")).toBe(res.body.answer);
    expect(events.at(-1)).toMatchObject({ done: true, sources: res.body.sources });
  });

  it("refuses a document URL that is not http(s) and an unknown format", async () => {
    const agent = await createAgent(server, key);
    for (const doc of [
      { title: "T", text: "x", url: "javascript:alert(1)" },
      { title: "T", text: "x", format: "pdf" },
    ]) {
      const res = await call(server, "POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, { key, body: { documents: [doc] } });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/url|format/);
    }
  });
});
