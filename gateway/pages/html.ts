/** HTML built on the server: escaping, and a template tag that escapes what it interpolates. */

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Text made safe to put in HTML, inside elements or quoted attributes. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

/** A template literal whose interpolated values are escaped; a value already made by `html` is kept as it is. */
export function html(strings: TemplateStringsArray, ...values: Array<string | number | SafeHtml | SafeHtml[]>): SafeHtml {
  let out = strings[0]!;
  values.forEach((value, i) => {
    const parts = Array.isArray(value) ? value : [value];
    out += parts.map((v) => (v instanceof SafeHtml ? v.text : escapeHtml(String(v)))).join("") + strings[i + 1]!;
  });
  return new SafeHtml(out);
}

export class SafeHtml {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}
