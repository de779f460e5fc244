/**
 * Shard ownership. The workers alive are those whose heartbeat in the store is younger than a lease, on any host,
 * however many; every shard has a home among them (`placeShards`: rendezvous hashing, so a worker joining or leaving
 * moves only the shards whose home changes). A worker holds its home shards, takes over the shards of a worker
 * that stopped renewing (its lease expired), and hands a shard over at its next tick when the shard's home is
 * another live worker (one that joined, or came back). Each take-over increments the shard's fencing epoch in the
 * store, so a worker that lost its lease (paused, partitioned) has every later write refused. Leases, not the
 * membership, are what keep two workers from serving one shard: a worker that misses heartbeats keeps its shards
 * until their leases expire. Heartbeats and renewals are a LeaseKeeper's (lease-keeper.ts): on Postgres a thread of
 * their own, so a stalled event loop keeps its shards for up to a bound; the manager acts on a shard only while the
 * keeper says its lease is surely held.
 *
 * Changes are announced (`peers`): a worker that joined, left or handed shards back says so, and every other worker
 * ticks at once on hearing it (reading the members afresh), so a joining worker gets its home shards and a stopping
 * worker's shards are taken over within round trips, not at the others' next tick. Best effort: a notice missed is
 * made up for by that next tick.
 */
import type { ActorSystem } from "./system.ts";
import { placeShards } from "./placement.ts";
import type { Lease, Store } from "./store/store.ts";
import { log } from "./log.ts";
import { LoopLeaseKeeper, ThreadLeaseKeeper, type LeaseKeeper } from "./lease-keeper.ts";
import type { PubSub } from "./transport/pubsub.ts";
import { channels } from "./transport/redis-keys.ts";

export interface ShardManagerOptions {
  node: string;
  shards: number;
  leaseSeconds: number;
  /** Single-process deployments take their shards at start even if a crashed predecessor's lease is live. */
  takeOverAtStart?: boolean;
  /**
   * Renew leases from a thread of their own on this Postgres database (ThreadLeaseKeeper), keeping them while the
   * event loop stalls for up to `stallSeconds`. Without it, leases are renewed at each tick, on the event loop.
   */
  renewer?: { databaseUrl: string; stallSeconds: number };
  /** The deployment's pub/sub, to announce this worker joining and leaving and hear the others do it. */
  peers?: PubSub;
}

export class ShardManager {
  private readonly held = new Map<number, Lease>();
  private readonly leases: LeaseKeeper;
  private timer?: NodeJS.Timeout;
  /** The tick running, and the one waiting to run after it (requests while one waits join it). */
  private running?: Promise<void>;
  private waiting?: { force: boolean; fresh: boolean; done: Promise<void> };
  private stopped = false;
  private readonly hearPeer = (node: string) => {
    if (node !== this.opts.node) void this.requestTick({ fresh: true });
  };
  /** The live members at the last tick, and each shard's home among them. */
  private members = "";
  private homes: string[] = [];

  constructor(
    private readonly store: Store,
    private readonly system: ActorSystem,
    private readonly opts: ShardManagerOptions,
  ) {
    const { node, shards, leaseSeconds, renewer } = opts;
    this.leases = renewer ? new ThreadLeaseKeeper({ node, shards, leaseSeconds, ...renewer }) : new LoopLeaseKeeper(store, { node, shards, leaseSeconds });
    // The system handles a shard's entries only while its lease is surely ours; entries it held back meanwhile run
    // once a renewal confirms the lease (or are left to the next holder when the shard is dropped).
    system.guardShards((shard) => this.leases.validUntil(shard) > Date.now());
    this.leases.onRenewed(() => system.leasesConfirmed());
  }

  /** Take the home shards (waiting for expired leases of a previous incarnation if need be) and keep renewing. */
  async start(): Promise<void> {
    await this.store.ensureShards(this.opts.shards);
    await this.opts.peers?.subscribe(channels.members, this.hearPeer);
    await this.leases.start();
    await this.requestTick({ force: this.opts.takeOverAtStart });
    // Our heartbeat is in the store now: the holders of our home shards hand them over when they hear of us.
    await this.announce();
    const deadline = Date.now() + this.opts.leaseSeconds * 1000 * 2;
    while (!this.holdsHomeShards() && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      await this.requestTick();
    }
    const period = Math.max(200, (this.opts.leaseSeconds * 1000) / 3);
    this.timer = setInterval(() => void this.requestTick(), period);
    this.timer.unref();
  }

  private async announce(): Promise<void> {
    await this.opts.peers?.publish(channels.members, this.opts.node).catch((err) => log.warn({ err }, "could not announce a membership change"));
  }

  /**
   * A tick after the one running (ticks never overlap). `fresh`: with the members as the store has them now, not as
   * the lease keeper last read them (a peer just joined or left).
   */
  private requestTick(opts: { force?: boolean; fresh?: boolean } = {}): Promise<void> {
    const waiting = this.waiting;
    if (waiting) {
      waiting.force ||= !!opts.force;
      waiting.fresh ||= !!opts.fresh;
      return waiting.done;
    }
    const next = { force: !!opts.force, fresh: !!opts.fresh, done: Promise.resolve() };
    next.done = (this.running ?? Promise.resolve()).then(async () => {
      this.waiting = undefined;
      const run = this.tick(next.force, next.fresh);
      this.running = run;
      await run;
      if (this.running === run) this.running = undefined;
    });
    this.waiting = next;
    return next.done;
  }

