/** The console's building blocks: labelled fields, forms that report in a live region, copy buttons, tables, times. */
import { el, type Child } from "../../shared/browser/dom.ts";
import { ApiError } from "./api.ts";

/** The server's URL as clients should use it (the page says). */
export const siteUrl = document.getElementById("page")?.dataset.siteUrl ?? location.origin;

let fieldCount = 0;

/** A label and its control (input, textarea, select), tied by id; an optional hint is the control's description. */
export function field(label: string, control: HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement, hint?: string): HTMLElement {
  const id = control.id || `f${++fieldCount}`;
  control.id = id;
  if (hint) control.setAttribute("aria-describedby", `${id}-hint`);
  return el("div", { class: "field" }, el("label", { for: id }, label), control, hint ? el("span", { class: "hint", id: `${id}-hint` }, hint) : null);
}

/** A live region for what an action did or why it failed. */
export function statusLine(): HTMLElement & { ok(text: string): void; error(text: string): void; clear(): void } {
  const node = el("p", { class: "message", role: "status", "aria-live": "polite" }) as any;
  node.ok = (text: string) => ((node.className = "message ok"), (node.textContent = text));
  node.error = (text: string) => ((node.className = "message error"), (node.textContent = text));
  node.clear = () => ((node.className = "message"), (node.textContent = ""));
  return node;
}

export function errorText(err: unknown): string {
  return err instanceof ApiError ? err.message : "Something went wrong in the console. Reload the page and try again.";
}

/**
 * A form whose submission runs `submit` with its button disabled; a failure is shown in the form's status line and
 * focus returns to the first control, so the operator can correct and send again.
 */
export function actionForm(children: Child[], button: string, submit: (status: ReturnType<typeof statusLine>) => Promise<void>, label?: string): HTMLFormElement {
  const status = statusLine();
  const send = el("button", { type: "submit" }, button);
  const form = el("form", label ? { "aria-label": label } : {}, ...children, send, status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.clear();
    send.disabled = true;
    try {
      await submit(status);
    } catch (err) {
      status.error(errorText(err));
      (form.querySelector("input, textarea, select") as HTMLElement | null)?.focus();
    } finally {
      send.disabled = false;
    }
  });
  return form;
}

/** A button that runs `action`, disabled while it runs, reporting to `status`. */
export function actionButton(text: string, status: ReturnType<typeof statusLine>, action: () => Promise<void>, props: Record<string, string> = {}): HTMLButtonElement {
  const button = el("button", { type: "button", ...props }, text);
  button.addEventListener("click", async () => {
    status.clear();
    button.disabled = true;
    try {
      await action();
    } catch (err) {
      status.error(errorText(err));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/** A read-only value with a button that copies it (the clipboard, else selecting it for the operator to copy). */
export function copyable(label: string, value: string, multiline = false): HTMLElement {
  const box = multiline ? el("textarea", { readonly: true, rows: 3, class: "copy-value" }) : el("input", { readonly: true, class: "copy-value" });
  box.value = value;
  const done = el("span", { class: "small", role: "status", "aria-live": "polite" });
  const button = el("button", { type: "button", class: "secondary", "aria-label": `Copy ${label.toLowerCase()}` }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(value);
      done.textContent = "Copied.";
    } catch {
      box.select();
      done.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
    }
  });
  return el("div", { class: "copyable" }, field(label, box), el("div", { class: "row" }, button, done));
}

export function table(headers: string[], rows: Child[][], caption: string): HTMLElement {
  if (!rows.length) return el("p", { class: "small" }, `No ${caption.toLowerCase()} yet.`);
  return el(
    "div",
    { class: "table-wrap" },
    el(
      "table",
      {},
      el("caption", { class: "visually-hidden" }, caption),
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, ...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))))),
    ),
  );
}

export function when(iso: string | null): string {
  return iso ? new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" }) : "—";
}

export function shortId(id: string): string {
  return id.slice(0, 8);
}

/** The lines to put an agent on a website. */
export function embedSnippet(siteUrl: string, agentKey: string): string {
  return `<script src="${siteUrl}/widget.js" data-agent-key="${agentKey}" async></script>`;
}
