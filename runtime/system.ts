/**
 * The actor system of one process: activations of the actors on the shards this process holds, their mailboxes
 * (one turn at a time per actor), and the asking side that reaches any actor on any process through the transport:
 * typed references (`ref(kind, key)`: ask, askTransient, tell) and `broadcast` by kind and keys (runtime/protocol.ts).
 *
 * Messages are plain JSON values. On the memory transport they are passed by reference: neither side may mutate a
 * message after sending or receiving it.
 */
import { context, propagation, trace, SpanKind, SpanStatusCode, type Context } from "@opentelemetry/api";
import { DEACTIVATION_WAIT_MS, PARKED, parseActorId, shardOf, type Actor, type ActorContext, type ActorFactory, type ActorId, type Deferred, type Fence } from "./actor.ts";
import { ChorusError, errors } from "./errors.ts";
import type { PubSub } from "./transport/pubsub.ts";
import { channels } from "./transport/redis-keys.ts";
import { ActorRef, type ActorKind, type MessageFor, type ProtocolShape, type Sender } from "./protocol.ts";
import { LeftForNextHolder, type Entry, type Reply, type ReplyAddress, type Transport } from "./transport/transport.ts";
import type { HolderFrame, LinkedEntry, LinkMode, PeerLinks } from "./transport/peer-links.ts";
import { log } from "./log.ts";
import { settledWithin } from "./settled.ts";
import { gauges, metrics, secondsSince } from "./metrics.ts";

const tracer = trace.getTracer("chorus.runtime");

export interface SystemOptions {
  transport: Transport;
  /**
   * Carries the notices (`announce`, `onNotice`). They are pub/sub by nature (every node, at most once, nothing
   * kept), so they take the seam that promises exactly that, which the assistant's socket relay shares (one
   * subscriber connection per process), and the transport only moves entries and replies.
   */
  pubsub: PubSub;
  /**
   * Direct links to the other workers of this host, for the asks that need no transport entry (see dispatch). The
   * shard manager tells the system where each shard lives (shardHomes).
   */
  peers?: PeerLinks;
  shards: number;
  kinds: Record<string, ActorFactory>;
  askTimeoutMs: number;
  /** An activation unused this long is passivated if it agrees (canPassivate). */
  idleMs?: number;
  /**
   * How long an actor's deactivate may take before its shard's hand-over goes on without it (default twice
   * DEACTIVATION_WAIT_MS, the wait actors bound their own to): a hand-over that waited forever would stop the shard
   * manager's tick, and with it every later take-over and hand-over of this process.
   */
  deactivationBoundMs?: number;
}

interface Turn {
  body: unknown;
  replyTo?: ReplyAddress;
  /** The sender's trace context: the turn's span is its child. */
  parent?: Context;
  /** The turn is answered; `held` (holdAcknowledgement) must settle before its entry is acknowledged. */
  done(error?: ChorusError, held?: Promise<unknown>): void;
}

interface Activation {
  id: ActorId;
  shard: number;
  actor: Actor;
  ctx: ActorContext;
  queue: Turn[];
  running: boolean;
  lastUsed: number;
  timers: Set<NodeJS.Timeout>;
  /** Reply address of the ask being handled by the current turn (for ctx.defer()). */
  current?: ReplyAddress;
  parked: boolean;
  /** Set by ctx.completeWhen during the current turn. */
  completion?: Promise<unknown>;
  /** Set by ctx.holdAcknowledgement during the current turn. */
  held?: Promise<unknown>;
  activated?: Promise<void>;
  /** `activated` has resolved: later drains skip awaiting it (a fan-out runs thousands of drains). */
  ready?: boolean;
}

/** The address of an ask that came over a peer link: its replies go back on that link. */
interface LinkedReplyAddress extends ReplyAddress {
  answer?: (frame: HolderFrame) => void;
}

/** An ask's entry sent over a peer link, until its holder answered what the asker waits for. */
interface SentOverLink {
  node: string;
  shard: number;
  mode: LinkMode;
  entry: Entry & { replyTo: ReplyAddress };
  /** Its final reply came. */
  answered: boolean;
  /** A held entry's promise on the caller's `held` (broadcastHeld): settled once the holder's held work has. */
  settleHeld?: (outcome?: Promise<void>) => void;
}

interface PendingAsk {
  /** The key of this ask in `pending`: a transient ask sent again gets a new one (see resendTransient). */
  corr: string;
  resolve(value: unknown): void;
  reject(err: ChorusError): void;
  timer: NodeJS.Timeout;
  /** A transient ask (askTransient): what to send again if the turn it parked may be gone. */
  transient?: { shard: number; targets: ActorId[]; body: unknown };
  /** A streaming ask (askStream): hears the interim answers; its timeout starts again at each. */
  onMore?: (value: unknown) => void;
}

