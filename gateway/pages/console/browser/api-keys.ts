/** API keys for scripts: everything the console does, a script can do with a key (shown once) and the internal API. */
import { el } from "../../shared/browser/dom.ts";
import { post } from "./api.ts";
import { actionForm, copyable, siteUrl } from "./ui.ts";

export async function apiKeysView(): Promise<HTMLElement> {
  const created = el("div", {});
  const form = actionForm([], "Create an API key", async (status) => {
    const { key } = await post<{ key: string }>("/api/internal/api-keys");
    status.clear();
    const heading = el("h2", { tabindex: -1 }, "Copy the key now");
    created.replaceChildren(
      el(
        "section",
        { class: "secret-once" },
        heading,
        el("p", {}, "It acts as you and is shown only this once; the server keeps only its hash."),
        copyable("API key", key),
        copyable("Try it", `curl -H "Authorization: Bearer ${key}" ${siteUrl}/api/internal/rag/agents`, true),
      ),
    );
    heading.focus();
  }, "New API key");
  return el(
    "div",
    {},
    el("h1", {}, "API keys"),
    el("p", {}, "Scripts call the same internal API as this console, with a key sent as ", el("code", {}, "Authorization: Bearer <key>"), "."),
    form,
    created,
  );
}
