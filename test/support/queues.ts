/** An event queue opened through POST /register, and what has arrived in it (ids left out for comparing). */
import { api, type Credentials } from "./server.ts";

export interface OpenQueue {
  queueId: string;
  /** The initial state register returned. */
  state: Record<string, any>;
  /** Every event queued so far (none are acknowledged), without their ids. */
  events(): Promise<Record<string, any>[]>;
}

export async function openQueue(server: { url: string }, as: Credentials, eventTypes: string[]): Promise<OpenQueue> {
  const res = await api(server, "POST", "/register", { as, params: { event_types: eventTypes } });
  if (res.status !== 200) throw new Error(`register: ${JSON.stringify(res.body)}`);
  const queueId = res.body.queue_id as string;
  return {
    queueId,
    state: res.body,
    async events() {
      const polled = await api(server, "GET", "/events", { as, params: { queue_id: queueId, last_event_id: -1, dont_block: true } });
      return polled.body.events.map(({ id, ...event }: any) => event);
    },
  };
}
