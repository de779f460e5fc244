/**
 * The people pages: what this server is (`/`), accepting an invitation (`/join/{key}/`) and resetting a forgotten
 * password (`/accounts/password/reset/`, and the e-mailed link `/accounts/password/reset/{token}/`). The server
 * renders each page's text; the forms are the script's (people/browser/), which calls the public API.
 */
import { serverRealmName } from "../../../actors/chat/reads/realms.ts";
import { html } from "../html.ts";
import type { PageContext, PageSet } from "../routes.ts";

async function organizationName(ctx: PageContext): Promise<string> {
  return (await serverRealmName(ctx.services.store.db)) ?? "Chorus";
}

/** How to reach this server from a Zulip app: shown on the landing page and after joining. */
export function connectSteps(siteUrl: string) {
  return html`<ol class="steps">
<li>Install a Zulip app (<a href="https://zulip.com/apps/">desktop, mobile or terminal</a>).</li>
<li>Choose <b>Add an organization</b> and enter <code class="server-url">${siteUrl}</code></li>
<li>Sign in with your e-mail address and password.</li>
</ol>`;
}

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
  ],
};
