/**
 * flags:<user id>: one user's message flags (Zulip's UserMessage.flags), stored as Zulip's bitfield in
 * `user_message_rows`. Rows are created by the conversation actor that commits the message (every recipient gets
 * one, possibly through a recipient list: see actors/chat/message-log.ts); this actor owns every later change, so two
 * clients marking the same messages serialise here.
 *
 * It is its own kind rather than part of `user:<id>` only because that actor is being reworked; the state is
 * the same user's, and folding it in later changes no table.
 */
import { sql, type RawBuilder, type SqlBool } from "kysely";
import type { Actor, ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { dispatch, type Handlers, type MessageOf } from "../../../runtime/protocol.ts";
import type { FlagsProtocol, MarkChannelRead, MarkedRead, UpdateFlags, UpdatedFlags } from "./flags.protocol.ts";
import { User } from "../users/user.protocol.ts";

/** Zulip's flag bits, in Zulip's order (zerver/models/messages.py AbstractUserMessage.ALL_FLAGS). */
export const FLAG_BITS = {
  read: 1,
  starred: 2,
  collapsed: 4,
  mentioned: 8,
  stream_wildcard_mentioned: 16,
  topic_wildcard_mentioned: 32,
  has_alert_word: 64,
  historical: 128,
} as const;
export type FlagName = keyof typeof FLAG_BITS;

/** The flags a message's content decides for each recipient: recomputed when the content is edited. */
export const MENTION_FLAGS = FLAG_BITS.mentioned | FLAG_BITS.stream_wildcard_mentioned | FLAG_BITS.topic_wildcard_mentioned;

/** What clients may change through POST /messages/flags; the rest follow from the content. */
const EDITABLE = new Set<string>(["read", "starred", "collapsed"]);

/** The API's flag list for a bitfield; `wildcard_mentioned` is Zulip's legacy union of both wildcard flags. */
export function flagList(bits: number): string[] {
  const out: string[] = [];
  for (const [name, bit] of Object.entries(FLAG_BITS)) if (bits & bit) out.push(name);
  if (bits & (FLAG_BITS.stream_wildcard_mentioned | FLAG_BITS.topic_wildcard_mentioned)) out.push("wildcard_mentioned");
  return out;
}

/** Flags of a message the user can read but never received (a public channel's history). */
export const HISTORICAL_FLAGS = ["read", "historical"];

export function checkEditableFlag(flag: string): FlagName {
  if (!(flag in FLAG_BITS) && flag !== "wildcard_mentioned") throw errors.badRequest(`Invalid flag: '${flag}'`);
  if (!EDITABLE.has(flag)) throw errors.badRequest(`Flag not editable: '${flag}'`);
  return flag as FlagName;
}

export class FlagsActor implements Actor {
  private readonly userId: number;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.userId = Number(ctx.key);
  }

  /** The implementation of flags.protocol.ts. */
  private static readonly handlers: Handlers<FlagsProtocol, FlagsActor> = {
    updateFlags: (flags, msg) => flags.update(msg),
    markAllRead: (flags) => flags.markAllRead(),
    markChannelRead: (flags, msg) => flags.markChannelRead(msg),
  };

  receive(msg: MessageOf<FlagsProtocol>): unknown {
    return dispatch(FlagsActor.handlers, this, msg);
  }

  /**
   * Set or clear one flag on messages the gateway found readable. A message the user never received gets a
   * `historical` row when flagged (Zulip does the same), so starring a public channel's old message sticks.
   * Reports only the messages whose flag actually changed, as Zulip does.
   */
  private async update(msg: UpdateFlags): Promise<UpdatedFlags> {
    const bit = FLAG_BITS[msg.flag as FlagName];
    const ids = [...new Set(msg.messageIds)];
    if (!ids.length) return { messages: [] };
    const changed = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await this.deps.messageLog.expandRecipientLists(trx, ids);
      const rows = await trx.selectFrom("user_message_rows").select(["message_id", "flags"]).where("user_id", "=", this.userId).where("message_id", "in", ids).execute();
      const have = new Map(rows.map((r) => [Number(r.message_id), r.flags]));
      const changed: number[] = [];
      const historical: number[] = [];
      for (const id of ids) {
        const flags = have.get(id);
        if (flags === undefined) {
          // Never received: it reads as read + historical, so only setting starred/collapsed changes anything.
          if (msg.add && bit !== FLAG_BITS.read) historical.push(id);
          continue;
        }
        if (Boolean(flags & bit) !== msg.add) changed.push(id);
      }
      if (changed.length) {
        await trx
          .updateTable("user_message_rows")
          .set({ flags: msg.add ? sql`flags | ${bit}` : sql`flags & ${~bit}` })
          .where("user_id", "=", this.userId)
          .where("message_id", "in", changed)
          .execute();
      }
      if (historical.length) {
        const bits = bit | FLAG_BITS.read | FLAG_BITS.historical;
        await trx
          .insertInto("user_message_rows")
          .values(historical.map((message_id) => ({ user_id: this.userId, message_id, flags: bits })))
          .onConflict((c) => c.columns(["user_id", "message_id"]).doNothing())
          .execute();
      }
      return [...changed, ...historical].sort((a, b) => a - b);
    });
    if (changed.length) {
      const event: Record<string, unknown> = { type: "update_message_flags", op: msg.add ? "add" : "remove", operation: msg.add ? "add" : "remove", flag: msg.flag, messages: changed, all: false };
      if (!msg.add && msg.flag === "read") {
        event.message_details = Object.fromEntries(changed.filter((id) => msg.details?.[id]).map((id) => [id, msg.details![id]]));
      }
      await this.announce(event);
    }
    return { messages: changed };
  }

  /**
   * Zulip's do_mark_all_as_read: batches of MARK_ALL_BATCH, each its own commit so a large backlog makes progress,
   * then one event with `all: true` and no ids (clients reload their unread state).
   */
  private async markAllRead(): Promise<MarkedRead> {
    let count = 0;
    for (;;) {
      const marked = await this.markRead(sql<UnreadRow>`select message_id from unread_user_messages where user_id = ${this.userId} limit ${MARK_ALL_BATCH}`);
      count += marked.length;
      if (marked.length < MARK_ALL_BATCH) break;
    }
    await this.announce(readEvent([], true));
    return { count };
  }

  /** Zulip's do_mark_stream_messages_as_read: the user's unread messages of a channel (or one of its topics). */
  private async markChannelRead(msg: MarkChannelRead): Promise<MarkedRead> {
    const topic = msg.topic === undefined ? sql`` : sql`and lower(m.topic) = ${msg.topic.toLowerCase()}`;
    const marked = await this.markRead(
      sql<UnreadRow>`select um.message_id from unread_user_messages um join messages m on m.id = um.message_id
        where um.user_id = ${this.userId} and m.stream_id = ${msg.streamId} ${topic}`,
    );
    if (marked.length) await this.announce(readEvent(marked, false));
    return { count: marked.length };
  }

  /** Mark read the unread messages a query names (expanding their recipient lists first); the ids it changed. */
  private markRead(unread: RawBuilder<UnreadRow>): Promise<number[]> {
    return this.deps.store.write(this.ctx.fence(), async (trx) => {
      const ids = (await unread.execute(trx)).rows.map((r) => Number(r.message_id));
      if (!ids.length) return [];
      await this.deps.messageLog.expandRecipientLists(trx, ids);
      const updated = await trx
        .updateTable("user_message_rows")
        .set({ flags: sql`flags | ${FLAG_BITS.read}` })
        .where("user_id", "=", this.userId)
        .where("message_id", "in", ids)
        .where(sql<SqlBool>`(flags & ${FLAG_BITS.read}) = 0`)
        .returning("message_id")
        .execute();
      return updated.map((r) => Number(r.message_id)).sort((a, b) => a - b);
    });
  }

  /** Asked, not told: a flag change succeeds only once its event is in the user's queues. */
  private async announce(event: Record<string, unknown>): Promise<void> {
    await this.deps.system().broadcast(User, [this.userId], { op: "deliverEvent", event });
  }
}

/** An unread message of the user's, as the mark-as-read queries name it. */
type UnreadRow = { message_id: number };

/** Zulip's batch for marking everything read (zerver/actions/message_flags.py). */
const MARK_ALL_BATCH = 2000;

/** Zulip's ReadMessagesEvent. */
function readEvent(messages: number[], all: boolean): Record<string, unknown> {
  return { type: "update_message_flags", op: "add", operation: "add", flag: "read", messages, all };
}
