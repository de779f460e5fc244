/**
 * The one error type. Every failure a client may see is a ChorusError with a stable `code`, an HTTP status and
 * optional extra envelope fields; the gateway turns it into `{"result":"error","msg","code",...extra}`.
 * It crosses process boundaries as plain JSON (see toJSON / fromJSON), so a refusal raised inside an actor on
 * another worker reaches the client unchanged.
 */
export interface ErrorJSON {
  code: string;
  msg: string;
  status: number;
  extra?: Record<string, unknown>;
}

export class ChorusError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status = 400,
    readonly extra: Record<string, unknown> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "ChorusError";
  }

  toJSON(): ErrorJSON {
    return { code: this.code, msg: this.message, status: this.status, extra: this.extra };
  }

  static fromJSON(json: ErrorJSON): ChorusError {
    return new ChorusError(json.code, json.msg, json.status, json.extra ?? {});
  }

  /**
   * Anything thrown becomes a ChorusError: the store or the transport out of reach is a 503 the client may retry
   * (SERVICE_UNAVAILABLE); other unknown failures are 500s that hide their detail from the client.
   */
  static wrap(err: unknown): ChorusError {
    if (err instanceof ChorusError) return err;
    if (isOutage(err)) return new ChorusError("SERVICE_UNAVAILABLE", UNAVAILABLE, 503, {}, { cause: err });
    return new ChorusError("INTERNAL_SERVER_ERROR", "Internal server error", 500, {}, { cause: err });
  }
}

const UNAVAILABLE = "The server is temporarily unavailable; try again shortly";

/** What a 503's Retry-After header says: about one lease take-over or reconnection. */
export const RETRY_AFTER_SECONDS = 2;

/** Socket errors of a connection to Postgres or Redis (Node's codes). */
const CONNECTION_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN"]);
/**
 * Postgres's SQLSTATEs of a server going away or not yet there: admin_shutdown, crash_shutdown, cannot_connect_now,
 * too_many_connections (class 08, connection_exception, is matched by its prefix).
 */
const UNAVAILABLE_SQLSTATES = new Set(["57P01", "57P02", "57P03", "53300"]);
/** What pg and ioredis say, without a code, when their connection is gone or was never made. */
const OUTAGE_MESSAGES = /^(Connection terminated|Connection is closed|Reached the max retries per request limit|Command timed out|Stream isn't writeable|timeout exceeded when trying to connect|Client has encountered a connection error)/;

/** The store or the transport could not be reached (as opposed to refusing the request or failing in our code). */
export function isOutage(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string" && (CONNECTION_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code) || /^08[0-9A-Z]{3}$/.test(code))) return true;
  return err.name === "MaxRetriesPerRequestError" || OUTAGE_MESSAGES.test(err.message);
}

/**
 * Constructors for the kernel's own failures and the generic request errors both products raise (with Zulip's
 * wording, which the assistant shares). A domain's own errors live with it (actors/chat/errors.ts).
 */
export const errors = {
  badRequest: (msg: string, extra: Record<string, unknown> = {}) => new ChorusError("BAD_REQUEST", msg, 400, extra),
  unauthorized: (msg: string) => new ChorusError("UNAUTHORIZED", msg, 401),
  /** An ask that got no reply in time: the actor's worker is slow or gone. The client may retry. */
  timeout: (what: string) => new ChorusError("REQUEST_TIMEOUT", `Timed out waiting for ${what}`, 503),
  /** A write by a worker whose shard lease was taken over: refused so two owners never both write. */
  fenced: (shard: number) => new ChorusError("FENCED", `Shard ${shard} is owned by another worker`, 503),
  conflict: (what: string) => new ChorusError("CONFLICT", `Concurrent update of ${what}`, 409),
  shuttingDown: () => new ChorusError("SHUTTING_DOWN", "The server is shutting down", 503),
  /** A part of the service went away in the middle of the request (a worker's link closed): the client may retry. */
  unavailable: () => new ChorusError("SERVICE_UNAVAILABLE", UNAVAILABLE, 503),
  /**
   * A message for an operation or actor kind this process does not have: a worker of another version sent it (or
   * a bug). Named, so that the log and the client say what happened instead of a bare internal error.
   */
  unknownOperation: (what: string) =>
    new ChorusError("UNKNOWN_OPERATION", `This server does not know ${what} (a worker of another version may have sent it)`, 501),
};
