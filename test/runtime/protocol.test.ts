/**
 * Typed actor protocols (runtime/protocol.ts). The `@ts-expect-error` lines are the test of the typing: tsc fails
 * if any of them stops being an error (a wrong operation, a wrong field, a wrong reply type, a handler answering
 * the wrong type). Then one round trip on the memory transport: ask, askTransient, tell and broadcast reach the
 * handlers, replies come back typed, and the message the handler receives is the very object the caller built
 * (no copy on the way: the wire message is the caller's `{ op, …fields }`).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { Actor, ActorContext } from "../../runtime/actor.ts";
import { actorKind, dispatch, type Empty, type Handlers, type MessageOf, type Op } from "../../runtime/protocol.ts";
import { ChorusError } from "../../runtime/errors.ts";
import { ActorSystem } from "../../runtime/system.ts";
import { MemoryTransport } from "../../runtime/transport/memory.ts";
import { MemoryPubSub } from "../../runtime/transport/memory-pubsub.ts";

interface Add {
  op: "add";
  by: number;
}
interface Get {
  op: "get";
}
interface Rename {
  op: "rename";
  name: string;
}

type CounterProtocol = {
  add: Op<Add, number>;
  get: Op<Get, { total: number; name: string }>;
  rename: Op<Rename, Empty>;
};
const Counter = actorKind<CounterProtocol>("counter");

/** Every message a counter received, as received. */
const received: unknown[] = [];

class CounterActor implements Actor {
  private total = 0;
  private name = "";

  private static readonly handlers: Handlers<CounterProtocol, CounterActor> = {
    add: (counter, msg) => (counter.total += msg.by),
    get: (counter) => ({ total: counter.total, name: counter.name }),
    rename: (counter, msg) => {
      counter.name = msg.name;
      return {};
    },
  };

  receive(msg: MessageOf<CounterProtocol>): unknown {
    received.push(msg);
    return dispatch(CounterActor.handlers, this, msg);
  }
}

// ---- what must not compile ------------------------------------------------------------------------------------

async function typeErrors(system: ActorSystem): Promise<void> {
  const counter = system.ref(Counter, 1);
  // @ts-expect-error an operation the protocol does not have
  await counter.ask({ op: "reset" });
  // @ts-expect-error a field the operation does not take
  await counter.ask({ op: "add", by: 1, times: 2 });
  // @ts-expect-error a field of the wrong type
  await counter.ask({ op: "add", by: "one" });
  // @ts-expect-error a missing field
  await counter.tell({ op: "rename" });
  // @ts-expect-error the reply of `add` is a number, not a string
  const wrongReply: string = await counter.ask({ op: "add", by: 1 });
  // @ts-expect-error broadcast checks the message as ask does
  await system.broadcast(Counter, [1, 2], { op: "get", extra: true });
  // @ts-expect-error the untyped sending side is the runtime's own
  await system.ask("counter:1", { op: "get" });
  const _wrongHandlers: Handlers<CounterProtocol, CounterActor> = {
    add: () => 1,
    // @ts-expect-error a handler answering another type than its operation's reply
    get: () => "total",
    rename: () => ({}),
  };
  // @ts-expect-error a table without the handler of every operation
  const _missing: Handlers<CounterProtocol, CounterActor> = { add: () => 1, get: () => ({ total: 0, name: "" }) };
  void [wrongReply, _wrongHandlers, _missing];
}
void typeErrors;

// ---- a round trip -------------------------------------------------------------------------------------------------

describe("typed references", () => {
  let system: ActorSystem | undefined;
  let transport: MemoryTransport | undefined;

  afterEach(async () => {
    await system?.close();
    await transport?.close();
    received.length = 0;
  });

  it("send the caller's message as it is and bring back each operation's reply", async () => {
    transport = new MemoryTransport();
    system = new ActorSystem({ transport, shards: 4, kinds: { [Counter.name]: (_ctx: ActorContext) => new CounterActor() }, askTimeoutMs: 3000, pubsub: new MemoryPubSub() });
    await system.start();
    for (let shard = 0; shard < 4; shard++) await system.holdShard(shard, 1);

    const counter = system.ref(Counter, 7);
    expect(counter.id).toBe("counter:7");
    const add: Add = { op: "add", by: 2 };
    const total: number = await counter.ask(add);
    expect(total).toBe(2);
    expect(received[0]).toBe(add); // the very object: no copy, no wrapper

    await counter.tell({ op: "rename", name: "seven" });
    const state: { total: number; name: string } = await counter.askTransient({ op: "get" });
    expect(state).toEqual({ total: 2, name: "seven" });

    await system.broadcast(Counter, [7, 8, 9], { op: "add", by: 1 });
    const totals = await Promise.all([7, 8, 9].map((key) => system!.ref(Counter, key).ask({ op: "get" })));
    expect(totals.map((t) => t.total)).toEqual([3, 1, 1]);
  });

  it("answer an operation or kind the process does not know with a named error, not an internal one", async () => {
    transport = new MemoryTransport();
    system = new ActorSystem({ transport, shards: 4, kinds: { [Counter.name]: (_ctx: ActorContext) => new CounterActor() }, askTimeoutMs: 3000, pubsub: new MemoryPubSub() });
    await system.start();
    for (let shard = 0; shard < 4; shard++) await system.holdShard(shard, 1);
    const untyped = system.ref(actorKind<Record<string, Op<{ op: string }, unknown>>>("counter"), 7);
    // `toString` is on every object's prototype: it must not count as an operation either.
    for (const op of ["reset", "toString", "constructor"]) {
      const failure = await untyped.ask({ op }).then(() => undefined, (err: unknown) => err);
      expect(failure, op).toBeInstanceOf(ChorusError);
      expect((failure as ChorusError).code).toBe("UNKNOWN_OPERATION");
      expect((failure as ChorusError).message).toContain(`'${op}'`);
    }
    const noKind = await system.ref(actorKind<Record<string, Op<{ op: string }, unknown>>>("nokind"), 1).ask({ op: "get" }).catch((err: unknown) => err);
    expect((noKind as ChorusError).code).toBe("UNKNOWN_OPERATION");
  });
});
