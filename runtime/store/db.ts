/**
 * The only module that knows which database engine runs: PGlite under DATA_DIR when no DATABASE_URL is set,
 * Postgres through `pg` otherwise. Both return bigint columns as JavaScript numbers (ids and UNIX seconds stay
 * far below 2^53).
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import {
  CompiledQuery,
  Kysely,
  PostgresAdapter,
  PostgresDialect,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type Transaction,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type QueryResult,
  type TransactionSettings,
} from "kysely";
import { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { serialize, type DatabaseError } from "pg-protocol";
import { Parser } from "pg-protocol/dist/parser.js";
import type { BackendMessage, CommandCompleteMessage, DataRowMessage, ReadyForQueryMessage, RowDescriptionMessage } from "pg-protocol/dist/messages.js";
import { prepareValue } from "pg/lib/utils.js";
import type { KernelTables } from "./schema.ts";
import { log } from "../log.ts";

export type Engine = "pglite" | "postgres";

/**
 * One statement as a named prepared statement: parsed, and planned, once per connection. For the hot group commits
 * only (kysely has no named statements). On PGlite it is sent as protocol messages (PGliteStatements below): a
 * one-message append took 160-190 µs through PGlite's node-postgres adapter, and 270-320 µs as a PL/pgSQL function
 * through PGlite's own query(), which parses and describes every statement again (six calls into the wasm each).
 */
export type Prepared = <R>(name: string, text: string, values: readonly unknown[]) => Promise<R[]>;

export interface OpenDatabase {
  /** Typed with the kernel's tables; the store built on it is told the whole database's type. */
  db: Kysely<KernelTables>;
  engine: Engine;
  prepared: Prepared;
}

const INT8_OID = 20;
/** bigint columns as JavaScript numbers, on every node-postgres connection. */
const types = {
  getTypeParser: ((oid: number, format?: any) =>
    oid === INT8_OID ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

/**
 * What a kysely statement ends with (`.modifyEnd(NAMED_STATEMENT)`) to run on Postgres as a named prepared
 * statement, parsed and planned once per connection: for hot reads whose text is the same from one request to the
 * next (GET /messages of a channel), where planning cost as much as running (docs/reads.md). The name is a hash of
 * the text. Statements whose text varies (a list of ids spelled out) must not carry it: each text is a statement
 * held by every connection; past MAX_NAMED_TEXTS distinct texts, further ones run unnamed. On PGlite every
 * statement runs named (PGliteSession.query).
 */
export const NAMED_STATEMENT = "/* named */";
const MAX_NAMED_TEXTS = 500;
const namedTexts = new Map<string, string>();

function statementName(text: string): string | undefined {
  if (!text.endsWith(NAMED_STATEMENT)) return undefined;
  let name = namedTexts.get(text);
  if (!name && namedTexts.size < MAX_NAMED_TEXTS) namedTexts.set(text, (name = hashedName("n", text)));
  return name;
}

/** A statement's name on Postgres: a hash of its text (under 63 bytes), after a letter saying which pool runs it. */
function hashedName(prefix: string, text: string): string {
  return `${prefix}${createHash("sha1").update(text).digest("hex").slice(0, 24)}`;
}

/**
 * A pool of connections to Postgres, bigint columns as numbers, with `options` for the connection's startup.
 *
 * Every connection plans serially (`max_parallel_workers_per_gather = 0`). The reads here are short walks of
 * indexes, and each time the planner chose parallel workers for one it was wrong: starting two workers cost 3-118 ms
 * for pages whose own work was well under a millisecond (a page of unread messages, a channel's first_unread lookup
 * over a table it had no statistics for, searches), where the serial plan walks the index and stops at the page
 * (docs/reads.md). Serial for every statement rather than a transaction with `set local` around those: three round
 * trips fewer for each of them, and a statement not yet caught can not go parallel either. On this 2-core machine a
 * worker also takes a core the other requests wait for. The register's unread state of a reader with 100,000 unread
 * messages measured the same either way (docs/reads.md, 2026-12-03).
 */
function postgresPool(connectionString: string, max: number, options = ""): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, types, options: `-c max_parallel_workers_per_gather=0 ${options}`.trim() });
  // An idle connection that Postgres closes (a restart, an administrator, a failover) is an 'error' event on the
  // pool; unhandled, it would end the process. The pool drops that connection and opens another when needed.
  pool.on("error", (err) => log.error(`postgres: idle connection lost (${err.message})`));
  return pool;
}

