/**
 * The in-process pub/sub: the engine of a single process (the memory transport's partner), not a test double.
 * One instance is one deployment. A message goes to the handlers subscribed when it was published, each on a
 * microtask (so a publisher never runs a handler on its own stack), in publish order.
 */
import type { Channel } from "./redis-keys.ts";
import { reportTo, runHandler, type ErrorReport, type MessageHandler, type PubSub } from "./pubsub.ts";

export class MemoryPubSub implements PubSub {
  private readonly handlers = new Map<Channel, Set<MessageHandler>>();
  private closed = false;

  constructor(private readonly onError: ErrorReport = reportTo("memory pub/sub")) {}

  async publish(channel: Channel, message: string): Promise<void> {
    const subscribed = this.handlers.get(channel);
    if (this.closed || !subscribed?.size) return;
    const handlers = [...subscribed];
    queueMicrotask(() => {
      for (const handler of handlers) {
        // Unsubscribed (or closed) since the publish: it hears nothing more.
        if (!this.closed && subscribed.has(handler)) runHandler(handler, message, channel, this.onError);
      }
    });
  }

  async subscribe(channel: Channel, handler: MessageHandler): Promise<void> {
    if (this.closed) throw new Error("pub/sub closed");
    let subscribed = this.handlers.get(channel);
    if (!subscribed) this.handlers.set(channel, (subscribed = new Set()));
    subscribed.add(handler);
  }

  async unsubscribe(channel: Channel, handler: MessageHandler): Promise<void> {
    this.handlers.get(channel)?.delete(handler);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.handlers.clear();
  }
}
