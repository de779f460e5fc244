/**
 * operator:<user id>: one console operator's sessions and API keys. Handlers: OperatorActor.handlers in
 * operator.ts.
 */
import { actorKind, type Op } from "../../runtime/protocol.ts";

export interface OpenConsoleSession {
  op: "openSession";
  tokenHash: string;
  csrfToken: string;
  expiresAt: number;
}

export interface CreateApiKey {
  op: "createApiKey";
  keyId: string;
  keyHash: string;
}

/** Signing out: the session's row goes (unknown tokens are fine: signing out twice is not an error). */
export interface CloseConsoleSession {
  op: "closeSession";
  tokenHash: string;
}

export type OperatorProtocol = {
  openSession: Op<OpenConsoleSession, { ok: true }>;
  closeSession: Op<CloseConsoleSession, { ok: true }>;
  createApiKey: Op<CreateApiKey, { ok: true }>;
};

export const Operator = actorKind<OperatorProtocol>("operator");
