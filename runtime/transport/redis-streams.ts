/**
 * The Redis Streams transport: the engine of many workers. Every Redis key it touches is built by `redisKeys`
 * (redis-keys.ts), and every multi-step Redis operation is one of the named Lua scripts below.
 *
 * Shard entries: one stream per shard (`<prefix>:shard:<n>`) with one consumer group (`workers`); the consumer
 * name is this node's id. Sends are batched per shard over one turn of the event loop (`send`, `TurnBatches`). To a
 * shard held elsewhere a batch is XADDs in one write; to a shard this node holds it is the script `appendAndTake`,
 * which also reads the new entries (with any other unread ones) for this consumer, so that they are handed over
 * from its answer instead of waking the shard's blocked read, which would then have to read again; the two paths
 * are merged back into stream order (see `Waiting`). For each acquired shard:
 *   1. `acquire` XAUTOCLAIMs, min-idle 0, the group's whole pending list (what the previous holder left
 *      unacknowledged; `acquire` is only called once the shard's lease, with its fencing epoch, was taken over) and
 *      delivers it before resolving; then a `while (!closing)` consumer loop starts on its own connection:
 *   2. XREADGROUP `>` with BLOCK and COUNT, delivering each batch;
 *   3. every `claimIdleMs / 2`, XAUTOCLAIM again with min-idle `claimIdleMs`: entries that a stale holder (one that
 *      has not noticed it lost the lease yet) read after our takeover, or that a read of ours lost to a broken
 *      connection, would otherwise sit in a pending list until the next takeover;
 *   4. every `trimIntervalMs`, trim the stream below what every group has acknowledged (script `trimAcked`).
 * After any error the loop backs off, re-creates the group if Redis lost it (a restarted Redis has none) and
 * does step 1 again (a read whose reply was lost still moved entries into our pending list); entries already in
 * flight here are never delivered twice by such a claim.
 * Entries are handed to `onEntry` in stream order without awaiting each (up to `maxInFlight` per shard); an entry
 * is XACKed (batched over `ackDelayMs`) when its promise settles, and only if this node still owns it in
 * the pending list (script `ackOwned`): once the next holder has claimed an entry, a late settle here must not take
 * it away from it. `release` waits up to `drainTimeoutMs` for the turns in flight, then abandons the rest: they
 * stay pending, and a late settle no longer acknowledges them.
 *
 * Replies: one stream per node (`<prefix>:reply:<nodeId>`), read by this node with plain XREAD BLOCK from the
 * last id seen (at most once: an id is never read twice). The node creates its stream at `start` and refreshes a
 * short TTL while its loop runs, so the stream of a dead node vanishes; `reply` appends (MAXLEN ~) only while the
 * target's stream exists (script `replyIfAlive`), so replies to a node that is gone are dropped at the source
 * instead of re-creating its stream. A reply to this node itself does not go through Redis. The refresh runs at
 * least once per read's wait: finding its own stream gone tells the node that Redis lost its data, and with it
 * the replies dropped meanwhile and entries not yet read (`onLost`).
 *
 * Connections. One non-blocking command connection for XADD, XACK, group creation and the scripts; one blocking
 * connection per held shard loop; one for the reply loop. Why one per shard
 * rather than a single multiplexed XREADGROUP over all held streams: shards are few per worker (16 in all by
 * default), each loop keeps its own claim/read/trim phase, its own back-off and its own watchdog, and `release`
 * interrupts exactly one loop by closing its connection — a shared reader would need CLIENT UNBLOCK on every acquire
 * and release and would stall every shard behind one slow reconnect. Every blocking or loop-side call runs under a
 * watchdog (BLOCK + grace): if Redis has not answered by then the connection is thrown away and replaced (after a
 * reconnect a blocking read can hang forever), and the loop re-claims its pending list, since a read whose reply was
 * lost still moved entries into our pending list. (ioredis 6's own `blockingTimeout` is not used: it resolves the
 * read with null but keeps the connection, whose late reply would then be lost.) Connections are opened by
 * `connectRedis` (redis-connection.ts), which makes them speak RESP2.
 *
 * Trimming (Redis 7.0: XTRIM/MAXLEN ignore pending entries, and XAUTOCLAIM silently drops trimmed ones): only the
 * shard's holder trims, with `XTRIM MINID ~ floor` where floor = the lowest pending id over all groups, or a
 * group's last-delivered id when nothing is pending there; entries below it are acknowledged by every group.
 */
