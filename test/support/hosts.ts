/**
 * Several hosts on this one machine, for tests of what crosses a network: each host is a network namespace with
 * its own address on a bridge of the test's own (`ip netns`, veth pairs), so its processes reach the others only
 * over that network, as separate machines would. The test process itself sits on the bridge too (its address is
 * `gateway`), as a client of every host. Needs root and iproute2; `hostsAvailable` says whether this machine has them.
 */
import { execFile, execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";

const execAsync = promisify(execFile);
const ip = (...args: string[]) => execAsync("ip", args);

/**
 * Where a process runs: on this machine's loopback, or inside a network namespace (a host of `createNetwork`),
 * listening on that host's address.
 */
export interface ServicePlacement {
  address: string;
  namespace?: string;
}

/** `command args` as run on `placement`'s host: inside its network namespace, if it has one. */
export function onHost(placement: ServicePlacement, command: string, args: string[]): [string, string[]] {
  return placement.namespace ? ["ip", ["netns", "exec", placement.namespace, command, ...args]] : [command, args];
}

export interface TestHost extends ServicePlacement {
  name: string;
  namespace: string;
}

export interface TestNetwork {
  /** The test process's own address on the network. */
  gateway: string;
  hosts: Record<string, TestHost>;
  /** Remove the namespaces (killing nothing: stop the hosts' processes first), the links and the bridge. */
  remove(): Promise<void>;
}

export function hostsAvailable(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    execFileSync("ip", ["netns", "list"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Hosts named `names` on a fresh /24 (interface names carry a random tag, so runs never collide). */
export async function createNetwork(names: string[]): Promise<TestNetwork> {
  const tag = randomBytes(3).toString("hex");
  const subnet = `10.${100 + (parseInt(tag.slice(0, 2), 16) % 100)}.${parseInt(tag.slice(2, 4), 16)}`;
  const bridge = `cb${tag}`;
  const made: Array<() => Promise<unknown>> = [];
  const remove = async () => {
    for (const undo of made.reverse()) await undo().catch(() => {});
  };
  try {
    await ip("link", "add", bridge, "type", "bridge");
    made.push(() => ip("link", "del", bridge));
    await ip("addr", "add", `${subnet}.1/24`, "dev", bridge);
    await ip("link", "set", bridge, "up");
    const hosts: Record<string, TestHost> = {};
    for (const [i, name] of names.entries()) {
      const namespace = `chorus-${tag}-${name}`;
      const outside = `cv${tag}${i}`;
      await ip("netns", "add", namespace);
      made.push(() => ip("netns", "del", namespace));
      await ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", namespace);
      await ip("link", "set", outside, "master", bridge);
      await ip("link", "set", outside, "up");
      const address = `${subnet}.${10 + i}`;
      await ip("netns", "exec", namespace, "ip", "addr", "add", `${address}/24`, "dev", "eth0");
      await ip("netns", "exec", namespace, "ip", "link", "set", "eth0", "up");
      await ip("netns", "exec", namespace, "ip", "link", "set", "lo", "up");
      hosts[name] = { name, namespace, address };
    }
    return { gateway: `${subnet}.1`, hosts, remove };
  } catch (err) {
    await remove();
    throw err;
  }
}
