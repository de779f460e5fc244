/**
 * The fan-out family's reference peer (issue 26): a private ejabberd (Debian's package, 23.01 when the issue was
 * filed) whose multi-user chat room the same load generator fills with the same members and sends the same messages
 * to, so that `--scenario fanout-xmpp` puts a dedicated XMPP server's figures in the same run as Chorus's.
 *
 * Configured as the issue measured it: rooms in memory, no archive, no history, no traffic shaper; members sign in
 * with SASL ANONYMOUS (no accounts to make). With `archive` (`--scenario fanout-xmpp-archive`), each room keeps its
 * messages in Postgres (mod_mam on a fresh database with the package's schema): ejabberd writes a message there
 * before it sends it to the occupants, one autocommitted INSERT each, which is the durability a Chorus send has.
 * Joins are announced only to moderators, so that filling a room of N costs N presences rather than N² (above 1,000
 * occupants ejabberd stops announcing them anyway); the messages go to every occupant either way. The instance has a directory, port and Erlang node name of its own, and never touches
 * the machine's ejabberd (Debian starts none without systemd).
 */
import { execFile, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import pg from "pg";
import { freePort, reachable } from "../test/support/process.ts";
import { cpuByProcess, procCpuMicros } from "../test/support/proc-stat.ts";
import { freshDatabase } from "../test/support/services.ts";
import type { ServiceStats } from "./scenarios.ts";
import type { XmppRoom } from "./xmpp-session.ts";

/** The package's Postgres schema (tables of every SQL-backed module; mod_mam's `archive` among them). */
const PG_SCHEMA = "/usr/share/ejabberd/sql/pg.sql";

const run = promisify(execFile);

/** Where Debian's erlang-p1-pgsql puts its application (ejabberd's Postgres driver): p1_pgsql-<version>. */
const ERLANG_LIBS = "/usr/lib/erlang/lib";

/** Why the peer (with `archive`, its Postgres archive) cannot run here, or undefined when it can. */
export function xmppPeerMissing(archive: boolean): string | undefined {
  try {
    execFileSync("sh", ["-c", "command -v ejabberdctl"], { stdio: "ignore" });
  } catch {
    return "ejabberd is not installed (apt-get install ejabberd)";
  }
  if (!archive) return undefined;
  const driver = fs.existsSync(ERLANG_LIBS) && fs.readdirSync(ERLANG_LIBS).some((d) => d.startsWith("p1_pgsql-"));
  if (!driver || !fs.existsSync(PG_SCHEMA)) return "ejabberd's Postgres driver or schema is missing (apt-get install erlang-p1-pgsql)";
  return undefined;
}

interface Archive {
  url: URL;
  name: string;
  drop(): Promise<void>;
}

function config(port: number, archive: Archive | undefined): string {
  const sql = archive
    ? `sql_type: pgsql
sql_server: "${archive.url.hostname}"
sql_port: ${archive.url.port || 5432}
sql_database: "${archive.name}"
sql_username: "${decodeURIComponent(archive.url.username) || "postgres"}"
sql_password: "${decodeURIComponent(archive.url.password)}"
sql_pool_size: 4
`
    : "";
  return `${sql}hosts: [localhost]
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
${archive ? "  mod_mam:\n    db_type: sql\n" : ""}  mod_muc:
    access: all
    access_create: muc_create
    access_persistent: muc_create
    history_size: 0
    max_users: 100000
    max_user_conferences: 100
    default_room_options:
      mam: ${archive ? "true" : "false"}
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
    private readonly archive: Archive | undefined,
  ) {}

  static async start(opts: { archive: boolean }): Promise<XmppPeer> {
    const missing = xmppPeerMissing(opts.archive);
    if (missing) throw new Error(missing);
    let archive: Archive | undefined;
    if (opts.archive) {
      const database = await freshDatabase();
      archive = { ...database, url: new URL(database.url) };
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        await client.query(fs.readFileSync(PG_SCHEMA, "utf8"));
      } finally {
        await client.end();
      }
    }
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-xmpp-peer-"));
    const port = await freePort();
    const node = `chorusbench${process.pid}@localhost`;
    fs.mkdirSync(path.join(dir, "spool"));
    fs.mkdirSync(path.join(dir, "logs"));
    fs.writeFileSync(path.join(dir, "ejabberd.yml"), config(port, archive));
    fs.writeFileSync(path.join(dir, "ejabberdctl.cfg"), `ERLANG_NODE=${node}\n`);
    // ejabberdctl run by root runs the server as the package's user, who must own what it writes.
    if (process.getuid?.() === 0) execFileSync("chown", ["-R", "ejabberd", dir]);
    const ctl = ["--config", path.join(dir, "ejabberd.yml"), "--ctl-config", path.join(dir, "ejabberdctl.cfg"), "--spool", path.join(dir, "spool"), "--logs", path.join(dir, "logs")];
    await ejabberdctl([...ctl, "start"], dir);
    const deadline = Date.now() + 60_000;
    while (!(await reachable("127.0.0.1", port))) {
      if (Date.now() > deadline) {
        const log = fs.readdirSync(path.join(dir, "logs")).map((f) => fs.readFileSync(path.join(dir, "logs", f), "utf8").slice(-2000)).join("\n");
        throw new Error(`ejabberd did not listen on ${port} within 60 s:\n${log}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    return new XmppPeer(dir, ctl, port, beamOf(node), archive);
  }

  /** A room of its own for a cell (made by its first occupant). */
  room(name: string): XmppRoom {
    return { host: "127.0.0.1", port: this.port, room: `${name.replace(/[^a-z0-9-]/gi, "-").toLowerCase()}@conference.localhost` };
  }

  cpuMicros(): number {
    return procCpuMicros(this.pid) ?? Number.NaN;
  }

  /** The CPU of the Postgres backends serving the archive (none without one). */
  async serviceStats(): Promise<ServiceStats> {
    if (!this.archive) return { cpu: new Map(), counters: {} };
    const client = new pg.Client({ connectionString: this.archive.url.toString() });
    await client.connect();
    try {
      const { rows } = await client.query<{ pid: number }>("select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()");
      return { cpu: cpuByProcess("postgres", rows.map((r) => r.pid)), counters: {} };
    } finally {
      await client.end();
    }
  }

  async stop(): Promise<void> {
    await ejabberdctl([...this.ctl, "stop"], this.dir).catch(() => {});
    const deadline = Date.now() + 15_000;
    while (procCpuMicros(this.pid) !== undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    if (procCpuMicros(this.pid) !== undefined) process.kill(this.pid, "SIGKILL");
    fs.rmSync(this.dir, { recursive: true, force: true });
    await this.archive?.drop();
  }
}

/**
 * ejabberdctl, with as many open files as the hard limit allows: every occupant is a socket, and run by root it
 * would start the server as the package's user under a soft limit of 1,024 (su's), which a room of 2,000 exceeds (the
 * server then stops accepting and halts). Run as that user directly, ejabberdctl starts the server itself.
 */
function ejabberdctl(args: string[], cwd: string): Promise<unknown> {
  const script = 'ulimit -n "$(ulimit -Hn)"; exec "$0" "$@"';
  if (process.getuid?.() === 0) return run("su", ["-s", "/bin/sh", "-c", script, "ejabberd", "--", "ejabberdctl", ...args], { cwd });
  return run("sh", ["-c", script, "ejabberdctl", ...args], { cwd });
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
