/**
 * The clients of one host of the several-hosts test (test/e2e/hosts.test.ts), as a process inside that host's
 * network namespace: senders (steadySenders) of the host's channels and followers (followQueue) of the host's users'
 * queues, through the Chorus hosts the test says are up. Started by `startHostClients` with its plan as JSON in
 * argv[2]; it speaks with the test over the IPC channel.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { onHost, type TestHost } from "./hosts.ts";
import { followQueue, manyRequestsController, steadySenders, untilDelivered, type FollowerState, type Gateway } from "./traffic.ts";
import type { Credentials } from "./zulip-call.ts";

export interface HostClientsPlan {
  owner: Credentials;
  /** The channels this host's senders send to (one sender each). */
  channels: string[];
  topic: string;
  /** The queues this host's users follow. */
  queues: Array<{ user: Credentials; queueId: string }>;
  /** The Chorus hosts up at start. */
  gateways: Gateway[];
}

/** What the test tells the clients: the Chorus hosts now up, stop sending, or wait for these ids and stop. */
export type ToHostClients = { gateways: Gateway[] } | { stopSending: true } | { deliver: number[] };
export type FromHostClients =
  | { started: true }
  | { acknowledged: Array<[string, number[]]>; retries: number }
  | { followers: FollowerState[] };

export interface HostClients {
  proc: ChildProcess;
  /** Tell the clients which Chorus hosts are up. */
  route(gateways: Gateway[]): void;
  /** Stop sending; answers what was acknowledged, per channel, and how many attempts were retried. */
  stopSending(): Promise<{ acknowledged: Map<string, number[]>; retries: number }>;
  /** Wait until every follower holds `everyId` (or 20 s), stop following, and answer what each received. */
  deliver(everyId: number[]): Promise<FollowerState[]>;
}

/** The clients of `host`, in a process inside its namespace. */
export async function startHostClients(host: TestHost, plan: HostClientsPlan): Promise<HostClients> {
  const script = fileURLToPath(import.meta.url);
  const [command, args] = onHost(host, process.execPath, ["--import", "tsx", script, JSON.stringify(plan)]);
  const proc = spawn(command, args, { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const next = async <T extends FromHostClients>(): Promise<T> => ((await once(proc, "message")) as [T])[0];
  await next<{ started: true }>();
  return {
    proc,
    route: (gateways) => proc.send({ gateways } satisfies ToHostClients),
    async stopSending() {
      proc.send({ stopSending: true } satisfies ToHostClients);
      const answer = await next<{ acknowledged: Array<[string, number[]]>; retries: number }>();
      return { acknowledged: new Map(answer.acknowledged), retries: answer.retries };
    },
    async deliver(everyId) {
      proc.send({ deliver: everyId } satisfies ToHostClients);
      return (await next<{ followers: FollowerState[] }>()).followers;
    },
  };
}

async function runClients(plan: HostClientsPlan): Promise<void> {
  const send = (message: FromHostClients) => process.send!(message);
  let gateways = plan.gateways;
  const stopPolls = manyRequestsController();
  const followers = plan.queues.map(({ user, queueId }, i) => followQueue(user, queueId, () => gateways[i % gateways.length]!, stopPolls.signal));
  const senders = steadySenders(plan.owner, plan.channels, (n) => gateways[n % gateways.length]!, plan.topic);
  process.on("message", async (message: ToHostClients) => {
    if ("gateways" in message) gateways = message.gateways;
    else if ("stopSending" in message) {
      await senders.stop();
      send({ acknowledged: [...senders.acknowledged], retries: senders.retries() });
    } else {
      await untilDelivered(followers, message.deliver, stopPolls);
      send({ followers: followers.map((f) => f.state) });
      process.disconnect();
    }
  });
  send({ started: true });
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.send) await runClients(JSON.parse(process.argv[2]!) as HostClientsPlan);
