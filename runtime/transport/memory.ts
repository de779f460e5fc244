/**
 * The in-process transport: the default engine of a single process, not a test double. Entries go straight to
 * the handler (on a microtask, so a sender never runs a turn on its own stack); entries for a shard that is not
 * held wait in a per-shard buffer until it is acquired.
 */
import { randomUUID } from "node:crypto";
import type { Entry, Reply, ReplyAddress, Transport, TransportHandlers } from "./transport.ts";

export class MemoryTransport implements Transport {
  readonly nodeId = `mem-${randomUUID()}`;
  readonly redeliversAfterCrash = false;
  private handlers?: TransportHandlers;
  private readonly held = new Set<number>();
  private readonly waiting = new Map<number, Entry[]>();
  private readonly inFlight = new Map<number, Set<Promise<void>>>();
  private closed = false;

  async start(handlers: TransportHandlers): Promise<void> {
    this.handlers = handlers;
  }

  async send(shard: number, entry: Entry): Promise<void> {
    if (this.closed) throw new Error("transport closed");
    if (!this.held.has(shard) || !this.handlers) {
      let queue = this.waiting.get(shard);
      if (!queue) this.waiting.set(shard, (queue = []));
      queue.push(entry);
      return;
    }
    // Keep per-shard order: drain anything buffered before this one.
    if (this.waiting.get(shard)?.length) this.drain(shard);
    queueMicrotask(() => this.deliver(shard, entry));
  }

  async reply(to: ReplyAddress, reply: Reply): Promise<void> {
    if (to.node !== this.nodeId || this.closed) return;
    const handlers = this.handlers;
    queueMicrotask(() => handlers?.onReply(reply));
  }

  async acquire(shard: number): Promise<void> {
    this.held.add(shard);
    this.drain(shard);
  }

  async release(shard: number): Promise<void> {
    this.held.delete(shard);
    await Promise.allSettled([...(this.inFlight.get(shard) ?? [])]);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const shard of [...this.held]) await this.release(shard);
  }

  private drain(shard: number): void {
    const queue = this.waiting.get(shard);
    if (!queue?.length) return;
    this.waiting.delete(shard);
    for (const entry of queue) queueMicrotask(() => this.deliver(shard, entry));
  }

  private deliver(shard: number, entry: Entry): void {
    if (!this.handlers) return;
    if (!this.held.has(shard)) {
      // Released between send and delivery: keep it for the next holder, as Redis would.
      const queue = this.waiting.get(shard) ?? [];
      queue.push(entry);
      this.waiting.set(shard, queue);
      return;
    }
    let set = this.inFlight.get(shard);
    if (!set) this.inFlight.set(shard, (set = new Set()));
    const turn = this.handlers.onEntry(shard, entry).catch(() => {});
    set.add(turn);
    void turn.finally(() => set!.delete(turn));
  }
}
