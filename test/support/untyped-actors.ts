/**
 * Runtime tests' test actors take any message and answer anything: their references are untyped (`any` protocol),
 * and these helpers reach them by full id (`kind:key`). Code outside the runtime's tests declares a protocol.
 */
import { parseActorId, type ActorId } from "../../runtime/actor.ts";
import { actorKind, type ActorRef, type Op } from "../../runtime/protocol.ts";
import type { ActorSystem } from "../../runtime/system.ts";

/** Any operation, any message, any reply. */
export type Untyped = { [op: string]: Op<any, any> };

/** A kind of test actor. */
export const untypedKind = (name: string) => actorKind<Untyped>(name);

/** A reference to the actor `id` on `system`. */
export function at(system: ActorSystem, id: ActorId): ActorRef<Untyped> {
  const { kind, key } = parseActorId(id);
  return system.ref(untypedKind(kind), key);
}

/** system.broadcast to actors given by full id, all of one kind. */
export function broadcastAt(system: ActorSystem, ids: ActorId[], message: any, timeoutMs?: number): Promise<void> {
  const parsed = ids.map(parseActorId);
  const kinds = new Set(parsed.map((p) => p.kind));
  if (kinds.size > 1) throw new Error(`broadcast to one kind at a time, not ${[...kinds].join(", ")}`);
  return system.broadcast(untypedKind(parsed[0]?.kind ?? "none"), parsed.map((p) => p.key), message, timeoutMs);
}
