/**
 * The embed widget: `<script src="https://chorus.example/widget.js" data-agent-key="…" async></script>` adds a chat
 * bubble to any page. Everything it draws lives in a shadow root, so the host page's CSS and its own do not mix.
 *
 * Settings, from the script tag's data attributes:
 *   data-agent-key (required) · data-title (header, "Ask us") · data-greeting (first line shown) · data-color (the
 *   accent, any CSS colour) · data-position ("right" | "left") · data-theme ("light" | "dark" | "auto") ·
 *   data-user-id and data-user-hash (a signed-in visitor, see the embed endpoint's user_hash)
 * and from the page's script, once loaded: `window.ChorusWidget.identify({ userId, userHash })`, `.open()`,
 * `.close()`, `.reset()` (forget the conversation). A page may set `window.chorusWidgetUser = { userId, userHash }`
 * before the script runs instead.
 *
 * The conversation (its session and the last messages) is kept in localStorage per agent, so it survives page
 * loads. Answers stream into an ARIA log that screen readers announce once complete; Escape closes the panel and
 * gives focus back to the bubble; Enter sends, Shift+Enter starts a new line. A failure shows a sentence and, when
 * asking again can help, a retry button (after the wait a 429 gives).
 */
import { ask, type EmbedSource } from "./embed-client.ts";
import { WIDGET_CSS } from "./styles.ts";

interface StoredMessage {
  role: "user" | "assistant";
  text: string;
  sources?: EmbedSource[];
}

interface Stored {
  sessionId?: string;
  messages: StoredMessage[];
}

interface Identity {
  userId?: string;
  userHash?: string;
}

declare global {
  interface Window {
    ChorusWidget?: { identify(identity: Identity): void; open(): void; close(): void; reset(): void };
    chorusWidgetUser?: Identity;
  }
}

/** Messages kept across page loads: enough to show the conversation, small enough for localStorage. */
const KEPT_MESSAGES = 40;

const CHAT_ICON = '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M4 3h16a2 2 0 0 1 2 2v11a2 2 0 0 1-2 2H9l-5 4v-4H4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2z"/></svg>';

