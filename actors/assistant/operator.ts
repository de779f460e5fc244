/**
 * operator:<user id>: an operator's console sessions and API keys. Only hashes arrive here (the gateway makes the
 * token or key and shows it once), so no credential crosses the transport or reaches the store in clear.
 */
import type { Transaction } from "kysely";
import type { Actor, ActorContext } from "../../runtime/actor.ts";
import type { ActorDeps } from "../deps.ts";
import { dispatch, type Handlers, type MessageOf } from "../../runtime/protocol.ts";
import type { CloseConsoleSession, CreateApiKey, OpenConsoleSession, OperatorProtocol } from "./operator.protocol.ts";
import type { Database } from "../schema.ts";

/** An API key's hash (idempotent by key id). The management CLI writes it directly, the actor under its fence. */
export async function insertApiKey(trx: Transaction<Database>, userId: number, key: { keyId: string; keyHash: string }): Promise<void> {
  await trx
    .insertInto("operator_api_keys")
    .values({ id: key.keyId, user_id: userId, key_hash: key.keyHash, created_at: Math.floor(Date.now() / 1000) })
    .onConflict((c) => c.column("id").doNothing())
    .execute();
}

export class OperatorActor implements Actor {
  private readonly userId: number;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.userId = Number(ctx.key);
  }

  /** The implementation of operator.protocol.ts. */
  private static readonly handlers: Handlers<OperatorProtocol, OperatorActor> = {
    openSession: (operator, msg) => operator.openSession(msg),
    closeSession: (operator, msg) => operator.closeSession(msg),
    createApiKey: (operator, msg) => operator.createApiKey(msg),
  };

  receive(msg: MessageOf<OperatorProtocol>): unknown {
    return dispatch(OperatorActor.handlers, this, msg);
  }

  private async openSession(msg: OpenConsoleSession): Promise<{ ok: true }> {
    const now = Math.floor(Date.now() / 1000);
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx.deleteFrom("operator_sessions").where("user_id", "=", this.userId).where("expires_at", "<", now).execute();
      await trx
        .insertInto("operator_sessions")
        .values({ token_hash: msg.tokenHash, user_id: this.userId, csrf_token: msg.csrfToken, expires_at: msg.expiresAt })
        .onConflict((c) => c.column("token_hash").doNothing())
        .execute();
    });
    return { ok: true };
  }

  private async closeSession(msg: CloseConsoleSession): Promise<{ ok: true }> {
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.deleteFrom("operator_sessions").where("user_id", "=", this.userId).where("token_hash", "=", msg.tokenHash).execute(),
    );
    return { ok: true };
  }

  private async createApiKey(msg: CreateApiKey): Promise<{ ok: true }> {
    await this.deps.store.write(this.ctx.fence(), (trx) => insertApiKey(trx, this.userId, msg));
    return { ok: true };
  }

  canPassivate(): boolean {
    return true;
  }
}
