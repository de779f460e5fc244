/**
 * What channels and direct-message conversations share: a conversation owns its messages. Sends take an id,
 * commit (the message and its recipients' flag rows in the store's group commit, before the reply), then reach
 * the recipients' queues. Edits, deletions and reactions of its messages are
 * turns here too, so they serialise with sends and with each other.
 *
 * Subclasses say who the recipients are, how the conversation is displayed, and (channels only) how messages move.
 */
import crypto from "node:crypto";
import { sql, type Transaction } from "kysely";
import { PARKED, type Actor, type ActorContext } from "../../../runtime/actor.ts";
import { settledWithin } from "../../../runtime/settled.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import { chatErrors } from "../errors.ts";
import { log } from "../../../runtime/log.ts";
import type { MessageTable } from "../schema.ts";
import type { ActorDeps } from "../../deps.ts";
import { FLAG_BITS, flagList, MENTION_FLAGS } from "./flags.ts";
import { inGroupSetting, type GroupSettingValue } from "../organization/groups.ts";
import { contentEditRefusal, messageRules, pastLimit, type MessageRules } from "./message-rules.ts";
import { isMeMessage, type MessageRecord, type Submessage } from "../rendering/message-format.ts";
import { renderMarkdown as renderZulipMarkdown, type RenderResult } from "../rendering/markdown.ts";
import { markdownContext } from "../rendering/mentions.ts";
import { usersAlertedBy } from "../users/alert-words.ts";
import { topicLinks } from "../rendering/linkifiers.ts";
import { compiledLinkifiers } from "../organization/linkifiers.ts";
import { usersMutingCache } from "../users/user-data.ts";
import type { Handlers } from "../../../runtime/protocol.ts";
import type { Acting, AddSubmessage, ConversationProtocol, DeleteMessage, EditMessage, Edited, React, RedeliverMessages, RefreshUploadPreview, Sent } from "./conversation.protocol.ts";
import { checkWidgetData, widgetSubmessageContent, widgetTypeOf } from "./widgets.ts";
import { submessagesOf } from "../reads/submessages.ts";
import { placeholderPaths, rewriteUploadPreviews } from "../rendering/thumbnails.ts";
import type { SendToDm } from "./dm.protocol.ts";
import { User, type DeliverMessage } from "../users/user.protocol.ts";
import type { Database } from "../../schema.ts";
import { attachmentsOfMessages, detachedUploads, notifyAttachmentUpdates, uploadPreviews } from "../organization/attachments.ts";

/** A message delivered again from its owed fan-out's record (Conversation.redeliver), as its after-steps need it. */
export type RedeliveredMessage = { id: number; senderId: number; senderIsBot: boolean; topic: string };

export const invalidMessage = () => errors.badRequest("Invalid message(s)");

/** The stored message a turn works on. */
export type StoredMessage = Pick<MessageTable, "id" | "sender_id" | "recipient_id" | "stream_id" | "topic" | "content" | "rendered_content" | "date_sent">;

/** What a move to another channel changes in who holds the messages (see ChannelActor.accessChange). */
export interface AccessChange {
  /** Users whose flag rows for the moved messages go. */
  dropFlagsOf: number[];
  /** Users who get read flag rows for them (already having one changes nothing). */
  readFlagsFor: number[];
  /** Users who can no longer read them: a delete_message event instead of update_message. */
  losingAccess: number[];
}

/** A move decided by a channel: which messages go where. */
export interface MovePlan extends AccessChange {
  messageIds: number[];
  topic: string;
  streamId: number;
  recipientId: number;
  /** Resolving or unresolving only: no last_moved_timestamp, as in Zulip. */
  resolveOnly: boolean;
  /** Users to tell besides this conversation's recipients (the destination channel's subscribers). */
  alsoNotify: number[];
  /** Runs after the commit, before events go out (the destination channel learns its new ids). */
  afterCommit(): Promise<void>;
  /** Runs last: Notification Bot's notices about the move. */
  notices(): Promise<void>;
}

/** The first wait before a failed fan-out is tried again; it doubles up to the second. */
const FAN_OUT_RETRY_MS = 50;
const FAN_OUT_RETRY_MAX_MS = 2_000;
/** Past this a fan-out that still fails is given up. */
const FAN_OUT_GIVE_UP_MS = 120_000;
/** How long a conversation leaving this process waits for its fan-outs under way (see deactivate). */
const OWED_FAN_OUTS_WAIT_MS = 1_000;

/** Zulip's Realm.WILDCARD_MENTION_THRESHOLD. */
export const WILDCARD_MENTION_THRESHOLD = 15;

export abstract class Conversation implements Actor {
  protected lastMessageId = 0;
  protected realmId = 0;
  protected realmStr = "";
  protected recipientId = 0;

  constructor(
    protected readonly ctx: ActorContext,
    protected readonly deps: ActorDeps,
  ) {}

  abstract activate(): Promise<void>;
  /** Users who receive the conversation's messages and events. */
  protected abstract recipients(): number[];

  /** Non-recipients who also get new messages (queues following every public channel). */
  protected observers(): number[] {
    return [];
  }
  protected abstract recordBase(): Pick<MessageRecord, "type" | "stream_id" | "display_recipient">;
  protected abstract planMove(msg: EditMessage, row: StoredMessage, rules: MessageRules, now: number): Promise<MovePlan>;
  /** Channel-level permission settings (group-setting values), none for direct messages. */
  protected channelSetting(_name: string): unknown {
    return undefined;
  }
  protected eventBase(): Record<string, unknown> {
    return {};
  }