import { createHash, randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import type { RedisClient } from "./redis-connection.ts";
import { connectRedis } from "./redis-connection.ts";
import { redisKeys, type RedisKeys } from "./redis-keys.ts";
import { LeftForNextHolder, type Entry, type Reply, type ReplyAddress, type Transport, type TransportHandlers } from "./transport.ts";
import { log } from "../log.ts";
import { settledWithin } from "../settled.ts";

export interface RedisStreamsOptions {
  url: string;
  /** Prefix of every key (tests use a unique one per run). */
  prefix: string;
  /** This process's reply address and consumer name; unique per process start. */
  nodeId?: string;
  /** How long one blocking read waits (ms). Default 2000. */
  blockMs?: number;
  /** Entries pending this long on another consumer are claimed by the holder (ms). Default 30000. */
  claimIdleMs?: number;
  /** How long release/close wait for in-flight turns before abandoning them (left pending for the next holder). */
  drainTimeoutMs?: number;
  /** How often a shard loop trims its stream below what is acknowledged (ms). Default 1000. */
  trimIntervalMs?: number;
  /** Entries read per XREADGROUP / XAUTOCLAIM. Default 256. */
  batch?: number;
  /** How long a settled entry's XACK waits to be batched with others (ms). Default 10. */
  ackDelayMs?: number;
  /** Delivered-but-unacknowledged entries per shard before the loop stops reading (back-pressure). Default 4096. */
  maxInFlight?: number;
  /** Approximate cap of a reply stream (MAXLEN ~). Default 10000. */
  replyMaxLen?: number;
  /** Where loop errors go (they are retried). Default: the log (runtime/log.ts). */
  onError?: (err: unknown, where: string) => void;
}

/** The consumer group every worker joins on every shard stream. */
export const GROUP = "workers";
/** Field names inside stream entries: one JSON-encoded value each. */
const ENTRY_FIELD = "e";
const REPLY_FIELD = "r";
const HELLO_FIELD = "hello";

/** A named Lua script run by EVALSHA, falling back to EVAL when the server does not know it yet. */
class LuaScript {
  readonly sha: string;
  constructor(
    readonly name: string,
    readonly source: string,
  ) {
    this.sha = createHash("sha1").update(source).digest("hex");
  }
  async run(conn: RedisClient, keys: string[], args: (string | number)[]): Promise<unknown> {
    try {
      return await conn.call("EVALSHA", this.sha, keys.length, ...keys, ...args);
    } catch (err) {
      if (!String((err as Error)?.message ?? "").startsWith("NOSCRIPT")) throw err;
      return conn.call("EVAL", this.source, keys.length, ...keys, ...args);
    }
  }
}

/**
 * XACK the ids that are still pending for this consumer; ids claimed by another holder are left to it. One XPENDING
 * over the ids' range (paged) and one XACK, not a pair per id: a batch of a hundred ids cost Redis 200 commands.
 */
const ackOwned = new LuaScript(
  "ackOwned",
  `-- KEYS[1] shard stream; ARGV[1] group; ARGV[2] consumer; ARGV[3] lowest id; ARGV[4] highest id; ARGV[5..] entry ids
local mine = {}
local start = ARGV[3]
while true do
  local page = redis.call('XPENDING', KEYS[1], ARGV[1], start, ARGV[4], 1000, ARGV[2])
  for _, p in ipairs(page) do mine[p[1]] = true end
  if #page < 1000 then break end
  start = '(' .. page[#page][1]
end
local ids = {}
for i = 5, #ARGV do
  if mine[ARGV[i]] then ids[#ids + 1] = ARGV[i] end
end
if #ids == 0 then return 0 end
return redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))`,
);

/**
 * Trim a shard stream below what every group has acknowledged, and forget other consumers of our group that
 * hold nothing and have been idle for a while (one is left behind by every process start).
 */
const trimAcked = new LuaScript(
  "trimAcked",
  `-- KEYS[1] shard stream; ARGV[1] group; ARGV[2] this consumer; ARGV[3] idle ms before an empty consumer is dropped
local function before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
local function field(list, name)
  for i = 1, #list, 2 do
    if list[i] == name then return list[i + 1] end
  end
  return nil
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local floor = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local candidate = field(g, 'last-delivered-id')
  local summary = redis.call('XPENDING', KEYS[1], field(g, 'name'))
  if summary[1] > 0 then candidate = summary[2] end
  if floor == nil or before(candidate, floor) then floor = candidate end
end
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local name = field(c, 'name')
  if name ~= ARGV[2] and field(c, 'pending') == 0 and field(c, 'idle') >= tonumber(ARGV[3]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
  end
end
if floor == nil then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', '~', floor)`,
);

/**
 * Append entries to a shard stream this node holds and, in the same step, take for this consumer every entry of
 * the stream not yet read by the group, the new ones included (see `appendAndTake`). Answers the entries' ids, the
 * group's last-delivered id before the take, and the entries taken, those it just appended as their id alone (the
 * caller has them: their payloads would only travel back to be dropped). Without the group (Redis lost it) it only
 * appends.
 */
const appendAndTake = new LuaScript(
  "appendAndTake",
  `-- KEYS[1] shard stream; ARGV[1] group; ARGV[2] consumer; ARGV[3] most entries to take; ARGV[4..] entry JSONs
local after = nil
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local name, last = nil, nil
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
    end
    if name == ARGV[1] then after = last end
  end
end
local ids, mine = {}, {}
for i = 4, #ARGV do
  local id = redis.call('XADD', KEYS[1], '*', '${ENTRY_FIELD}', ARGV[i])
  ids[#ids + 1] = id
  mine[id] = true
end
if not after then return {ids} end
local read = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
if not read then return {ids, after, {}} end
local taken = read[1][2]
for i = 1, #taken do
  if mine[taken[i][1]] then taken[i] = {taken[i][1]} end
end
return {ids, after, taken}`,
);

/** Append replies only while the target node's reply stream exists (it keeps it alive while it runs). */
const replyIfAlive = new LuaScript(
  "replyIfAlive",
  `-- KEYS[1] reply stream; ARGV[1] approximate max length; ARGV[2..] reply JSON
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
for i = 2, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', '${REPLY_FIELD}', ARGV[i])
end
return 1`,
);

class WatchdogTimeout extends Error {
  constructor(what: string, ms: number) {
    super(`Redis did not answer ${what} within ${ms} ms; connection replaced`);
    this.name = "WatchdogTimeout";
  }
}

/**
 * One connection dedicated to one loop. Every call races a watchdog; when it fires the connection is dropped and
 * a fresh one opened, so a read left hanging by a half-dead socket cannot stall the loop.
 */
class LoopConnection {
  private conn: RedisClient;
  private stopped = false;

  constructor(private readonly open: () => RedisClient) {
    this.conn = open();
  }

  async call(timeoutMs: number, command: string, ...args: (string | number)[]): Promise<unknown> {
    if (this.stopped) throw new Error("loop connection stopped");
    const conn = this.conn;
    let timer: NodeJS.Timeout | undefined;
    const watchdog = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new WatchdogTimeout(command, timeoutMs)), timeoutMs);
    });
    try {
      return await Promise.race([conn.call(command, ...args), watchdog]);
    } catch (err) {
      if (err instanceof WatchdogTimeout && !this.stopped && this.conn === conn) {
        conn.disconnect();
        this.conn = this.open();
      }
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  script(script: LuaScript, timeoutMs: number, keys: string[], args: (string | number)[]): Promise<unknown> {
    // EVALSHA first, EVAL on NOSCRIPT, both under the watchdog.
    return this.call(timeoutMs, "EVALSHA", script.sha, keys.length, ...keys, ...args).catch((err) => {
      if (!String((err as Error)?.message ?? "").startsWith("NOSCRIPT")) throw err;
      return this.call(timeoutMs, "EVAL", script.source, keys.length, ...keys, ...args);
    });
  }

  /** Interrupts a blocked call (it rejects) and closes the connection for good. */
  stop(): void {
    this.stopped = true;
    this.conn.disconnect();
  }
}

