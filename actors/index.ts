/** Actor kinds, by the `kind` part of their identity. */
import type { ActorFactory } from "../runtime/actor.ts";
import { loadAssistantConfig } from "./assistant/config.ts";
import { AgentActor } from "./assistant/agent.ts";
import { AgentSessionActor } from "./assistant/agent-session.ts";
import type { AssistantDeps } from "./assistant/deps.ts";
import { OperatorActor } from "./assistant/operator.ts";
import { ChannelActor } from "./chat/conversations/channel.ts";
import { DmActor } from "./chat/conversations/dm.ts";
import { FlagsActor } from "./chat/conversations/flags.ts";
import { SchedulerActor } from "./chat/conversations/scheduler.ts";
import { UserTopicsActor } from "./chat/users/user-topics.ts";
import type { ActorDeps } from "./deps.ts";
import { AGENT, AGENT_SESSION, CHANNEL, DM, FLAGS, OPERATOR, REALM, SCHEDULER, USER, USER_TOPICS } from "./protocol.ts";
import { RealmActor } from "./chat/organization/realm.ts";
import { UserActor } from "./chat/users/user.ts";
import { PRESENCE, PresenceActor } from "./chat/users/presence.ts";

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