export class ActorSystem {
  readonly nodeId: string;
  private readonly activations = new Map<ActorId, Activation>();
  private readonly epochs = new Map<number, number>();
  /** Held shards whose transient asks (askTransient) are queued here directly: from acquired until dropping. */
  private readonly servedHere = new Set<number>();
  /**
   * Shards whose lost entries no one will deliver: reclaimed from a crashed holder whose unacknowledged entries the
   * transport cannot deliver again, or held when the transport lost entries (onLost).
   */
  private readonly lostEntries = new Set<number>();
  private readonly pending = new Map<string, PendingAsk>();
  /** Each shard's home worker as the shard manager last placed them (empty: none known). */
  private homes: readonly string[] = [];
  /** Entries this process sent over peer links, by their reply address's corr, until answered (see sendOverLink). */
  private readonly overLinks = new Map<string, SentOverLink>();
  /** Whether this process surely still holds a shard's lease (guardShards); absent: it does while it holds it. */
  private leaseSure?: (shard: number) => boolean;
  /** Entries of shards whose lease was in doubt when they arrived, in arrival order (see guardShards). */
  private readonly heldBack = new Map<number, Array<{ entry: Entry; handled: (outcome?: Promise<void>) => void }>>();
  private corr = 0;
  private readonly noticeListeners: Array<(notice: string) => void> = [];
  private readonly hearNotice = (notice: string) => {
    for (const listener of this.noticeListeners) listener(notice);
  };
  private sweeper?: NodeJS.Timeout;
  private closing = false;
  /** The gauges this system feeds at scrape (removed at close). */
  private readonly unsample: Array<() => void> = [];

  constructor(private readonly opts: SystemOptions) {
    this.nodeId = opts.transport.nodeId;
  }

  get shardCount(): number {
    return this.opts.shards;
  }

  /** Asks of this process still waiting for their reply (what a leak would grow: the memory tests read it). */
  get waitingAsks(): number {
    return this.pending.size;
  }

  async start(): Promise<void> {
    await this.opts.transport.start({
      onEntry: (shard, entry) => this.onEntry(shard, entry),
      onReply: (reply) => this.onReply(reply),
      onLost: () => {
        // The actors first: a transient ask sent again below then finds what they made of the loss.
        this.entriesLost();
        this.resendTransient();
      },
    });
    await this.opts.pubsub.subscribe(channels.notices, this.hearNotice);
    await this.opts.pubsub.subscribe(channels.shardHolders, this.hearShardHolder);
    await this.opts.peers?.start({
      onEntry: (linked, answer) => this.onLinkedEntry(linked, answer),
      onAnswer: (frame) => this.onLinkAnswer(frame),
      onLinkLost: (node) => this.linkLost(node),
    });
    const idleMs = this.opts.idleMs ?? 5 * 60_000;
    this.sweeper = setInterval(() => void this.passivateIdle(idleMs), Math.min(idleMs, 60_000));
    this.sweeper.unref();
    this.unsample.push(
      gauges.actorsActive.add(() => this.activations.size),
      gauges.mailboxDepth.add(() => {
        let waiting = 0;
        for (const a of this.activations.values()) waiting += a.queue.length;
        return waiting;
      }),
    );
  }

  /** The actors of `kind` active in this process, for figures sampled at scrape (an actor's own gauges). */
  *actorsOf(kind: string): Iterable<Actor> {
    for (const a of this.activations.values()) if (a.ctx.kind === kind && a.ready) yield a.actor;
  }

  // ---- the asking side -------------------------------------------------------------------------------------
  // Senders go through typed references (runtime/protocol.ts); the untyped methods below are the runtime's own.

  /** The actor `kind:key`, typed by its kind's protocol. */
  ref<P extends ProtocolShape<P>>(kind: ActorKind<P>, key: string | number): ActorRef<P> {
    return new ActorRef<P>(kind.id(key), this.sender);
  }

  /**
   * Deliver `message` to the actors of `kind` with these keys, one entry per shard, and wait until every turn has
   * ended (fan-out by shard: a message for 10,000 users is one entry per shard, not 10,000).
   */
  async broadcast<P extends ProtocolShape<P>, O extends keyof P>(
    kind: ActorKind<P>,
    keys: Iterable<string | number>,
    message: MessageFor<P, O> & { op: O },
    timeoutMs = this.opts.askTimeoutMs,
  ): Promise<void> {
    await this.broadcastBy(kind, keys, message, timeoutMs);
  }

  /**
   * `broadcast`, with the turns on shards held here run here, without the transport: on Redis Streams each such
   * shard's entry otherwise costs a script call, the entry's JSON and a wake-up, at every chat message's fan-out
   * (docs/performance.md, 2026-12-04). What those entries gave is then the caller's to keep: for each such turn a
   * promise goes onto `held` (also when the broadcast fails) that settles once the work the turn held
   * (ctx.holdAcknowledgement, which its entry would have been acknowledged after) has settled, or, for work refused
   * as FENCED, once its entry is in the transport for the shard's next holder; it rejects with FENCED only if that
   * send failed. A caller in a turn holds its own entry's acknowledgement on them: a crash before then leaves that
   * entry to be delivered again, and so the broadcast made again.
   *
   * Order: such a turn may overtake entries of its shard still in the transport. None of them is one the caller
   * already waited for (every broadcast and ask is answered after its turns), so only concurrent operations, which
   * have no order between them anyway, can be reordered.
   */
  broadcastHeld<P extends ProtocolShape<P>, O extends keyof P>(
    kind: ActorKind<P>,
    keys: Iterable<string | number>,
    message: MessageFor<P, O> & { op: O },
    held: Promise<void>[],
    timeoutMs = this.opts.askTimeoutMs,
  ): Promise<void> {
    return this.broadcastBy(kind, keys, message, timeoutMs, held);
  }

