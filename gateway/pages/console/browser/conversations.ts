/** Conversations: the organization's, filtered by agent and dates (the filter lives in the address), and one read in full. */
import { el } from "../../shared/browser/dom.ts";
import { get, type AgentInfo, type Source } from "./api.ts";
import { field, shortId, table, when } from "./ui.ts";

interface ConversationRow {
  session_id: string;
  agent_id: string;
  agent_name: string;
  user_id: string | null;
  created_at: string;
  messages: number;
  first_question: string | null;
}

interface Message {
  id: string;
  role: "user" | "assistant";
  content: string;
  created_at: string;
  sources?: Source[];
}

/** Sources as links where the document has a URL, as titles otherwise. */
export function sourceList(sources: Source[]): HTMLElement | null {
  if (!sources.length) return null;
  return el(
    "div",
    { class: "sources" },
    el("span", { class: "small" }, "Sources: "),
    el("ul", {}, ...sources.map((s) => el("li", {}, s.url ? el("a", { href: s.url, target: "_blank", rel: "noopener" }, s.title) : s.title))),
  );
}

export async function conversationsView(_params: string[], query: URLSearchParams): Promise<HTMLElement> {
  const filter = new URLSearchParams();
  for (const name of ["agent_id", "since", "until"]) if (query.get(name)) filter.set(name, query.get(name)!);
  const [{ agents }, { conversations }] = await Promise.all([
    get<{ agents: AgentInfo[] }>("/api/internal/rag/agents"),
    get<{ conversations: ConversationRow[] }>(`/api/internal/rag/conversations?${filter}`),
  ]);
  const agent = el("select", { name: "agent_id" }, el("option", { value: "" }, "All agents"), ...agents.map((a) => el("option", { value: a.agent_id }, a.name)));
  agent.value = query.get("agent_id") ?? "";
  const since = el("input", { type: "date", name: "since", value: query.get("since") ?? "" });
  const until = el("input", { type: "date", name: "until", value: query.get("until") ?? "" });
  const form = el("form", { class: "filters", "aria-label": "Filter conversations" }, field("Agent", agent), field("From", since), field("Before", until), el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    if (agent.value) next.set("agent_id", agent.value);
    if (since.value) next.set("since", since.value);
    if (until.value) next.set("until", until.value);
    location.hash = `#/conversations?${next}`;
  });
  return el(
    "div",
    {},
    el("h1", {}, "Conversations"),
    form,
    table(
      ["Started", "Agent", "First question", "Messages", "Visitor"],
      conversations.map((c) => [
        el("a", { href: `#/conversations/${c.session_id}` }, when(c.created_at)),
        c.agent_name,
        c.first_question ?? "—",
        String(c.messages),
        c.user_id ?? "anonymous",
      ]),
      "Conversations",
    ),
  );
}

export async function conversationView([sessionId]: string[]): Promise<HTMLElement> {
  const conversation = await get<{ session_id: string; agent_id: string; user_id: string | null; created_at: string; messages: Message[] }>(
    `/api/internal/rag/conversations/${encodeURIComponent(sessionId!)}`,
  );
  return el(
    "div",
    {},
    el("h1", {}, `Conversation ${shortId(conversation.session_id)}`),
    el("p", { class: "crumbs" }, el("a", { href: "#/conversations" }, "Conversations"), ` / started ${when(conversation.created_at)} by ${conversation.user_id ?? "an anonymous visitor"}`),
    el(
      "ol",
      { class: "exchange" },
      ...conversation.messages.map((m) =>
        el(
          "li",
          { class: m.role },
          el("span", { class: "who" }, m.role === "user" ? "Visitor" : "Agent"),
          el("span", { class: "small" }, ` ${when(m.created_at)}`),
          el("p", {}, m.content),
          sourceList(m.sources ?? []),
        ),
      ),
    ),
  );
}