/**
 * Reads that must run on one plan per connection, planned once: Postgres decides at each execution of a named
 * statement between its generic plan and a plan for the values at hand, by comparing estimates, and a page whose
 * limit is a parameter looks dear as a generic plan on a large table (the planner takes a parameter's limit for a
 * tenth of the rows), so it planned one channel's page again at every fetch: 0.9 ms of planning for 0.3 ms of
 * running at 10,000,000 messages (docs/reads.md). On Postgres these run named on connections of their own, set to
 * `plan_cache_mode = force_generic_plan`; the setting is not the main pool's, where the plan of a statement that
 * runs unnamed must fit its values (a generic plan of the reader's newest messages took 620 ms there). Only for
 * statements whose every plan is the same walk whatever the values. On PGlite the statement runs named too, with
 * the setting for its own implicit transaction only (PGliteSession.runGeneric): planning it again took most of an
 * embedded fetch. In a transaction, as any statement.
 */
export async function queryPlannedOnce<R>(db: Kysely<any> | Transaction<any>, text: string, values: readonly unknown[]): Promise<R[]> {
  const run = plannedOnce.get(db);
  if (run) return run<R>(text, values);
  return (await db.executeQuery<R>(CompiledQuery.raw(text, values as unknown[]))).rows;
}

const plannedOnce = new WeakMap<object, <R>(text: string, values: readonly unknown[]) => Promise<R[]>>();

/** The planned-once statements' names, by text (on either engine). */
function plannedOnceNames(): (text: string) => string {
  const names = new Map<string, string>();
  return (text) => names.get(text) ?? names.set(text, hashedName("g", text)).get(text)!;
}

function plannedOncePool(connectionString: string, max: number) {
  // Set in the connection's startup message: a SET run from the pool's connect event raced the first statement the
  // pool handed the new connection (pg queued it behind, and warned that pg@9 will refuse a query to a busy client).
  // Without JIT: Postgres compiles a generic plan's expressions again at every execution when the plan's estimated
  // cost is above jit_above_cost, and a channel's page over 10,000,000 messages was estimated that dear (its limit a
  // parameter): 65-95 ms of compiling for 0.6 ms of running (docs/reads.md, 2026-12-03).
  const pool = postgresPool(connectionString, max, "-c plan_cache_mode=force_generic_plan -c jit=off");
  // Its callers' texts are built once (a handful): each is named at its first run.
  const nameOf = plannedOnceNames();
  return {
    run: async <R>(text: string, values: readonly unknown[]) => (await pool.query({ name: nameOf(text), text, values: values as unknown[] })).rows as R[],
    end: () => pool.end(),
  };
}

/** A pool whose clients run the statements that end with NAMED_STATEMENT as named ones (kysely's driver calls query(text, values)). */
function namingPool(pool: pg.Pool, alsoEnd: () => Promise<void>) {
  // One wrapper per connection: kysely keeps its connection object per client it is given.
  const wrappers = new WeakMap<pg.PoolClient, { query: pg.PoolClient["query"]; release(): void }>();
  const wrap = (client: pg.PoolClient) => ({
    query: ((text: unknown, values?: unknown[]) => {
      const name = typeof text === "string" ? statementName(text) : undefined;
      return name ? client.query({ name, text: text as string, values }) : client.query(text as string, values);
    }) as pg.PoolClient["query"],
    release: () => client.release(),
  });
  return {
    async connect() {
      const client = await pool.connect();
      let wrapper = wrappers.get(client);
      if (!wrapper) wrappers.set(client, (wrapper = wrap(client)));
      return wrapper;
    },
    end: async () => void (await Promise.all([pool.end(), alsoEnd()])),
  };
}

/** Where the embedded store keeps its PGlite files under a data directory. */
export function pgliteDirectory(dataDir: string): string {
  return path.join(dataDir, "pglite");
}

