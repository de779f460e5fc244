/**
 * POST /messages to a set of channels in turn, the load of the process benchmarks (bench/hosts.ts, bench/workers.ts):
 * the channels' actors spread over the shards, so the sends exercise every worker and every crossing between them.
 */
import autocannon from "autocannon";
import type { ChorusProcess } from "../test/support/process.ts";

export interface ChannelSends {
  channels: string[];
  connections: number;
  seconds: number;
  /** Sends offered per second in all (autocannon overallRate); unset: as many as answered. */
  overallRate?: number;
}

/** Subscribe the caller to every channel (creating them): a send to a missing channel is an error, not a send. */
export async function subscribeToChannels(server: ChorusProcess, authorization: string, channels: string[]): Promise<void> {
  const res = await fetch(`http://${server.address}:${server.port}/api/v1/users/me/subscriptions`, {
    method: "POST",
    headers: { authorization, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ subscriptions: JSON.stringify(channels.map((name) => ({ name }))) }).toString(),
  });
  if (!res.ok) throw new Error(`subscribing failed: ${res.status} ${await res.text()}`);
}

/** autocannon against one server, each request to the next channel of the list. */
export function sendToChannels(server: ChorusProcess, authorization: string, load: ChannelSends) {
  let next = 0;
  return autocannon({
    url: `http://${server.address}:${server.port}/api/v1/messages`,
    method: "POST",
    headers: { authorization, "content-type": "application/x-www-form-urlencoded" },
    requests: [
      {
        setupRequest: (request) => {
          request.body = new URLSearchParams({ type: "stream", to: load.channels[next++ % load.channels.length]!, topic: "load", content: "hello" }).toString();
          return request;
        },
      },
    ],
    connections: load.connections,
    overallRate: load.overallRate,
    duration: load.seconds,
    timeout: 10,
  });
}
