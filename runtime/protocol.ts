/**
 * Typed actor protocols: each actor kind declares, in one place (its protocol file), the operations it answers and
 * the reply of each; senders reach it through a typed reference and its handlers implement the declaration. A wrong
 * operation, a wrong field or a wrong reply type is a compile error; nothing of this exists at run time beyond the
 * kind's name and one small object per reference.
 *
 * A protocol is a type mapping each operation name to `Op<Message, Reply>`, where the message carries the same name
 * in its `op` field:
 *
 *     export type ChannelProtocol = { send: Op<SendToChannel, Sent>; … };
 *     export const Channel = actorKind<ChannelProtocol>("channel");
 *     const sent = await system.ref(Channel, id).ask({ op: "send", … }); // Promise<Sent>
 *
 * Why `ask(message)` and not `ask("send", body)`: the message the caller builds is the wire message itself, the
 * same plain JSON object `{ op, …fields }` as before, handed to the transport as it is. An `(op, body)` form would
 * have to copy the body into a new object with its `op` on every call (channel sends, deliveries to user actors,
 * event-queue polls and fan-outs are the hot paths), or change the wire format. The operation is still inferred
 * from the literal `op` (so is the reply type), the message is checked against exactly that operation's type
 * (unknown fields included), and go-to-definition on `op: "send"` at a call site opens the op's declaration.
 *
 * A reference costs one two-field object (its id and the system's sender, no closure) and one extra call on the
 * way to the system's ask: no promise, no copy. A fan-out goes by kind and keys (`system.broadcast(User, ids, …)`),
 * which builds the ids while grouping them by shard instead of in a separate array first.
 *
 * Each protocol file says where its handlers are; each actor keeps them in a static `handlers` table
 * (`Handlers<P, Actor>`: one function per operation, checked against that operation's reply type) that its
 * `receive` hands to `dispatch`. Messages an actor sends itself (ctx.schedule timers) are a small protocol private
 * to the actor, added to its table's type.
 */
import { actorId, type ActorId, type PARKED } from "./actor.ts";
import { errors } from "./errors.ts";

/** One operation: the message (with its `op`) and the reply an ask gets. */
export interface Op<Message extends { op: string }, Reply> {
  message: Message;
  reply: Reply;
}

/** The reply of an operation that has nothing to report (`{}` on the wire). */
export type Empty = Record<string, never>;

/** What a protocol must look like: each key names an operation whose message has that `op`. */
export type ProtocolShape<P> = { [O in keyof P]: Op<{ op: O & string }, unknown> };

/** Every message of a protocol: what its actor's `receive` takes. */
export type MessageOf<P> = { [O in keyof P]: MessageFor<P, O> }[keyof P];
export type MessageFor<P, O extends keyof P> = P[O] extends Op<infer M, unknown> ? M : never;
export type ReplyFor<P, O extends keyof P> = P[O] extends Op<{ op: string }, infer R> ? R : never;

/**
 * One kind of actor and its protocol: `actorKind<ChannelProtocol>("channel")`. The name is the `kind` part of its
 * actors' identities (`channel:42`) and the key of its factory in the system's kinds.
 */
export class ActorKind<P extends ProtocolShape<P>> {
  /** Never set: it only carries the protocol type. */
  declare readonly protocol?: P;

  constructor(readonly name: string) {}

  id(key: string | number): ActorId {
    return actorId(this.name, key);
  }
}

export function actorKind<P extends ProtocolShape<P>>(name: string): ActorKind<P> {
  return new ActorKind<P>(name);
}

/** The untyped sending side the system gives its references (runtime only: see ActorSystem). */
export interface Sender {
  ask(id: ActorId, body: unknown, timeoutMs?: number): Promise<unknown>;
  askTransient(id: ActorId, body: unknown, timeoutMs?: number): Promise<unknown>;
  askDirect(id: ActorId, body: unknown, timeoutMs?: number): Promise<unknown>;
  askStream(id: ActorId, body: unknown, onMore: (value: unknown) => void, timeoutMs?: number): Promise<unknown>;
  tell(id: ActorId, body: unknown): Promise<void>;
}

