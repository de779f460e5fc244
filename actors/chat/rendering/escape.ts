/**
 * HTML escaping as Zulip's renderer does it: Python-Markdown leaves quotes alone in text; Pygments escapes them in
 * code blocks.
 */

export function escapeText(s: string): string {
  return s.replace(/[&<>]/g, (c) => (c === "&" ? "&amp;" : c === "<" ? "&lt;" : "&gt;"));
}

const ATTRIBUTE_ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
export function escapeAttribute(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ATTRIBUTE_ESCAPES[c]!);
}

/** Code escapes `'` too, as `&#39;` (Pygments) or `&#x27;` (Django's escape). */
export function escapeCode(s: string, apostrophe: string): string {
  return escapeAttribute(s).replaceAll("'", apostrophe);
}