type RawEntry = [id: string, fields: string[]] | null;

interface ShardLoop {
  shard: number;
  key: string;
  conn: LoopConnection;
  stopping: boolean;
  /** Set when release gave up waiting: late settles of this loop's entries no longer acknowledge anything. */
  abandoned: boolean;
  /** Ids delivered here whose acknowledgement is not done yet (a claim must not deliver them a second time). */
  unacked: Set<string>;
  /** One promise per delivered entry: its turn settled and its XACK done. */
  turns: Set<Promise<void>>;
  acks: string[];
  ackFlush?: Promise<void>;
  /** Sends the queued acknowledgements now instead of when the batching timer fires. */
  flushAcks?: () => void;
  /** The highest entry id handed to onEntry here (or settled by a previous holder, as of acquire). */
  lastHanded: string;
  /** Entries read or taken but not handed over yet, in stream order (see handOver). */
  waiting: Waiting[];
  /** appendAndTake scripts this loop's shard sent, and how many of them have answered (in order: one connection). */
  takesSent: number;
  takesAnswered: number;
  waitTimer?: NodeJS.Timeout;
  /** Wakes the loop from a back-pressure wait (a turn finished, or release). */
  wakeRoom?: () => void;
  /** Cuts a back-off sleep short (release). */
  wakePause?: () => void;
  loop?: Promise<void>;
  releasing?: Promise<void>;
}

/**
 * An entry waiting to be handed over in stream order. A shard's entries reach this node by two paths: the loop's
 * reads, and the takes of its own sends (appendAndTake). Either may answer first, so an entry waits until nothing
 * older can still arrive: a read's entries until every take sent before they arrived has answered (a take may
 * have run before the read); a taken entry until `after`, the entry the group had read before it, is handed over
 * (a read of the loop's may have been answered with it and still be on its way).
 */
interface Waiting {
  id: string;
  fields: string[];
  /** The entry itself, when this node sent it (a take of its own send): no need to parse `fields`. */
  entry?: Entry;
  /** Read: hand over once this many takes have answered. */
  takes?: number;
  /** Taken: hand over once this entry (or a later one) has been handed over. */
  after?: string;
}

/** Payloads to one destination queued in one turn of the event loop: written, and accepted or refused, together. */
interface OutgoingBatch<T> {
  items: T[];
  accepted: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
}

/**
 * Payloads queued by destination during one turn of the event loop and written at its end: `schedule` is called at
 * a turn's first payload, and whoever it schedules calls `flush` (the transport's corked turn: see flushTurn).
 */
class TurnBatches<K, T> {
  private readonly batches = new Map<K, OutgoingBatch<T>>();

  constructor(
    private readonly write: (to: K, items: T[]) => Promise<void>,
    private readonly schedule: () => void,
  ) {}

  add(to: K, item: T): Promise<void> {
    let batch = this.batches.get(to);
    if (!batch) {
      let resolve!: () => void;
      let reject!: (err: unknown) => void;
      const accepted = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
      batch = { items: [], accepted, resolve, reject };
      this.batches.set(to, batch);
      if (this.batches.size === 1) this.schedule();
    }
    batch.items.push(item);
    return batch.accepted;
  }

  /** Writes every batch queued; each resolves its senders once Redis accepted it. */
  readonly flush = (): void => {
    if (this.batches.size === 0) return;
    const batches = [...this.batches];
    this.batches.clear();
    for (const [to, batch] of batches) this.write(to, batch.items).then(batch.resolve, batch.reject);
  };
}

const NOOP = () => {};
/**
 * How long a taken entry waits for its `after` before going anyway: the entry it waits for went to another
 * consumer (a holder that has not noticed it lost the shard), and the order across a change of holder is not kept.
 */
const AFTER_WAIT_MS = 1000;

export class RedisStreamsTransport implements Transport {
  readonly nodeId: string;
  readonly redeliversAfterCrash = true;
  private readonly url: string;
  private readonly keys: RedisKeys;
  private readonly blockMs: number;
  private readonly claimIdleMs: number;
  private readonly drainTimeoutMs: number;
  private readonly trimIntervalMs: number;
  private readonly batch: number;
  private readonly maxInFlight: number;
  private readonly ackDelayMs: number;
  private readonly replyMaxLen: number;
  private readonly onError: (err: unknown, where: string) => void;
  /** Grace added to BLOCK before the watchdog replaces a connection; also the bound of a non-blocking call. */
  private readonly callTimeoutMs: number;
  private readonly replyTtlMs: number;
  /** How often the reply loop refreshes its stream's TTL, and so checks that Redis still has it. */
  private readonly replyTouchMs: number;

