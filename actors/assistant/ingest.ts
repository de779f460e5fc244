/**
 * Knowledge documents into plain text: HTML (node-html-parser) and Markdown (markdown-it) become sections, each a
 * heading and its paragraphs, with no markup left, so that answers quoting them are plain text and the sources can
 * name the section they come from. Plain text is read as Markdown (a text without markup is a Markdown text whose
 * paragraphs are separated by blank lines).
 *
 * Paragraphs keep what a reader needs to understand a sentence alone: a definition's term leads its first
 * paragraph ("port (integer): The TCP port the server listens on…"), a table row reads "cell: cell; cell".
 * Then sections are cut into chunks of about CHUNK_TARGET characters, at paragraphs (sentences inside a long one),
 * never across a heading.
 */
import MarkdownIt, { type Token } from "markdown-it";
import { parse, NodeType, type HTMLElement, type Node } from "node-html-parser";

export type DocumentFormat = "text" | "markdown" | "html";

export interface Section {
  heading: string;
  paragraphs: string[];
}

export interface ChunkText {
  heading: string;
  text: string;
}

export const CHUNK_TARGET = 800;

/** HTML when asked, or when the text starts like an HTML document or fragment; Markdown otherwise. */
export function detectFormat(text: string, format?: DocumentFormat): DocumentFormat {
  if (format) return format;
  return /^\s*(<!doctype html|<html|<body|<(div|section|article|main|h[1-6]|p)[\s>])/i.test(text) ? "html" : "markdown";
}

export function documentSections(text: string, format?: DocumentFormat): Section[] {
  const sections = detectFormat(text, format) === "html" ? htmlSections(text) : markdownSections(text);
  return sections.filter((s) => s.paragraphs.length);
}

/** Collects paragraphs under headings; a pending label (a definition's term) leads the next paragraph. */
class SectionWriter {
  readonly sections: Section[] = [{ heading: "", paragraphs: [] }];
  private label = "";

  heading(text: string): void {
    const heading = clean(text);
    if (!heading) return;
    this.label = "";
    this.sections.push({ heading, paragraphs: [] });
  }

  paragraph(text: string): void {
    const p = clean(text);
    if (!p) return;
    const current = this.sections[this.sections.length - 1]!;
    current.paragraphs.push(this.label ? `${this.label}: ${p}` : p);
    this.label = "";
  }

  /** The term of a definition list: it is said with the first paragraph of its definition. */
  term(text: string): void {
    if (this.label) this.sections[this.sections.length - 1]!.paragraphs.push(this.label); // a term without a definition
    this.label = clean(text).replace(/[:.]$/, "");
  }
}

function clean(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

const SKIPPED = new Set(["script", "style", "nav", "header", "footer", "noscript", "template", "svg", "head", "button", "form"]);
const BLOCKS = new Set(["p", "div", "section", "article", "main", "aside", "blockquote", "pre", "li", "dd", "figure", "figcaption", "caption", "address", "ul", "ol", "dl", "table", "tbody", "thead", "tfoot", "br", "hr", "details", "summary"]);

function htmlSections(html: string): Section[] {
  const out = new SectionWriter();
  const root = parse(html.replace(/<!doctype[^>]*>/i, ""), { blockTextElements: { script: false, style: false, noscript: false } });
  let buffer = "";
  const flush = () => {
    out.paragraph(buffer);
    buffer = "";
  };
  const walk = (node: Node): void => {
    if (node.nodeType === NodeType.TEXT_NODE) {
      buffer += node.text;
      return;
    }
    if (node.nodeType !== NodeType.ELEMENT_NODE) return;
    const el = node as HTMLElement;
    const tag = el.rawTagName?.toLowerCase() ?? "";
    if (SKIPPED.has(tag)) return;
    if (/^h[1-6]$/.test(tag)) {
      flush();
      out.heading(el.text);
      return;
    }
    if (tag === "dt") {
      flush();
      out.term(el.text);
      return;
    }
    if (tag === "tr") {
      flush();
      const cells = el.childNodes.filter((c): c is HTMLElement => c.nodeType === NodeType.ELEMENT_NODE && /^t[dh]$/i.test((c as HTMLElement).rawTagName)).map((c) => clean(c.text)).filter(Boolean);
      out.paragraph(cells.length > 1 ? `${cells[0]}: ${cells.slice(1).join("; ")}` : (cells[0] ?? ""));
      return;
    }
    if (tag === "img") {
      buffer += el.getAttribute("alt") ?? "";
      return;
    }
    const block = BLOCKS.has(tag);
    if (block) flush();
    for (const child of el.childNodes) walk(child);
    if (block) flush();
  };
  walk(root);
  flush();
  return out.sections;
}

const markdown = new MarkdownIt({ html: true });

function markdownSections(text: string): Section[] {
  const out = new SectionWriter();
  const tokens = markdown.parse(text, {});
  let row: string[] | undefined;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (t.type === "heading_open") {
      out.heading(inlineText(tokens[i + 1]?.children ?? []));
      i += 2;
    } else if (t.type === "tr_open") row = [];
    else if (t.type === "tr_close" && row) {
      out.paragraph(row.length > 1 ? `${row[0]}: ${row.slice(1).join("; ")}` : (row[0] ?? ""));
      row = undefined;
    } else if (t.type === "inline") {
      const content = inlineText(t.children ?? []);
      if (row) row.push(clean(content));
      else out.paragraph(content);
    } else if (t.type === "fence" || t.type === "code_block") out.paragraph(t.content);
    else if (t.type === "html_block") {
      for (const s of htmlSections(t.content)) {
        if (s.heading) out.heading(s.heading);
        s.paragraphs.forEach((p) => out.paragraph(p));
      }
    }
  }
  return out.sections;
}

function inlineText(children: Token[]): string {
  return children
    .map((c) => {
      if (c.type === "text" || c.type === "code_inline") return c.content;
      if (c.type === "softbreak" || c.type === "hardbreak") return " ";
      if (c.type === "image") return c.content;
      if (c.type === "html_inline") return "";
      return "";
    })
    .join("");
}

/** Sections into chunks of about `target` characters, at paragraphs (at sentences inside a long paragraph). */
export function chunkSections(sections: Section[], target = CHUNK_TARGET): ChunkText[] {
  const chunks: ChunkText[] = [];
  for (const { heading, paragraphs } of sections) {
    let current = "";
    const push = () => {
      if (current) chunks.push({ heading, text: current });
      current = "";
    };
    for (const paragraph of paragraphs) {
      for (const piece of paragraph.length <= target ? [paragraph] : splitLong(paragraph, target)) {
        if (current && current.length + piece.length + 2 > target) push();
        current = current ? `${current}\n\n${piece}` : piece;
      }
    }
    push();
  }
  return chunks;
}

function splitLong(paragraph: string, target: number): string[] {
  const pieces: string[] = [];
  let current = "";
  for (const s of splitSentences(paragraph)) {
    if (current && current.length + s.length + 1 > target) {
      pieces.push(current);
      current = "";
    }
    current = current ? `${current} ${s}` : s;
  }
  if (current) pieces.push(current);
  return pieces;
}

/** Sentences of one paragraph: at . ! ? followed by a space, but not after "e.g." and the like. */
export function splitSentences(paragraph: string): string[] {
  return paragraph
    .split(/(?<=(?<!\b(?:e\.g|i\.e|cf|vs|etc|approx|resp|Sec|Fig|No))[.!?])\s+(?=[^\s\p{Ll}])/u)
    .map((s) => s.trim())
    .filter(Boolean);
}