  /** One request per shard of `keys`; with `held`, those to shards held here run here (see broadcastHeld). */
  private async broadcastBy(kind: ActorKind<any>, keys: Iterable<string | number>, message: unknown, timeoutMs: number, held?: Promise<void>[]): Promise<void> {
    if (this.closing) throw errors.shuttingDown();
    const byShard = new Map<number, ActorId[]>();
    for (const key of keys) {
      const id = kind.id(key);
      const shard = shardOf(id, this.opts.shards);
      const list = byShard.get(shard);
      if (list) list.push(id);
      else byShard.set(shard, [id]);
    }
    const results = await Promise.allSettled([...byShard].map(([shard, targets]) => this.request(shard, targets, message, timeoutMs, "broadcast", false, undefined, held)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) throw failed.reason;
  }

  /** What references send through: made once, so a reference is two fields and no closure. */
  private readonly sender: Sender = {
    ask: (id, body, timeoutMs) => this.ask(id, body, timeoutMs),
    askTransient: (id, body, timeoutMs) => this.askTransient(id, body, timeoutMs),
    askDirect: (id, body, timeoutMs) => this.askDirect(id, body, timeoutMs),
    askStream: (id, body, onMore, timeoutMs) => this.askStream(id, body, onMore, timeoutMs),
    tell: (id, body) => this.tell(id, body),
  };

  private ask(id: ActorId, body: unknown, timeoutMs = this.opts.askTimeoutMs): Promise<unknown> {
    if (this.closing) return Promise.reject(errors.shuttingDown());
    return this.request(shardOf(id, this.opts.shards), [id], body, timeoutMs, `ask ${parseActorId(id).kind}`);
  }

  /**
   * An ask that changes nothing durable and whose loss costs nothing when this process dies, because its asker
   * dies with it: a poll of an event queue. When this process holds the actor's shard, the turn is queued here
   * directly instead of through the transport. On Redis Streams that spares a poll three commands and two
   * process wake-ups; on 2 cores each wake-up is a context switch, and polls are the other half of a chat
   * message's trip to its readers. It may overtake an entry of the shard still in the transport: a poll then
   * parks and that entry wakes it. An operation's events are in their queues before the operation returns
   * success (every delivery is an ask), so no such entry is one the poller was already told about.
   * A transient ask may reach its actor more than once (see resendTransient): it must be idempotent.
   */
  private askTransient(id: ActorId, body: unknown, timeoutMs = this.opts.askTimeoutMs): Promise<unknown> {
    if (this.closing) return Promise.reject(errors.shuttingDown());
    const shard = shardOf(id, this.opts.shards);
    return this.request(shard, [id], body, timeoutMs, `ask ${parseActorId(id).kind}`, true);
  }

  /**
   * An ask whose turn makes what it does durable by itself, so that its transport entry would add nothing: queued here
   * directly when this process holds the actor's shard and is sure of its lease, else sent through the transport. A
   * chat send is one (its commit records the fan-out it owes until it is done: actors/chat/conversations/fan-outs.ts).
   * On Redis Streams the entry would cost a script call, the entry's JSON and a wake-up of Redis and of this process.
   * If this process dies during the turn, the ask dies with its asker; nothing is run again for it. Order: as with
   * broadcastHeld, it may overtake only entries of operations concurrent with it.
   */
  private askDirect(id: ActorId, body: unknown, timeoutMs = this.opts.askTimeoutMs): Promise<unknown> {
    if (this.closing) return Promise.reject(errors.shuttingDown());
    return this.request(shardOf(id, this.opts.shards), [id], body, timeoutMs, `ask ${parseActorId(id).kind}`, false, undefined, undefined, true);
  }

  /**
   * A transient ask whose actor may answer it more than once before its final answer (Deferred.push): each interim
   * answer goes to `onMore` as it comes, in order, and the timeout counts from the last. An open event stream is
   * one such ask instead of an ask per batch of events. Where the transient ask would be sent again (its actor's
   * holder may have changed, or Redis lost replies: resendTransient), a stream ends instead, answered `undefined`:
   * what it had heard decides where its asker starts again, which only the asker knows.
   */
  private askStream(id: ActorId, body: unknown, onMore: (value: unknown) => void, timeoutMs = this.opts.askTimeoutMs): Promise<unknown> {
    if (this.closing) return Promise.reject(errors.shuttingDown());
    const shard = shardOf(id, this.opts.shards);
    return this.request(shard, [id], body, timeoutMs, `ask ${parseActorId(id).kind}`, true, onMore);
  }

  /**
   * Send the transient asks still waiting (of `shard`, or all) again, each under a new correlation id, so that
   * only the new turn's answer counts. Their first turns may be parked on a process that died (the shard's new
   * holder announced itself) or their entry or reply lost with Redis's data (the transport's `onLost`): a parked
   * poll would otherwise wait out its whole timeout. A first turn still alive is harmless: a poll is idempotent,
   * and a newer poll of a queue finishes the older one, whose answer then goes to a correlation id nobody waits on.
   */
  private resendTransient(shard?: number): void {
    if (this.closing) return;
    for (const waiting of [...this.pending.values()]) {
      const again = waiting.transient;
      if (again && (shard === undefined || again.shard === shard)) this.sendTransientAgain(waiting);
    }
  }

  private sendTransientAgain(waiting: PendingAsk): void {
    const again = waiting.transient!;
    this.pending.delete(waiting.corr);
    this.overLinks.delete(waiting.corr);
    if (waiting.onMore) {
      clearTimeout(waiting.timer);
      waiting.resolve(undefined);
      return;
    }
    waiting.corr = `${++this.corr}`;
    this.pending.set(waiting.corr, waiting);
    this.dispatch(again.shard, { targets: again.targets, body: again.body, replyTo: { node: this.nodeId, corr: waiting.corr } }, true);
  }

  /**
   * The transport lost entries, to any shard held here: every activation that cares hears it in a turn of its
   * own, and actors activated later on these shards see `unacknowledgedLost` (until the shard is dropped).
   */
  private entriesLost(): void {
    if (this.closing) return;
    for (const shard of this.epochs.keys()) this.lostEntries.add(shard);
    for (const a of this.activations.values()) {
      if (!a.actor.entriesLost) continue;
      a.queue.push({ body: ENTRIES_LOST, done: () => {} });
      if (!a.running) void this.drain(a);
    }
  }

  /** A process took a shard's lease (ShardManager → holdShard): asks parked on its previous holder go to it. */
  private readonly hearShardHolder = (notice: string) => {
    const shard = Number(notice);
    if (Number.isInteger(shard)) this.resendTransient(shard);
  };

  /**
   * Tell every process, this one included, a short notice (best effort: see the pub/sub's guarantees). The
   * gateway uses it to make every worker drop cached credentials when an account changes.
   */
  announce(notice: string): Promise<void> {
    return this.opts.pubsub.publish(channels.notices, notice);
  }

  onNotice(listener: (notice: string) => void): void {
    this.noticeListeners.push(listener);
  }

  private async tell(id: ActorId, body: unknown): Promise<void> {
    if (this.closing) throw errors.shuttingDown();
    await this.opts.transport.send(shardOf(id, this.opts.shards), { targets: [id], body, trace: carrier() });
  }

  /**
   * `transient`: an askTransient (queued here when this process holds the shard; sent again by resendTransient).
   * `direct`: an askDirect (queued here when this process surely holds the shard).
   */
  private request<T>(
    shard: number,
    targets: ActorId[],
    body: unknown,
    timeoutMs: number,
    spanName: string,
    transient = false,
    onMore?: (value: unknown) => void,
    held?: Promise<void>[],
    direct = false,
  ): Promise<T> {
    // An ask is a remote call (RPC's CLIENT kind) whose turn, on whichever process holds the actor, is its SERVER side.
    return tracer.startActiveSpan(spanName, { kind: SpanKind.CLIENT }, (span) => {
      const corr = `${++this.corr}`;
      const result = new Promise<T>((resolve, reject) => {
        const waiting: PendingAsk = {
          corr,
          resolve: resolve as (v: unknown) => void,
          reject,
          timer: setTimeout(() => {
            this.pending.delete(waiting.corr);
            if (this.overLinks.get(waiting.corr)?.mode !== "held") this.overLinks.delete(waiting.corr);
            reject(errors.timeout(targets.length === 1 ? targets[0]! : `shard ${shard}`));
          }, timeoutMs),
          transient: transient ? { shard, targets, body } : undefined,
          onMore,
        };
        this.pending.set(corr, waiting);
      });
      this.dispatch(shard, { targets, body, replyTo: { node: this.nodeId, corr }, trace: carrier() }, transient, held, direct);
      return result.finally(() => span.end()).catch((err: ChorusError) => {
        span.setStatus({ code: SpanStatusCode.ERROR, message: err.code });
        throw err;
      });
    });
  }

  /**
   * Hand an ask's entry to the transport, or, to a shard held here, straight to its turns: when transient, when its
   * turn keeps its own work durable (`direct`: askDirect), or when its asker keeps what the entry's acknowledgement
   * would have waited for (`held`: broadcastHeld). The latter two only while the lease is sure, so that their turns
   * run now: an entry held back (see guardShards) and then dropped with the shard would be left to a next holder
   * that never gets it.
   */
  private dispatch(shard: number, entry: Entry & { replyTo: ReplyAddress }, transient: boolean, held?: Promise<void>[], direct = false): void {
    if (transient && this.servedHere.has(shard)) void this.onEntry(shard, entry).catch(() => {}); // nothing to acknowledge: no transport entry
    else if (direct && this.surelyServedHere(shard)) void this.onEntry(shard, entry).catch(() => {});
    else if (held && this.surelyServedHere(shard)) held.push(this.onEntry(shard, entry).catch((err) => this.leaveToNextHolder(shard, entry, err)));
    else if (!(transient || direct || held) || !this.sendOverLink(shard, entry, transient ? "transient" : direct ? "direct" : "held", held)) this.sendThroughTransport(shard, entry);
  }

  private sendThroughTransport(shard: number, entry: Entry & { replyTo: ReplyAddress }): Promise<void> {
    const sending = this.opts.transport.send(shard, entry);
    sending.catch((err) => this.settle({ corr: entry.replyTo.corr, error: ChorusError.wrap(err).toJSON() }));
    return sending;
  }

  // ---- peer links: the same three kinds of ask, to a shard another worker of this host holds --------------------
  //
  // The holder runs such an entry only if it would run it from its own dispatch (transient: it serves the shard;
  // direct and held: it surely does), else refuses it, and the asker sends it through the transport. What a lost link
  // leaves unanswered is made good as the transport would have: a transient ask is sent again (it is idempotent); a
  // direct ask fails with a 503, as when its holder dies during the turn with a transport entry (its work is durable
  // by itself: the gateway settles a failed send from the store); a held entry goes to the transport for the shard's
  // holder (again, if it may have run: its turns are idempotent), with its reply address while its answer is owed.

  /** Where `shard` lives, as the shard manager placed the shards over the live workers (runtime/placement.ts). */
  shardHomes(homes: readonly string[]): void {
    this.homes = homes;
  }

  private sendOverLink(shard: number, entry: Entry & { replyTo: ReplyAddress }, mode: LinkMode, held?: Promise<void>[]): boolean {
    const home = this.homes[shard];
    if (!this.opts.peers || home === undefined || home === this.nodeId) return false;
    if (!this.opts.peers.send(home, { shard, mode, entry })) return false;
    const sent: SentOverLink = { node: home, shard, mode, entry, answered: false };
    if (held) held.push(new Promise<void>((resolve) => (sent.settleHeld = resolve)));
    this.overLinks.set(entry.replyTo.corr, sent);
    metrics().peerLinkAsks("sent").inc();
    return true;
  }

  private onLinkedEntry({ shard, mode, entry }: LinkedEntry, answer: (frame: HolderFrame) => void): void {
    const corr = entry.replyTo.corr;
    const here = mode === "transient" ? this.servedHere.has(shard) : this.surelyServedHere(shard);
    if (this.closing || !here) return answer({ refused: corr });
    const replyTo: LinkedReplyAddress = { ...entry.replyTo, answer };
    const handled = this.onEntry(shard, { ...entry, replyTo });
    if (mode !== "held") handled.catch(() => {});
    else handled.then(
      () => answer({ settled: corr }),
      (err) => answer(err instanceof LeftForNextHolder ? { settled: corr, left: true } : { settled: corr }),
    );
  }

  private onLinkAnswer(frame: HolderFrame): void {
    if ("reply" in frame) {
      const { reply } = frame;
      const sent = reply.more ? undefined : this.overLinks.get(reply.corr);
      if (sent) {
        sent.answered = true;
        if (sent.mode !== "held") this.overLinks.delete(reply.corr);
      }
      this.settle(reply);
      return;
    }
    const corr = "refused" in frame ? frame.refused : frame.settled;
    const sent = this.overLinks.get(corr);
    if (!sent) return;
    this.overLinks.delete(corr);
    if ("refused" in frame) {
      metrics().peerLinkAsks("refused").inc();
      const sending = this.sendThroughTransport(sent.shard, sent.entry);
      sent.settleHeld?.(sending.catch(() => {}));
    } else {
      sent.settleHeld!(frame.left ? this.leaveToNextHolder(sent.shard, sent.entry, new LeftForNextHolder(`entry of shard ${sent.shard} left to its next holder`)) : undefined);
    }
  }

  private linkLost(node: string): void {
    for (const [corr, sent] of [...this.overLinks]) {
      if (sent.node !== node) continue;
      this.overLinks.delete(corr);
      metrics().peerLinkAsks("lost").inc();
      if (sent.mode === "transient") {
        const waiting = this.pending.get(corr);
        if (waiting?.transient && !this.closing) this.sendTransientAgain(waiting);
      } else if (sent.mode === "direct") {
        this.settle({ corr, error: errors.unavailable().toJSON() });
      } else if (sent.answered) {
        sent.settleHeld!(this.leaveToNextHolder(sent.shard, sent.entry, new LeftForNextHolder(`entry of shard ${sent.shard} sent again`)));
      } else {
        sent.settleHeld!(this.sendThroughTransport(sent.shard, sent.entry).catch(() => {}));
      }
    }
  }

  /** Replies go back the way their ask came: on its peer link, or through the transport. */
  private readonly reply = (to: LinkedReplyAddress, reply: Reply): void => {
    if (to.answer) to.answer({ reply });
    else void this.opts.transport.reply(to, reply);
  };

  /** The shard's entries are handled here, and its lease is not in doubt: a turn queued now runs now. */
  private surelyServedHere(shard: number): boolean {
    return this.servedHere.has(shard) && (!this.leaseSure || this.leaseSure(shard));
  }

  /**
   * A turn run here without the transport (broadcastHeld) whose held work was refused as FENCED: its entry goes to the
   * transport now, without its reply address (its asker has its answer), for the shard's next holder to run again.
   * Any other failure is settled as the transport would settle it: acknowledged.
   */
  private async leaveToNextHolder(shard: number, entry: Entry, err: unknown): Promise<void> {
    if (!(err instanceof LeftForNextHolder)) return;
    try {
      await this.opts.transport.send(shard, { targets: entry.targets, body: entry.body, trace: entry.trace });
    } catch (sendErr) {
      log.warn({ err: sendErr }, `an entry of shard ${shard} left to its next holder could not be sent to it`);
      throw errors.fenced(shard);
    }
  }

  private onReply(reply: Reply): void {
    this.settle(reply);
  }

  private settle(reply: Reply): void {
    const waiting = this.pending.get(reply.corr);
    if (!waiting) return; // timed out already
    if (reply.more) {
      if (!waiting.onMore) return; // only a streaming ask hears interim answers
      waiting.timer.refresh();
      waiting.onMore(reply.value);
      return;
    }
    this.pending.delete(reply.corr);
    clearTimeout(waiting.timer);
    if (reply.error) waiting.reject(ChorusError.fromJSON(reply.error));
    else waiting.resolve(reply.value);
  }

  // ---- the hosting side ------------------------------------------------------------------------------------

  /**
   * Called by the shard manager once the lease is ours: record the epoch, then start receiving. `reclaimed`: the
   * previous holder did not release the shard (it crashed).
   */
  async holdShard(shard: number, epoch: number, reclaimed = false): Promise<void> {
    this.epochs.set(shard, epoch);
    if (reclaimed && !this.opts.transport.redeliversAfterCrash) this.lostEntries.add(shard);
    await this.opts.transport.acquire(shard);
    if (this.epochs.get(shard) !== epoch) return;
    this.servedHere.add(shard);
    // Asks parked on the previous holder died with it if it crashed; their askers send them again (best effort:
    // an asker that misses this notice still has its ask's timeout).
    this.opts.pubsub.publish(channels.shardHolders, String(shard)).catch(() => {});
  }

  /**
   * Handle a shard's entries only while `leaseSure(shard)`: a process whose event loop stalled past its lease may
   * have lost the shard to another, and wakes to entries that the other now serves (it claimed them) or must serve.
   * Writes are fenced by the store; what the guard keeps from happening twice is the rest of a turn (a delivery to an
   * event queue in memory, an answer). An entry that arrives while the lease is in doubt is held back, unacknowledged:
   * it runs once a renewal confirms the lease (leasesConfirmed), or stays pending for the next holder if the shard is
   * dropped. Only on a transport that gives a dropped shard's unacknowledged entries to its next holder: on the
   * memory transport there is no other process to take a shard, nor to give held-back entries to.
   */
  guardShards(leaseSure: (shard: number) => boolean): void {
    if (this.opts.transport.redeliversAfterCrash) this.leaseSure = leaseSure;
  }

  /** A renewal confirmed leases: run the entries held back on the shards now surely held, in their order. */
  leasesConfirmed(): void {
    if (!this.heldBack.size) return;
    for (const shard of [...this.heldBack.keys()]) if (this.epochs.has(shard) && this.leaseSure!(shard)) this.runHeldBack(shard);
  }

  private runHeldBack(shard: number): void {
    const entries = this.heldBack.get(shard)!;
    this.heldBack.delete(shard);
    // Its outcome is the entry's: work refused as FENCED leaves it unacknowledged, for the shard's next holder.
    for (const { entry, handled } of entries) handled(this.onEntry(shard, entry));
  }

  /** Stop receiving the shard and drop its activations (after their current turns). */
  async dropShard(shard: number): Promise<void> {
    this.servedHere.delete(shard);
    const heldBack = this.heldBack.get(shard) ?? [];
    this.heldBack.delete(shard);
    // The transport waits for the held-back entries' ends, then leaves them pending for the next holder: ended only
    // after the release, they are not acknowledged.
    await this.opts.transport.release(shard);
    for (const { handled } of heldBack) handled();
    // Deactivated while the epoch is known: an actor may still write what it kept in memory (its fence holds until
    // the shard manager releases the lease).
    const dropping = [...this.activations.values()].filter((a) => a.shard === shard);
    await Promise.all(dropping.map((a) => this.deactivate(a)));
    this.epochs.delete(shard);
    this.lostEntries.delete(shard);
  }

  heldShards(): number[] {
    return [...this.epochs.keys()];
  }

  /** The shards this process holds, each with the epoch of its lease (what its fences carry). */
  heldShardEpochs(): ReadonlyMap<number, number> {
    return this.epochs;
  }

  /**
   * One transport entry: a turn for each target. A broadcast entry is answered once every turn has ended (with
   * the first failure, if any), counted down rather than awaited turn by turn: a fan-out to thousands of actors
   * allocates one promise, not one per actor. The entry's promise (and so its acknowledgement) waits for the work
   * its turns held with holdAcknowledgement as well; if that work was refused as FENCED, the promise rejects with
   * LeftForNextHolder and the entry stays unacknowledged for the shard's next holder.
   */
  private onEntry(shard: number, entry: Entry): Promise<void> {
    if (this.leaseSure && !this.leaseSure(shard)) {
      return new Promise<void>((handled) => {
        const entries = this.heldBack.get(shard);
        if (entries) entries.push({ entry, handled });
        else this.heldBack.set(shard, [{ entry, handled }]);
      });
    }
    // Confirmed before the renewal's notice came: what was held back goes first (turns are queued synchronously).
    if (this.heldBack.has(shard)) this.runHeldBack(shard);
    const parent = entry.trace ? propagation.extract(context.active(), entry.trace) : undefined;
    const single = entry.targets.length === 1;
    return new Promise<void>((resolve, reject) => {
      let remaining = entry.targets.length;
      let failure: ChorusError | undefined;
      let holds: Promise<unknown>[] | undefined;
      const done = (error?: ChorusError, held?: Promise<unknown>) => {
        failure ??= error;
        // Turns of a fan-out hold the same work, the batch their rows are written in: awaited once, not once per turn.
        if (held && held !== holds?.at(-1)) (holds ??= []).push(held);
        if (--remaining > 0) return;
        if (!single && entry.replyTo) this.reply(entry.replyTo, { corr: entry.replyTo.corr, error: failure?.toJSON() });
        if (!holds) return resolve();
        void Promise.allSettled(holds).then((results) => {
          // Work held for the entry refused as FENCED: the shard's next holder gets the entry and does it.
          const fenced = results.some((r) => r.status === "rejected" && ChorusError.wrap(r.reason).code === "FENCED");
          if (fenced) reject(new LeftForNextHolder(`entry of shard ${shard} left to its next holder`));
          else resolve();
        });
      };
      const replyTo = single ? entry.replyTo : undefined;
      for (const id of entry.targets) {
        const activation = this.activation(id, shard);
        activation.queue.push({ body: entry.body, replyTo, parent, done });
        if (!activation.running) void this.drain(activation);
      }
    });
  }

  private activation(id: ActorId, shard: number): Activation {
    const existing = this.activations.get(id);
    if (existing) return existing;
    const { kind, key } = parseActorId(id);
    const factory = this.opts.kinds[kind];
    const activation: Activation = {
      id,
      shard,
      queue: [],
      running: false,
      lastUsed: Date.now(),
      timers: new Set(),
      parked: false,
      actor: undefined as unknown as Actor,
      ctx: undefined as unknown as ActorContext,
    };
    activation.ctx = this.contextFor(activation, kind, key);
    if (!factory) {
      activation.actor = {
        receive: () => {
          throw errors.unknownOperation(`the actor kind '${kind}'`);
        },
      };
    } else {
      activation.actor = factory(activation.ctx);
    }
    metrics().activations(kind).inc();
    this.activations.set(id, activation);
    return activation;
  }

  private contextFor(a: Activation, kind: string, key: string): ActorContext {
    const system = this;
    return {
      id: a.id,
      kind,
      key,
      defer: <T>() => {
        const to = a.current;
        a.parked = true;
        return this.deferred<T>(to);
      },
      schedule: (ms, message) => {
        const timer = setTimeout(() => {
          a.timers.delete(timer);
          if (this.activations.get(a.id) !== a) return;
          a.queue.push({ body: message, done: () => {} });
          if (!a.running) void this.drain(a);
        }, ms);
        a.timers.add(timer);
        return () => {
          clearTimeout(timer);
          a.timers.delete(timer);
        };
      },
      completeWhen: (work) => {
        a.completion = a.completion ? Promise.all([a.completion, work]) : work;
      },
      holdAcknowledgement: (work) => {
        a.held = a.held ? Promise.allSettled([a.held, work]) : work;
      },
      get unacknowledgedLost() {
        return system.lostEntries.has(a.shard);
      },
      transportRedelivers: this.opts.transport.redeliversAfterCrash,
      fence: (): Fence => {
        const epoch = this.epochs.get(a.shard);
        if (epoch === undefined) throw errors.fenced(a.shard);
        return { shard: a.shard, epoch, node: this.nodeId };
      },
    };
  }

  private deferred<T>(to: ReplyAddress | undefined): Deferred<T> {
    return new ParkedReply<T>(this.reply, to);
  }

  private async drain(a: Activation): Promise<void> {
    a.running = true;
    try {
      if (!a.ready) {
        if (!a.activated) a.activated = a.actor.activate?.() ?? Promise.resolve();
        try {
          await a.activated;
          a.ready = true;
        } catch (err) {
          // Activation failed: fail what is queued and forget the activation so the next message retries.
          this.activations.delete(a.id);
          const error = ChorusError.wrap(err);
          for (const turn of a.queue.splice(0)) this.finishTurn(turn, undefined, error);
          return;
        }
      }
      while (a.queue.length) {
        const turn = a.queue.shift()!;
        a.current = turn.replyTo;
        a.parked = false;
        a.lastUsed = Date.now();
        // A span only for a turn whose sender traced it (entries carry no trace context when tracing is off).
        const span = turn.parent && tracer.startSpan(`turn ${a.ctx.kind}`, { kind: SpanKind.SERVER }, turn.parent);
        const started = performance.now();
        try {
          a.completion = undefined;
          a.held = undefined;
          const value = await (span ? context.with(trace.setSpan(turn.parent!, span), () => receive(a, turn.body)) : receive(a, turn.body));
          const completion = a.completion as Promise<unknown> | undefined;
          const held = a.held as Promise<unknown> | undefined;
          if (value === PARKED || a.parked) turn.done(undefined, held);
          else if (completion) {
            completion.then(
              () => this.finishTurn(turn, value, undefined, held),
              (err) => this.finishTurn(turn, undefined, ChorusError.wrap(err), held),
            );
          } else this.finishTurn(turn, value, undefined, held);
        } catch (err) {
          const error = ChorusError.wrap(err);
          if (error.status >= 500 && error.code === "INTERNAL_SERVER_ERROR") log.error({ err }, `turn of ${a.id} failed`);
          this.finishTurn(turn, undefined, error, a.held);
        } finally {
          a.current = undefined;
          a.completion = undefined;
          a.held = undefined;
          span?.end();
          metrics().turnSeconds(a.ctx.kind).observe(secondsSince(started));
        }
      }
    } finally {
      a.running = false;
    }
  }

  private finishTurn(turn: Turn, value: unknown, error?: ChorusError, held?: Promise<unknown>): void {
    if (turn.replyTo) this.reply(turn.replyTo, { corr: turn.replyTo.corr, value, error: error?.toJSON() });
    turn.done(error, held);
  }

  private async deactivate(a: Activation): Promise<void> {
    if (this.activations.get(a.id) !== a) return;
    this.activations.delete(a.id);
    for (const t of a.timers) clearTimeout(t);
    a.timers.clear();
    while (a.running) await new Promise((r) => setTimeout(r, 1));
    if (!a.actor.deactivate) return;
    const boundMs = this.opts.deactivationBoundMs ?? 2 * DEACTIVATION_WAIT_MS;
    const deactivating = a.actor.deactivate().catch((err) => log.error({ err }, `deactivating ${a.id} failed`));
    if (!(await settledWithin([deactivating], boundMs))) log.error(`deactivating ${a.id} did not end in ${boundMs} ms: its shard goes on without it`);
  }

  private async passivateIdle(idleMs: number): Promise<void> {
    const now = Date.now();
    for (const a of [...this.activations.values()]) {
      if (a.running || a.queue.length || now - a.lastUsed < idleMs) continue;
      if (a.actor.canPassivate && !a.actor.canPassivate()) continue;
      await this.deactivate(a);
    }
  }

  /** Stop asking, finish the turns in progress, drop every activation. The shard manager releases leases. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.sweeper) clearInterval(this.sweeper);
    for (const remove of this.unsample.splice(0)) remove();
    await this.opts.pubsub.unsubscribe(channels.notices, this.hearNotice);
    await this.opts.pubsub.unsubscribe(channels.shardHolders, this.hearShardHolder);
    await Promise.all(this.heldShards().map((shard) => this.dropShard(shard)));
    await this.opts.peers?.close();
    for (const [corr, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(errors.shuttingDown());
      this.pending.delete(corr);
    }
  }
}

/**
 * The reply handle of a parked ask (Deferred). A class rather than an object of closures: one is made per parked
 * poll, and tsx names every closure it compiles (a defineProperty per creation; see storedMessage in
 * actors/chat/users/user.ts). No getters either: see UwsRequest in gateway/http.ts.
 */
class ParkedReply<T> implements Deferred<T> {
  private settled = false;
  constructor(
    private readonly reply: (to: ReplyAddress, reply: Reply) => void,
    private readonly to: ReplyAddress | undefined,
  ) {}
  resolve(value: T): void {
    if (this.settled) return;
    this.settled = true;
    if (this.to) this.reply(this.to, { corr: this.to.corr, value });
  }
  reject(error: ChorusError): void {
    if (this.settled) return;
    this.settled = true;
    if (this.to) this.reply(this.to, { corr: this.to.corr, error: error.toJSON() });
  }
  push(value: T): void {
    if (this.settled || !this.to) return;
    this.reply(this.to, { corr: this.to.corr, value, more: true });
  }
}

/** The body of the turn in which an actor hears that the transport lost entries of its shard (entriesLost). */
const ENTRIES_LOST: unique symbol = Symbol("entries lost");

function receive(a: Activation, body: unknown): unknown {
  return body === ENTRIES_LOST ? a.actor.entriesLost!() : a.actor.receive(body, a.ctx);
}

function carrier(): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  propagation.inject(context.active(), out);
  return Object.keys(out).length ? out : undefined;
}
