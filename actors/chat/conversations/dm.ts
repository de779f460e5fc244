/**
 * dm:<sorted user ids>: one direct-message conversation (1:1, group, or a user's messages to themself), Zulip's
 * recipient for that set of users. Its recipient id is created with the conversation and never changes, so
 * both directions of a 1:1 conversation share it (Zulip's behaviour since feature level 327).
 */
import type { PARKED } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import { Conversation, type MovePlan } from "./conversation.ts";
import type { MessageRecord } from "../rendering/message-format.ts";
import { dispatch, type Handlers, type MessageOf } from "../../../runtime/protocol.ts";
import type { DmProtocol, SendToDm } from "./dm.protocol.ts";

/** Zulip's recipient type for a direct-message group; every conversation is one here, 1:1 included. */
export const RECIPIENT_DM = 3;

/** The conversation's key: the participants' ids, sorted and unique. */
export function dmKey(userIds: number[]): string {
  return [...new Set(userIds)].sort((a, b) => a - b).join(",");
}

/**
 * How long the participants' names and API e-mails (a message's display_recipient) are trusted without news of a
 * change. Accounts change rarely (a rename, an e-mail visibility change), and each change is announced
 * (forgetDmParticipants); this is the backstop for a worker that missed the announcement, which also keeps a
 * sender's own cached credentials for as long.
 */
const PARTICIPANTS_MS = 2000;

/** Counts the account changes this process heard of: a conversation that read its participants before reads again. */
let accountChanges = 0;

/** Some account changed (the gateway's notice): every conversation reads its participants again before its next send. */
export function forgetDmParticipants(): void {
  accountChanges++;
}

export class DmActor extends Conversation {
  private participants: Array<{ id: number; email: string; full_name: string; is_mirror_dummy: boolean }> = [];
  private participantsReadAt = 0;
  private participantsChanges = 0;

  private async readParticipants(ids: number[]) {
    const users = await this.deps.store.db
      .selectFrom("users")
      .innerJoin("realms", "realms.id", "users.realm_id")
      .select(["users.id", "users.email", "users.full_name", "users.realm_id", "realms.string_id"])
      .where("users.id", "in", ids)
      .orderBy("users.id")
      .execute();
    this.participants = users.map((u) => ({ id: u.id, email: u.email, full_name: u.full_name, is_mirror_dummy: false }));
    this.participantsReadAt = Date.now();
    this.participantsChanges = accountChanges;
    return users;
  }

  async activate(): Promise<void> {
    const ids = this.ctx.key.split(",").map(Number);
    if (!ids.length || ids.some((n) => !Number.isSafeInteger(n)) || dmKey(ids) !== this.ctx.key) throw errors.badRequest("Invalid direct-message conversation");
    const db = this.deps.store.db;
    const users = await this.readParticipants(ids);
    if (users.length !== ids.length || new Set(users.map((u) => u.realm_id)).size !== 1) throw errors.badRequest("Invalid direct-message conversation");
    this.realmId = users[0]!.realm_id;
    this.realmStr = users[0]!.string_id;
    this.recipientId = await this.ensureRecipient(ids);
    const last = await db.selectFrom("messages").select((eb) => eb.fn.coalesce(eb.fn.max("id"), eb.lit(0)).as("max")).where("recipient_id", "=", this.recipientId).executeTakeFirst();
    this.lastMessageId = Number(last?.max ?? 0);
  }

  private async ensureRecipient(ids: number[]): Promise<number> {
    const find = () =>
      this.deps.store.db
        .selectFrom("recipients")
        .select("id")
        .where("type", "=", RECIPIENT_DM)
        .where("realm_id", "=", this.realmId)
        .where("dm_key", "=", this.ctx.key)
        .executeTakeFirst();
    const found = await find();
    if (found) return found.id;
    return this.deps.store.write(this.ctx.fence(), async (trx) => {
      const row = await trx
        .insertInto("recipients")
        .values({ realm_id: this.realmId, type: RECIPIENT_DM, type_id: null, dm_key: this.ctx.key })
        .returning("id")
        .executeTakeFirstOrThrow();
      await trx.insertInto("recipient_members").values(ids.map((user_id) => ({ recipient_id: row.id, user_id }))).execute();
      return row.id;
    });
  }

  /** The implementation of dm.protocol.ts. */
  private static readonly handlers: Handlers<DmProtocol, DmActor> = {
    ...Conversation.conversationHandlers,
    send: (dm, msg) => dm.sendWithFreshParticipants(msg),
  };

  receive(msg: MessageOf<DmProtocol>): unknown {
    return dispatch(DmActor.handlers, this, msg);
  }

  private async sendWithFreshParticipants(msg: SendToDm): Promise<typeof PARKED> {
    if (this.participantsChanges !== accountChanges || Date.now() - this.participantsReadAt >= PARTICIPANTS_MS) await this.readParticipants(this.participants.map((p) => p.id));
    return this.send(msg, "");
  }

  protected recipients(): number[] {
    return this.participants.map((p) => p.id);
  }

  protected recordBase(): Pick<MessageRecord, "type" | "stream_id" | "display_recipient"> {
    return { type: "private", stream_id: null, display_recipient: this.participants };
  }

  protected async planMove(msg: { topic?: string; streamId?: number }): Promise<MovePlan> {
    throw errors.badRequest(msg.streamId !== undefined ? "Direct messages cannot be moved to channels." : "Direct messages cannot have topics.");
  }
}