  /** The operations every conversation answers (conversation.protocol.ts); each kind's table includes them. */
  protected static readonly conversationHandlers: Handlers<ConversationProtocol, Conversation> = {
    edit: (conversation, msg) => conversation.edit(msg),
    delete: (conversation, msg) => conversation.delete(msg),
    react: (conversation, msg) => conversation.react(msg),
    addSubmessage: (conversation, msg) => conversation.addSubmessage(msg),
    refreshUploadPreview: (conversation, msg) => conversation.refreshUploadPreview(msg),
    redeliver: (conversation, msg) => conversation.redeliver(msg),
  };

  abstract receive(msg: unknown): unknown;

  // ---- send ---------------------------------------------------------------------------------------------------

  /**
   * Topics (lower-cased) with a send still committing, and how many: a later send in the same topic is not its
   * first message even before the first one is in the store.
   */
  protected readonly committing = new Map<string, number>();

  /** Sends' fan-outs recorded as owed and not done yet (see deactivate). */
  private readonly owedFanOuts = new Set<Promise<unknown>>();

  /**
   * Leaving this process (its shard is handed over, or the process stops): the fan-outs under way finish and their
   * records go first, so the shard's next holder finds none of them and delivers nothing again. A queue that had a
   * message and acknowledged it no longer knows it, and would take a second delivery as new (a repeat the membership
   * test saw once in a run).
   *
   * Briefly (OWED_FAN_OUTS_WAIT_MS): a fan-out ends within milliseconds unless its users' shards are unserved, and
   * then the shard manager's tick that runs this hand-over may be what would serve them. A worker woken from a stall
   * past its leases dropped the shards taken from it while its peer handed them back: each tick waited for fan-outs
   * to a user whose shard neither would take until its tick ended (docs/chaos.md). A fan-out cut short keeps its
   * record, and the next holder delivers it again.
   */
  async deactivate(): Promise<void> {
    if (!this.ctx.transportRedelivers) return; // nothing is recorded as owed
    await settledWithin(this.owedFanOuts, OWED_FAN_OUTS_WAIT_MS);
    await this.deps.messageLog.fanOutsDoneNow().catch(() => {}); // left rows only mean a message delivered again
  }

  /**
   * `after` runs once the message is committed and delivered, before the reply, with each recipient's mention
   * flags; it may add fields to the reply.
   */
  protected async send(msg: SendToDm, topic: string, after?: (id: number, mentions: Map<number, number>) => Promise<Partial<Sent>>): Promise<typeof PARKED> {
    const rendered = await this.render(msg.content);
    const recipients = this.recipients();
    // Refusals (wildcard mentions) come before the id is taken and the reply parked.
    const mentions = await this.mentionFlags(msg.content, rendered, topic, recipients, msg.senderId);
    // Zulip marks a muted sender's new messages read for those who muted them.
    const mutedBy = (await usersMutingCache.get(this.deps.store.db, this.realmId)).get(msg.senderId) ?? [];
    const id = await this.deps.ids.take(this.lastMessageId);
    this.lastMessageId = id;
    const reply = this.ctx.defer<Sent>();
    const base = this.recordBase();
    // `...base` last: see docs/performance.md on spreads in objects made per message.
    const record: MessageRecord = {
      id,
      sender_id: msg.senderId,
      sender_email: msg.sender.email,
      sender_full_name: msg.sender.full_name,
      sender_realm_str: this.realmStr,
      recipient_id: this.recipientId,
      subject: topic,
      content: msg.content,
      rendered_content: rendered.html,
      timestamp: Math.floor(Date.now() / 1000),
      client: msg.client,
      topic_links: base.type === "stream" ? topicLinks(await compiledLinkifiers.get(this.deps.store.db, this.realmId), topic) : [],
      ...base,
    };
    const senderFlags = (msg.readBySender ? FLAG_BITS.read : 0) | (mentions.get(msg.senderId) ?? 0);
    // Notification Bot's notices start read for some (see SendToChannel): the usual recipient's flags, and theirs.
    const readByDefault = msg.unreadOnlyFor !== undefined;
    const readFor = new Set([...(msg.readFor ?? []), ...mutedBy]);
    const unreadFor = new Set(msg.unreadOnlyFor);
    const startsRead = (user: number) => readFor.has(user) || (readByDefault && !unreadFor.has(user));
    const flagsOf = (user: number) =>
      user === msg.senderId ? senderFlags : (mentions.get(user) ?? 0) | (startsRead(user) ? FLAG_BITS.read : 0);
    const rows = recipients.map((user_id) => ({ user_id, flags: flagsOf(user_id) }));
    // The turn ends here: the next send may take its id while this one commits (the store batches them). Its entry
    // stays unacknowledged until the fan-out has been handed over, and the deliveries made here without the
    // transport have written what they hold (`written`: see fanOut): a worker that dies before then leaves the entry to
    // the next holder, whose redelivered send finds the stored message (by its send key) and delivers it.
    // Acknowledged at the end of the turn, the message would be stored and in no queue.
    const topicKey = topic.toLowerCase();
    this.committing.set(topicKey, (this.committing.get(topicKey) ?? 0) + 1);
    const written: Promise<void>[] = [];
    // Where a crash's unacknowledged entries are delivered again, the commit also records the fan-out as owed, and
    // it stays so until done: a send that came without a transport entry (System.askDirect) has nothing else that
    // would make it again, and the shard's next holder makes it from that record (fan-outs.ts).
    const owesFanOut = this.ctx.transportRedelivers;
    let fannedOut: number | undefined;
    const delivered = this.deps.messageLog
      .appendMessage(
        {
          id,
          realm_id: this.realmId,
          sender_id: msg.senderId,
          recipient_type: base.type === "stream" ? "stream" : "direct",
          recipient_id: this.recipientId,
          stream_id: base.stream_id,
          topic,
          content: record.content,
          rendered_content: record.rendered_content,
          date_sent: record.timestamp,
          sending_client: msg.client,
          send_key: msg.sendKey,
        },
        this.ctx.fence(),
        rows,
        msg.attempt,
        owesFanOut,
      )
      .then(async (storedId) => {
        // A redelivered send, or a client's retry, resolves with the first attempt's id; that attempt wrote the flag
        // rows, and its message is the one delivered (again: the user actors drop a repeat).
        const message = storedId === id ? record : await this.storedInstead(record, storedId, msg.senderId);
        if (message.content.startsWith("/")) message.submessages = await this.widgetSubmessages(storedId, msg.senderId, message.content);
        const delivery: DeliverMessage = {
          op: "deliverMessage",
          message,
          flags: readByDefault ? ["read"] : [],
          flagsFor: Object.fromEntries(
            [...new Set([msg.senderId, ...mentions.keys(), ...readFor, ...unreadFor])].map((u) => [u, flagList(flagsOf(u))]),
          ),
          queueId: msg.queueId,
          localId: msg.localId,
        };
        const recipientSet = new Set(recipients);
        const observers = this.observers().filter((u) => !recipientSet.has(u));
        if (observers.length) delivery.observers = observers;
        await this.fanOut([...recipients, ...observers], delivery, written);
        fannedOut = storedId;
        // The message is committed and delivered: a failure here costs a preview update, never the send.
        if (storedId === id && record.content.includes("/user_uploads/")) {
          await this.afterUploadsLinked(id, record.rendered_content).catch((err) => log.warn({ err }, "telling of a new message's uploads failed"));
        }
        reply.resolve({ id: storedId, ...(after ? await after(storedId, mentions) : {}) });
      })
      .catch((err) => reply.reject(ChorusError.wrap(err)))
      .finally(() => {
        const left = (this.committing.get(topicKey) ?? 1) - 1;
        if (left) this.committing.set(topicKey, left);
        else this.committing.delete(topicKey);
      });
    const done = delivered.then(() => Promise.all(written));
    this.ctx.holdAcknowledgement(done);
    if (owesFanOut) {
      const recorded = done.then(() => fannedOut !== undefined && this.deps.messageLog.fanOutDone(fannedOut), () => {});
      this.owedFanOuts.add(recorded);
      void recorded.finally(() => this.owedFanOuts.delete(recorded));
    }
    return PARKED;
  }