export async function openDatabase(opts: { databaseUrl?: string; dataDir: string; poolSize?: number }): Promise<OpenDatabase> {
  if (opts.databaseUrl) {
    const pool = postgresPool(opts.databaseUrl, opts.poolSize ?? 10);
    const prepared: Prepared = async (name, text, values) => (await pool.query({ name, text, values: values as unknown[] })).rows;
    const planned = plannedOncePool(opts.databaseUrl, opts.poolSize ?? 10);
    const db = new Kysely<KernelTables>({ dialect: new PostgresDialect({ pool: namingPool(pool, planned.end) }) });
    plannedOnce.set(db, planned.run);
    return { db, engine: "postgres", prepared };
  }
  const dir = opts.dataDir === "memory://" ? "memory://" : pgliteDirectory(opts.dataDir);
  if (dir !== "memory://") fs.mkdirSync(dir, { recursive: true });
  const client = await PGlite.create(dir);
  // A new 16 MB WAL segment is written full of zeros by default: at 1,000 sends a second that is one every few
  // seconds, and the commit that crosses into it held the event loop for 40-50 ms. Off, Postgres writes the
  // segment's last byte only. The zeros reserve disk space ahead of need, which PGlite (it never fsyncs) gains
  // little from: a full disk fails the commit either way.
  await client.exec("set wal_init_zero = off");
  // Kysely's connections and the prepared statements take turns on PGlite's one session through one lock, so that a
  // statement never interleaves with a transaction or another statement.
  const session = new PGliteSession(client, new SessionLock());
  const db = new Kysely<KernelTables>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new PGliteDriver(session),
      createIntrospector: (db) => new PostgresIntrospector(db),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  });
  const prepared: Prepared = async <R>(name: string, text: string, values: readonly unknown[]) => (await session.run<R>(name, text, values)).rows;
  const nameOf = plannedOnceNames();
  plannedOnce.set(db, async <R>(text: string, values: readonly unknown[]) => (await session.runGeneric<R>(nameOf(text), text, values)).rows);
  return { db, engine: "pglite", prepared };
}

/** What PGlite answered to one statement: its rows, and the command tag's verb and row count. */
type Answer<R> = { rows: R[]; command: string; rowCount: number };

/**
 * PGlite's one session, spoken to in Postgres's wire protocol, as node-postgres speaks to a server: every statement
 * is Parse (a named statement's only the first time), Bind, Describe, Execute and Sync in one call into PGlite, the
 * answer parsed with node-postgres's own protocol parser and type parsers, parameters prepared as node-postgres
 * prepares them. So both engines read and write values alike (a bigint as a number, a bytea as a Buffer, a date as
 * node-postgres sends it). PGlite's node-postgres adapter made one call per message and parsed each answer into
 * objects emitted to a pg.Client (65 µs against 25 µs for a one-row insert); PGlite's own query(), which kysely-pglite
 * used for every kysely statement, parses and describes the statement first, several calls into the wasm each.
 */
class PGliteSession {
  private readonly parsed = new Set<string>();
  private readonly parser = new Parser();
  /** Kysely's statements' names by text, least recently run first (see query). */
  private readonly queryNames = new Map<string, string>();
  /** Kysely's statements that run unnamed (see query). */
  private readonly unnamedTexts = new Set<string>();
  /** Named statements to close (Close messages go ahead of the next call's statement). */
  private closing: string[] = [];
  constructor(
    private readonly client: PGlite,
    readonly lock: SessionLock,
  ) {}

  /** A named statement, holding the session for it. */
  async run<R>(name: string, text: string, values: readonly unknown[]): Promise<Answer<R>> {
    const release = await this.lock.acquire();
    try {
      return await this.exchange<R>(name, text, values);
    } finally {
      release();
    }
  }

  /**
   * A named statement on its generic plan (see queryPlannedOnce), holding the session: the setting is local to a
   * transaction of its own, begun and committed in the same call, so no other statement runs with it. A failure
   * leaves that transaction aborted: it is rolled back before the session goes to anyone else.
   */
  async runGeneric<R>(name: string, text: string, values: readonly unknown[]): Promise<Answer<R>> {
    const release = await this.lock.acquire();
    try {
      return await this.exchange<R>(name, text, values, GENERIC_PLAN);
    } catch (err) {
      await this.exchange("", "rollback", []);
      throw err;
    } finally {
      release();
    }
  }

