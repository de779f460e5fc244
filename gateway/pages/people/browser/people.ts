/**
 * The people pages' script: the form of each view the server names on `<main data-view>` (accepting an
 * invitation, joining through a link, asking for a password reset, choosing the new password). Each form posts to
 * the public API, shows errors in a live region next to the button, and on success replaces itself with what to do
 * next. The landing page has no view and needs nothing from here.
 */
import "../../shared/browser/pages.css";
import { postForm } from "../../shared/browser/api.ts";
import { append, el } from "../../shared/browser/dom.ts";

const main = document.getElementById("page")!;
const data = main.dataset;

interface Field {
  name: string;
  label: string;
  type: string;
  autocomplete: string;
  hint?: string;
  minlength?: number;
}

/**
 * A form of `fields` whose submission calls `submit`; while it runs the button is disabled, and a failure is
 * announced in the form's live region with focus kept in the form, so the person can correct and send again.
 */
function form(fields: Field[], button: string, submit: (values: Record<string, string>) => Promise<string | undefined>): HTMLFormElement {
  const status = el("p", { class: "message error", role: "alert", "aria-live": "assertive" });
  const send = el("button", { type: "submit" }, button);
  const inputs = fields.map((f) =>
    el("input", {
      id: `field-${f.name}`,
      name: f.name,
      type: f.type,
      autocomplete: f.autocomplete,
      required: true,
      ...(f.minlength ? { minlength: f.minlength } : {}),
      ...(f.hint ? { "aria-describedby": `${f.name}-hint` } : {}),
    }),
  );
  const node = el(
    "form",
    { novalidate: false },
    ...fields.map((f, i) =>
      el("div", { class: "field" }, el("label", { for: `field-${f.name}` }, f.label), inputs[i]!, f.hint ? el("span", { class: "hint", id: `${f.name}-hint` }, f.hint) : null),
    ),
    status,
    send,
  );
  node.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.textContent = "";
    send.disabled = true;
    const values = Object.fromEntries(inputs.map((input) => [input.name, input.value]));
    try {
      const failure = await submit(values);
      if (failure) {
        status.textContent = failure;
        inputs[0]?.focus();
      }
    } finally {
      send.disabled = false;
    }
  });
  return node;
}

/** Replace the page's text after the heading with `nodes`, and move focus to the new heading for screen readers. */
function show(heading: string, ...nodes: Array<Node | string>): void {
  const h1 = el("h1", { tabindex: -1 }, heading);
  main.replaceChildren(h1, ...nodes);
  h1.focus();
}

function connectSteps(site: string, email: string): HTMLElement {
  return el(
    "ol",
    { class: "steps" },
    el("li", {}, "Install a Zulip app (", el("a", { href: "https://zulip.com/apps/" }, "desktop, mobile or terminal"), ")."),
    el("li", {}, "Choose ", el("b", {}, "Add an organization"), " and enter ", el("code", { class: "server-url" }, site)),
    el("li", {}, "Sign in as ", el("b", {}, email), " with the password you chose."),
  );
}

const PASSWORD: Field = { name: "password", label: "Password", type: "password", autocomplete: "new-password", hint: "At least 8 characters.", minlength: 8 };

const views: Record<string, () => void> = {
  "accept-invitation"() {
    const fields: Field[] = [{ name: "full_name", label: "Your name", type: "text", autocomplete: "name" }, PASSWORD];
    append(
      main,
      form(fields, "Create my account", async ({ full_name, password }) => {
        if (password!.length < 8) return "Choose a password of at least 8 characters.";
        const result = await postForm("/invites/accept", { key: data.key!, full_name: full_name!, password: password! });
        if (!result.ok) return result.message;
        show(
          `Welcome, ${full_name!.trim()}!`,
          el("p", { class: "message ok", role: "status" }, "Your account is ready."),
          el("h2", {}, "Sign in with a Zulip app"),
          connectSteps(data.site!, data.email!),
          el("p", { class: "small" }, "Scripts and bots use the same address with Zulip's API and your API key (in the app's settings)."),
        );
        return undefined;
      }),
    );
  },
  "join-link"() {
    append(
      main,
      form([{ name: "email", label: "E-mail address", type: "email", autocomplete: "email" }], "Send me the link", async ({ email }) => {
        const result = await postForm("/invites/join", { key: data.key!, email: email!.trim() });
        if (!result.ok) return result.message;
        show("Check your e-mail", el("p", { class: "message ok", role: "status" }, `We sent a link to ${email!.trim()}. Open it to create your account.`));
        return undefined;
      }),
    );
  },
  "request-reset"() {
    append(
      main,
      form([{ name: "email", label: "E-mail address", type: "email", autocomplete: "email" }], "Send me a reset link", async ({ email }) => {
        const result = await postForm("/password_reset", { email: email!.trim() });
        if (!result.ok) return result.message;
        show(
          "Check your e-mail",
          el("p", { class: "message ok", role: "status" }, `If an account has the address ${email!.trim()}, we sent it a link to choose a new password. The link works for a day.`),
        );
        return undefined;
      }),
    );
  },
  reset() {
    const fields: Field[] = [PASSWORD, { name: "confirm", label: "The same password again", type: "password", autocomplete: "new-password" }];
    append(
      main,
      form(fields, "Set my password", async ({ password, confirm }) => {
        if (password!.length < 8) return "Choose a password of at least 8 characters.";
        if (password !== confirm) return "The two passwords differ. Type the same password twice.";
        const result = await postForm("/password_reset/confirm", { key: data.key!, new_password: password! });
        if (!result.ok) return result.message;
        show(
          "Password changed",
          el("p", { class: "message ok", role: "status" }, "Your new password works now."),
          el("p", {}, "Sign in with your Zulip app at ", el("code", { class: "server-url" }, data.site!), " using your e-mail address and the new password."),
        );
        return undefined;
      }),
    );
  },
};

views[data.view ?? ""]?.();