  /**
   * Committed messages' fan-outs that an earlier holder of this conversation's shard may not have finished (their
   * rows in pending_fan_outs: fan-outs.ts), made again from the store, in id order: each to everyone with a flag row
   * for it, with their flags, and to the observers. A recipient whose queue has one already drops the repeat. One
   * deleted since is dropped; one moved to another conversation since is left for the next sweep to find its new
   * owner. Answered once the messages are in the queues; each record is deleted once its queues' rows are written
   * (until then a crash leaves it). A batch, not a turn per message: after a crash every message still being written
   * behind has a record, thousands of them, and each turn's two reads and its fan-out's round trip were most of the
   * recovery's time.
   */
  private async redeliver(msg: RedeliverMessages): Promise<Record<string, never>> {
    const db = this.deps.store.db;
    const ids = [...new Set([...(msg.messageIds ?? []), ...(msg.messageId === undefined ? [] : [msg.messageId])])];
    if (!ids.length) return {};
    const rows = await db
      .selectFrom("messages as m")
      .innerJoin("users as u", "u.id", "m.sender_id")
      .select(["m.id", "m.sender_id", "m.recipient_id", "m.topic", "m.content", "m.rendered_content", "m.date_sent", "m.sending_client", "u.email", "u.full_name", "u.is_bot"])
      .where("m.id", "in", ids)
      .orderBy("m.id")
      .execute();
    const found = new Set(rows.map((row) => Number(row.id)));
    for (const id of ids) if (!found.has(id)) this.deps.messageLog.fanOutDone(id); // deleted since: nothing to deliver
    const mine = rows.filter((row) => row.recipient_id === this.recipientId);
    if (!mine.length) return {};
    const flagRows = await db
      .selectFrom("user_messages")
      .select(["message_id", "user_id", "flags"])
      .where("message_id", "in", mine.map((row) => row.id))
      .execute();
    const flagsOf = new Map<number, Map<number, number>>();
    for (const r of flagRows) {
      const id = Number(r.message_id);
      (flagsOf.get(id) ?? flagsOf.set(id, new Map()).get(id)!).set(r.user_id, r.flags);
    }
    const base = this.recordBase();
    const linkifiers = base.type === "stream" ? await compiledLinkifiers.get(db, this.realmId) : undefined;
    const everyObserver = this.observers();
    const redelivered: Array<{ row: (typeof mine)[number]; record: MessageRecord; flags: Map<number, number>; written: Promise<void>[] }> = [];
    for (const row of mine) {
      const id = Number(row.id);
      // As a send makes it, `...base` last.
      const record: MessageRecord = {
        id,
        sender_id: row.sender_id,
        sender_email: row.email,
        sender_full_name: row.full_name,
        sender_realm_str: this.realmStr,
        recipient_id: row.recipient_id,
        subject: row.topic,
        content: row.content,
        rendered_content: row.rendered_content,
        timestamp: Number(row.date_sent),
        client: row.sending_client,
        topic_links: linkifiers ? topicLinks(linkifiers, row.topic) : [],
        ...base,
      };
      if (row.content.startsWith("/")) record.submessages = await this.widgetSubmessages(id, row.sender_id, row.content);
      redelivered.push({ row, record, flags: flagsOf.get(id) ?? new Map(), written: [] });
    }
    // Every fan-out starts before any is awaited: each queue gets them in id order (one path per shard), and the
    // round trips overlap.
    const fannedOut = redelivered.map(({ record, flags, written }) => {
      const delivery: DeliverMessage = {
        op: "deliverMessage",
        message: record,
        flags: [],
        flagsFor: Object.fromEntries([...flags].map(([user, bits]) => [user, flagList(bits)])),
      };
      const observers = everyObserver.filter((u) => !flags.has(u));
      if (observers.length) delivery.observers = observers;
      return this.fanOut([...flags.keys(), ...observers], delivery, written);
    });
    await Promise.all(fannedOut);
    for (const { row, record, flags, written } of redelivered) {
      // What the send does once its message is delivered, done again: the process that owed this fan-out may have
      // died before it. Each step leaves alone what is done already.
      if (record.content.includes("/user_uploads/")) {
        await this.afterUploadsLinked(record.id, record.rendered_content).catch((err) => log.warn({ err }, "telling of a message's uploads failed"));
      }
      await this.afterRedelivered({ id: record.id, senderId: row.sender_id, senderIsBot: row.is_bot, topic: row.topic }, flags).catch((err) =>
        log.warn({ err }, `the automatic steps after message ${record.id} failed`),
      );
      // Answered once in the queues; the record goes once their rows are written too, which this conversation's next
      // turns need not wait for (a write-behind may wait a while for company).
      void Promise.all(written).then(() => this.deps.messageLog.fanOutDone(record.id), () => {});
    }
    return {};
  }

