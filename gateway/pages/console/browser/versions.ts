/**
 * An agent's versions: create one from uploaded files (each with a title and URL), publish, roll back; one
 * version's ingested documents, and how it differs from the published one.
 */
import { el } from "../../shared/browser/dom.ts";
import { get, post, request, type AgentInfo } from "./api.ts";
import { actionButton, actionForm, field, shortId, statusLine, table, when } from "./ui.ts";
import { agentTabs, loadAgent } from "./agents.ts";
import { refresh } from "./navigation.ts";

interface VersionRow {
  version_id: string;
  created_at: string;
  documents: number;
  chunks: number;
}

interface Ingested {
  version_id: string;
  created_at: string;
  instructions: string;
  documents: Array<{ title: string; text: string; characters: number; chunks: number }>;
}

interface Comparison {
  instructions_changed: boolean;
  documents: Array<{ title: string; change: string; lines_added: number; lines_removed: number; patch?: string }>;
}

function uploadForm(agent: AgentInfo): HTMLFormElement {
  const files = el("input", { type: "file", name: "file", multiple: true, required: true, accept: ".md,.markdown,.html,.htm,.txt,text/markdown,text/html,text/plain" });
  const perFile = el("div", { class: "per-file" });
  const instructions = el("textarea", { name: "instructions", rows: 2, maxlength: 20000 });
  files.addEventListener("change", () => {
    perFile.replaceChildren(
      ...[...(files.files ?? [])].map((file, i) => {
        const title = el("input", { name: "title", maxlength: 300, placeholder: file.name.replace(/\.[^.]+$/, "") });
        const url = el("input", { name: "url", type: "url", placeholder: "https://", maxlength: 2000 });
        return el("fieldset", {}, el("legend", {}, `Document ${i + 1}: ${file.name}`), field("Title", title, "Empty: the file's name."), field("URL", url, "Where readers find it: answers link their sources here."));
      }),
    );
  });
  return actionForm(
    [
      field("Documents", files, "Markdown (.md), HTML (.html) or text (.txt) files, UTF-8."),
      perFile,
      field("Instructions", instructions, "Optional: how the agent should answer."),
    ],
    "Create version",
    async (status) => {
      const form = new FormData();
      const chosen = [...(files.files ?? [])];
      chosen.forEach((file, i) => {
        form.append("file", file, file.name);
        form.append("title", (perFile.querySelectorAll<HTMLInputElement>('input[name="title"]')[i]?.value ?? "").trim());
        form.append("url", (perFile.querySelectorAll<HTMLInputElement>('input[name="url"]')[i]?.value ?? "").trim());
      });
      if (instructions.value) form.append("instructions", instructions.value);
      const added = await request<{ version_id: string; documents: number; chunks: number }>("POST", `/api/internal/rag/agents/${agent.agent_id}/versions`, form);
      await refresh();
      document.getElementById("versions-status")!.textContent = `Version ${shortId(added.version_id)} created: ${added.documents} documents in ${added.chunks} passages. Publish it to answer from it.`;
      status.clear();
    },
    "New version",
  );
}

async function publish(agent: AgentInfo, versionId: string): Promise<void> {
  await post("/api/internal/rag/publish", { agent_id: agent.agent_id, version_id: versionId });
  await refresh();
  document.getElementById("versions-status")!.textContent = `Version ${shortId(versionId)} is published.`;
}

