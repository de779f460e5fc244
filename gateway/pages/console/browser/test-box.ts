/**
 * The test box: asks the agent's published version with the widget's own client (widget/browser/embed-client.ts:
 * POST /api/embed/{agent key}, the answer streamed as it arrives), keeping the session for follow-ups.
 * The conversation it makes is a real one and shows under Conversations.
 */
import { el } from "../../shared/browser/dom.ts";
import { ask } from "../../widget/browser/embed-client.ts";
import { field, statusLine } from "./ui.ts";
import { agentTabs, loadAgent } from "./agents.ts";
import { sourceList } from "./conversations.ts";

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
      const done = await ask({ base: location.origin, agentKey: agent.agent_key, question: text, sessionId, onText: (piece) => answer.append(piece) });
      if (done.ok) {
        sessionId = done.sessionId;
        const sources = sourceList(done.sources);
        if (sources) item.append(sources);
      } else {
        item.remove();
        if (done.failure === "unknown-session") sessionId = undefined;
        status.error(done.message);
      }
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