  /**
   * What a send does after its message is delivered besides answering (a channel's automatic topic policies), done
   * again for a message delivered again from its record: the send that owed the fan-out may have died first.
   * `flags`: each recipient's stored flags.
   */
  protected async afterRedelivered(_message: RedeliveredMessage, _flags: Map<number, number>): Promise<void> {}

  /**
   * A committed message's delivery to its recipients' queues, tried again while it fails for want of the transport
   * or a worker (Redis down, an ask timing out), as long as this conversation holds its shard: the send's entry is
   * held unacknowledged meanwhile. Given up, a queue would miss a message whose send is answered with its id (the
   * gateway settles a failed send from the store). A delivery made twice is queued once (the user actors drop a
   * repeated message id); once the shard is gone, its next holder gets the send's entry again and delivers it.
   * The users held here get it without the transport (broadcastHeld): what their deliveries hold goes onto `held`,
   * which the send's entry is acknowledged after.
   */
  private async fanOut(users: number[], delivery: DeliverMessage, held: Promise<void>[]): Promise<void> {
    const since = Date.now();
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.deps.system().broadcastHeld(User, users, delivery, held);
      } catch (err) {
        const failure = ChorusError.wrap(err);
        if (failure.status < 500) throw failure;
        if (Date.now() - since > FAN_OUT_GIVE_UP_MS) {
          log.error(`${this.ctx.id}: gave up delivering message ${delivery.message.id} (${failure.code}): queues miss it`);
          throw failure;
        }
        this.ctx.fence(); // throws FENCED once the shard is no longer held here
        if (attempt === 0) log.warn(`${this.ctx.id}: delivering message ${delivery.message.id} failed (${failure.code}); retrying`);
        await new Promise((r) => setTimeout(r, Math.min(FAN_OUT_RETRY_MS * 2 ** attempt, FAN_OUT_RETRY_MAX_MS)));
      }
    }
  }

  /**
   * The message stored first under a send's key, as this send's record with the stored text. A key names one message
   * of its sender: one stored elsewhere (another conversation, or moved away since) is refused, as a key reused.
   */
  private async storedInstead(record: MessageRecord, storedId: number, senderId: number): Promise<MessageRecord> {
    const row = await this.deps.store.db
      .selectFrom("messages")
      .select(["sender_id", "recipient_id", "topic", "content", "rendered_content", "date_sent"])
      .where("id", "=", storedId)
      .executeTakeFirst();
    if (!row || row.sender_id !== senderId || row.recipient_id !== this.recipientId) throw chatErrors.sendKeyReused(storedId);
    return Object.assign({}, record, { id: storedId, subject: row.topic, content: row.content, rendered_content: row.rendered_content, timestamp: Number(row.date_sent) });
  }

  /** Markdown with the realm's users and channels resolved, so mentions render and are known. */
  protected async render(content: string): Promise<RenderResult> {
    return renderZulipMarkdown(content, await markdownContext(this.deps.store.db, this.realmId, content));
  }

  /**
   * The mention bits each recipient gets: named users (and members of named groups) `mentioned`; a channel
   * wildcard flags every recipient, a topic wildcard those who took part in the topic (Zulip's rule). Beside them,
   * `has_alert_word` for the recipients whose alert words the content holds.
   */
  protected async mentionFlags(content: string, r: RenderResult, topic: string, recipients: number[], senderId: number): Promise<Map<number, number>> {
    const out = new Map<number, number>();
    await this.checkWildcard(r, topic, recipients, senderId);
    const add = (u: number, bit: number) => out.set(u, (out.get(u) ?? 0) | bit);
    const members = new Set(recipients);
    let named = r.mentionedUserIds;
    if (r.mentionedGroupIds.length) {
      const rows = await this.deps.store.db.selectFrom("user_group_members").select("user_id").where("group_id", "in", r.mentionedGroupIds).execute();
      named = [...named, ...rows.map((x) => x.user_id)];
    }
    for (const u of named) if (members.has(u)) add(u, FLAG_BITS.mentioned);
    if (r.wildcardMention === "channel") for (const u of recipients) add(u, FLAG_BITS.stream_wildcard_mentioned);
    if (r.wildcardMention === "topic") {
      for (const u of await this.topicParticipants(topic)) if (members.has(u)) add(u, FLAG_BITS.topic_wildcard_mentioned);
    }
    for (const u of await usersAlertedBy(this.deps.store.db, this.realmId, content, members)) add(u, FLAG_BITS.has_alert_word);
    return out;
  }

  /**
   * Zulip's rule for wildcard mentions in channels: above WILDCARD_MENTION_THRESHOLD people (subscribers for
   * `@**all**`, topic participants for `@**topic**`) only `can_mention_many_users_group` may use them.
   */
  private async checkWildcard(r: RenderResult, topic: string, recipients: number[], senderId: number): Promise<void> {
    if (!r.wildcardMention || this.recordBase().type !== "stream") return;
    const db = this.deps.store.db;
    const reach =
      r.wildcardMention === "channel"
        ? recipients.length
        : (await this.topicParticipants(topic)).length;
    if (reach <= WILDCARD_MENTION_THRESHOLD) return;
    const rules = await messageRules(db, this.realmId);
    if (await inGroupSetting(db, rules.can_mention_many_users_group, senderId)) return;
    throw r.wildcardMention === "channel"
      ? new ChorusError("STREAM_WILDCARD_MENTION_NOT_ALLOWED", "You do not have permission to use channel wildcard mentions in this channel.", 400)
      : new ChorusError("TOPIC_WILDCARD_MENTION_NOT_ALLOWED", "You do not have permission to use topic wildcard mentions in this topic.", 400);
  }

  private async topicParticipants(topic: string): Promise<number[]> {
    const rows = await this.deps.store.db
      .selectFrom("messages")
      .select("sender_id")
      .distinct()
      .where("recipient_id", "=", this.recipientId)
      .where(sql`lower(topic)`, "=", topic.toLowerCase())
      .execute();
    return rows.map((r) => r.sender_id);
  }

  // ---- edit and move ------------------------------------------------------------------------------------------

  protected async loadMessage(id: number): Promise<StoredMessage> {
    const row = await this.deps.store.db
      .selectFrom("messages")
      .select(["id", "sender_id", "recipient_id", "stream_id", "topic", "content", "rendered_content", "date_sent"])
      .where("id", "=", id)
      .where("recipient_id", "=", this.recipientId)
      .executeTakeFirst();
    if (!row) throw invalidMessage();
    return row;
  }

  private async edit(msg: EditMessage): Promise<Edited> {
    const row = await this.loadMessage(msg.messageId);
    const db = this.deps.store.db;
    const rules = await messageRules(db, this.realmId);
    const now = Math.floor(Date.now() / 1000);
    const contentChanged = msg.content !== undefined;
    if (contentChanged) {
      const refusal = contentEditRefusal(rules, row, msg.acting.id, now);
      if (refusal) throw refusal;
      if (msg.prevContentSha256 !== undefined && sha256(row.content) !== msg.prevContentSha256) {
        throw new ChorusError("EXPECTATION_MISMATCH", "'prev_content_sha256' value does not match the expected value.", 400);
      }
      // Zulip's check_update_message: a widget's content says what the widget is.
      const widget = await db.selectFrom("submessages").select("id").where("message_id", "=", row.id).limit(1).executeTakeFirst();
      if (widget) throw errors.badRequest("Widgets cannot be edited.");
    }
    const wantsMove = (msg.topic !== undefined && msg.topic !== row.topic) || (msg.streamId !== undefined && msg.streamId !== row.stream_id);
    if (!contentChanged && !wantsMove) throw errors.badRequest("Nothing to change");
    const move = wantsMove ? await this.planMove(msg, row, rules, now) : undefined;
    const rendering = contentChanged ? await this.render(msg.content!) : undefined;
    const rendered = rendering?.html;
    // As Zulip does: the wildcard rules of a send hold for the edited content, and every recipient's mention
    // flags follow the new content.
    const mentions = rendering ? await this.mentionFlags(msg.content!, rendering, move?.topic ?? row.topic, this.recipients(), row.sender_id) : undefined;
    // The files the old content linked: those the new content (or no other message) links no more are detached.
    const linkedBefore = contentChanged ? await attachmentsOfMessages(db, [row.id]) : [];

    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const entry: Record<string, unknown> = { user_id: msg.acting.id, timestamp: now };
      if (contentChanged) Object.assign(entry, { prev_content: row.content, prev_rendered_content: row.rendered_content });
      const moveEntry: Record<string, unknown> = {};
      if (move && move.topic !== row.topic) Object.assign(moveEntry, { prev_topic: row.topic, topic: move.topic });
      if (move && move.streamId !== row.stream_id) Object.assign(moveEntry, { prev_stream: row.stream_id, stream: move.streamId });
      Object.assign(entry, moveEntry);
      await prependHistory(trx, [row.id], entry, {
        ...(contentChanged ? { content: msg.content!, rendered_content: rendered!, last_edit_time: now } : {}),
        ...(move ? moveColumns(move, now) : {}),
      });
      const others = move?.messageIds.filter((id) => id !== row.id) ?? [];
      if (others.length) await prependHistory(trx, others, { user_id: msg.acting.id, timestamp: now, ...moveEntry }, moveColumns(move!, now));
      // The flag rows below must exist to be changed.
      if (mentions || move) await this.deps.messageLog.expandRecipientLists(trx, [row.id, ...(move?.messageIds ?? [])]);
      if (mentions) await setMentionFlags(trx, row.id, mentions);
      if (move) await applyAccessChange(trx, move);
    });
    await move?.afterCommit();

    const event: Record<string, unknown> = {
      type: "update_message",
      user_id: msg.acting.id,
      edit_timestamp: now,
      message_id: row.id,
      message_ids: move ? [...new Set([row.id, ...move.messageIds])].sort((a, b) => a - b) : [row.id],
      rendering_only: false,
      ...this.eventBase(),
    };
    if (contentChanged) {
      Object.assign(event, {
        orig_content: row.content,
        orig_rendered_content: row.rendered_content,
        content: msg.content,
        rendered_content: rendered,
        is_me_message: isMeMessage(msg.content!),
      });
    }
    if (move) {
      Object.assign(event, { propagate_mode: msg.propagateMode, orig_subject: row.topic });
      if (move.topic !== row.topic) Object.assign(event, { subject: move.topic, topic_links: topicLinks(await compiledLinkifiers.get(this.deps.store.db, this.realmId), move.topic) });
      if (move.streamId !== row.stream_id) event.new_stream_id = move.streamId;
    }
    const losing = new Set(move?.losingAccess);
    const notified = [...new Set([...this.recipients(), ...(move?.alsoNotify ?? [])])].filter((u) => !losing.has(u));
    await this.deliverWithFlags(notified, row.id, event);
    if (losing.size) {
      // For them the messages are gone, as if deleted where they were.
      const gone = { type: "delete_message", message_ids: event.message_ids, message_type: "stream", stream_id: row.stream_id, topic: row.topic };
      await this.deps.system().broadcast(User, [...losing], { op: "deliverEvent", event: gone });
    }
    if (move) await move.notices();
    if (contentChanged && (linkedBefore.length || msg.content!.includes("/user_uploads/"))) {
      const linkedAfter = await attachmentsOfMessages(db, [row.id]);
      const changed = [...linkedBefore.filter((a) => !linkedAfter.includes(a)), ...linkedAfter.filter((a) => !linkedBefore.includes(a))];
      await notifyAttachmentUpdates(db, this.deps.system(), changed);
    }
    return { detached_uploads: await detachedUploads(db, msg.acting.id, linkedBefore) };
  }

  /**
   * Whether the acting user passes a permission: in the realm's group setting or the channel's, or (for the
   * `can_delete_any`-style settings, which Zulip lets administrators bypass) an administrator.
   */
  protected async allowed(rules: MessageRules, realmSetting: keyof MessageRules, channelSetting: string | undefined, acting: Acting): Promise<boolean> {
    const db = this.deps.store.db;
    if (await inGroupSetting(db, rules[realmSetting] as GroupSettingValue, acting.id)) return true;
    if (channelSetting && (await inGroupSetting(db, this.channelSetting(channelSetting) as GroupSettingValue, acting.id))) return true;
    return false;
  }

  // ---- delete -------------------------------------------------------------------------------------------------

  private async delete(msg: DeleteMessage): Promise<Record<string, never>> {
    const row = await this.loadMessage(msg.messageId);
    const rules = await messageRules(this.deps.store.db, this.realmId);
    const now = Math.floor(Date.now() / 1000);
    const any = await this.allowed(rules, "can_delete_any_message_group", "can_delete_any_message_group", msg.acting);
    if (!any) {
      const own = row.sender_id === msg.acting.id && (await this.allowed(rules, "can_delete_own_message_group", "can_delete_own_message_group", msg.acting));
      if (!own) throw errors.badRequest("You don't have permission to delete this message");
      if (pastLimit(rules.message_content_delete_limit_seconds, row.date_sent, now)) throw errors.badRequest("The time limit for deleting this message has passed");
    }
    await this.removeMessage(row);
    return {};
  }

  /** Delete a message of this conversation, with its flags and reactions, and tell the recipients. */
  protected removeMessage(row: Pick<StoredMessage, "id" | "stream_id" | "topic">): Promise<void> {
    return this.removeMessages([row.id], row);
  }

  /**
   * Delete messages of one topic (channels) or of this conversation (direct messages) in one commit, with their
   * flags and reactions, and tell the recipients in one event (Zulip's do_delete_messages).
   */
  protected async removeMessages(ids: number[], where: Pick<StoredMessage, "stream_id" | "topic">): Promise<void> {
    // Their links to uploaded files go with them (the foreign key cascades): the files' owners hear of it after.
    const linked = await attachmentsOfMessages(this.deps.store.db, ids);
    await this.deps.store.write(this.ctx.fence(), async (trx) => {
      await trx.deleteFrom("reactions").where("message_id", "in", ids).execute();
      await this.deps.messageLog.expandRecipientLists(trx, ids);
      await trx.deleteFrom("user_message_rows").where("message_id", "in", ids).execute();
      await trx.deleteFrom("messages").where("id", "in", ids).execute();
    });
    // The user actors give clients without the bulk_message_deletion capability one event per id.
    const event: Record<string, unknown> = { type: "delete_message", message_ids: [...ids].sort((a, b) => a - b) };
    if (where.stream_id !== null) Object.assign(event, { message_type: "stream", stream_id: where.stream_id, topic: where.topic });
    else event.message_type = "private";
    await this.deps.system().broadcast(User, this.recipients(), { op: "deliverEvent", event });
    await notifyAttachmentUpdates(this.deps.store.db, this.deps.system(), linked);
  }

  // ---- reactions ----------------------------------------------------------------------------------------------

  // ---- widgets ------------------------------------------------------------------------------------------------------

  /**
   * A new message's submessages when its content asks for a widget (`/poll`, `/todo`): the widget is written first,
   * unless the message has a submessage already (its send ran before, or the redelivery of its fan-out does this
   * again), as Zulip's do_widget_post_save_actions writes it after the message. Undefined for any other content.
   */
  private async widgetSubmessages(messageId: number, senderId: number, content: string): Promise<Submessage[] | undefined> {
    const widget = widgetSubmessageContent(content);
    if (widget === undefined) return undefined;
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      sql`insert into submessages (message_id, sender_id, msg_type, content)
        select ${messageId}, ${senderId}, 'widget', ${widget} where not exists (select 1 from submessages where message_id = ${messageId})`.execute(trx),
    );
    return (await submessagesOf(this.deps.store.db, [messageId])).get(messageId);
  }

  /**
   * Zulip's process_submessage and do_add_submessage: the first submessage of a message is its sender's; what is
   * added to a poll or a todo list is checked against the widget; everyone who has the message hears of it, and adding
   * one is participation in the topic (afterParticipation).
   */
  private async addSubmessage(msg: AddSubmessage): Promise<Record<string, never>> {
    const row = await this.loadMessage(msg.messageId);
    const existing = await this.deps.store.db
      .selectFrom("submessages")
      .select(["sender_id", "msg_type", "content"])
      .where("message_id", "=", row.id)
      .orderBy("id")
      .execute();
    if (msg.acting.id !== row.sender_id && !existing.some((s) => s.sender_id === row.sender_id)) {
      throw errors.badRequest("You cannot attach a submessage to this message.");
    }
    let data: unknown;
    try {
      data = JSON.parse(msg.content);
    } catch {
      throw errors.badRequest("Invalid json for submessage");
    }
    checkWidgetData(widgetTypeOf(existing.find((s) => s.msg_type === "widget")), data, msg.acting.id === row.sender_id);
    const inserted = await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("submessages")
        .values({ message_id: row.id, sender_id: msg.acting.id, msg_type: msg.msgType, content: msg.content })
        .returning("id")
        .executeTakeFirstOrThrow(),
    );
    const event = { type: "submessage", msg_type: msg.msgType, message_id: row.id, submessage_id: Number(inserted.id), sender_id: msg.acting.id, content: msg.content };
    await this.deps.system().broadcast(User, this.recipients(), { op: "deliverEvent", event });
    await this.afterParticipation(msg.acting, row);
    return {};
  }

  // ---- reactions ----------------------------------------------------------------------------------------------------

  private async react(msg: React): Promise<Record<string, never>> {
    const row = await this.loadMessage(msg.messageId);
    const { emoji_code, reaction_type } = msg.reaction;
    // The name in the event is the stored one: a removal may name the emoji by code alone.
    const emoji_name = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      if (msg.add) {
        const inserted = await trx
          .insertInto("reactions")
          .values({ message_id: row.id, user_id: msg.acting.id, emoji_name: msg.reaction.emoji_name, emoji_code, reaction_type })
          .onConflict((c) => c.columns(["message_id", "user_id", "reaction_type", "emoji_code"]).doNothing())
          .executeTakeFirst();
        return Number(inserted.numInsertedOrUpdatedRows ?? 0) > 0 ? msg.reaction.emoji_name : undefined;
      }
      const deleted = await trx
        .deleteFrom("reactions")
        .where("message_id", "=", row.id)
        .where("user_id", "=", msg.acting.id)
        .where("reaction_type", "=", reaction_type)
        .where("emoji_code", "=", emoji_code)
        .returning("emoji_name")
        .executeTakeFirst();
      return deleted?.emoji_name;
    });
    if (emoji_name === undefined) {
      throw msg.add
        ? new ChorusError("REACTION_ALREADY_EXISTS", "Reaction already exists.", 400)
        : new ChorusError("REACTION_DOES_NOT_EXIST", "Reaction doesn't exist.", 400);
    }
    const event = {
      type: "reaction",
      op: msg.add ? "add" : "remove",
      message_id: row.id,
      user_id: msg.acting.id,
      user: { user_id: msg.acting.id, email: msg.acting.email, full_name: msg.acting.full_name },
      emoji_name,
      emoji_code,
      reaction_type,
    };
    await this.deps.system().broadcast(User, this.recipients(), { op: "deliverEvent", event });
    if (msg.add) await this.afterParticipation(msg.acting, row);
    return {};
  }

  /** What else taking part in a message (a reaction, a submessage) does (channels: Zulip's automatic topic policies). */
  protected async afterParticipation(_acting: Acting, _row: StoredMessage): Promise<void> {}

  // ---- uploaded images' previews ------------------------------------------------------------------------------

  /**
   * After a new message linking uploads commits: their owners hear of the link (Zulip's do_claim_attachments), and
   * the placeholders it shows are checked once more. It was rendered before it committed: its images' thumbnails
   * may have been made in between, when the thumbnail job could not yet find the message among the files' links.
   * Whatever the records say now is applied in a turn of its own (the job, which commits its records before looking
   * for messages, handles every message committed before that look).
   */
  private async afterUploadsLinked(messageId: number, rendered: string): Promise<void> {
    await notifyAttachmentUpdates(this.deps.store.db, this.deps.system(), await attachmentsOfMessages(this.deps.store.db, [messageId]));
    const paths = placeholderPaths(rendered);
    if (!paths.length) return;
    const previews = await uploadPreviews(this.deps.store.db, this.realmId, paths);
    for (const path of paths) {
      const preview = previews.get(path);
      if (preview && !preview.url) continue;
      const refresh: RefreshUploadPreview = { op: "refreshUploadPreview", messageIds: [messageId], pathId: path, urlPath: path, preview: preview ?? null };
      this.ctx.schedule(0, refresh);
    }
  }

  /**
   * Zulip's update_message_rendered_content after its thumbnail worker: a turn here, so it serialises with edits
   * (an edit since then rendered with what the records said, and has no placeholder left to replace). Messages
   * moved to another conversation meanwhile are not here: their new owner rendered nothing new, so they keep
   * the placeholder (rare; a later edit renders the thumbnail).
   */
  private async refreshUploadPreview(msg: RefreshUploadPreview): Promise<Record<string, never>> {
    const db = this.deps.store.db;
    if (!msg.messageIds.length) return {};
    const rows = await db
      .selectFrom("messages")
      .select(["id", "content", "rendered_content"])
      .where("id", "in", msg.messageIds)
      .where("recipient_id", "=", this.recipientId)
      .execute();
    for (const row of rows) {
      const rendered = rewriteUploadPreviews(row.rendered_content, msg, msg.preview);
      if (rendered === undefined) continue;
      await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("messages").set({ rendered_content: rendered }).where("id", "=", row.id).execute());
      // Zulip's do_update_embedded_data: no author, no edit history. Zulip leaves is_me_message out of it, but
      // zulip-terminal reads is_me_message from every update_message that has rendered_content (a KeyError that
      // ends its event loop: no live messages after someone posts an image): it is documented for the event, and
      // it did not change.
      const event = {
        type: "update_message",
        user_id: null,
        edit_timestamp: Math.floor(Date.now() / 1000),
        message_id: Number(row.id),
        message_ids: [Number(row.id)],
        content: row.content,
        rendered_content: rendered,
        is_me_message: isMeMessage(row.content),
        rendering_only: true,
      };
      await this.deliverWithFlags(this.recipients(), Number(row.id), event);
    }
    return {};
  }

  // ---- events -------------------------------------------------------------------------------------------------

  /**
   * An event whose `flags` are the receiving user's flags for `messageId` (update_message): one broadcast per
   * distinct set of flags, so the fan-out stays one entry per shard per set, not one per user.
   */
  protected async deliverWithFlags(userIds: number[], messageId: number, event: Record<string, unknown>): Promise<void> {
    if (!userIds.length) return;
    const rows = await this.deps.store.db.selectFrom("user_messages").select(["user_id", "flags"]).where("message_id", "=", messageId).where("user_id", "in", userIds).execute();
    const bits = new Map(rows.map((r) => [r.user_id, r.flags]));
    const groups = new Map<string, number[]>();
    for (const u of userIds) {
      const flags = bits.has(u) ? flagList(bits.get(u)!) : ["read", "historical"];
      const key = JSON.stringify(flags);
      groups.set(key, [...(groups.get(key) ?? []), u]);
    }
    await Promise.all(
      [...groups].map(([key, users]) =>
        this.deps.system().broadcast(User, users, { op: "deliverEvent", event: Object.assign({}, event, { flags: JSON.parse(key) }) }),
      ),
    );
  }
}

