/**
 * The people pages: what this server is (`/`), accepting an invitation (`/join/{key}/`) and resetting a forgotten
 * password (`/accounts/password/reset/`, and the e-mailed link `/accounts/password/reset/{token}/`). The server
 * renders each page's text; the forms are the script's (people/browser/), which calls the public API.
 */
import { serverRealm, serverRealmId } from "../../../actors/chat/reads/realms.ts";
import { joinKey } from "../../../actors/chat/reads/invitations.ts";
import { html } from "../html.ts";
import type { PageContext, PageSet } from "../routes.ts";

async function organizationName(ctx: PageContext): Promise<string> {
  return (await serverRealm(ctx.services.store.db))?.name ?? "Chorus";
}

/** How to reach this server from a Zulip app: shown on the landing page and after joining. */
export function connectSteps(siteUrl: string) {
  return html`<ol class="steps">
<li>Install a Zulip app (<a href="https://zulip.com/apps/">desktop, mobile or terminal</a>).</li>
<li>Choose <b>Add an organization</b> and enter <code class="server-url">${siteUrl}</code></li>
<li>Sign in with your e-mail address and password.</li>
</ol>`;
}

/** A page that only says something went wrong, with the way forward. */
function problem(title: string, text: string, status: number) {
  return { title, status, main: html`<h1>${title}</h1><p class="message error" role="alert">${text}</p><p><a href="/">Back to the start page</a></p>`.text };
}

const NEEDS_SCRIPT = html`<noscript><p class="message error">This page needs JavaScript.</p></noscript>`;

export const peoplePages: PageSet = {
  entries: { people: "people/browser/people.ts" },
  pages: [
    {
      path: "/",
      script: "people.js",
      async render(ctx) {
        const name = await organizationName(ctx);
        return {
          title: name,
          main: html`<h1>${name}</h1>
<p class="lead">This is a <b>Chorus</b> server: a team chat that Zulip's apps connect to, and an assistant that answers
questions from your documents on any website.</p>
<section>
<h2>Chat with your team</h2>
${connectSteps(ctx.siteUrl)}
<p>Invited? Open the link in your invitation e-mail. <a href="/accounts/password/reset/">Forgot your password?</a></p>
</section>
<section>
<h2>Run the assistant</h2>
<p>Owners and administrators manage agents, their documents and conversations in the <a href="/console/">console</a>.
Put an agent on a website with one line:</p>
<pre><code>&lt;script src="${ctx.siteUrl}/widget.js" data-agent-key="YOUR-AGENT-KEY" async&gt;&lt;/script&gt;</code></pre>
</section>
<p class="small">Developers: the chat speaks <a href="https://zulip.com/api/">Zulip's REST API</a> under <code>/api/v1/</code>.</p>`.text,
        };
      },
    },
    {
      path: "/join/{key}/",
      script: "people.js",
      async render(ctx) {
        const name = await organizationName(ctx);
        const key = await joinKey(ctx.services.store.db, await serverRealmId(ctx.services.store.db), ctx.pathParams.key!);
        if (!key) return problem("Invitation not found", "This invitation link is not valid. Check that you opened the whole link from the e-mail.", 404);
        if (key.unusable) return problem("Invitation not usable", `${key.unusable}. Ask the person who invited you for a new one.`, 410);
        const intro =
          key.kind === "invitation"
            ? html`<p>You were invited as <b class="invited-email">${key.email}</b>. Choose your name and a password to create your account.</p>`
            : html`<p>Enter your e-mail address: we will send you a link to create your account.</p>`;
        return {
          title: `Join ${name}`,
          main: html`<h1>Join ${name}</h1>${intro}${NEEDS_SCRIPT}`.text,
          data: { view: key.kind === "invitation" ? "accept-invitation" : "join-link", key: ctx.pathParams.key!, site: ctx.siteUrl, ...(key.kind === "invitation" ? { email: key.email } : {}) },
        };
      },
    },
    {
      path: "/accounts/password/reset/",
      script: "people.js",
      async render(ctx) {
        const name = await organizationName(ctx);
        return {
          title: `Reset your password: ${name}`,
          main: html`<h1>Forgot your password?</h1><p>Enter the e-mail address of your account in ${name}. We will send you a link to choose a new password.</p>${NEEDS_SCRIPT}`.text,
          data: { view: "request-reset" },
        };
      },
    },
    {
      path: "/accounts/password/reset/{key}/",
      script: "people.js",
      async render(ctx) {
        const name = await organizationName(ctx);
        return {
          title: `Choose a new password: ${name}`,
          main: html`<h1>Choose a new password</h1><p>For your account in ${name}.</p>${NEEDS_SCRIPT}`.text,
          data: { view: "reset", key: ctx.pathParams.key!, site: ctx.siteUrl },
        };
      },
    },
  ],
};