/**
 * One actor, as senders see it: obtained from the system (`system.ref(Channel, 42)`). The message given is the
 * message sent; `{ op: O }` in each signature is what lets the compiler take the operation from the literal.
 */
export class ActorRef<P extends ProtocolShape<P>> {
  constructor(
    readonly id: ActorId,
    private readonly sender: Sender,
  ) {}

  /** Send and wait for the reply (or the actor's error). */
  ask<O extends keyof P>(message: MessageFor<P, O> & { op: O }, timeoutMs?: number): Promise<ReplyFor<P, O>> {
    return this.sender.ask(this.id, message, timeoutMs) as Promise<ReplyFor<P, O>>;
  }

  /** An ask whose loss costs nothing if this process dies (an event-queue poll): see ActorSystem.askTransient. */
  askTransient<O extends keyof P>(message: MessageFor<P, O> & { op: O }, timeoutMs?: number): Promise<ReplyFor<P, O>> {
    return this.sender.askTransient(this.id, message, timeoutMs) as Promise<ReplyFor<P, O>>;
  }

  /**
   * An ask whose turn keeps what it does durable by itself, needing no transport entry delivered again after a crash
   * (a chat send: its commit records the fan-out still owed): see ActorSystem.askDirect.
   */
  askDirect<O extends keyof P>(message: MessageFor<P, O> & { op: O }, timeoutMs?: number): Promise<ReplyFor<P, O>> {
    return this.sender.askDirect(this.id, message, timeoutMs) as Promise<ReplyFor<P, O>>;
  }

  /**
   * A transient ask its actor may answer with interim replies (Deferred.push) before the final one: each goes to
   * `onMore`, in order. Answered `undefined` when the stream was cut where a transient ask would be sent again
   * (see ActorSystem.askStream): the asker asks again from what it heard.
   */
  askStream<O extends keyof P>(
    message: MessageFor<P, O> & { op: O },
    onMore: (value: ReplyFor<P, O>) => void,
    timeoutMs?: number,
  ): Promise<ReplyFor<P, O> | undefined> {
    return this.sender.askStream(this.id, message, onMore as (value: unknown) => void, timeoutMs) as Promise<ReplyFor<P, O> | undefined>;
  }

  /** Send without waiting for the turn: resolves once the transport accepted the message. */
  tell<O extends keyof P>(message: MessageFor<P, O> & { op: O }): Promise<void> {
    return this.sender.tell(this.id, message);
  }
}

/** A handler may answer later: it parks the ask with ctx.defer() and returns PARKED. */
type Answer<R> = R | typeof PARKED | Promise<R | typeof PARKED>;

/**
 * An actor's implementation of its protocol: one handler per operation, given the actor and that operation's
 * message, answering that operation's reply type. An actor keeps its table in a static field (so the handlers may
 * call its private methods) and its `receive` calls `dispatch`.
 */
export type Handlers<P, A> = { [O in keyof P]: (actor: A, message: MessageFor<P, O>) => Answer<ReplyFor<P, O>> };

/**
 * The handlers of a part of an actor (an object the actor holds, such as the realm's invitations) as handlers of
 * the actor: each calls the part's handler with the part. Built once per actor class, at load.
 */
export function forward<P, A, Part>(handlers: Handlers<P, Part>, part: (actor: A) => Part): Handlers<P, A> {
  const forwarded: Partial<Record<keyof P, (actor: A, message: never) => unknown>> = {};
  for (const op of Object.keys(handlers) as Array<keyof P>) {
    const handler = handlers[op] as (part: Part, message: never) => unknown;
    forwarded[op] = (actor, message) => handler(part(actor), message);
  }
  return forwarded as Handlers<P, A>;
}

/** Run the handler of `message.op`: a property lookup and a call, no allocation. */
export function dispatch<P, A>(handlers: Handlers<P, A>, actor: A, message: MessageOf<P>): unknown {
  const op = (message as unknown as { op: keyof P }).op;
  // Own properties only: an op named `toString` or `constructor` must not reach Object.prototype's.
  if (!Object.hasOwn(handlers as object, op)) throw errors.unknownOperation(`the operation '${String(op)}'`);
  return (handlers[op] as (actor: A, message: MessageOf<P>) => unknown)(actor, message);
}