  private readonly cmd: RedisClient;
  private handlers?: TransportHandlers;
  private readonly shards = new Map<number, ShardLoop>();
  /**
   * Entries and replies sent in this turn of the event loop, by shard and by node, not written yet: every send to a
   * shard in one turn (the requests of one read of the sockets, the fan-outs of one group commit) goes in one
   * write and one script call, and the replies to a node in one script call.
   */
  private readonly outgoing = new TurnBatches<number, Entry>(
    (shard, entries) => this.sendBatch(shard, entries),
    () => this.scheduleTurn(),
  );
  private readonly replies = new TurnBatches<string, Reply>(
    (node, replies) => this.replyBatch(node, replies),
    () => this.scheduleTurn(),
  );
  private turnScheduled = false;
  /** Shards with acknowledgements queued, flushed together when the batching timer fires (`ackTimer`). */
  private readonly ackShards = new Set<ShardLoop>();
  private ackTimer?: NodeJS.Timeout;
  private replyConn?: LoopConnection;
  private replyLoop?: Promise<void>;
  private replyLast = "0-0";
  private replyWake?: () => void;
  private closing = false;
  private closed?: Promise<void>;

  constructor(options: RedisStreamsOptions) {
    this.url = options.url;
    this.keys = redisKeys(options.prefix);
    this.nodeId = options.nodeId ?? `node-${randomUUID()}`;
    this.blockMs = Math.max(10, options.blockMs ?? 2000);
    this.claimIdleMs = Math.max(0, options.claimIdleMs ?? 30_000);
    this.drainTimeoutMs = Math.max(0, options.drainTimeoutMs ?? 5000);
    this.trimIntervalMs = Math.max(10, options.trimIntervalMs ?? 1000);
    this.batch = Math.max(1, options.batch ?? 256);
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 4096);
    this.ackDelayMs = Math.max(0, options.ackDelayMs ?? 10);
    this.replyMaxLen = Math.max(100, options.replyMaxLen ?? 10_000);
    this.onError = options.onError ?? ((err, where) => log.error({ err }, `redis-streams ${this.nodeId}: ${where} failed`));
    this.callTimeoutMs = Math.max(1000, this.blockMs);
    this.replyTtlMs = Math.max(30_000, 10 * this.blockMs);
    // Every read's wait at most: a lost stream (see keepReplyStream) is noticed within two reads, not a quarter TTL.
    this.replyTouchMs = Math.min(this.replyTtlMs / 4, this.blockMs);
    this.cmd = this.connect("cmd", false);
  }

  async start(handlers: TransportHandlers): Promise<void> {
    if (this.closing) throw new Error("transport closed");
    if (this.handlers) throw new Error("transport already started");
    this.handlers = handlers;
    // Create our reply stream now: replies are only appended to streams that exist, and reading from the id of
    // this first entry (rather than `$`) loses nothing that arrives between two reads.
    this.replyLast = await this.createReplyStream();
    await this.cmd.call("SCRIPT", "LOAD", appendAndTake.source);
    this.replyConn = new LoopConnection(() => this.connect("reply", true));
    this.replyLoop = this.runReplies(this.replyConn);
  }

  send(shard: number, entry: Entry): Promise<void> {
    if (this.closing) return Promise.reject(new Error("transport closed"));
    return this.outgoing.add(shard, entry);
  }

  private scheduleTurn(): void {
    if (this.turnScheduled) return;
    this.turnScheduled = true;
    setImmediate(this.flushTurn);
  }

  /** Everything sent and replied in this turn, to every shard and node, in one write to Redis (see `corked`). */
  private readonly flushTurn = (): void => {
    this.turnScheduled = false;
    this.corked(() => {
      this.outgoing.flush();
      this.replies.flush();
    });
  };

  /**
   * Run `issue`, whose commands on the command connection then leave in one write (one writev) instead of one write
   * each: a turn's script calls and XADDs to several shards, replies to other nodes, the acknowledgements of every
   * shard. Each write is a system call, and one that wakes Redis; on a machine with fewer cores than busy processes
   * a write that wakes Redis often hands it the core there and then, so the writes of a turn cost Node a context
   * switch each (docs/performance.md, 2026-11-28: two workers). ioredis writes a command to the socket as it is
   * issued when connected (offline, it queues it, and corking changes nothing); the socket's cork keeps the order.
   * Not on a cluster client: its commands go to several sockets.
   */
  private corked(issue: () => void): void {
    const socket = this.cmd instanceof Redis ? this.cmd.stream : undefined;
    const cork = socket?.writable === true;
    if (cork) socket!.cork();
    try {
      issue();
    } finally {
      if (cork) socket!.uncork();
    }
  }

  /** A batch of entries to one shard: taken at once when the shard is held here, else appended for its holder. */
  private sendBatch(shard: number, entries: Entry[]): Promise<void> {
    const s = this.shards.get(shard);
    if (s?.loop && !s.stopping) return this.appendAndTake(s, entries);
    return this.append(shard, entries.map((entry) => JSON.stringify(entry)));
  }

  /** Entries to a shard held elsewhere (or by nobody): XADDs in one write; its holder's loop reads them. */
  private async append(shard: number, payloads: string[]): Promise<void> {
    const key = this.keys.shard(shard);
    if (payloads.length === 1) {
      await this.cmd.call("XADD", key, "*", ENTRY_FIELD, payloads[0]!);
      return;
    }
    const pipeline = this.cmd.pipeline();
    for (const payload of payloads) pipeline.call("XADD", key, "*", ENTRY_FIELD, payload);
    for (const [err] of (await pipeline.exec()) ?? []) if (err) throw err;
  }

  /**
   * Entries to a shard held here: append them and, in the same script, take for this consumer every entry of the
   * stream not yet read by the group (theirs included), and hand them over from the answer. The plain path (XADD,
   * then the loop's blocked XREADGROUP answers, then it reads again) costs two commands and one more wake-up of
   * this process, at each hop of a chat message (gateway → channel → user). The group's last-delivered id, read in
   * the script before the take, says which entry the taken ones must wait for (see Waiting). One script call for
   * the batch rather than a MULTI … EXEC of the same commands: Redis runs the transaction for less (5 µs a send
   * against 7.5 at 50 in flight) but ioredis's pipeline of five commands cost Node more than that saved
   * (docs/performance.md, 2026-11-28).
   */
  private async appendAndTake(s: ShardLoop, sent: Entry[]): Promise<void> {
    s.takesSent++;
    // The entries taken: this call's own come back as their id alone (the script's comment).
    let answer: [string[], string?, Array<[id: string, fields?: string[]] | null>?];
    try {
      // Takes answer in the order they were sent (one connection; the script is loaded at start, so no NOSCRIPT
      // retry reorders them), which is what counting them relies on.
      const args: (string | number)[] = [GROUP, this.nodeId, Math.max(this.batch, sent.length)];
      for (const entry of sent) args.push(JSON.stringify(entry));
      answer = (await appendAndTake.run(this.cmd, [s.key], args)) as typeof answer;
    } catch (err) {
      void this.recoverTaken(s).catch((recoverErr) => this.onError(recoverErr, `recovering takes on shard ${s.shard}`));
      throw err;
    } finally {
      s.takesAnswered++;
    }
    const [ids, after, entries] = answer;
    const own = new Map<string, Entry>();
    for (let i = 0; i < sent.length; i++) own.set(ids[i]!, sent[i]!);
    if (after === undefined || !entries || this.shards.get(s.shard) !== s || s.stopping) return this.handOver(s);
    let previous = after;
    for (const raw of entries) {
      if (!raw) continue;
      this.queueInOrder(s, { id: raw[0], fields: raw[1] ?? [], after: previous, entry: own.get(raw[0]) });
      previous = raw[0];
    }
    this.handOver(s);
  }

  /**
   * A take that failed without an answer (a command timeout on an overloaded Redis, a dropped connection) may still
   * have run: its entries are then pending for this node and handed to nobody, while the entries taken after them
   * wait for them (`after`) until AFTER_WAIT_MS, then go first, and the lost ones come much later with a claim
   * (claimIdleMs): out of order. So this node's pending entries of the shard are read again now and handed over in
   * stream order with the rest. Skipped: entries handed over already (their turn or its acknowledgement not done:
   * `unacked`) and those already waiting. The send itself still fails, and its sender may send again: a duplicate,
   * which at-least-once delivery allows, rather than a reordering, which the contract does not.
   */
  private async recoverTaken(s: ShardLoop): Promise<void> {
    let from = "0-0";
    for (;;) {
      const res = (await this.cmd.call("XREADGROUP", "GROUP", GROUP, this.nodeId, "COUNT", this.batch, "STREAMS", s.key, from)) as [string, RawEntry[]][] | null;
      if (this.shards.get(s.shard) !== s || s.stopping) return;
      const entries = res?.[0]?.[1] ?? [];
      const waiting = new Set(s.waiting.map((w) => w.id));
      for (const raw of entries) {
        // An entry trimmed since has no fields: nothing to hand over.
        if (raw?.[1] && !s.unacked.has(raw[0]) && !waiting.has(raw[0])) this.queueInOrder(s, { id: raw[0], fields: raw[1] });
      }
      if (entries.length < this.batch) break;
      from = entries.at(-1)![0];
    }
    this.handOver(s);
  }

  async reply(to: ReplyAddress, reply: Reply): Promise<void> {
    if (this.closing) return;
    if (to.node === this.nodeId) {
      const handlers = this.handlers;
      queueMicrotask(() => this.safeReply(handlers, reply));
      return;
    }
    await this.replies.add(to.node, reply);
  }

  private async replyBatch(node: string, replies: Reply[]): Promise<void> {
    try {
      await replyIfAlive.run(this.cmd, [this.keys.reply(node)], [this.replyMaxLen, ...replies.map((reply) => JSON.stringify(reply))]);
    } catch (err) {
      // Replies are best effort (see Transport.reply): their askers time out. Thrown on, the failure would reach
      // callers that do not wait for a reply's fate, and end the process as an unhandled rejection.
      this.onError(err, `a batch of ${replies.length} replies to ${node}`);
    }
  }

  /**
   * Over the shards held here: entries read but not acknowledged (`pending`) and entries not yet read by the group
   * (`lag`, as XINFO GROUPS tells it: Redis 7.0 or later). For metrics at scrape: one command per held shard.
   */
  async backlog(): Promise<{ pending: number; lag: number }> {
    const replies = await Promise.all([...this.shards.values()].map((s) => this.cmd.call("XINFO", "GROUPS", s.key) as Promise<unknown[][]>));
    let pending = 0;
    let lag = 0;
    for (const groups of replies) {
      for (const fields of groups) {
        const group = new Map<string, unknown>();
        for (let i = 0; i + 1 < fields.length; i += 2) group.set(String(fields[i]), fields[i + 1]);
        if (group.get("name") !== GROUP) continue;
        pending += Number(group.get("pending") ?? 0);
        lag += Number(group.get("lag") ?? 0);
      }
    }
    return { pending, lag };
  }

  async acquire(shard: number): Promise<void> {
    if (this.closing) throw new Error("transport closed");
    if (!this.handlers) throw new Error("start() the transport before acquiring shards");
    const current = this.shards.get(shard);
    if (current && !current.stopping) return;
    if (current) await current.releasing;
    if (this.shards.has(shard)) return; // a concurrent acquire got there first

    const key = this.keys.shard(shard);
    const s: ShardLoop = {
      shard,
      key,
      conn: new LoopConnection(() => this.connect(`shard:${shard}`, true)),
      stopping: false,
      abandoned: false,
      unacked: new Set(),
      turns: new Set(),
      acks: [],
      lastHanded: "0-0",
      waiting: [],
      takesSent: 0,
      takesAnswered: 0,
    };
    this.shards.set(shard, s);
    try {
      // Take over what the previous holder left before resolving: once acquire resolves, those entries are ours.
      await this.ensureGroup(key);
      await this.claim(s, 0);
      await this.catchUpHanded(s);
    } catch (err) {
      if (this.shards.get(shard) === s) this.shards.delete(shard);
      s.stopping = true;
      s.conn.stop();
      if (s.releasing) return; // released while acquiring
      throw err;
    }
    s.loop = this.runShard(s);
  }

  release(shard: number): Promise<void> {
    const s = this.shards.get(shard);
    if (!s) return Promise.resolve();
    s.releasing ??= (async () => {
      s.stopping = true;
      clearTimeout(s.waitTimer);
      s.waiting = []; // read or taken but not handed over: pending here, so the next holder's claim delivers them
      s.flushAcks?.();
      s.wakeRoom?.();
      s.wakePause?.();
      s.conn.stop(); // interrupts a blocked read; whatever it had taken stays pending for the next holder
      await s.loop;
      const drained = await settledWithin(s.turns, this.drainTimeoutMs);
      if (!drained) s.abandoned = true; // left pending: the next holder's claim delivers them again
      await s.ackFlush;
      if (this.shards.get(shard) === s) this.shards.delete(shard);
    })();
    return s.releasing;
  }

  close(): Promise<void> {
    this.closed ??= (async () => {
      this.closing = true;
      await Promise.all([...this.shards.keys()].map((shard) => this.release(shard)));
      this.replyWake?.();
      this.replyConn?.stop();
      await this.replyLoop;
      this.outgoing.flush(); // entries and replies sent in the last turn: written before the connection goes
      this.replies.flush();
      await Promise.race([this.cmd.quit().catch(NOOP), sleep(1000)]);
      this.cmd.disconnect();
    })();
    return this.closed;
  }

  // ---- shard loops -------------------------------------------------------------------------------------------

  private async runShard(s: ShardLoop): Promise<void> {
    let recover = false; // acquire did the first claim
    let failures = 0;
    let lastClaim = Date.now();
    let lastTrim = Date.now();
    const claimEveryMs = Math.max(50, this.claimIdleMs / 2);
    while (!this.closing && !s.stopping) {
      try {
        if (recover) {
          s.waiting = []; // the claim below delivers them, in order, with the rest of what is pending here
          await this.ensureGroup(s.key);
          await this.claim(s, 0);
          await this.catchUpHanded(s);
          recover = false;
          lastClaim = Date.now();
        } else if (Date.now() - lastClaim >= claimEveryMs) {
          await this.claim(s, this.claimIdleMs);
          lastClaim = Date.now();
        }
        if (Date.now() - lastTrim >= this.trimIntervalMs) {
          await s.conn.script(trimAcked, this.callTimeoutMs, [s.key], [GROUP, this.nodeId, Math.max(this.claimIdleMs, 1000)]);
          lastTrim = Date.now();
        }
        const room = await this.roomFor(s);
        if (room === 0) continue;
        const res = (await s.conn.call(
          this.blockMs + this.callTimeoutMs,
          "XREADGROUP",
          "GROUP",
          GROUP,
          this.nodeId,
          "COUNT",
          room,
          "BLOCK",
          this.blockMs,
          "STREAMS",
          s.key,
          ">",
        )) as [string, RawEntry[]][] | null;
        for (const [, entries] of res ?? []) this.deliverRead(s, entries);
        failures = 0;
      } catch (err) {
        if (this.closing || s.stopping) break;
        recover = true;
        if (isStreamLost(err)) continue; // Redis lost the stream or its group: re-create them and claim again at once
        if (!(err instanceof WatchdogTimeout)) this.onError(err, `shard ${s.shard} loop`);
        await this.pause(s, backoff(failures++));
      }
    }
  }

  /** XAUTOCLAIM the group's pending entries idle at least `minIdleMs` (all of them with 0) and deliver them. */
  private async claim(s: ShardLoop, minIdleMs: number): Promise<void> {
    let cursor = "0-0";
    do {
      const room = await this.roomFor(s);
      if (s.stopping) return;
      const res = (await s.conn.call(
        this.callTimeoutMs,
        "XAUTOCLAIM",
        s.key,
        GROUP,
        this.nodeId,
        minIdleMs,
        cursor,
        "COUNT",
        Math.min(room, this.batch),
      )) as [string, RawEntry[], string[]?];
      cursor = res[0];
      this.deliverAll(s, res[1]);
    } while (cursor !== "0-0" && !s.stopping);
    this.handOver(s);
  }

  /**
   * After a claim of everything pending: every entry up to the group's last-delivered id is settled or was just
   * handed over here, so entries `send` takes after it need not wait for anything older.
   */
  private async catchUpHanded(s: ShardLoop): Promise<void> {
    const groups = (await s.conn.call(this.callTimeoutMs, "XINFO", "GROUPS", s.key)) as unknown[][];
    for (const g of groups) {
      const name = g[g.indexOf("name") + 1];
      const last = g[g.indexOf("last-delivered-id") + 1];
      if (name === GROUP && typeof last === "string" && idBefore(s.lastHanded, last)) s.lastHanded = last;
    }
    this.handOver(s);
  }

  /** A read's entries: handed over at once unless a take of this node's is still to answer (see Waiting). */
  private deliverRead(s: ShardLoop, entries: RawEntry[]): void {
    const takes = s.takesAnswered < s.takesSent ? s.takesSent : undefined;
    for (const raw of entries) if (raw) this.queueInOrder(s, { id: raw[0], fields: raw[1], takes });
    this.handOver(s);
  }

  /** Queue an entry among those waiting, in stream order (it nearly always goes last). */
  private queueInOrder(s: ShardLoop, w: Waiting): void {
    let i = s.waiting.length;
    while (i > 0 && idBefore(w.id, s.waiting[i - 1]!.id)) i--;
    s.waiting.splice(i, 0, w);
  }

  /** Hand over the waiting entries, oldest first, while the oldest has nothing left to wait for (`force`: at all). */
  private handOver(s: ShardLoop, force = false): void {
    while (s.waiting.length && !s.stopping) {
      const w = s.waiting[0]!;
      if (w.takes !== undefined && s.takesAnswered < w.takes) break;
      if (!force && w.after !== undefined && idBefore(s.lastHanded, w.after)) break;
      s.waiting.shift();
      this.deliver(s, w.id, w.fields, w.entry);
    }
    const stuck = s.waiting.length > 0 && !s.stopping && s.waiting[0]!.takes === undefined;
    if (!stuck) {
      clearTimeout(s.waitTimer);
      s.waitTimer = undefined;
    } else {
      s.waitTimer ??= setTimeout(() => {
        s.waitTimer = undefined;
        this.handOver(s, true);
      }, AFTER_WAIT_MS);
    }
  }

  /** How many entries the loop may take now; waits while the shard is at its in-flight cap. */
  private async roomFor(s: ShardLoop): Promise<number> {
    while (!s.stopping && s.turns.size >= this.maxInFlight) {
      await new Promise<void>((resolve) => (s.wakeRoom = resolve));
    }
    return s.stopping ? 0 : Math.min(this.batch, this.maxInFlight - s.turns.size);
  }

  private deliverAll(s: ShardLoop, entries: RawEntry[]): void {
    for (const raw of entries) {
      if (s.stopping) return; // not ours to deliver any more: it stays pending for the next holder
      if (raw) this.deliver(s, raw[0], raw[1]);
    }
  }

  private deliver(s: ShardLoop, id: string, fields: string[], sent?: Entry): void {
    if (s.unacked.has(id)) return; // our own in-flight entry, seen again by a claim
    s.unacked.add(id);
    if (idBefore(s.lastHanded, id)) s.lastHanded = id;
    let turn: Promise<void>;
    // Handed over by reference, as the memory transport does: neither side mutates a message (system.ts).
    const entry = sent ?? decodeField<Entry>(fields, ENTRY_FIELD);
    if (!entry || !Array.isArray(entry.targets)) {
      this.onError(new Error(`malformed entry ${id} on ${s.key}; acknowledged and dropped`), "deliver");
      turn = Promise.resolve();
    } else {
      try {
        turn = Promise.resolve(this.handlers!.onEntry(s.shard, entry));
      } catch (err) {
        turn = Promise.reject(err);
      }
    }
    let left = false; // kept in `unacked` then: our own claims must not deliver it here again
    const done: Promise<void> = turn
      .catch((err) => void (left = err instanceof LeftForNextHolder))
      .then(() => (s.abandoned || left ? undefined : this.queueAck(s, id)))
      .finally(() => {
        if (!s.abandoned && !left) s.unacked.delete(id);
        s.turns.delete(done);
        s.wakeRoom?.();
      });
    s.turns.add(done);
  }

  /**
   * Batches XACKs: one script call per shard per `ackDelayMs` (or per `batch` ids, or at once when releasing).
   * (Carried inside the next take of the shard instead, they cost more than they saved: at low rates every take
   * carried one id, a script call per send where the timer makes one per 10 ms.)
   * Acknowledging is off the latency path (the turn's effects are already committed), and one XACK per entry
   * doubled the writes to Redis of a chat message; an entry whose holder dies inside the window is delivered
   * again, which at-least-once delivery allows.
   */
  private queueAck(s: ShardLoop, id: string): Promise<void> {
    s.acks.push(id);
    s.ackFlush ??= new Promise<void>((resolve) => {
      s.flushAcks = () => {
        this.ackShards.delete(s);
        s.flushAcks = undefined;
        const ids = s.acks;
        s.acks = [];
        s.ackFlush = undefined;
        this.ack(s, ids).then(resolve, (err) => {
          if (!this.closing) this.onError(err, `ack on shard ${s.shard}`);
          resolve(); // unacknowledged entries are delivered again by a later claim: at least once
        });
      };
      this.ackShards.add(s);
      // One timer for every shard's acknowledgements, written together (see `corked`).
      this.ackTimer ??= setTimeout(this.flushAllAcks, this.ackDelayMs);
    });
    const flushed = s.ackFlush;
    if (s.acks.length >= this.batch || s.stopping) s.flushAcks?.();
    return flushed;
  }

  private readonly flushAllAcks = (): void => {
    this.ackTimer = undefined;
    this.corked(() => {
      for (const s of [...this.ackShards]) s.flushAcks?.();
    });
  };

  private async ack(s: ShardLoop, ids: string[]): Promise<void> {
    for (let i = 0; i < ids.length; i += 512) {
      await ackOwned.run(this.cmd, [s.key], ackArgs(this.nodeId, ids.slice(i, i + 512)));
    }
  }

  private async ensureGroup(key: string): Promise<void> {
    try {
      // From id 0: entries sent before the group existed are delivered too.
      await this.cmd.call("XGROUP", "CREATE", key, GROUP, "0", "MKSTREAM");
    } catch (err) {
      if (!String((err as Error)?.message ?? "").startsWith("BUSYGROUP")) throw err;
    }
  }

  private pause(s: ShardLoop, ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      s.wakePause = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  // ---- replies -----------------------------------------------------------------------------------------------

  private async runReplies(conn: LoopConnection): Promise<void> {
    const key = this.keys.reply(this.nodeId);
    let failures = 0;
    let lastTouch = Date.now();
    while (!this.closing) {
      try {
        if (Date.now() - lastTouch >= this.replyTouchMs) {
          await this.keepReplyStream();
          lastTouch = Date.now();
        }
        const res = (await conn.call(
          this.blockMs + this.callTimeoutMs,
          "XREAD",
          "COUNT",
          512,
          "BLOCK",
          this.blockMs,
          "STREAMS",
          key,
          this.replyLast,
        )) as [string, RawEntry[]][] | null;
        for (const [, entries] of res ?? []) {
          for (const raw of entries) {
            if (!raw) continue;
            this.replyLast = raw[0];
            const reply = decodeField<Reply>(raw[1], REPLY_FIELD);
            if (reply && !this.closing) this.safeReply(this.handlers, reply);
          }
        }
        failures = 0;
      } catch (err) {
        if (this.closing) break;
        if (!(err instanceof WatchdogTimeout)) this.onError(err, "reply loop");
        lastTouch = 0; // after a failure, make sure the stream still exists (Redis may have restarted)
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, backoff(failures++));
          this.replyWake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    }
  }

  /**
   * Refresh the TTL of this node's reply stream. A stream gone while this node runs means Redis lost its data
   * (flushed, or restarted without it): replies to this node were dropped meanwhile (replyIfAlive), and entries
   * may have gone with the shard streams. Re-create it, read it from its start, and tell the system (`onLost`).
   */
  private async keepReplyStream(): Promise<void> {
    if ((await this.cmd.call("PEXPIRE", this.keys.reply(this.nodeId), this.replyTtlMs)) === 1) return;
    this.replyLast = await this.createReplyStream();
    await this.cmd.call("SCRIPT", "LOAD", appendAndTake.source);
    try {
      this.handlers?.onLost?.();
    } catch (err) {
      this.onError(err, "onLost");
    }
  }

  /** Create this node's reply stream (its first entry, a hello) with its TTL; returns the hello's id. */
  private async createReplyStream(): Promise<string> {
    const key = this.keys.reply(this.nodeId);
    const id = (await this.cmd.call("XADD", key, "MAXLEN", "~", this.replyMaxLen, "*", HELLO_FIELD, "1")) as string;
    await this.cmd.call("PEXPIRE", key, this.replyTtlMs);
    return id;
  }

  private safeReply(handlers: TransportHandlers | undefined, reply: Reply): void {
    try {
      handlers?.onReply(reply);
    } catch (err) {
      this.onError(err, "onReply");
    }
  }

  // ---- connections -------------------------------------------------------------------------------------------

  private connect(role: string, blocking: boolean): RedisClient {
    const onError = (err: unknown) => {
      if (!this.closing) this.onError(err, `connection ${role}`);
    };
    return connectRedis(this.url, `${this.nodeId}:${role}`, onError, {
      // Loop connections fail fast and let their loop back off and re-claim; the command connection rides out
      // short reconnects (a resent XADD is a duplicate, which at-least-once delivery allows).
      maxRetriesPerRequest: blocking ? 0 : 3,
      autoResendUnfulfilledCommands: !blocking,
      commandTimeout: blocking ? undefined : Math.max(5000, this.callTimeoutMs),
    });
  }
}

