/**
 * RFC 6570 URL templates (levels 1 to 4), as Zulip's linkifiers and code playgrounds take them (Zulip uses the
 * Python `uri_template` package): checking a template, the variables it names, and expanding it with string values.
 * A variable whose value is undefined is left out, as the RFC says; lists and maps never occur here (a linkifier's
 * values are its pattern's groups, a playground's is the code), so they are not handled.
 */

interface Operator {
  first: string;
  separator: string;
  /** `;`, `?` and `&` write `name=value`. */
  named: boolean;
  /** What a named variable with an empty value becomes after its name. */
  ifEmpty: string;
  /** `+` and `#` keep reserved characters and percent-encoded triplets. */
  allowReserved: boolean;
}

const OPERATORS: Record<string, Operator> = {
  "": { first: "", separator: ",", named: false, ifEmpty: "", allowReserved: false },
  "+": { first: "", separator: ",", named: false, ifEmpty: "", allowReserved: true },
  "#": { first: "#", separator: ",", named: false, ifEmpty: "", allowReserved: true },
  ".": { first: ".", separator: ".", named: false, ifEmpty: "", allowReserved: false },
  "/": { first: "/", separator: "/", named: false, ifEmpty: "", allowReserved: false },
  ";": { first: ";", separator: ";", named: true, ifEmpty: "", allowReserved: false },
  "?": { first: "?", separator: "&", named: true, ifEmpty: "=", allowReserved: false },
  "&": { first: "&", separator: "&", named: true, ifEmpty: "=", allowReserved: false },
};

interface VarSpec {
  name: string;
  /** The `:n` prefix modifier. */
  maxLength?: number;
}

interface Expression {
  operator: Operator;
  variables: VarSpec[];
}

/** A template split into literal text and expressions. */
type Part = string | Expression;

const VARNAME = /^(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+(?:\.(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+)*$/;
/** Characters a template's literal text may not hold (RFC 6570 §2.1), and a `%` not starting a triplet. */
const BAD_LITERAL = /[\s"'<>\\^`{|}]|%(?![0-9A-Fa-f]{2})/;

function parse(template: string): Part[] | undefined {
  const parts: Part[] = [];
  let pos = 0;
  while (pos < template.length) {
    const open = template.indexOf("{", pos);
    const literal = template.slice(pos, open < 0 ? undefined : open);
    if (literal.includes("}") || BAD_LITERAL.test(literal)) return undefined;
    if (literal) parts.push(literal);
    if (open < 0) break;
    const close = template.indexOf("}", open);
    if (close < 0) return undefined;
    let body = template.slice(open + 1, close);
    const symbol = /^[+#./;?&]/.test(body) ? body[0]! : "";
    const operator = OPERATORS[symbol]!;
    body = body.slice(symbol.length);
    if (/^[=,!@|]/.test(body)) return undefined; // reserved for future operators
    const variables: VarSpec[] = [];
    for (const spec of body.split(",")) {
      const match = /^([^:*]+)(?::([1-9][0-9]{0,3})|(\*))?$/.exec(spec);
      if (!match || !VARNAME.test(match[1]!)) return undefined;
      // A `*` (explode) changes nothing for a string value.
      variables.push({ name: match[1]!, maxLength: match[2] === undefined ? undefined : Number(match[2]) });
    }
    parts.push({ operator, variables });
    pos = close + 1;
  }
  return parts;
}

/** Whether the template is a valid RFC 6570 template (Zulip's url_template_validator). */
export function isUrlTemplate(template: string): boolean {
  return parse(template) !== undefined;
}

/** The variables a valid template names. */
export function templateVariables(template: string): Set<string> {
  const names = new Set<string>();
  for (const part of parse(template) ?? []) if (typeof part !== "string") for (const v of part.variables) names.add(v.name);
  return names;
}

const UNRESERVED = /[A-Za-z0-9\-._~]/;
const RESERVED = /[:/?#[\]@!$&'()*+,;=]/;

function encode(value: string, allowReserved: boolean): string {
  let out = "";
  const chars = [...value];
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i]!;
    if (UNRESERVED.test(c) || (allowReserved && RESERVED.test(c))) out += c;
    else if (allowReserved && c === "%" && /^[0-9A-Fa-f]{2}$/.test(chars.slice(i + 1, i + 3).join(""))) out += c;
    else out += [...Buffer.from(c, "utf8")].map((b) => "%" + b.toString(16).toUpperCase().padStart(2, "0")).join("");
  }
  return out;
}

/** The template expanded with these values (an undefined value is left out); undefined if the template is invalid. */
export function expandUrlTemplate(template: string, values: Record<string, string | undefined>): string | undefined {
  const parts = parse(template);
  if (!parts) return undefined;
  let out = "";
  for (const part of parts) {
    if (typeof part === "string") {
      out += part;
      continue;
    }
    const { operator } = part;
    const pieces: string[] = [];
    for (const spec of part.variables) {
      const raw = values[spec.name];
      if (raw === undefined) continue;
      const value = encode(spec.maxLength === undefined ? raw : [...raw].slice(0, spec.maxLength).join(""), operator.allowReserved);
      pieces.push(operator.named ? spec.name + (value ? "=" + value : operator.ifEmpty) : value);
    }
    if (pieces.length) out += operator.first + pieces.join(operator.separator);
  }
  return out;
}
