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

  /** Anything thrown becomes a ChorusError; unknown failures are 500s that hide their detail from the client. */
  static wrap(err: unknown): ChorusError {
    if (err instanceof ChorusError) return err;
    return new ChorusError("INTERNAL_SERVER_ERROR", "Internal server error", 500, {}, { cause: err });
  }
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
  /**
   * A message for an operation or actor kind this process does not have: a worker of another version sent it (or
   * a bug). Named, so that the log and the client say what happened instead of a bare internal error.
   */
  unknownOperation: (what: string) =>
    new ChorusError("UNKNOWN_OPERATION", `This server does not know ${what} (a worker of another version may have sent it)`, 501),
};