/** Our group's last-delivered id in an XINFO GROUPS answer (RESP2: a flat field/value list per group). */
function lastDeliveredOf(groups: unknown[][] | null | undefined): string | undefined {
  for (const g of groups ?? []) {
    let name: unknown;
    let last: unknown;
    for (let i = 0; i + 1 < g.length; i += 2) {
      if (g[i] === "name") name = g[i + 1];
      else if (g[i] === "last-delivered-id") last = g[i + 1];
    }
    if (name === GROUP && typeof last === "string") return last;
  }
  return undefined;
}

/** ackOwned's arguments for these ids (at most a few hundred: they go on Lua's stack). */
function ackArgs(nodeId: string, ids: string[]): string[] {
  let lowest = ids[0]!;
  let highest = lowest;
  for (const id of ids) {
    if (idBefore(id, lowest)) lowest = id;
    else if (idBefore(highest, id)) highest = id;
  }
  return [GROUP, nodeId, lowest, highest, ...ids];
}

function decodeField<T>(fields: string[], name: string): T | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] !== name) continue;
    try {
      return JSON.parse(fields[i + 1]!) as T;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** Whether stream id `a` comes before `b` (both "<ms>-<seq>", compared as numbers; per entry, so no splitting). */
function idBefore(a: string, b: string): boolean {
  const aDash = a.indexOf("-");
  const bDash = b.indexOf("-");
  if (aDash !== bDash) return aDash < bDash; // fewer digits of milliseconds
  for (let i = 0; i < aDash; i++) {
    if (a.charCodeAt(i) !== b.charCodeAt(i)) return a.charCodeAt(i) < b.charCodeAt(i);
  }
  if (a.length - aDash !== b.length - bDash) return a.length - aDash < b.length - bDash; // fewer digits of sequence
  return a < b; // same milliseconds, sequence numbers of as many digits
}

/** NOGROUP: the group is gone (a restart without data); UNBLOCKED: the stream was deleted under a blocked read (FLUSHALL). */
function isStreamLost(err: unknown): boolean {
  const message = String((err as Error)?.message ?? "");
  return message.startsWith("NOGROUP") || message.startsWith("UNBLOCKED");
}

function backoff(failures: number): number {
  return Math.min(5000, 50 * 2 ** Math.min(failures, 7)) + Math.floor(Math.random() * 50);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref?.());
}