  heldShards(): number[] {
    return [...this.held.keys()];
  }

  /**
   * Whether this worker serves what it should: it holds its home shards, and every lease it holds is surely still
   * its own (renewed within the lease's lifetime: past that it may have been taken over). For /ready.
   */
  leasesCurrent(now = Date.now()): boolean {
    if (!this.holdsHomeShards()) return false;
    for (const shard of this.held.keys()) if (this.leases.validUntil(shard) <= now) return false;
    return true;
  }

  private holdsHomeShards(): boolean {
    if (this.homes.length === 0) return false;
    for (let shard = 0; shard < this.opts.shards; shard++) {
      if (this.homes[shard] === this.opts.node && !this.held.has(shard)) return false;
    }
    return true;
  }

  /** The live members as the last tick saw them (this worker among them). */
  liveMembers(): string[] {
    return this.members ? this.members.split(" ") : [];
  }

  private place(alive: Set<string>): void {
    alive.add(this.opts.node);
    const members = [...alive].sort().join(" ");
    if (members === this.members) return;
    this.members = members;
    this.homes = placeShards(this.opts.shards, alive);
    this.system.shardHomes(this.homes);
  }

  private async tick(force: boolean, fresh: boolean): Promise<void> {
    if (this.stopped) return;
    const { node, leaseSeconds, shards } = this.opts;
    try {
      this.place(await this.leases.refresh(fresh));
      let reclaimed = false;
      // A lease not renewed within its lifetime (the renewer was late, or stopped while this loop stalled past the
      // bound) is still ours unless another worker took it over: renewed here, or dropped if it was taken, all
      // together (each drop waits for the shard's turns in flight).
      const now = Date.now();
      const doubtful = [...this.held.values()].filter((lease) => this.leases.validUntil(lease.shard) <= now);
      if (doubtful.length) {
        const renewing = Date.now();
        const renewed = await this.store.renewLeases(doubtful, node, leaseSeconds);
        for (const lease of doubtful) if (renewed.has(lease.shard)) this.leases.hold(lease, renewing);
        const lost = doubtful.filter((lease) => !renewed.has(lease.shard));
        if (lost.length) log.warn(`leases taken over by another worker: shards ${lost.map((lease) => lease.shard).join(",")}`);
        await Promise.all(lost.map((lease) => this.drop(lease.shard)));
        if (renewed.size) this.system.leasesConfirmed();
      }
      let handedBack = false;
      for (const [shard, lease] of [...this.held]) {
        if (this.homes[shard] !== node) {
          await this.handBack(shard, lease);
          handedBack = true;
        }
      }
      // Their new home is waiting for them: it takes them at once on hearing this.
      if (handedBack) await this.announce();
      for (let shard = 0; shard < shards; shard++) {
        if (this.held.has(shard)) continue;
        if (this.homes[shard] !== node) continue;
        const acquiring = Date.now();
        const lease = await this.store.acquireLease(shard, node, leaseSeconds, force);
        if (!lease) continue;
        this.held.set(shard, lease);
        this.leases.hold(lease, acquiring);
        await this.system.holdShard(shard, lease.epoch, lease.reclaimed);
        reclaimed ||= !!lease.reclaimed;
      }
      // A crashed holder may have left work half-done (see StoreComponent.recover in store.ts).
      if (reclaimed) await this.store.recover();
    } catch (err) {
      if (!this.stopped) log.error({ err }, "shard manager tick failed");
    }
  }

  private async drop(shard: number): Promise<void> {
    this.held.delete(shard);
    this.leases.forget(shard);
    await this.system.dropShard(shard);
  }

  private async handBack(shard: number, lease: Lease): Promise<void> {
    await this.drop(shard);
    await this.store.releaseLease(lease, this.opts.node);
  }

  /** Graceful shutdown: finish turns, release every lease so successors need not wait for expiry. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.opts.peers?.unsubscribe(channels.members, this.hearPeer);
    await (this.waiting?.done ?? this.running);
    // No more heartbeats once stopped (below, the heartbeat is forgotten); leases held are released right after.
    await this.leases.close();
    // All shards at once, each lease released as soon as its own shard is dropped: one after another, a worker whose
    // shards each waited out the transport's drain (parked turns) took longer than its 15 s shutdown bound.
    await Promise.all(
      [...this.held].map(async ([shard, lease]) => {
        await this.drop(shard);
        await this.store.releaseLease(lease, this.opts.node).catch(() => {});
      }),
    );
    // Stop counting as alive, or the other workers leave our released home shards alone until our last heartbeat
    // ages past leaseSeconds (tick skips the shards of a live home worker), which is as slow as a crash.
    await this.store.leave(this.opts.node).catch(() => {});
    await this.announce();
  }
}
