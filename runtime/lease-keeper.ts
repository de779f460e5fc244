/**
 * Who renews a worker's shard leases and heartbeat, and what the worker knows of them: until when each lease it
 * holds is surely its own (`validUntil`), so that it acts on a shard only while that holds.
 *
 * Two keepers:
 * - `LoopLeaseKeeper` renews on the event loop, at each tick of the shard manager. For one process on the embedded
 *   database (PGlite lives in this thread): nobody else could take its shards.
 * - `ThreadLeaseKeeper` renews from a `worker_threads` thread with its own Postgres connection
 *   (lease-renewer-thread.ts), so a stalled event loop (a long GC, a busy turn, a loaded machine) neither loses the
 *   worker's leases to a live peer nor drops it from the membership. Bounded: the event loop checks in with the
 *   thread every CHECK_IN_MS, and the thread renews nothing while the loop has not checked in for `stallSeconds`,
 *   so a wedged worker loses its shards `stallSeconds + leaseSeconds` after it wedged at most. Each renewal's
 *   validity is written to memory shared with the loop, which reads it without waiting for a message: a loop that
 *   wakes from a stall past the bound sees at once that its leases may be gone, before it handles what piled up.
 */
import { Worker } from "node:worker_threads";
import type { Lease, Store } from "./store/store.ts";
import { log } from "./log.ts";

/**
 * The renewer thread built ahead of time, relative to this module's source: defined by gateway/build.ts in a built
 * server, and set as a global by the test forks (test/support/fork-setup.ts) to their run's build.
 */
declare const CHORUS_BUILT_RENEWER_THREAD: string | undefined;

/** The slot of the event loop's last check-in in the shared cells; the slot of shard `s` is `1 + s`. */
const CHECK_IN = 0;
const CHECK_IN_MS = 250;

export interface LeaseKeeper {
  /** Start keeping; resolves once the live members are known. */
  start(): Promise<void>;
  /**
   * The live members (this worker among them), renewing the held leases first if this keeper renews on the loop.
   * `fresh`: as the store has them now (a thread keeper otherwise answers with its last round's).
   */
  refresh(fresh?: boolean): Promise<Set<string>>;
  /** Keep renewing `lease`, acquired by a call made at `acquiredAt` (ms). */
  hold(lease: Lease, acquiredAt: number): void;
  /** Stop renewing the shard's lease (it is being released, or was lost). */
  forget(shard: number): void;
  /** Until when (ms since the epoch) the shard's lease is surely this worker's; 0 if it is not held or was lost. */
  validUntil(shard: number): number;
  /** Called after each renewal round that confirmed leases (a thread's rounds run between the manager's ticks). */
  onRenewed(listener: () => void): void;
  close(): Promise<void>;
}

export interface KeeperOptions {
  node: string;
  shards: number;
  leaseSeconds: number;
}

/** Renews at each `refresh`, on the event loop. */
export class LoopLeaseKeeper implements LeaseKeeper {
  private readonly held = new Map<number, Lease>();
  private readonly valid = new Map<number, number>();
  private listener?: () => void;

  constructor(
    private readonly store: Store,
    private readonly opts: KeeperOptions,
  ) {}

  async start(): Promise<void> {}

  async refresh(): Promise<Set<string>> {
    const { node, leaseSeconds } = this.opts;
    const members = await this.store.heartbeat(node, leaseSeconds);
    // One statement for every lease held: a tick's round trips are what a busy worker waits on.
    const renewing = Date.now();
    const renewed = await this.store.renewLeases([...this.held.values()], node, leaseSeconds);
    for (const shard of this.held.keys()) this.valid.set(shard, renewed.has(shard) ? renewing + leaseSeconds * 1000 : 0);
    this.listener?.();
    return members;
  }

  hold(lease: Lease, acquiredAt: number): void {
    this.held.set(lease.shard, lease);
    this.valid.set(lease.shard, acquiredAt + this.opts.leaseSeconds * 1000);
  }

  forget(shard: number): void {
    this.held.delete(shard);
    this.valid.delete(shard);
  }

  validUntil(shard: number): number {
    return this.valid.get(shard) ?? 0;
  }

  onRenewed(listener: () => void): void {
    this.listener = listener;
  }

  async close(): Promise<void> {}
}

/** What the event loop tells the renewer thread. */
export type ToRenewer =
  | { type: "hold"; shard: number; epoch: number }
  | { type: "forget"; shard: number }
  /** Run a round now (after the one running); its report answers `request`. */
  | { type: "round"; request: number }
  | { type: "stop" };

/**
 * What the renewer thread tells the event loop after each round. `answers`: the highest round request received
 * before the round began (0: none), so its members are at least as fresh as that request.
 */
export type FromRenewer = { type: "renewed"; members: string[]; answers: number } | { type: "stalled"; sinceMs: number } | { type: "stopped" };

/** What the renewer thread starts with. */
export interface RenewerData extends KeeperOptions {
  databaseUrl: string;
  stallSeconds: number;
  /** BigInt64Array cells: the loop's last check-in, then each shard's lease validity (ms since the epoch). */
  cells: SharedArrayBuffer;
}

export function sharedCells(buffer: SharedArrayBuffer) {
  const cells = new BigInt64Array(buffer);
  return {
    checkIn: () => Number(Atomics.load(cells, CHECK_IN)),
    checkInNow: () => void Atomics.store(cells, CHECK_IN, BigInt(Date.now())),
    validUntil: (shard: number) => Number(Atomics.load(cells, 1 + shard)),
    setValidUntil: (shard: number, ms: number) => void Atomics.store(cells, 1 + shard, BigInt(ms)),
  };
}

