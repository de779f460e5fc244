/**
 * Widget messages, as Zulip has them (zerver/lib/widget.py, zerver/lib/validator.py): a message whose content
 * starts with `/poll` or `/todo` carries a widget, stored as its first submessage (its sender's, msg_type "widget",
 * the widget's type and extra data as JSON); its readers then add votes, options and tasks as further submessages
 * (POST /submessage), which Zulip checks against the widget's type. Clients (the web app, the mobile app,
 * zulip-terminal) draw the widget from the message's `submessages`.
 */
import { errors } from "../../../runtime/errors.ts";

/** The widget submessage a new message's content asks for, as its content (JSON text), or undefined. */
export function widgetSubmessageContent(content: string): string | undefined {
  const first = /^\S*/.exec(content)![0]; // the first word alone: the content may be long
  if (first !== "/poll" && first !== "/todo") return undefined;
  const rest = content.replace(first, "");
  const widget = first === "/poll" ? { widget_type: "poll", extra_data: pollData(rest) } : { widget_type: "todo", extra_data: todoData(rest) };
  return pythonJson(widget);
}

/** The widget type of a message's first submessage (its widget), if it names one. */
export function widgetTypeOf(firstSubmessage: { msg_type: string; content: string } | undefined): string | undefined {
  if (firstSubmessage?.msg_type !== "widget") return undefined;
  try {
    const parsed = JSON.parse(firstSubmessage.content) as unknown;
    return isObject(parsed) && typeof parsed.widget_type === "string" ? parsed.widget_type : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Zulip's validate_poll_data and validate_todo_data: what a reader may add to a widget of `type`, refused with
 * Zulip's message; any other widget type (or none) takes any JSON.
 */
export function checkWidgetData(type: string | undefined, data: unknown, isWidgetAuthor: boolean): void {
  if (type === "poll") return checkShape("poll data", data, POLL_SHAPES, isWidgetAuthor);
  if (type === "todo") return checkShape("todo data", data, TODO_SHAPES, isWidgetAuthor);
}

// ---- the widget's extra data from the content -------------------------------------------------------------------

/** Python's str.splitlines (without a last empty line, which no caller here keeps anyway). */
const lines = (text: string) => text.split(/\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/);
/** A list item's marker (`- `, `* `) taken off a line, as Zulip does. */
const unlisted = (line: string) => line.trim().replace(/^\s*[-*]?\s*/, "");

/** `/poll Question` then one option a line. */
function pollData(rest: string): { question: string; options: string[] } {
  const all = lines(rest);
  const question = all.length && all[0] ? all.shift()!.trim() : "";
  return { question, options: all.map(unlisted).filter((option) => option.length > 0) };
}

/** `/todo Title` then one task a line, `task: description`. */
function todoData(rest: string): { task_list_title: string; tasks: Array<{ task: string; desc: string }> } {
  const all = lines(rest);
  const title = all.length && all[0] ? all.shift()!.trim() : "";
  const tasks = all
    .map(unlisted)
    .filter((task) => task.length > 0)
    .map((task) => {
      const at = task.indexOf(": ");
      return at < 0 ? { task: task.trim(), desc: "" } : { task: task.slice(0, at).trim(), desc: task.slice(at + 2).trim() };
    });
  return { task_list_title: title, tasks };
}

/**
 * JSON as Python's json.dumps writes it (", " and ": " between items, non-ASCII escaped), which is how Zulip stores
 * a widget's content: clients parse it, and a stored widget reads the same from either server.
 */
function pythonJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(", ")}]`;
  if (isObject(value)) return `{${Object.entries(value).map(([k, v]) => `${pythonJson(k)}: ${pythonJson(v)}`).join(", ")}}`;
  if (typeof value === "string") return JSON.stringify(value).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  return JSON.stringify(value);
}

// ---- what readers may add ------------------------------------------------------------------------------------------

/** Zulip's MAX_IDX: the highest option or task index a client may give. */
const MAX_IDX = 1000;

type Check = (name: string, value: unknown) => void;
type Shape = { fields: Record<string, Check>; authorOnly?: string };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const fail = (message: string): never => {
  throw errors.badRequest(message);
};
const string: Check = (name, v) => void (typeof v === "string" || fail(`${name} is not a string`));
const integer = (name: string, v: unknown): number => (typeof v === "number" && Number.isInteger(v) ? v : fail(`${name} is not an integer`));
const boolean: Check = (name, v) => void (typeof v === "boolean" || fail(`${name} is not a boolean`));
const oneOf =
  (...allowed: number[]): Check =>
  (name, v) =>
    void (allowed.includes(integer(name, v)) || fail(`Invalid ${name}`));
const inRange =
  (low: number, high: number): Check =>
  (name, v) => {
    const n = integer(name, v);
    if (n < low) fail(`${name} is too small`);
    if (n > high) fail(`${name} is too large`);
  };

const POLL_SHAPES: Record<string, Shape> = {
  vote: { fields: { type: string, key: string, vote: oneOf(1, -1) } },
  question: { fields: { type: string, question: string }, authorOnly: "You can't edit a question unless you are the author." },
  new_option: { fields: { type: string, option: string, idx: inRange(0, MAX_IDX) } },
};

const TODO_SHAPES: Record<string, Shape> = {
  new_task: { fields: { type: string, key: inRange(0, MAX_IDX), task: string, desc: string, completed: boolean } },
  strike: { fields: { type: string, key: string } },
  new_task_list_title: { fields: { type: string, title: string }, authorOnly: "You can't edit the task list title unless you are the author." },
};

/** Zulip's check_dict on `type`, then check_dict_only on the shape that type names. */
function checkShape(name: string, data: unknown, shapes: Record<string, Shape>, isWidgetAuthor: boolean): void {
  if (!isObject(data)) return fail(`${name} is not a dict`);
  if (!("type" in data)) return fail(`${name}["type"] is missing`);
  string(`${name}["type"]`, data.type);
  const shape = Object.hasOwn(shapes, data.type as string) ? shapes[data.type as string] : undefined;
  if (!shape) return fail(`Unknown type for ${name}: ${data.type as string}`);
  if (shape.authorOnly && !isWidgetAuthor) return fail(shape.authorOnly);
  for (const [field, check] of Object.entries(shape.fields)) {
    if (!(field in data)) return fail(`${name}["${field}"] is missing`);
    check(`${name}["${field}"]`, data[field]);
  }
  const unexpected = Object.keys(data).filter((key) => !(key in shape.fields));
  if (unexpected.length) fail(`Unexpected arguments: ${unexpected.join(", ")}`);
}
