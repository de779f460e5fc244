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
import { AgentSession } from "./assistant/agent-session.protocol.ts";
import { Agent } from "./assistant/agent.protocol.ts";
import { Operator } from "./assistant/operator.protocol.ts";
import { Channel } from "./chat/conversations/channel.protocol.ts";
import { Dm } from "./chat/conversations/dm.protocol.ts";
import { Flags } from "./chat/conversations/flags.protocol.ts";
import { Scheduler } from "./chat/conversations/scheduler.protocol.ts";
import { Realm } from "./chat/organization/realm.protocol.ts";
import { UserTopics } from "./chat/users/user-topics.protocol.ts";
import { User } from "./chat/users/user.protocol.ts";
import { RealmActor } from "./chat/organization/realm.ts";
import { UserActor } from "./chat/users/user.ts";
import { PresenceActor } from "./chat/users/presence.ts";
import { Presence } from "./chat/users/presence.protocol.ts";

export function actorKinds(
  deps: ActorDeps,
  assistant: AssistantDeps = { config: loadAssistantConfig(), wakeWebhooks: () => {} },
): Record<string, ActorFactory> {
  return {
    [Realm.name]: (ctx) => new RealmActor(ctx, deps),
    [Channel.name]: (ctx) => new ChannelActor(ctx, deps),
    [Dm.name]: (ctx) => new DmActor(ctx, deps),
    [Flags.name]: (ctx) => new FlagsActor(ctx, deps),
    [Scheduler.name]: (ctx) => new SchedulerActor(ctx, deps),
    [UserTopics.name]: (ctx) => new UserTopicsActor(ctx, deps),
    [User.name]: (ctx) => new UserActor(ctx, deps),
    [Presence.name]: (ctx) => new PresenceActor(ctx, deps),
    [Agent.name]: (ctx) => new AgentActor(ctx, deps, assistant),
    [AgentSession.name]: (ctx) => new AgentSessionActor(ctx, deps, assistant),
    [Operator.name]: (ctx) => new OperatorActor(ctx, deps),
  };
}