/** Renews from a thread of its own (see the module's comment). */
export class ThreadLeaseKeeper implements LeaseKeeper {
  private readonly buffer: SharedArrayBuffer;
  private readonly cells: ReturnType<typeof sharedCells>;
  private readonly held = new Map<number, Lease>();
  private members = new Set<string>();
  private thread?: Worker;
  private checkIn?: NodeJS.Timeout;
  private firstReport?: Promise<void>;
  private reported?: () => void;
  private stopping = false;
  private closed?: Promise<void>;
  private listener?: () => void;
  /** Round requests made (refresh(true)), the highest one a report has answered, and those waiting for theirs. */
  private requested = 0;
  private answered = 0;
  private readonly awaitingRound: Array<{ request: number; answered: () => void }> = [];

  constructor(private readonly data: Omit<RenewerData, "cells">) {
    this.buffer = new SharedArrayBuffer(8 * (1 + data.shards));
    this.cells = sharedCells(this.buffer);
  }

  async start(): Promise<void> {
    this.cells.checkInNow();
    this.checkIn = setInterval(this.cells.checkInNow, CHECK_IN_MS);
    this.checkIn.unref();
    this.spawn();
    // Without a first report (the database unreachable) the manager starts with itself as the only member, as a
    // tick on the loop would, and the thread keeps trying.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.firstReport, new Promise<void>((resolve) => (timer = setTimeout(resolve, this.data.leaseSeconds * 1000)))]);
    clearTimeout(timer);
  }

  private spawn(): void {
    this.firstReport = new Promise((resolve) => (this.reported = resolve));
    const workerData = { ...this.data, cells: this.buffer } satisfies RenewerData;
    let thread: Worker;
    if (typeof CHORUS_BUILT_RENEWER_THREAD === "string") {
      // The thread's own bundle: nothing to compile.
      thread = new Worker(new URL(CHORUS_BUILT_RENEWER_THREAD, import.meta.url), { workerData });
    } else {
      // Run from source, the thread's module is TypeScript: tsx compiles it there (the thread does not inherit this
      // process's loader). That is about a second of CPU at every start, which a built server saves.
      const entry = new URL("./lease-renewer-thread.ts", import.meta.url).href;
      const tsx = import.meta.resolve("tsx/esm/api");
      thread = new Worker(`import(${JSON.stringify(tsx)}).then((tsx) => tsx.tsImport(${JSON.stringify(entry)}, ${JSON.stringify(entry)}))`, { eval: true, workerData });
    }
    thread.unref();
    thread.on("message", (message: FromRenewer) => this.hear(message));
    thread.on("error", (err) => log.error({ err }, "lease renewer thread failed"));
    thread.on("exit", () => {
      if (this.stopping) return;
      // Its leases lapse unless someone renews them: a new thread takes them on (the tick renews meanwhile), after a
      // pause, so that a thread failing at start does not restart in a tight loop.
      log.error("lease renewer thread exited; starting another");
      const restart = setTimeout(() => {
        if (this.stopping) return;
        this.spawn();
        for (const lease of this.held.values()) this.post({ type: "hold", shard: lease.shard, epoch: lease.epoch });
      }, 1000);
      restart.unref();
    });
    this.thread = thread;
  }

  private hear(message: FromRenewer): void {
    if (message.type === "renewed") {
      this.members = new Set(message.members);
      this.answered = Math.max(this.answered, message.answers);
      for (let i = this.awaitingRound.length - 1; i >= 0; i--) {
        if (this.awaitingRound[i]!.request <= this.answered) this.awaitingRound.splice(i, 1)[0]!.answered();
      }
      this.reported?.();
      this.listener?.();
    } else if (message.type === "stalled") {
      log.warn(`the event loop did not check in for ${message.sinceMs} ms: leases no longer renewed until it does`);
    }
  }

  private post(message: ToRenewer): void {
    this.thread?.postMessage(message);
  }

  async refresh(fresh = false): Promise<Set<string>> {
    if (fresh && this.thread && !this.stopping) {
      const request = ++this.requested;
      let timer: NodeJS.Timeout | undefined;
      // A round that does not come (the thread restarting, or the loop stalled) leaves the last round's members.
      await new Promise<void>((resolve) => {
        this.awaitingRound.push({ request, answered: resolve });
        timer = setTimeout(resolve, this.data.leaseSeconds * 1000);
        this.post({ type: "round", request });
      });
      clearTimeout(timer);
    }
    return new Set(this.members);
  }

  hold(lease: Lease, acquiredAt: number): void {
    this.held.set(lease.shard, lease);
    this.cells.setValidUntil(lease.shard, acquiredAt + this.data.leaseSeconds * 1000);
    this.post({ type: "hold", shard: lease.shard, epoch: lease.epoch });
  }

  forget(shard: number): void {
    this.held.delete(shard);
    this.cells.setValidUntil(shard, 0);
    this.post({ type: "forget", shard });
  }

  validUntil(shard: number): number {
    return this.held.has(shard) ? this.cells.validUntil(shard) : 0;
  }

  onRenewed(listener: () => void): void {
    this.listener = listener;
  }

  /** Stop the thread (once: a second call waits for the first's). */
  close(): Promise<void> {
    this.closed ??= this.stopThread();
    return this.closed;
  }

  private async stopThread(): Promise<void> {
    this.stopping = true;
    clearInterval(this.checkIn);
    const thread = this.thread;
    if (!thread) return;
    const exited = new Promise<void>((resolve) => thread.once("exit", () => resolve()));
    this.post({ type: "stop" });
    // A thread that does not stop within a lease is ended: its renewals are what must stop.
    const timer = setTimeout(() => void thread.terminate(), this.data.leaseSeconds * 1000);
    await exited;
    clearTimeout(timer);
  }
}
