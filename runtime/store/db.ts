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
  PostgresDialect,
  type Transaction,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type QueryResult,
  type TransactionSettings,
} from "kysely";
import { PGlite, types as pgliteTypes } from "@electric-sql/pglite";
import pg from "pg";
import { serialize, type DatabaseError } from "pg-protocol";
import { Parser } from "pg-protocol/dist/parser.js";
import type { BackendMessage, DataRowMessage, RowDescriptionMessage } from "pg-protocol/dist/messages.js";
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
 * held by every connection; past MAX_NAMED_TEXTS distinct texts, further ones run unnamed. PGlite ignores it (a
 * comment).
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

/** A pool of connections to Postgres, bigint columns as numbers. */
function postgresPool(connectionString: string, max: number, options?: string): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, types, options });
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
 * statements whose every plan is the same walk whatever the values. Elsewhere (PGlite, a transaction), as any statement.
 */
export async function queryPlannedOnce<R>(db: Kysely<any> | Transaction<any>, text: string, values: readonly unknown[]): Promise<R[]> {
  const run = plannedOnce.get(db);
  if (run) return run<R>(text, values);
  return (await db.executeQuery<R>(CompiledQuery.raw(text, values as unknown[]))).rows;
}

const plannedOnce = new WeakMap<object, <R>(text: string, values: readonly unknown[]) => Promise<R[]>>();

function plannedOncePool(connectionString: string, max: number) {
  // Set in the connection's startup message: a SET run from the pool's connect event raced the first statement the
  // pool handed the new connection (pg queued it behind, and warned that pg@9 will refuse a query to a busy client).
  const pool = postgresPool(connectionString, max, "-c plan_cache_mode=force_generic_plan");
  // Its callers' texts are built once (a handful): each is named at its first run.
  const names = new Map<string, string>();
  const nameOf = (text: string) => names.get(text) ?? names.set(text, hashedName("g", text)).get(text)!;
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
  const client = await PGlite.create(dir, { parsers: { [pgliteTypes.INT8]: (v: string) => Number(v) } });
  // A new 16 MB WAL segment is written full of zeros by default: at 1,000 sends a second that is one every few
  // seconds, and the commit that crosses into it held the event loop for 40-50 ms. Off, Postgres writes the
  // segment's last byte only. The zeros reserve disk space ahead of need, which PGlite (it never fsyncs) gains
  // little from: a full disk fails the commit either way.
  await client.exec("set wal_init_zero = off");
  const KyselyPGlite = await loadKyselyPGlite();
  // Kysely's connections and the prepared statements take turns on PGlite's one session through one lock, so that a
  // statement never interleaves with a transaction or another statement.
  const lock = new SessionLock();
  const db = new Kysely<KernelTables>({ dialect: serialised(new KyselyPGlite(client).dialect, lock) });
  const session = new PGliteStatements(client, lock);
  const prepared: Prepared = (name, text, values) => session.run(name, text, values);
  return { db, engine: "pglite", prepared };
}

/**
 * Named prepared statements on PGlite, sent as protocol messages: Bind, Describe, Execute and Sync (and Parse, the
 * first time) in one call into PGlite, the answer parsed with node-postgres's own protocol parser and type parsers.
 * PGlite's node-postgres adapter did the same in one call per message, each answer parsed into objects and emitted
 * as events to a pg.Client: 65 µs against 25 µs for a one-row insert, most of it JavaScript around the wasm.
 */
class PGliteStatements {
  private readonly parsed = new Set<string>();
  private readonly parser = new Parser();
  constructor(
    private readonly client: PGlite,
    private readonly lock: SessionLock,
  ) {}

  async run<R>(name: string, text: string, values: readonly unknown[]): Promise<R[]> {
    const release = await this.lock.acquire();
    try {
      return await this.runHeld<R>(name, text, values);
    } finally {
      release();
    }
  }

