/**
 * The operator console's script: the sign-in form until a console session exists, then a header (who is signed
 * in, sign out), the navigation and one view per address (`#/agents`, `#/agents/{id}/versions`, …). Changing view
 * moves focus to its heading, so keyboard and screen-reader users land on what changed.
 */
import "./console.css";
import { el } from "../../shared/browser/dom.ts";
import { ApiError, get, post, setCsrfToken } from "./api.ts";
import { actionForm, errorText, field } from "./ui.ts";
import { agentView, agentsView } from "./agents.ts";
import { versionsView, versionView } from "./versions.ts";
import { webhooksView } from "./webhooks.ts";
import { conversationsView, conversationView } from "./conversations.ts";
import { testBoxView } from "./test-box.ts";
import { apiKeysView } from "./api-keys.ts";
import { onRefresh } from "./navigation.ts";

const main = document.getElementById("page")!;

export interface View {
  /** The view's content, its heading first. */
  render(params: string[], query: URLSearchParams): Promise<HTMLElement>;
}

const ROUTES: Array<[RegExp, View["render"]]> = [
  [/^\/?$|^\/agents$/, agentsView],
  [/^\/agents\/([\w-]+)$/, agentView],
  [/^\/agents\/([\w-]+)\/versions$/, versionsView],
  [/^\/agents\/([\w-]+)\/versions\/([\w-]+)$/, versionView],
  [/^\/agents\/([\w-]+)\/webhooks$/, webhooksView],
  [/^\/agents\/([\w-]+)\/test$/, testBoxView],
  [/^\/conversations$/, conversationsView],
  [/^\/conversations\/([\w-]+)$/, conversationView],
  [/^\/api-keys$/, apiKeysView],
];

let email = "";
const content = el("div", { id: "view" });

async function start(): Promise<void> {
  try {
    const session = await get<{ email: string; csrf_token?: string }>("/api/internal/auth/session");
    setCsrfToken(session.csrf_token ?? "");
    email = session.email;
    showConsole();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) showSignIn();
    else main.replaceChildren(el("h1", {}, "Chorus console"), el("p", { class: "message error", role: "alert" }, errorText(err)));
  }
}

function showSignIn(): void {
  const emailInput = el("input", { type: "email", name: "email", autocomplete: "username", required: true });
  const password = el("input", { type: "password", name: "password", autocomplete: "current-password", required: true });
  const form = actionForm([field("E-mail", emailInput), field("Password", password)], "Sign in", async () => {
    const login = await post<{ email: string; csrf_token: string }>("/api/internal/auth/login", { email: emailInput.value, password: password.value });
    setCsrfToken(login.csrf_token);
    email = login.email;
    showConsole();
  }, "Sign in");
  main.className = "sign-in";
  main.replaceChildren(
    el("h1", {}, "Sign in to the console"),
    el("p", {}, "For the organization's owners and administrators: use your chat e-mail address and password."),
    form,
  );
  emailInput.focus();
}

function showConsole(): void {
  main.className = "console";
  const signOut = el("button", { type: "button", class: "secondary" }, "Sign out");
  signOut.addEventListener("click", async () => {
    signOut.disabled = true;
    await post("/api/internal/auth/logout").catch(() => undefined);
    setCsrfToken("");
    location.hash = "";
    showSignIn();
  });
  const nav = el(
    "nav",
    { "aria-label": "Console" },
    el(
      "ul",
      {},
      el("li", {}, el("a", { href: "#/agents" }, "Agents")),
      el("li", {}, el("a", { href: "#/conversations" }, "Conversations")),
      el("li", {}, el("a", { href: "#/api-keys" }, "API keys")),
    ),
  );
  main.replaceChildren(el("header", { class: "bar" }, el("span", { class: "brand" }, "Chorus console"), nav, el("span", { class: "who" }, email), signOut), content);
  void route(false);
}

async function route(focus = true): Promise<void> {
  if (!main.classList.contains("console")) return;
  const [path = "", queryText = ""] = location.hash.replace(/^#/, "").split("?");
  const match = ROUTES.map(([re, render]) => [re.exec(path), render] as const).find(([m]) => m);
  for (const link of main.querySelectorAll("nav a")) {
    const section = (link as HTMLAnchorElement).hash.slice(1);
    if ((path || "/agents").startsWith(section)) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!match) {
    content.replaceChildren(el("h1", { tabindex: -1 }, "Not found"), el("p", {}, "There is no such page in the console. "), el("a", { href: "#/agents" }, "Go to the agents"));
    return;
  }
  const [m, render] = match;
  content.setAttribute("aria-busy", "true");
  let view: HTMLElement;
  try {
    view = await render(m!.slice(1), new URLSearchParams(queryText));
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return showSignIn();
    view = el("div", {}, el("h1", { tabindex: -1 }, "Could not load this page"), el("p", { class: "message error", role: "alert" }, errorText(err)));
  }
  content.replaceChildren(view);
  content.removeAttribute("aria-busy");
  const heading = content.querySelector("h1");
  heading?.setAttribute("tabindex", "-1");
  if (focus) heading?.focus();
}

onRefresh(() => route(false));

window.addEventListener("hashchange", () => void route());
void start();
