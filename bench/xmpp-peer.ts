/**
 * The fan-out family's reference peer (issue 26): a private ejabberd (Debian's package, 23.01 when the issue was
 * filed) whose multi-user chat room the same load generator fills with the same members and sends the same messages
 * to, so that `--scenario fanout-xmpp` puts a dedicated XMPP server's figures in the same run as Chorus's.
 *
 * Configured as the issue measured it: rooms in memory, no archive, no history, no traffic shaper; members sign in
 * with SASL ANONYMOUS (no accounts to make). Joins are announced only to moderators, so that filling a room of N
 * costs N presences rather than N² (above 1,000 occupants ejabberd stops announcing them anyway); the messages go to
 * every occupant either way. The instance has a directory, port and Erlang node name of its own, and never touches
 * the machine's ejabberd (Debian starts none without systemd).
 */
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { procCpuMicros } from "../test/support/proc-stat.ts";
import type { XmppRoom } from "./xmpp-session.ts";

const run = promisify(execFile);

/** Why the peer cannot run here, or undefined when it can. */
export function xmppPeerMissing(): string | undefined {
  try {
    execFileSync("sh", ["-c", "command -v ejabberdctl"], { stdio: "ignore" });
    return undefined;
  } catch {
    return "ejabberd is not installed (apt-get install ejabberd)";
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

function config(port: number): string {
  return `hosts: [localhost]
loglevel: warning
listen:
  - port: ${port}
    ip: "127.0.0.1"
    module: ejabberd_c2s
    backlog: 4096
    max_stanza_size: 262144
    access: c2s
auth_method: anonymous
anonymous_protocol: sasl_anon
allow_multiple_connections: true
access_rules:
  c2s: {allow: all}
  muc_create: {allow: all}
shaper_rules:
  max_user_sessions: 10
modules:
  mod_disco: {}
  mod_muc:
    access: all
    access_create: muc_create
    access_persistent: muc_create
    history_size: 0
    max_users: 100000
    max_user_conferences: 100
    default_room_options:
      mam: false
      persistent: false
      max_users: 100000
      presence_broadcast: [moderator]
`;
}

export class XmppPeer {
  private constructor(
    private readonly dir: string,
    private readonly ctl: string[],
    readonly port: number,
    /** The Erlang VM's process, whose CPU is the server's. */
    readonly pid: number,
  ) {}

  static async start(): Promise<XmppPeer> {
    const missing = xmppPeerMissing();
    if (missing) throw new Error(missing);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-xmpp-peer-"));
    const port = await freePort();
    const node = `chorusbench${process.pid}@localhost`;
    fs.mkdirSync(path.join(dir, "spool"));
    fs.mkdirSync(path.join(dir, "logs"));
    fs.writeFileSync(path.join(dir, "ejabberd.yml"), config(port));
    fs.writeFileSync(path.join(dir, "ejabberdctl.cfg"), `ERLANG_NODE=${node}\n`);
    // ejabberdctl run by root runs the server as the package's user, who must own what it writes.
    if (process.getuid?.() === 0) execFileSync("chown", ["-R", "ejabberd", dir]);
    const ctl = ["--config", path.join(dir, "ejabberd.yml"), "--ctl-config", path.join(dir, "ejabberdctl.cfg"), "--spool", path.join(dir, "spool"), "--logs", path.join(dir, "logs")];
    await run("ejabberdctl", [...ctl, "start"], { cwd: dir });
    const deadline = Date.now() + 60_000;
    while (!(await accepts(port))) {
      if (Date.now() > deadline) {
        const log = fs.readdirSync(path.join(dir, "logs")).map((f) => fs.readFileSync(path.join(dir, "logs", f), "utf8").slice(-2000)).join("\n");
        throw new Error(`ejabberd did not listen on ${port} within 60 s:\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    return new XmppPeer(dir, ctl, port, beamOf(node));
  }

  /** A room of its own for a cell (made by its first occupant). */
  room(name: string): XmppRoom {
    return { host: "127.0.0.1", port: this.port, room: `${name.replace(/[^a-z0-9-]/gi, "-").toLowerCase()}@conference.localhost` };
  }

  cpuMicros(): number {
    return procCpuMicros(this.pid) ?? Number.NaN;
  }

  async stop(): Promise<void> {
    await run("ejabberdctl", [...this.ctl, "stop"], { cwd: this.dir }).catch(() => {});
    const deadline = Date.now() + 15_000;
    while (procCpuMicros(this.pid) !== undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    if (procCpuMicros(this.pid) !== undefined) process.kill(this.pid, "SIGKILL");
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** The beam.smp process running the Erlang node `node`. */
function beamOf(node: string): number {
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline: string;
    try {
      cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, "utf8");
    } catch {
      continue;
    }
    const args = cmdline.split("\0");
    if (args[0]?.endsWith("beam.smp") && args.includes(node)) return Number(entry);
  }
  throw new Error(`no beam.smp process for the Erlang node ${node}`);
}
