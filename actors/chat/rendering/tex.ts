/**
 * TeX to HTML with KaTeX, as Zulip's server renders `$$inline$$` and ```math blocks: `katex.renderToString` with
 * only `displayMode` set (Zulip's KaTeX server passes nothing else), so KaTeX's defaults decide the rest
 * (HTML and MathML output, `throwOnError`, `maxExpand`).
 *
 * KaTeX is pinned to 0.16.31 in package.json: it renders Zulip's conformance corpus byte for byte, as do 0.16.22
 * to 0.16.30; 0.16.32 on round some margins to four decimals (`0.0576em` where Zulip has `0.05764em`), and 0.19
 * renames the classes (`katex-base`, `katex-strut`). Upgrading it changes the stored HTML of new messages.
 */
import { createRequire } from "node:module";
import type * as Katex from "katex";

/** Loaded on the first message with math: KaTeX is 600 kB of code that most processes never need. */
let katex: typeof Katex | undefined;

/** KaTeX's HTML for the TeX, or undefined where KaTeX refuses it (Zulip then shows the source as `tex-error`). */
export function renderTex(tex: string, displayMode: boolean): string | undefined {
  katex ??= createRequire(import.meta.url)("katex") as typeof Katex;
  try {
    // strict "ignore": the same output as KaTeX's default "warn", without a console line per warning.
    return katex.renderToString(tex, { displayMode, strict: "ignore" });
  } catch {
    // A ParseError for bad TeX; anything else KaTeX throws, Zulip's server also answers with the fallback.
    return undefined;
  }
}
