/** The agents: the organization's list, creating one (its key and secret shown once), and an agent's settings. */
import { el } from "../../shared/browser/dom.ts";
import { get, patch, post, type AgentInfo } from "./api.ts";
import { refresh } from "./navigation.ts";
import { actionForm, copyable, embedSnippet, field, shortId, siteUrl, table, when } from "./ui.ts";

/** Origins as the operator types them (one a line, or comma-separated) and as the API takes them. */
function originsOf(text: string): string[] {
  return text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/** The tabs of one agent's pages, the current one marked. */
export function agentTabs(agent: { agent_id: string; name: string }, current: "settings" | "versions" | "webhooks" | "test"): HTMLElement {
  const tabs: Array<[typeof current, string, string]> = [
    ["settings", "Settings", ""],
    ["versions", "Versions", "/versions"],
    ["webhooks", "Webhooks", "/webhooks"],
    ["test", "Test box", "/test"],
  ];
  return el(
    "div",
    {},
    el("p", { class: "crumbs" }, el("a", { href: "#/agents" }, "Agents"), " / ", agent.name),
    el(
      "nav",
      { class: "tabs", "aria-label": `Agent ${agent.name}` },
      ...tabs.map(([id, label, suffix]) => el("a", { href: `#/agents/${agent.agent_id}${suffix}`, ...(id === current ? { "aria-current": "page" } : {}) }, label)),
    ),
  );
}

export function loadAgent(agentId: string): Promise<AgentInfo> {
  return get<AgentInfo>(`/api/internal/rag/agents/${encodeURIComponent(agentId)}`);
}

interface CreatedAgent {
  agent_id: string;
  agent_key: string;
  secret: string;
  name: string;
}

/** The agent just created, for the list's next rendering to show its secret (once: the view forgets it). */
let justCreated: CreatedAgent | undefined;

function secretPanel(agent: CreatedAgent): HTMLElement {
  return el(
    "section",
    { class: "secret-once", "aria-labelledby": "created-heading" },
    el("h2", { id: "created-heading", tabindex: -1 }, `${agent.name}: copy the secret now`),
    el("p", {}, "The secret signs your visitors' identities (user_hash). It is shown only this once: store it in your site's server configuration."),
    copyable("Agent key", agent.agent_key),
    copyable("Secret", agent.secret),
    copyable("Embed snippet", embedSnippet(siteUrl, agent.agent_key), true),
    el("p", {}, el("a", { href: `#/agents/${agent.agent_id}/versions` }, "Next: add its knowledge (versions)")),
  );
}

export async function agentsView(): Promise<HTMLElement> {
  const { agents } = await get<{ agents: AgentInfo[] }>("/api/internal/rag/agents");
  const created = justCreated ? secretPanel(justCreated) : null;
  justCreated = undefined;
  const name = el("input", { name: "name", required: true, maxlength: 200 });
  const origins = el("textarea", { name: "allowed_origins", rows: 2 });
  const rate = el("input", { name: "rate_limit_per_minute", type: "number", min: 1, max: 100000, inputmode: "numeric" });
  const form = actionForm(
    [
      field("Name", name),
      field("Allowed origins", origins, "Sites that may embed the agent, one a line: shop.example or *.example.com. Empty: any site."),
      field("Questions per minute per visitor", rate, "Empty: the server's default."),
    ],
    "Create agent",
    async (status) => {
      const body: Record<string, unknown> = { name: name.value, allowed_origins: originsOf(origins.value) };
      if (rate.value) body.rate_limit_per_minute = Number(rate.value);
      justCreated = { ...(await post<CreatedAgent>("/api/internal/rag/agents", body)), name: name.value };
      status.clear();
      await refresh();
      document.getElementById("created-heading")?.focus();
    },
    "New agent",
  );
  return el(
    "div",
    {},
    el("h1", {}, "Agents"),
    created,
    table(
      ["Name", "Agent key", "Published version", "Versions", "Created"],
      agents.map((a) => [
        el("a", { href: `#/agents/${a.agent_id}` }, a.name),
        el("code", {}, a.agent_key),
        a.published_version_id ? `${shortId(a.published_version_id)} (${when(a.published_at)})` : "none",
        String(a.versions ?? 0),
        when(a.created_at),
      ]),
      "Agents",
    ),
    el("h2", {}, "New agent"),
    form,
  );
}

export async function agentView([agentId]: string[]): Promise<HTMLElement> {
  const agent = await loadAgent(agentId!);
  const name = el("input", { name: "name", required: true, maxlength: 200 });
  name.value = agent.name;
  const origins = el("textarea", { name: "allowed_origins", rows: 3 });
  origins.value = agent.allowed_origins.join("\n");
  const rate = el("input", { name: "rate_limit_per_minute", type: "number", min: 1, max: 100000, required: true });
  rate.value = String(agent.rate_limit_per_minute);
  const form = actionForm(
    [
      field("Name", name),
      field("Allowed origins", origins, "One a line: shop.example, shop.example:8443 or *.example.com. Empty: any site."),
      field("Questions per minute per visitor", rate),
    ],
    "Save settings",
    async (status) => {
      const saved = await patch<AgentInfo>(`/api/internal/rag/agents/${agent.agent_id}`, {
        name: name.value,
        allowed_origins: originsOf(origins.value),
        rate_limit_per_minute: Number(rate.value),
      });
      origins.value = saved.allowed_origins.join("\n");
      status.ok("Saved.");
    },
    "Settings",
  );
  return el(
    "div",
    {},
    el("h1", {}, agent.name),
    agentTabs(agent, "settings"),
    el(
      "dl",
      { class: "facts" },
      el("dt", {}, "Published version"),
      el("dd", {}, agent.published_version_id ? `${shortId(agent.published_version_id)}, ${when(agent.published_at)}` : "none yet: publish a version"),
      el("dt", {}, "Created"),
      el("dd", {}, when(agent.created_at)),
    ),
    el("h2", {}, "Put it on a website"),
    copyable("Agent key", agent.agent_key),
    copyable("Embed snippet", embedSnippet(siteUrl, agent.agent_key), true),
    el("h2", {}, "Settings"),
    form,
  );
}