  /**
   * A kysely statement, by a caller that holds the session: named, so that PGlite parses it once and plans it as
   * Postgres plans any prepared statement (custom plans for its first runs, then the generic plan where that is
   * estimated no dearer). Planning in wasm took most of an embedded read: a register 34.6 → 21.0 ms p50 when every
   * statement was named (docs/performance.md, 2026-12-02). The QUERY_NAMES texts run most lately keep their names;
   * the one run least lately is closed to make room.
   */
  async query<R>(text: string, values: readonly unknown[]): Promise<Answer<R>> {
    if (this.unnamedTexts.has(text)) return this.exchange<R>("", text, values);
    let name = this.queryNames.get(text);
    if (name === undefined) {
      name = hashedName("k", text);
      if (this.queryNames.size >= QUERY_NAMES) {
        const [oldest, oldName] = this.queryNames.entries().next().value!;
        this.queryNames.delete(oldest);
        this.forget(oldName);
      }
    } else this.queryNames.delete(text);
    this.queryNames.set(text, name);
    try {
      return await this.exchange<R>(name, text, values);
    } catch (err) {
      // A statement whose generic plan Postgres cannot make (42P10: an ON CONFLICT arbiter whose index predicate
      // names a parameter): unnamed from now on, and run again unnamed unless the failure aborted a transaction.
      if ((err as DatabaseError).code !== "42P10") throw err;
      this.unnamedTexts.add(text);
      this.queryNames.delete(text);
      this.forget(name);
      log.warn(`pglite: a statement runs unnamed, its generic plan refused (${(err as Error).message}): ${text.slice(0, 200)}`);
      if (this.transactionStatus !== "I") throw err;
      return this.exchange<R>("", text, values);
    }
  }

  private forget(name: string): void {
    if (this.parsed.delete(name)) this.closing.push(name);
  }

  /**
   * One statement, named (parsed once) or not (""), by a caller that holds the session; `around`, statements sent
   * before and after it in the same call (their answers carry no rows; the answer's command is then not told).
   * A named statement whose table changed its columns since it was parsed ("cached plan must not change result
   * type") is parsed again, and run again when that failure left no transaction aborted.
   */
  async exchange<R>(name: string, text: string, values: readonly unknown[], around?: { before: Buffer; after: Buffer }): Promise<Answer<R>> {
    try {
      return await this.send<R>(name, text, values, around);
    } catch (err) {
      if (!name || (err as DatabaseError).code !== "0A000" || !this.parsed.has(name)) throw err;
      this.forget(name);
      if (this.transactionStatus !== "I") throw err;
      return this.send<R>(name, text, values, around);
    }
  }

  /** The session's transaction status after the last call: idle (I), in a transaction (T), in a failed one (E). */
  private transactionStatus = "I";

  private async send<R>(name: string, text: string, values: readonly unknown[], around?: { before: Buffer; after: Buffer }): Promise<Answer<R>> {
    const messages: Buffer[] = [];
    for (const closed of this.closing.splice(0)) messages.push(serialize.close({ type: "S", name: closed }));
    if (around) messages.push(around.before);
    if (!name || !this.parsed.has(name)) messages.push(serialize.parse({ name, text }));
    messages.push(serialize.bind({ statement: name, values: values.map(prepareValue) }), serialize.describe({ type: "P" }), serialize.execute());
    if (around) messages.push(around.after);
    messages.push(serialize.sync());
    // The answer is taken as it is written (a view into PGlite's memory, copied), not from execProtocolRaw: that one
    // also parses every answer into PGlite's own message objects and keeps them in a list that only its next
    // query() empties. That was about 45 µs a commit, and with queries rare (a busy send path) the lists lived long
    // enough to be promoted to the old generation, commits' garbage with them.
    // syncToFs: PGlite's file systems under Node (a directory, or memory://) write through at once; its sync step
    // is an empty promise chain, only the browser's file systems need it.
    const chunks: Buffer[] = [];
    await this.client.execProtocolRawStream(Buffer.concat(messages), { syncToFs: false, onRawData: (chunk) => void chunks.push(Buffer.from(chunk)) });
    let columns: Column[] = [];
    const answer: Answer<R> = { rows: [], command: "", rowCount: 0 };
    let error: DatabaseError | undefined;
    this.parser.parse(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), (message: BackendMessage) => {
      if (message.name === "parseComplete") {
        if (name) this.parsed.add(name);
      } else if (message.name === "rowDescription") columns = columnsOf(message as RowDescriptionMessage);
      else if (message.name === "dataRow") answer.rows.push(rowOf(columns, (message as DataRowMessage).fields) as R);
      else if (message.name === "commandComplete" && !around) Object.assign(answer, commandOf((message as CommandCompleteMessage).text));
      else if (message.name === "error") error ??= message as DatabaseError;
      else if (message.name === "readyForQuery") this.transactionStatus = (message as ReadyForQueryMessage).status;
    });
    if (error) throw error;
    return answer;
  }

  close(): Promise<void> {
    return this.client.close();
  }
}

