/**
 * The operator console at `/console/`: owners and administrators sign in with their chat password and manage the
 * assistant's agents, their knowledge versions, webhooks and conversations, and try an agent in a test box. One
 * page; its views (`#/agents/…`, `#/conversations/…`) are the script's (console/browser/), which uses only the
 * internal API (gateway/assistant/internal.ts, console.ts), so a script with an API key can do all it does.
 */
import { html } from "../html.ts";
import type { PageSet } from "../routes.ts";

export const consolePages: PageSet = {
  entries: { console: "console/browser/console.ts" },
  pages: [
    {
      path: "/console/",
      script: "console.js",
      render(ctx) {
        return {
          title: "Chorus console",
          main: html`<h1>Chorus console</h1><p class="small">Loading… The console needs JavaScript.</p>`.text,
          data: { console: "", "site-url": ctx.siteUrl },
        };
      },
    },
  ],
};
