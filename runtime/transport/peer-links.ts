/**
 * Direct links between the worker processes of one host, for the asks whose entry the transport would keep for
 * nothing: askDirect, broadcastHeld's turns and transient asks (polls), when another worker holds the actor's shard.
 * On Redis Streams each such ask otherwise crosses as an entry and a reply through Redis: script calls, the JSON
 * written and read twice, and wake-ups of Redis and of both processes (docs/performance.md, "two workers"). Over a
 * link it is one line of JSON each way on a Unix socket.
 *
 * Each worker listens on a socket named by its node id, in a directory the workers of a host share. An asker opens a
 * link to a holder the first time it needs one and uses it once the holder has greeted it (`HelloFrame`, written on
 * accepting the connection); until then, and when the holder is on another host (no such socket here), its asks take
 * the transport. Connected is not enough: a connection made while the holder's process is being killed can land in
 * its listening socket's backlog, never to be accepted, and stay open there without an error, every frame written to
 * it unanswered (test/e2e/failover.test.ts, with links on, lost a killed worker's polls that way).
 *
 * What a link guarantees is only what a socket does: the frames sent on an open link arrive in order, or the link
 * closes and the asker hears `onLinkLost`. Everything else is the actor system's (ActorSystem.dispatch): the holder
 * refuses an entry for a shard it is not sure it serves, and the asker makes good what a refused entry or a lost link
 * leaves unanswered.
 */
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { log } from "../log.ts";
import type { Entry, Reply, ReplyAddress } from "./transport.ts";

/** Which kind of ask an entry sent over a link is (see ActorSystem.dispatch). */
export type LinkMode = "direct" | "held" | "transient";

/** What an asker sends a holder. */
export interface LinkedEntry {
  shard: number;
  mode: LinkMode;
  entry: Entry & { replyTo: ReplyAddress };
}

/**
 * What a holder answers on a link: a reply to an entry's ask; `refused`, the entry was not run (the holder is not
 * sure it serves the shard); `settled`, the work a held entry's turns held has settled (`left`: refused as FENCED,
 * for the shard's next holder).
 */
export type HolderFrame = { reply: Reply } | { refused: string } | { settled: string; left?: true };

/** A holder's first frame on a link it accepted: the link may be used from then on. */
export interface HelloFrame {
  hello: string;
}

export interface PeerLinkHandlers {
  /** An entry a peer sent: `answer` writes a frame back to it on its link (dropped if the link has closed). */
  onEntry(linked: LinkedEntry, answer: (frame: HolderFrame) => void): void;
  /** A frame from a holder this process sent entries to. */
  onAnswer(frame: HolderFrame): void;
  /** The link to `node` closed: what this process sent on it and was not answered may never be. */
  onLinkLost(node: string): void;
}

/**
 * Where the workers one primary forks link to each other when PEER_LINKS_DIR is not set: one directory per user of
 * the host, shared by every deployment that user runs there (node ids are unique, and a worker links only to the
 * members of its own deployment).
 */
export function defaultPeerLinksDir(): string {
  return path.join(os.tmpdir(), `chorus-peers-${process.getuid?.() ?? "user"}`);
}

/**
 * Refuse a directory that another user could write to: whoever can replace a socket there can pose as a worker and
 * have its entries run. A shared temporary directory is the usual place, so the check is not optional.
 */