/** How many of kysely's statement texts keep a prepared statement in PGlite's session (PGliteSession.query). */
const QUERY_NAMES = 500;

/** Statements (unnamed, no parameters) as protocol messages, to go before or after another in one call. */
function unnamed(...texts: string[]): Buffer {
  return Buffer.concat(texts.flatMap((text) => [serialize.parse({ text }), serialize.bind({}), serialize.execute()]));
}

/** What runGeneric sends around its statement. */
const GENERIC_PLAN = { before: unnamed("begin", "set local plan_cache_mode = force_generic_plan"), after: unnamed("commit") };

/** A command tag ("INSERT 0 3", "UPDATE 2", "SELECT 5", "BEGIN"): its verb and, when it has one, its row count. */
function commandOf(tag: string): { command: string; rowCount: number } {
  const words = tag.split(" ");
  const count = Number(words.at(-1));
  return { command: words[0]!, rowCount: Number.isInteger(count) ? count : 0 };
}

/** A result column: its name, and the parser of its text values (looked up once per answer, not per value). */
type Column = { name: string; parse: (text: string) => unknown };

function columnsOf(description: RowDescriptionMessage): Column[] {
  return description.fields.map((f) => ({ name: f.name, parse: types.getTypeParser(f.dataTypeID, "text") as (text: string) => unknown }));
}

function rowOf(columns: Column[], values: (string | null)[]): Record<string, unknown> {
  const row: Record<string, unknown> = {};
  for (let i = 0; i < columns.length; i++) {
    const value = values[i];
    row[columns[i]!.name] = value === null || value === undefined ? null : columns[i]!.parse(value);
  }
  return row;
}

/** One holder at a time, in the order they asked: turns on PGlite's one session. */
class SessionLock {
  private tail: Promise<void> = Promise.resolve();
  /** Resolves once every earlier holder has released, with this holder's release. */
  async acquire(): Promise<() => void> {
    let release!: () => void;
    const previous = this.tail;
    this.tail = new Promise<void>((r) => (release = r));
    await previous;
    return release;
  }
}

/**
 * Kysely's driver on the session: PGlite is one session, so a connection is the session held by one caller at a
 * time (a transaction, or a single query), which is what a pool of size one means. Every statement runs named
 * (PGliteSession.query).
 */
class PGliteDriver implements Driver {
  private readonly releases = new Map<DatabaseConnection, () => void>();
  constructor(private readonly session: PGliteSession) {}
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const release = await this.session.lock.acquire();
    const connection = new PGliteConnection(this.session);
    this.releases.set(connection, release);
    return connection;
  }
  async beginTransaction(c: DatabaseConnection, settings: TransactionSettings): Promise<void> {
    const level = settings.isolationLevel ? ` isolation level ${settings.isolationLevel}` : "";
    await c.executeQuery(CompiledQuery.raw(`start transaction${level}`));
  }
  async commitTransaction(c: DatabaseConnection): Promise<void> {
    await c.executeQuery(CompiledQuery.raw("commit"));
  }
  async rollbackTransaction(c: DatabaseConnection): Promise<void> {
    await c.executeQuery(CompiledQuery.raw("rollback"));
  }
  async releaseConnection(c: DatabaseConnection): Promise<void> {
    const release = this.releases.get(c);
    this.releases.delete(c);
    release?.();
  }
  destroy(): Promise<void> {
    return this.session.close();
  }
}

class PGliteConnection implements DatabaseConnection {
  constructor(private readonly session: PGliteSession) {}
  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    const { rows, command, rowCount } = await this.session.query<R>(query.sql, query.parameters);
    // As kysely's Postgres driver: an INSERT, UPDATE, DELETE or MERGE tells how many rows it changed.
    const counted = command === "INSERT" || command === "UPDATE" || command === "DELETE" || command === "MERGE";
    return counted ? { rows, numAffectedRows: BigInt(rowCount) } : { rows };
  }
  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error("the embedded store does not stream query results");
  }
}
