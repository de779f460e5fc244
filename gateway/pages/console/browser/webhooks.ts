/** An agent's webhooks: add an endpoint (its secret shown once), the endpoints, and the delivery log with resend. */
import { el } from "../../shared/browser/dom.ts";
import { ApiError, get, post } from "./api.ts";
import { actionButton, actionForm, copyable, field, shortId, statusLine, table, when } from "./ui.ts";
import { agentTabs, loadAgent } from "./agents.ts";
import { refresh } from "./navigation.ts";

const EVENTS: Array<[string, string]> = [
  ["conversation.created", "A conversation starts"],
  ["message.received", "A visitor asks"],
  ["message.sent", "The agent answers"],
];

interface Endpoint {
  webhook_id: string;
  url: string;
  events: string[];
  disabled: boolean;
  disabled_reason: string | null;
  created_at: string;
}

interface Delivery {
  delivery_id: number;
  message_id: string;
  url: string;
  event_type: string;
  status: string;
  attempts: number;
  next_attempt_at: string | null;
  last_status: number | null;
  last_error: string | null;
  created_at: string;
}

export async function webhooksView([agentId]: string[]): Promise<HTMLElement> {
  const base = `/api/internal/rag/agents/${agentId}/webhooks`;
  const [agent, { webhooks }, { deliveries }] = await Promise.all([
    loadAgent(agentId!),
    get<{ webhooks: Endpoint[] }>(base),
    get<{ deliveries: Delivery[] }>(`${base}/deliveries`),
  ]);
  const created = el("div", {});
  const url = el("input", { name: "url", type: "url", required: true, placeholder: "https://example.com/hooks/chorus" });
  const boxes = EVENTS.map(([event]) => el("input", { type: "checkbox", name: "events", value: event, checked: true }));
  const events = el(
    "fieldset",
    {},
    el("legend", {}, "Events"),
    ...EVENTS.map(([event, label], i) => {
      boxes[i]!.id = `event-${i}`;
      return el("div", { class: "check" }, boxes[i]!, el("label", { for: `event-${i}` }, `${label} `, el("code", {}, event)));
    }),
  );
  const form = actionForm([field("Endpoint URL", url), events], "Add webhook", async (status) => {
    const chosen = boxes.filter((b) => b.checked).map((b) => b.value);
    if (!chosen.length) throw new ApiError("Choose at least one event.", 400, "VALIDATION_ERROR");
    const hook = await post<{ webhook_id: string; secret: string }>(base, { url: url.value, events: chosen });
    status.ok("Webhook added.");
    const heading = el("h3", { tabindex: -1 }, "Copy the signing secret now");
    created.replaceChildren(
      el(
        "section",
        { class: "secret-once" },
        heading,
        el("p", {}, "Deliveries are signed per Standard Webhooks with this secret; it is shown only this once."),
        copyable("Signing secret", hook.secret),
        el("p", {}, el("a", { href: `#/agents/${agent.agent_id}/webhooks`, onclick: () => void refresh() }, "Show it in the list")),
      ),
    );
    heading.focus();
  }, "New webhook");
  const logStatus = statusLine();
  return el(
    "div",
    {},
    el("h1", {}, `${agent.name}: webhooks`),
    agentTabs(agent, "webhooks"),
    table(
      ["URL", "Events", "State", "Added"],
      webhooks.map((w) => [
        el("code", {}, w.url),
        w.events.join(", "),
        w.disabled ? `Disabled${w.disabled_reason ? `: ${w.disabled_reason}` : ""}` : "Active",
        when(w.created_at),
      ]),
      "Webhook endpoints",
    ),
    el("h2", {}, "New webhook"),
    form,
    created,
    el("h2", {}, "Deliveries"),
    el("p", {}, actionButton("Refresh", logStatus, () => refresh(), { class: "secondary" })),
    logStatus,
    table(
      ["Event", "To", "State", "Attempts", "Last answer", "Created", ""],
      deliveries.map((d) => [
        el("span", { title: d.message_id }, d.event_type),
        el("code", {}, d.url),
        d.status === "pending" && d.next_attempt_at ? `pending, next try ${when(d.next_attempt_at)}` : d.status,
        String(d.attempts),
        d.last_error ?? (d.last_status ? `HTTP ${d.last_status}` : "—"),
        when(d.created_at),
        actionButton(
          "Resend",
          logStatus,
          async () => {
            await post(`${base}/deliveries/${d.delivery_id}/resend`);
            await refresh();
          },
          { class: "secondary", "aria-label": `Resend delivery ${d.delivery_id} (${d.event_type})` },
        ),
      ]),
      "Deliveries",
    ),
    el("p", { class: "small" }, `Deliveries of one message share its webhook-id (for example ${deliveries[0] ? shortId(deliveries[0].message_id) : "msg_…"}); failed attempts are retried with growing pauses.`),
  );
}