function assertPrivate(directory: string): void {
  const stat = fs.lstatSync(directory);
  if (!stat.isDirectory()) throw new Error(`${directory} is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && stat.uid !== uid) throw new Error(`${directory} belongs to another user (uid ${stat.uid})`);
  if (stat.mode & 0o022) throw new Error(`${directory} is writable by other users (mode ${(stat.mode & 0o777).toString(8)})`);
}

/** How long a peer whose socket could not be reached is left alone before the next try. */
const RETRY_MS = 5_000;

export class PeerLinks {
  private server?: net.Server;
  private handlers?: PeerLinkHandlers;
  /** Links this process opened, by the node they reach: `open` once the holder greeted it (HelloFrame). */
  private readonly links = new Map<string, { socket: net.Socket; open: boolean }>();
  private readonly accepted = new Set<net.Socket>();
  private readonly unreachableUntil = new Map<string, number>();
  private closed = false;

  constructor(private readonly opts: { nodeId: string; directory: string }) {}

  private socketPath(node: string): string {
    return path.join(this.opts.directory, `${node}.sock`);
  }

  /**
   * Listen for the other workers' links. A directory that cannot hold the socket costs only the links to this worker
   * (its peers' asks take the transport): logged, not fatal.
   */
  async start(handlers: PeerLinkHandlers): Promise<void> {
    this.handlers = handlers;
    const own = this.socketPath(this.opts.nodeId);
    const server = net.createServer((socket) => this.accept(socket));
    try {
      fs.mkdirSync(this.opts.directory, { recursive: true, mode: 0o700 });
      assertPrivate(this.opts.directory);
      fs.rmSync(own, { force: true });
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(own, () => {
          server.off("error", reject);
          resolve();
        });
      });
    } catch (err) {
      log.warn({ err }, `workers cannot link to this one at ${own}: their asks to it go through the transport`);
      return;
    }
    server.on("error", (err) => log.warn({ err }, "peer link server failed"));
    this.server = server;
    void this.sweep();
  }

  /**
   * Remove the sockets of workers that are gone: a worker killed never removed its own, and node ids are never reused,
   * so a socket nobody listens on (ECONNREFUSED) only collects in the directory. Best effort.
   */
  private async sweep(): Promise<void> {
    const own = `${this.opts.nodeId}.sock`;
    let names: string[];
    try {
      names = fs.readdirSync(this.opts.directory).filter((name) => name.endsWith(".sock") && name !== own);
    } catch {
      return;
    }
    for (const name of names) {
      const file = path.join(this.opts.directory, name);
      const refused = await new Promise<boolean>((resolve) => {
        const probe = net.connect(file);
        probe.once("connect", () => {
          probe.destroy();
          resolve(false);
        });
        probe.once("error", (err: NodeJS.ErrnoException) => resolve(err.code === "ECONNREFUSED"));
      });
      if (refused) fs.rmSync(file, { force: true });
    }
  }

  /**
   * Write `linked` to `node` if a link to it is open; else start opening one (unless the node was unreachable
   * lately) and answer false: the caller sends this one through the transport.
   */
  send(node: string, linked: LinkedEntry): boolean {
    if (this.closed || !this.handlers) return false;
    const link = this.links.get(node);
    if (link?.open) {
      writeFrame(link.socket, linked);
      return true;
    }
    if (!link && (this.unreachableUntil.get(node) ?? 0) <= Date.now()) this.connect(node);
    return false;
  }

  private connect(node: string): void {
    const socket = net.connect(this.socketPath(node));
    const link = { socket, open: false };
    this.links.set(node, link);
    socket.setNoDelay(true);
    readFrames(socket, (frame) => {
      if (link.open) return this.handlers!.onAnswer(frame as HolderFrame);
      if (typeof (frame as Partial<HelloFrame>).hello !== "string") throw new Error("a peer link's first frame was not a hello");
      link.open = true;
      this.unreachableUntil.delete(node);
    });
    socket.on("error", (err: NodeJS.ErrnoException) => {
      if (!link.open) this.unreachableUntil.set(node, Date.now() + RETRY_MS);
      else log.warn({ err }, `the link to worker ${node} failed`);
    });
    socket.once("close", () => {
      if (this.links.get(node) === link) this.links.delete(node);
      if (link.open) this.handlers!.onLinkLost(node);
    });
  }

  private accept(socket: net.Socket): void {
    if (this.closed) return void socket.destroy();
    this.accepted.add(socket);
    socket.setNoDelay(true);
    const answer = (frame: HolderFrame | HelloFrame) => {
      if (!socket.destroyed) writeFrame(socket, frame);
    };
    readFrames(socket, (frame) => this.handlers!.onEntry(frame as LinkedEntry, answer));
    socket.on("error", () => {}); // the asker hears the close; nothing to do here
    answer({ hello: this.opts.nodeId });
    socket.once("close", () => this.accepted.delete(socket));
  }

  /** Links this process opened and may write to now (for tests and figures). */
  openLinks(): string[] {
    return [...this.links].filter(([, link]) => link.open).map(([node]) => node);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const { socket } of this.links.values()) socket.destroy();
    for (const socket of this.accepted) socket.destroy();
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    fs.rmSync(this.socketPath(this.opts.nodeId), { force: true });
  }
}

/**
 * One JSON text and a newline (JSON never holds a raw newline). Writes in one tick go out in one system call:
 * the socket is corked at the first and uncorked after the tick, as Node's documentation suggests.
 */
function writeFrame(socket: net.Socket, frame: unknown): void {
  if (!socket.writableCorked) {
    socket.cork();
    process.nextTick(() => socket.uncork());
  }
  socket.write(`${JSON.stringify(frame)}\n`);
}

function readFrames(socket: net.Socket, onFrame: (frame: unknown) => void): void {
  socket.setEncoding("utf8");
  let partial = "";
  socket.on("data", (chunk: string) => {
    let start = 0;
    let end = chunk.indexOf("\n");
    if (end < 0) {
      partial += chunk;
      return;
    }
    let line = partial + chunk.slice(0, end);
    partial = "";
    for (;;) {
      let frame: unknown;
      try {
        frame = JSON.parse(line);
      } catch (err) {
        // Only a peer of another version could write this: drop the link rather than guess at its frames.
        log.warn({ err }, "a peer link sent a frame that is not JSON: the link is closed");
        socket.destroy();
        return;
      }
      try {
        onFrame(frame);
      } catch (err) {
        // A frame of a shape this version does not know (a worker of another version): the same.
        log.warn({ err }, "a peer link sent a frame this worker cannot handle: the link is closed");
        socket.destroy();
        return;
      }
      start = end + 1;
      end = chunk.indexOf("\n", start);
      if (end < 0) break;
      line = chunk.slice(start, end);
    }
    partial = chunk.slice(start);
  });
}