export async function versionsView([agentId]: string[]): Promise<HTMLElement> {
  const [agent, { versions }] = await Promise.all([loadAgent(agentId!), get<{ versions: VersionRow[] }>(`/api/internal/rag/agents/${agentId}/versions`)]);
  const status = statusLine();
  status.id = "versions-status";
  status.className = "message ok";
  const history = agent.publish_history ?? [];
  const rollback = history.length
    ? actionButton(`Roll back to ${shortId(history[history.length - 1]!)}`, status, async () => {
        const back = await post<{ version_id: string }>("/api/internal/rag/rollback", { agent_id: agent.agent_id });
        await refresh();
        document.getElementById("versions-status")!.textContent = `Rolled back: version ${shortId(back.version_id)} is published again.`;
      }, { class: "secondary" })
    : null;
  return el(
    "div",
    {},
    el("h1", {}, `${agent.name}: versions`),
    agentTabs(agent, "versions"),
    status,
    el(
      "p",
      {},
      agent.published_version_id ? `Published: ${shortId(agent.published_version_id)} since ${when(agent.published_at)}. ` : "No version is published yet. ",
      rollback,
    ),
    table(
      ["Version", "Created", "Documents", "Passages", "State", ""],
      versions.map((v) => {
        const published = v.version_id === agent.published_version_id;
        return [
          el("a", { href: `#/agents/${agent.agent_id}/versions/${v.version_id}` }, shortId(v.version_id)),
          when(v.created_at),
          String(v.documents),
          String(v.chunks),
          published ? el("strong", { class: "badge" }, "Published") : "",
          published ? "" : actionButton("Publish", status, () => publish(agent, v.version_id), { "aria-label": `Publish version ${shortId(v.version_id)}` }),
        ];
      }),
      "Versions",
    ),
    el("h2", {}, "New version"),
    uploadForm(agent),
  );
}

function comparison(diff: Comparison): HTMLElement {
  const changed = diff.documents.filter((d) => d.change !== "unchanged");
  return el(
    "div",
    {},
    el("p", {}, diff.instructions_changed ? "The instructions differ." : "The instructions are the same.", changed.length ? "" : " The documents are the same."),
    el(
      "ul",
      { class: "changes" },
      ...diff.documents.map((d) =>
        el(
          "li",
          {},
          el("span", { class: `badge ${d.change}` }, d.change),
          ` ${d.title}`,
          d.change === "unchanged" ? "" : el("span", { class: "small" }, ` (+${d.lines_added} −${d.lines_removed} lines)`),
          d.patch ? el("details", {}, el("summary", {}, "Show the changes"), el("pre", { class: "patch" }, d.patch)) : null,
        ),
      ),
    ),
  );
}

export async function versionView([agentId, versionId]: string[]): Promise<HTMLElement> {
  const base = `/api/internal/rag/agents/${agentId}/versions/${versionId}`;
  const [agent, version] = await Promise.all([loadAgent(agentId!), get<Ingested>(base)]);
  const status = statusLine();
  status.id = "versions-status";
  const published = agent.published_version_id === version.version_id;
  let compared: HTMLElement;
  if (!agent.published_version_id) compared = el("p", { class: "small" }, "No version is published yet, so there is nothing to compare with.");
  else if (published) compared = el("p", { class: "small" }, "This is the published version.");
  else compared = comparison(await get<Comparison>(`${base}/diff`));
  return el(
    "div",
    {},
    el("h1", {}, `Version ${shortId(version.version_id)}`),
    agentTabs(agent, "versions"),
    status,
    el(
      "dl",
      { class: "facts" },
      el("dt", {}, "Created"),
      el("dd", {}, when(version.created_at)),
      el("dt", {}, "State"),
      el("dd", {}, published ? "Published" : "Not published ", published ? null : actionButton("Publish", status, () => publish(agent, version.version_id))),
      el("dt", {}, "Instructions"),
      el("dd", {}, version.instructions || "none"),
    ),
    el("h2", {}, "Compared with the published version"),
    compared,
    el("h2", {}, "What was ingested"),
    el(
      "ul",
      { class: "documents" },
      ...version.documents.map((d) =>
        el(
          "li",
          {},
          el("strong", {}, d.title),
          el("span", { class: "small" }, ` ${d.characters.toLocaleString()} characters in ${d.chunks} passage${d.chunks === 1 ? "" : "s"}`),
          el("details", {}, el("summary", {}, "Show the text"), el("pre", {}, d.text)),
        ),
      ),
    ),
  );
}