export function sha256(text: string): string {
  return crypto.createHash("sha256").update(text, "utf8").digest("hex");
}

function moveColumns(move: MovePlan, now: number) {
  return { topic: move.topic, stream_id: move.streamId, recipient_id: move.recipientId, ...(move.resolveOnly ? {} : { last_moved_time: now }) };
}

/** The flags a message's content decides: mentions and alert words. */
const CONTENT_FLAGS = MENTION_FLAGS | FLAG_BITS.has_alert_word;

/** Replace one message's mention and alert-word flags with those of its new content (Zulip's update_user_message_flags). */
async function setMentionFlags(trx: Transaction<Database>, messageId: number, mentions: Map<number, number>): Promise<void> {
  await trx
    .updateTable("user_message_rows")
    .set({ flags: sql`flags & ${~CONTENT_FLAGS}` })
    .where("message_id", "=", messageId)
    .where(sql`flags & ${CONTENT_FLAGS}`, "<>", 0)
    .execute();
  const byBits = new Map<number, number[]>();
  for (const [user, bits] of mentions) {
    const users = byBits.get(bits);
    if (users) users.push(user);
    else byBits.set(bits, [user]);
  }
  for (const [bits, users] of byBits) {
    await trx.updateTable("user_message_rows").set({ flags: sql`flags | ${bits}` }).where("message_id", "=", messageId).where("user_id", "in", users).execute();
  }
}

