/** Actor kinds, by the `kind` part of their identity. */
import type { ActorFactory } from "../runtime/actor.ts";
import { loadAssistantConfig } from "../runtime/assistant-config.ts";
import { AgentActor } from "./agent.ts";
import { AgentSessionActor } from "./agent-session.ts";
import type { AssistantDeps } from "./assistant-deps.ts";
import { OperatorActor } from "./operator.ts";
import { ChannelActor } from "./channel.ts";
import { DmActor } from "./dm.ts";
import { FlagsActor } from "./flags.ts";
import { SchedulerActor } from "./scheduler.ts";
import { UserTopicsActor } from "./user-topics.ts";
import type { ActorDeps } from "./deps.ts";
import { AGENT, AGENT_SESSION, CHANNEL, DM, FLAGS, OPERATOR, REALM, SCHEDULER, USER, USER_TOPICS } from "./protocol.ts";
import { RealmActor } from "./realm.ts";
import { UserActor } from "./user.ts";
import { PRESENCE, PresenceActor } from "./presence.ts";

export function actorKinds(
  deps: ActorDeps,
  assistant: AssistantDeps = { config: loadAssistantConfig(), wakeWebhooks: () => {} },
): Record<string, ActorFactory> {
  return {
    [REALM]: (ctx) => new RealmActor(ctx, deps),
    [CHANNEL]: (ctx) => new ChannelActor(ctx, deps),
    [DM]: (ctx) => new DmActor(ctx, deps),
    [FLAGS]: (ctx) => new FlagsActor(ctx, deps),
    [SCHEDULER]: (ctx) => new SchedulerActor(ctx, deps),
    [USER_TOPICS]: (ctx) => new UserTopicsActor(ctx, deps),
    [USER]: (ctx) => new UserActor(ctx, deps),
    [PRESENCE]: (ctx) => new PresenceActor(ctx, deps),
    [AGENT]: (ctx) => new AgentActor(ctx, deps, assistant),
    [AGENT_SESSION]: (ctx) => new AgentSessionActor(ctx, deps, assistant),
    [OPERATOR]: (ctx) => new OperatorActor(ctx, deps),
  };
}
