/** Chat's own errors, with Zulip's codes and exact wording (the generic ones are runtime/errors.ts's `errors`). */
import { ChorusError } from "../../runtime/errors.ts";

export const chatErrors = {
  /** Zulip's request decoding (gateway/params.ts): a required parameter absent, a JSON parameter malformed. */
  missing: (name: string) => new ChorusError("REQUEST_VARIABLE_MISSING", `Missing '${name}' argument`, 400, { var_name: name }),
  invalidJson: (name: string) => new ChorusError("INVALID_JSON", `Argument "${name}" is not valid JSON.`, 400),
  streamNotFound: (extra: { stream?: string; stream_id?: number }) =>
    new ChorusError(
      "STREAM_DOES_NOT_EXIST",
      extra.stream !== undefined ? `Channel '${extra.stream}' does not exist` : `Channel with ID '${extra.stream_id}' does not exist`,
      400,
      extra,
    ),
  /** Zulip's ChannelExistsError: the name is another channel's of the realm. */
  channelExists: (name: string) => new ChorusError("CHANNEL_ALREADY_EXISTS", `Channel '${name}' already exists`, 409),
  badQueue: (queueId: string) =>
    new ChorusError("BAD_EVENT_QUEUE_ID", `Bad event queue ID: ${queueId}`, 400, { queue_id: queueId }),
  /** Zulip's RateLimitedError: the client may try again after `retryAfter` seconds. */
  rateLimited: (retryAfter: number) => new ChorusError("RATE_LIMIT_HIT", "API usage exceeded rate limit", 429, { "retry-after": retryAfter }),
  /**
   * A send whose Idempotency-Key (or queue_id + local_id) already names a message of the sender elsewhere; not sent.
   * 422, as the IETF's Idempotency-Key draft answers a key reused for another request.
   */
  sendKeyReused: (storedId: number) =>
    new ChorusError("IDEMPOTENCY_KEY_REUSED", `This message was not sent: its idempotency key already names message ${storedId}, in another conversation.`, 422),
  /** Zulip's ValidationFailureError (a model's full_clean refused): the message, and the messages by field. */
  validationFailure: (field: string, message: string) => new ChorusError("BAD_REQUEST", message, 400, { errors: { [field]: [message] } }),
};