/**
 * The flag rows a move to another channel takes away and hands out, in the move's transaction. Users and messages
 * go as arrays: a large topic times a large channel stays one statement of two parameters.
 */
async function applyAccessChange(trx: Transaction<Database>, move: MovePlan): Promise<void> {
  const messages = sql`${sql.val(move.messageIds)}::bigint[]`;
  if (move.dropFlagsOf.length) {
    await sql`delete from user_message_rows where user_id = any(${sql.val(move.dropFlagsOf)}::int[]) and message_id = any(${messages})`.execute(trx);
  }
  if (move.readFlagsFor.length) {
    await sql`
      insert into user_message_rows (user_id, message_id, flags)
      select u, m, ${FLAG_BITS.read} from unnest(${sql.val(move.readFlagsFor)}::int[]) u cross join unnest(${messages}) m
      on conflict (user_id, message_id) do nothing`.execute(trx);
  }
}

/** Record an edit_history entry (newest first) and apply the changed columns, in the caller's transaction. */
async function prependHistory(trx: Transaction<Database>, ids: number[], entry: Record<string, unknown>, set: Record<string, unknown>): Promise<void> {
  await trx
    .updateTable("messages")
    .set({ ...set, edit_history: sql`jsonb_build_array(${JSON.stringify(entry)}::jsonb) || coalesce(edit_history, '[]'::jsonb)` } as any)
    .where(sql<boolean>`id = any(${sql.val(ids)}::bigint[])`)
    .execute();
}