function start(script: HTMLScriptElement): void {
  const settings = script.dataset;
  const agentKey = settings.agentKey;
  if (!agentKey) {
    console.error("Chorus widget: the script tag needs data-agent-key");
    return;
  }
  const base = new URL(script.src, location.href).origin;
  const storageKey = `chorus-widget:${base}:${agentKey}`;
  let identity: Identity = { userId: settings.userId, userHash: settings.userHash, ...window.chorusWidgetUser };

  const load = (): Stored => {
    try {
      const parsed = JSON.parse(localStorage.getItem(storageKey) ?? "null") as Stored | null;
      if (parsed && Array.isArray(parsed.messages)) return parsed;
    } catch {
      // Storage blocked or unreadable: the conversation lasts as long as the page.
    }
    return { messages: [] };
  };
  const stored = load();
  const save = () => {
    stored.messages = stored.messages.slice(-KEPT_MESSAGES);
    try {
      localStorage.setItem(storageKey, JSON.stringify(stored));
    } catch {
      // Storage full or blocked: nothing to do.
    }
  };

  // The host element, fixed in a corner. The page's CSS can still reach the host itself (a `*` or `div` rule, even
  // with !important), and what it sets there would be inherited inside: its own inline !important styles win over
  // any stylesheet, so they reset it. Theme settings become attributes and custom properties the shadow CSS reads.
  const host = document.createElement("chorus-widget");
  host.setAttribute("data-chorus-widget", "");
  const side = settings.position === "left" ? "left" : "right";
  host.style.cssText = `all: initial !important; position: fixed !important; bottom: 20px !important; ${side}: 20px !important; z-index: 2147483000 !important;`;
  host.dataset.position = side;
  host.dataset.theme = ["light", "dark", "auto"].includes(settings.theme ?? "") ? settings.theme! : "light";
  if (settings.color && CSS.supports("color", settings.color)) host.style.setProperty("--accent", settings.color);
  const root = host.attachShadow({ mode: "open" });
  adoptStyles(root);

  const title = settings.title || "Ask us";
  const launcher = button("launcher", { "aria-label": `Open chat: ${title}`, "aria-expanded": "false", "aria-controls": "chorus-panel" });
  launcher.innerHTML = CHAT_ICON;
  const panel = node("section", "panel", { id: "chorus-panel", role: "dialog", "aria-label": title, hidden: "" });
  const header = node("header", "");
  const heading = node("h2", "", { id: "chorus-title" });
  heading.textContent = title;
  const closer = button("icon", { "aria-label": "Close chat" });
  closer.textContent = "×";
  header.append(heading, closer);
  const log = node("div", "log", { role: "log", "aria-live": "polite", "aria-label": "Conversation" });
  const status = node("div", "status", { role: "alert", hidden: "" });
  const form = node("form", "") as HTMLFormElement;
  const label = node("label", "sr-only", { for: "chorus-question" });
  label.textContent = "Your question";
  const input = node("textarea", "", { id: "chorus-question", rows: "1", maxlength: "4000", placeholder: "Type your question…" }) as HTMLTextAreaElement;
  const send = button("send", { type: "submit" });
  send.textContent = "Send";
  form.append(label, input, send);
  panel.append(header, log, status, form);
  root.append(panel, launcher);

  if (settings.greeting) log.append(messageNode({ role: "assistant", text: settings.greeting }, "greeting"));
  for (const message of stored.messages) log.append(messageNode(message));

  const setOpen = (open: boolean) => {
    panel.hidden = !open;
    launcher.setAttribute("aria-expanded", String(open));
    launcher.setAttribute("aria-label", `${open ? "Close" : "Open"} chat: ${title}`);
    if (open) {
      log.scrollTop = log.scrollHeight;
      input.focus();
    } else launcher.focus();
  };
  launcher.addEventListener("click", () => setOpen(panel.hidden !== false));
  closer.addEventListener("click", () => setOpen(false));
  panel.addEventListener("keydown", (event) => {
    if (event.key === "Escape") setOpen(false);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  let busy = false;
  let retryTimer: ReturnType<typeof setInterval> | undefined;

  const showStatus = (message: string, retry?: { question: string; afterSeconds?: number }) => {
    clearInterval(retryTimer);
    status.replaceChildren();
    status.hidden = false;
    const text = node("span", "");
    text.textContent = message;
    status.append(text);
    if (!retry) return;
    const again = button("", { type: "button" });
    const ready = () => {
      again.disabled = false;
      again.textContent = "Try again";
    };
    let wait = retry.afterSeconds ?? 0;
    if (wait > 0) {
      again.disabled = true;
      again.textContent = `Try again (${wait})`;
      retryTimer = setInterval(() => {
        wait -= 1;
        if (wait > 0) again.textContent = `Try again (${wait})`;
        else {
          clearInterval(retryTimer);
          ready();
        }
      }, 1000);
    } else ready();
    again.addEventListener("click", () => void submit(retry.question, true));
    status.append(again);
  };
  const clearStatus = () => {
    clearInterval(retryTimer);
    status.hidden = true;
    status.replaceChildren();
  };

  /** Ask `question`; `again` when retrying one already shown in the log. */
  const submit = async (question: string, again = false): Promise<void> => {
    if (busy) return;
    busy = true;
    send.disabled = true;
    clearStatus();
    if (!again) {
      stored.messages.push({ role: "user", text: question });
      save();
      log.append(messageNode({ role: "user", text: question }));
    }
    const answer = messageNode({ role: "assistant", text: "" });
    answer.setAttribute("aria-busy", "true");
    const textNode = answer.querySelector(".text")!;
    log.append(answer);
    log.scrollTop = log.scrollHeight;
    const asking = (sessionId: string | undefined) =>
      ask({
        base,
        agentKey,
        question,
        sessionId,
        ...identity,
        onText(piece) {
          textNode.textContent += piece;
          log.scrollTop = log.scrollHeight;
        },
      });
    let result = await asking(stored.sessionId);
    if (!result.ok && result.failure === "unknown-session") {
      // The server no longer knows the stored conversation: start a new one with the same question.
      stored.sessionId = undefined;
      textNode.textContent = "";
      result = await asking(undefined);
    }
    answer.removeAttribute("aria-busy");
    if (result.ok) {
      stored.sessionId = result.sessionId;
      stored.messages.push({ role: "assistant", text: result.text, sources: result.sources });
      save();
      answer.replaceWith(messageNode({ role: "assistant", text: result.text, sources: result.sources }));
    } else {
      answer.remove();
      const retryable = result.failure === "network" || result.failure === "server" || result.failure === "rate-limited";
      showStatus(result.message, retryable ? { question, afterSeconds: result.retryAfter } : undefined);
    }
    log.scrollTop = log.scrollHeight;
    busy = false;
    send.disabled = false;
    if (panel.hidden === false) input.focus();
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const question = input.value.trim();
    if (!question || busy) return;
    input.value = "";
    void submit(question);
  });

  window.ChorusWidget = {
    identify(next) {
      identity = { userId: next.userId, userHash: next.userHash };
    },
    open: () => setOpen(true),
    close: () => setOpen(false),
    reset() {
      stored.sessionId = undefined;
      stored.messages = [];
      save();
      log.replaceChildren();
      clearStatus();
    },
  };
  document.body.append(host);
}

function node(tag: string, className: string, attributes: Record<string, string> = {}): HTMLElement {
  const element = document.createElement(tag);
  if (className) element.className = className;
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

function button(className: string, attributes: Record<string, string> = {}): HTMLButtonElement {
  return node("button", className, { type: "button", ...attributes }) as HTMLButtonElement;
}

/** A message in the log: its text (never HTML), and its sources, as links when they have an http(s) address. */
function messageNode(message: StoredMessage, extraClass = ""): HTMLElement {
  const item = node("div", `msg ${message.role} ${extraClass}`.trim());
  const who = node("span", "sr-only");
  who.textContent = message.role === "user" ? "You: " : "Assistant: ";
  const text = node("span", "text");
  text.textContent = message.text;
  item.append(who, text);
  if (message.sources?.length) {
    const list = node("ul", "sources", { "aria-label": "Sources" });
    // An answer may cite several passages of one document: each document once.
    const unique = new Map(message.sources.map((source) => [`${source.title}\u0000${source.url ?? ""}`, source]));
    for (const source of unique.values()) {
      const entry = node("li", "");
      const url = safeUrl(source.url);
      const target = url ? node("a", "", { href: url, target: "_blank", rel: "noopener noreferrer" }) : node("span", "");
      target.textContent = source.title;
      entry.append(target);
      list.append(entry);
    }
    item.append(list);
  }
  return item;
}

function safeUrl(url: string | undefined): string | undefined {
  if (!url) return undefined;
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : undefined;
  } catch {
    return undefined;
  }
}

/** Constructable stylesheets where the browser has them (host pages' CSP allow them), else a style element. */
function adoptStyles(root: ShadowRoot): void {
  try {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(WIDGET_CSS);
    root.adoptedStyleSheets = [sheet];
  } catch {
    const style = document.createElement("style");
    style.textContent = WIDGET_CSS;
    root.append(style);
  }
}

const script = document.currentScript as HTMLScriptElement | null;
if (script) {
  if (document.body) start(script);
  else document.addEventListener("DOMContentLoaded", () => start(script));
} else {
  console.error("Chorus widget: load widget.js with a plain <script> tag (not as a module)");
}
