/** Actor kinds, by the `kind` part of their identity. */
import type { ActorFactory } from "../runtime/actor.ts";
import { ChannelActor } from "./channel.ts";
import type { ActorDeps } from "./deps.ts";
import { CHANNEL, REALM, USER } from "./protocol.ts";
import { RealmActor } from "./realm.ts";
import { UserActor } from "./user.ts";
import { PRESENCE, PresenceActor } from "./presence.ts";

export function actorKinds(deps: ActorDeps): Record<string, ActorFactory> {
  return {
    [REALM]: (ctx) => new RealmActor(ctx, deps),
    [CHANNEL]: (ctx) => new ChannelActor(ctx, deps),
    [USER]: (ctx) => new UserActor(ctx, deps),
    [PRESENCE]: (ctx) => new PresenceActor(ctx, deps),
  };
}
