/**
 * The test box: asks the agent's published version exactly as the widget does (POST /api/embed/{agent key} with
 * `stream: true`, the answer read from the server-sent events as it arrives), keeping the session for follow-ups.
 * The conversation it makes is a real one and shows under Conversations.
 */
import { el } from "../../shared/browser/dom.ts";
import type { Source } from "./api.ts";
import { field, statusLine } from "./ui.ts";
import { agentTabs, loadAgent } from "./agents.ts";
import { sourceList } from "./conversations.ts";

interface Done {
  session_id: string;
  sources: Source[];
}

/** Ask, calling `onText` with each piece of the answer; resolves with the session and sources, or throws a sentence. */
async function askStreaming(agentKey: string, question: string, sessionId: string | undefined, onText: (piece: string) => void): Promise<Done> {
  let res: Response;
  try {
    res = await fetch(`/api/embed/${encodeURIComponent(agentKey)}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ question, stream: true, ...(sessionId ? { session_id: sessionId } : {}) }),
    });
  } catch {
    throw new Error("Could not reach the server. Check your connection and try again.");
  }
  if (!res.ok || !res.body) {
    const body = (await res.json().catch(() => undefined)) as any;
    throw new Error(body?.error?.message ?? `The agent could not answer (HTTP ${res.status}).`);
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("The answer broke off. Ask again.");
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const data = buffer
        .slice(0, end)
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trim())
        .join("");
      buffer = buffer.slice(end + 2);
      if (!data) continue; // a keep-alive comment
      const event = JSON.parse(data) as { answer: string; done: boolean; session_id?: string; sources?: Source[]; error?: { message: string } };
      if (event.error) throw new Error(event.error.message);
      if (event.answer) onText(event.answer);
      if (event.done) return { session_id: event.session_id!, sources: event.sources ?? [] };
    }
  }
}

export async function testBoxView([agentId]: string[]): Promise<HTMLElement> {
  const agent = await loadAgent(agentId!);
  let sessionId: string | undefined;
  const log = el("ol", { class: "exchange", "aria-live": "polite", "aria-label": "Test conversation" });
  const status = statusLine();
  const question = el("input", { name: "question", required: true, maxlength: 4000, autocomplete: "off" });
  const send = el("button", { type: "submit" }, "Ask");
  const restart = el("button", { type: "button", class: "secondary" }, "New conversation");
  restart.addEventListener("click", () => {
    sessionId = undefined;
    log.replaceChildren();
    status.clear();
    question.focus();
  });
  const form = el("form", { class: "ask", "aria-label": "Ask the agent" }, field("Question", question), el("div", { class: "row" }, send, restart), status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = question.value.trim();
    if (!text) return;
    status.clear();
    send.disabled = true;
    const answer = el("p", { class: "answer" });
    const item = el("li", { class: "assistant", "aria-busy": "true" }, el("span", { class: "who" }, "Agent"), answer);
    log.append(el("li", { class: "user" }, el("span", { class: "who" }, "You"), el("p", {}, text)), item);
    question.value = "";
    try {
      const done = await askStreaming(agent.agent_key, text, sessionId, (piece) => answer.append(piece));
      sessionId = done.session_id;
      const sources = sourceList(done.sources);
      if (sources) item.append(sources);
    } catch (err) {
      item.remove();
      status.error(err instanceof Error ? err.message : String(err));
    } finally {
      item.removeAttribute("aria-busy");
      send.disabled = false;
      question.focus();
    }
  });
  return el(
    "div",
    {},
    el("h1", {}, `${agent.name}: test box`),
    agentTabs(agent, "test"),
    el("p", {}, agent.published_version_id ? "Ask as a visitor would: the published version answers, streamed as the widget shows it." : "Publish a version first: the test box asks the published version."),
    log,
    form,
  );
}
