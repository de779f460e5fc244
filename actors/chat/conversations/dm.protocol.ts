/**
 * dm:<sorted user ids>: one direct-message conversation. Handlers: DmActor.handlers in dm.ts (edit, delete and
 * react: Conversation.conversationHandlers in conversation.ts).
 */
import { actorKind, type Op } from "../../../runtime/protocol.ts";
import type { ConversationProtocol, SendToChannel, Sent } from "./conversation.protocol.ts";

/** A direct message; the conversation (and its participants) is the actor's key. */
export type SendToDm = Omit<SendToChannel, "topic">;

export type DmProtocol = {
  send: Op<SendToDm, Sent>;
} & ConversationProtocol;

export const Dm = actorKind<DmProtocol>("dm");