  private async runHeld<R>(name: string, text: string, values: readonly unknown[]): Promise<R[]> {
    const messages: Buffer[] = [];
    if (!this.parsed.has(name)) messages.push(serialize.parse({ name, text }));
    messages.push(serialize.bind({ statement: name, values: values.map(textValue) }), serialize.describe({ type: "P" }), serialize.execute(), serialize.sync());
    // The answer is taken as it is written (a view into PGlite's memory, copied), not from execProtocolRaw: that one
    // also parses every answer into PGlite's own message objects and keeps them in a list that only its next
    // query() empties. That was about 45 µs a commit, and with queries rare (a busy send path) the lists lived long
    // enough to be promoted to the old generation, commits' garbage with them.
    // syncToFs: PGlite's file systems under Node (a directory, or memory://) write through at once; its sync step
    // is an empty promise chain, only the browser's file systems need it.
    const chunks: Buffer[] = [];
    await this.client.execProtocolRawStream(Buffer.concat(messages), { syncToFs: false, onRawData: (chunk) => void chunks.push(Buffer.from(chunk)) });
    let columns: Column[] = [];
    const rows: R[] = [];
    let error: DatabaseError | undefined;
    this.parser.parse(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), (message: BackendMessage) => {
      if (message.name === "parseComplete") this.parsed.add(name);
      else if (message.name === "rowDescription") columns = columnsOf(message as RowDescriptionMessage);
      else if (message.name === "dataRow") rows.push(rowOf(columns, (message as DataRowMessage).fields) as R);
      else if (message.name === "error") error ??= message as DatabaseError;
    });
    if (error) throw error;
    return rows;
  }
}

/** A parameter in Postgres's text format; the group commits pass strings (array literals), numbers and nulls. */
function textValue(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return String(value);
  throw new TypeError(`a prepared statement's parameter cannot be ${typeof value}`);
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

/**
 * kysely-pglite's dialect, from its own module: the package's entry point also loads its code generator and live
 * queries (kysely-codegen and more), which added 0.7 s to every start of the server and of the CLI.
 */
async function loadKyselyPGlite(): Promise<typeof import("kysely-pglite").KyselyPGlite> {
  const module = (await import(new URL("kysely-pglite.js", import.meta.resolve("kysely-pglite")).href)) as typeof import("kysely-pglite");
  return module.KyselyPGlite;
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
 * PGlite is one session, and kysely-pglite hands every caller a connection onto it: two concurrent transactions
 * would interleave their statements. This wraps its driver so a connection is held by one caller at a time
 * (a transaction, or a single query), which is what a pool of size one means.
 */
function serialised(dialect: Dialect, lock: SessionLock): Dialect {
  return {
    createAdapter: () => dialect.createAdapter(),
    createIntrospector: (db) => dialect.createIntrospector(db),
    createQueryCompiler: () => dialect.createQueryCompiler(),
    createDriver: () => new SerialDriver(dialect.createDriver(), lock),
  };
}

class SerialDriver implements Driver {
  private readonly releases = new Map<DatabaseConnection, () => void>();
  constructor(
    private readonly inner: Driver,
    private readonly lock: SessionLock,
  ) {}
  init() {
    return this.inner.init();
  }
  async acquireConnection(): Promise<DatabaseConnection> {
    const release = await this.lock.acquire();
    try {
      const connection = new CountingConnection(await this.inner.acquireConnection());
      this.releases.set(connection, release);
      return connection;
    } catch (err) {
      release();
      throw err;
    }
  }
  beginTransaction(c: DatabaseConnection, s: TransactionSettings) {
    return this.inner.beginTransaction(unwrap(c), s);
  }
  commitTransaction(c: DatabaseConnection) {
    return this.inner.commitTransaction(unwrap(c));
  }
  rollbackTransaction(c: DatabaseConnection) {
    return this.inner.rollbackTransaction(unwrap(c));
  }
  async releaseConnection(c: DatabaseConnection): Promise<void> {
    await this.inner.releaseConnection(unwrap(c));
    const release = this.releases.get(c);
    this.releases.delete(c);
    release?.();
  }
  destroy() {
    return this.inner.destroy();
  }
}

function unwrap(c: DatabaseConnection): DatabaseConnection {
  return c instanceof CountingConnection ? c.inner : c;
}

/**
 * kysely-pglite passes PGlite's result through unchanged, and PGlite reports `rowCount`, not kysely's
 * `numAffectedRows`: without this every UPDATE/INSERT reads as having changed 0 rows (an update's
 * numUpdatedRows is 0n, an insert's numInsertedOrUpdatedRows undefined). Mapped as kysely's Postgres driver does.
 */
class CountingConnection implements DatabaseConnection {
  constructor(readonly inner: DatabaseConnection) {}
  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    const result = (await this.inner.executeQuery<R>(query)) as QueryResult<R> & {
      command?: string;
      rowCount?: number;
      affectedRows?: number;
    };
    const counted = ["INSERT", "UPDATE", "DELETE", "MERGE"].includes(result.command ?? "");
    if (result.numAffectedRows !== undefined || !counted) return result;
    return { ...result, numAffectedRows: BigInt(result.rowCount ?? result.affectedRows ?? 0) };
  }
  streamQuery<R>(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<QueryResult<R>> {
    return this.inner.streamQuery<R>(query, chunkSize);
  }
}
