/**
 * channel:<id>: one channel's subscribers and its messages (see conversation.ts for what every conversation
 * does). A send is fanned out to the subscribers' user actors (one entry per shard); the sender's success reply
 * waits for the commit and the fan-out, so the message is durable and in every queue before "success".
 * Channels add subscriptions and topic/channel moves.
 */
import { randomUUID } from "node:crypto";
import { sql, type SelectQueryBuilder } from "kysely";
import type { Database } from "../../schema.ts";
import type { PARKED } from "../../../runtime/actor.ts";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import { chatErrors } from "../errors.ts";
import { Conversation, type AccessChange, type MovePlan, type RedeliveredMessage, type StoredMessage } from "./conversation.ts";
import { FLAG_BITS } from "./flags.ts";
import { ROLE } from "../organization/groups.ts";
import { isModerator, messageRules, pastLimit, topicPolicyError, type MessageRules } from "./message-rules.ts";
import { RESOLVED_TOPIC_PREFIX } from "../reads/narrow.ts";
import type { MessageRecord } from "../rendering/message-format.ts";
import { streamObject } from "../reads/channels.ts";
import { subscriptionObject, SUBSCRIPTION_COLUMNS, type SubscriptionColumns } from "../reads/subscriptions.ts";
import { topicHasOtherMessages } from "../reads/topics.ts";
import { metadataWatchers } from "./channel-access.ts";
import { inGroupSetting, systemGroups, type GroupSettingValue } from "../organization/groups.ts";
import { dispatch, type Handlers, type MessageOf } from "../../../runtime/protocol.ts";
import { ARCHIVED_CHANNELS, Channel, type ChannelProtocol, type DeleteTopic, type MovedIn, type Notify, type SubscribeResult, type UnsubscribeResult, type UpdateChannel, type UpdateSubscription } from "./channel.protocol.ts";
import type { Acting, EditMessage, SendToChannel } from "./conversation.protocol.ts";
import { User } from "../users/user.protocol.ts";
import { Realm } from "../organization/realm.protocol.ts";
import { renderMarkdown } from "../rendering/message-format.ts";
import { USER_SETTINGS_DEFAULTS, userSetting } from "../users/settings.ts";
import { TopicPolicies, visibilityAfterParticipation, visibilityAfterSend } from "./topic-policies.ts";
import { VISIBILITY } from "../users/user-topics.ts";
import { usersFollowingPublicChannels } from "../users/user.ts";
import { ensureSystemBot, NOTIFICATION_BOT } from "../organization/system-bots.ts";

/** Zulip's default subscription colours, handed out in turn. */
const COLORS = ["#76ce90", "#fae589", "#a6c7e5", "#e79ab5", "#bfd56f", "#f4ae55", "#b0a5fd", "#addfe5", "#f5ce6e", "#c2726a", "#94c849", "#bd86e5"];


/** Zulip's Realm.STREAM_EVENTS_NOTIFICATION_TOPIC_NAME: where Notification Bot tells of the channel's own changes. */
const CHANNEL_EVENTS_TOPIC = "channel events";

/** Two group-setting values (or any JSON values) alike, whatever the order of ids. */
function sameGroupSetting(a: unknown, b: unknown): boolean {
  const canonical = (v: unknown) =>
    v && typeof v === "object" && "direct_members" in v
      ? JSON.stringify({ m: [...(v as GroupSettingValue & object).direct_members].sort(), g: [...(v as GroupSettingValue & object).direct_subgroups].sort() })
      : JSON.stringify(v);
  return canonical(a) === canonical(b);
}
/** Zulip's RESOLVE_TOPIC_UNDO_GRACE_PERIOD_SECONDS. */
const RESOLVE_UNDO_GRACE_SECONDS = 60;
/** Notification Bot's (un)resolve notice, as moveNotices words it. */
const RESOLVE_NOTICE = /^@_\*\*[^*]+\*\* has marked this topic as (?:un)?resolved\.$/;

/** Zulip's recipient type for a channel. */
export const RECIPIENT_STREAM = 2;

interface ChannelState {
  id: number;
  name: string;
  /** Archived: nobody sends to it but Notification Bot. */
  archived: boolean;
  inviteOnly: boolean;
  isWebPublic: boolean;
  historyPublic: boolean;
  settings: Record<string, unknown>;
  subscribers: Set<number>;
}

/** How long a sender's settled topic policies are trusted, and how many are remembered. */
const SETTLED_MS = 30_000;
const MAX_SETTLED = 10_000;

export class ChannelActor extends Conversation {
  private state!: ChannelState;
  /** Users of the realm with a queue that follows every public channel (read at activation, then told). */
  private readonly publicListeners = new Set<number>();
  /** The realm's "role:everyone" group: a can_send_message_group that needs no membership check. */
  private everyoneGroup?: number;
  private readonly topicPolicies = new TopicPolicies(this.deps, () => ({ id: this.state.id, historyPublic: this.state.historyPublic }));
  /**
   * Senders whose automatic topic policies a recent send of theirs to the topic left with nothing to do
   * ("userId:topic" → until when): their next sends there skip the read that decides it (a query per send halved
   * the send rate). Any other operation on the channel clears it; a change of the user's own settings or topic
   * visibility made elsewhere applies to their sends after at most SETTLED_MS.
   */
  private readonly settledSenders = new Map<string, number>();

  async activate(): Promise<void> {
    const db = this.deps.store.db;
    const id = Number(this.ctx.key);
    const stream = await db
      .selectFrom("streams")
      .innerJoin("realms", "realms.id", "streams.realm_id")
      .select(["streams.id", "streams.realm_id", "streams.name", "streams.deactivated", "streams.invite_only", "streams.is_web_public", "streams.history_public_to_subscribers", "streams.settings", "realms.string_id"])
      .where("streams.id", "=", id)
      .executeTakeFirst();
    if (!stream) throw chatErrors.streamNotFound({ stream_id: id });
    const subs = await db.selectFrom("subscriptions").select("user_id").where("stream_id", "=", id).where("active", "=", true).execute();
    this.realmId = stream.realm_id;
    this.realmStr = stream.string_id;
    this.recipientId = await this.ensureRecipient(id, stream.realm_id);
    const last = await db.selectFrom("messages").select(sql<number>`coalesce(max(id), 0)`.as("max")).where("recipient_id", "=", this.recipientId).executeTakeFirst();
    this.lastMessageId = Number(last?.max ?? 0);
    this.state = {
      id,
      name: stream.name,
      archived: stream.deactivated,
      inviteOnly: stream.invite_only,
      isWebPublic: stream.is_web_public,
      historyPublic: stream.history_public_to_subscribers,
      settings: (stream.settings ?? {}) as Record<string, unknown>,
      subscribers: new Set(subs.map((s) => s.user_id)),
    };
    // Registering such a queue saves it in the user's snapshot and then tells the realm's public channels, so a
    // channel activating in between finds it here and one already active hears of it. The user actor's module
    // reads its snapshots for us (usersFollowingPublicChannels says why a read, not an ask).
    for (const id of await usersFollowingPublicChannels(db, stream.realm_id)) this.publicListeners.add(id);
  }

  /** The channel's recipient id; channels created before they had one get it on first activation. */
  private async ensureRecipient(streamId: number, realmId: number): Promise<number> {
    const find = () =>
      this.deps.store.db.selectFrom("recipients").select("id").where("type", "=", RECIPIENT_STREAM).where("type_id", "=", streamId).executeTakeFirst();
    const found = await find();
    if (found) return found.id;
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .insertInto("recipients")
        .values({ realm_id: realmId, type: RECIPIENT_STREAM, type_id: streamId, dm_key: null })
        // The arbiter index's predicate as a literal: a parameter there cannot be matched to the partial index on a
        // prepared statement's generic plan (Postgres refuses it, 42P10), which PGlite uses after a few runs.
        .onConflict((c) => c.column("type_id").where("type", "=", sql.lit(RECIPIENT_STREAM)).doNothing())
        .execute(),
    );
    return (await find())!.id;
  }

  /** The implementation of channel.protocol.ts. */
  private static readonly handlers: Handlers<ChannelProtocol, ChannelActor> = {
    ...Conversation.conversationHandlers,
    subscribe: (channel, msg) => channel.subscribe(msg.userIds),
    unsubscribe: (channel, msg) => channel.unsubscribe(msg.userIds),
    updateSubscription: (channel, msg) => channel.updateSubscription(msg),
    updateChannel: (channel, msg) => channel.updateChannel(msg),
    archive: (channel) => channel.archive(),
    unarchive: (channel) => channel.unarchive(),
    deleteTopic: (channel, msg) => channel.deleteTopic(msg),
    send: (channel, msg) => channel.checkSend(msg).then(() => channel.sendAs(msg)),
    movedIn: (channel, msg) => channel.movedIn(msg),
    notify: (channel, msg) => channel.notify(msg),
    publicListener: (channel, msg) => {
      if (msg.listening) channel.publicListeners.add(msg.userId);
      else channel.publicListeners.delete(msg.userId);
    },
  };

  receive(msg: MessageOf<ChannelProtocol>): unknown {
    // Anything but a send may change what a sender's topic policies depend on (subscriptions, moves, deletions).
    if (msg.op !== "send" && msg.op !== "publicListener") this.settledSenders.clear();
    return dispatch(ChannelActor.handlers, this, msg);
  }

  protected recipients(): number[] {
    return [...this.state.subscribers];
  }

  protected override observers(): number[] {
    return this.state.inviteOnly ? [] : [...this.publicListeners];
  }

  protected recordBase(): Pick<MessageRecord, "type" | "stream_id" | "display_recipient"> {
    return { type: "stream", stream_id: this.state.id, display_recipient: this.state.name };
  }

  protected override eventBase(): Record<string, unknown> {
    return { stream_id: this.state.id, stream_name: this.state.name };
  }

  protected override channelSetting(name: string): unknown {
    return this.state.settings[name];
  }

  /**
   * Notification Bot's notices after a move, worded as Zulip words them (zerver/actions/message_edit.py): a
   * resolved or unresolved topic says so in the topic; other moves leave a breadcrumb in the new topic (unless
   * `send_notification_to_new_thread` is false) and in the old one (if `send_notification_to_old_thread`).
   * They are told, not asked: a notice to this very channel is a later turn of this actor.
   */
  private async moveNotices(
    msg: EditMessage,
    oldTopic: string,
    to: { streamId: number; topic: string; messageIds: number[]; resolveOnly: boolean; wholeTopic: boolean },
  ): Promise<void> {
    const db = this.deps.store.db;
    const user = `@_**${msg.acting.full_name}|${msg.acting.id}**`;
    // Every notice starts read for the one who moved (Zulip's mark_as_read_for_acting_user).
    const notify = (streamId: number, topic: string, content: string, unreadOnlyFor?: number[]) =>
      this.deps.system().ref(Channel, streamId).tell({ op: "notify", topic, content, readFor: [msg.acting.id], unreadOnlyFor });
    if (to.resolveOnly) {
      if (await this.undoResolveNotice(to.topic)) return;
      const resolved = to.topic.startsWith(RESOLVED_TOPIC_PREFIX);
      const text = `${user} has marked this topic as ${resolved ? "resolved" : "unresolved"}.`;
      await notify(this.state.id, to.topic, text, await this.resolveNoticeUnreadFor(to.topic));
      return;
    }
    const destName = to.streamId === this.state.id ? this.state.name : (await db.selectFrom("streams").select("name").where("id", "=", to.streamId).executeTakeFirstOrThrow()).name;
    const oldLocation = `#**${this.state.name}>${oldTopic}**`;
    const newLocation = `#**${destName}>${to.topic}**`;
    const count = to.messageIds.length;
    const wholeTopic = to.wholeTopic;
    if (msg.notifyNewThread) {
      const text =
        wholeTopic && !(await topicHasOtherMessages(db, to.streamId, to.topic, to.messageIds))
          ? `This topic was moved here from ${oldLocation} by ${user}.`
          : count === 1
            ? `A message was moved here from ${oldLocation} by ${user}.`
            : `${count} messages were moved here from ${oldLocation} by ${user}.`;
      await notify(to.streamId, to.topic, text);
    }
    if (msg.notifyOldThread) {
      const text = wholeTopic
        ? `This topic was moved to ${newLocation} by ${user}.`
        : count === 1
          ? `A message was moved from this topic to ${newLocation} by ${user}.`
          : `${count} messages were moved from this topic to ${newLocation} by ${user}.`;
      await notify(this.state.id, oldTopic, text);
    }
  }

  /**
   * Zulip's access_stream_for_send_message: the channel's can_send_message_group first (no query while it is
   * "everyone", the default); nothing goes to an archived channel; then access: private channels take their
   * subscribers' messages, public ones anyone's but an unsubscribed guest's, web-public ones everyone's; then the
   * topic rules.
   */
  private async checkSend(msg: SendToChannel): Promise<void> {
    const senders = this.state.settings.can_send_message_group as GroupSettingValue | undefined;
    this.everyoneGroup ??= (await systemGroups(this.deps.store.db, this.realmId)).get("role:everyone");
    if (senders !== undefined && senders !== this.everyoneGroup && !(await inGroupSetting(this.deps.store.db, senders, msg.senderId))) {
      throw errors.badRequest("You do not have permission to post in this channel.");
    }
    if (this.state.archived) throw errors.badRequest(`Not authorized to send to channel '${this.state.name}'`);
    if ((this.state.inviteOnly || (msg.senderIsGuest && !this.state.isWebPublic)) && !this.state.subscribers.has(msg.senderId)) {
      throw errors.badRequest(`Not authorized to send to channel '${this.state.name}'`);
    }
    await this.checkTopic(msg.topic);
  }

  /**
   * Zulip's grace period for an accidental (un)resolve (maybe_delete_previous_resolve_topic_notification): when the
   * topic's last message is the (un)resolved notice, less than a minute old, toggling back deletes that notice
   * instead of adding another. Zulip marks those notices with a message type; here they are Notification Bot's
   * messages with the notice's wording.
   */
  private async undoResolveNotice(topic: string): Promise<boolean> {
    const last = await this.deps.store.db
      .selectFrom("messages")
      .innerJoin("users", "users.id", "messages.sender_id")
      .select(["messages.id", "messages.stream_id", "messages.topic", "messages.content", "messages.date_sent", "users.delivery_email"])
      .where("messages.stream_id", "=", this.state.id)
      .where(sql`lower(messages.topic)`, "=", topic.toLowerCase())
      .orderBy("messages.id", "desc")
      .limit(1)
      .executeTakeFirst();
    const isNotice = last?.delivery_email === NOTIFICATION_BOT.email && RESOLVE_NOTICE.test(last.content);
    if (!last || !isNotice || Date.now() / 1000 - last.date_sent > RESOLVE_UNDO_GRACE_SECONDS) return false;
    await this.removeMessage(last);
    return true;
  }

  /**
   * Who gets a resolve notice unread, per their resolved_topic_notice_auto_read_policy (Zulip's
   * get_unread_user_ids_for_resolved_topic_notifications): "never" (auto-read), everyone; "except_followed", the
   * default, those who follow the topic (its policies have moved with it by now); "always", nobody.
   */
  private async resolveNoticeUnreadFor(topic: string): Promise<number[]> {
    const { rows } = await sql<{ id: number }>`
      select s.user_id as id from subscriptions s
      join users u on u.id = s.user_id
      left join user_topics ut on ut.user_id = s.user_id and ut.stream_id = s.stream_id and ut.topic_key = ${topic.toLowerCase()}
      where s.stream_id = ${this.state.id} and s.active and u.is_active and not u.is_bot
        and case coalesce(${userSetting(sql.ref("s.user_id"), "resolved_topic_notice_auto_read_policy")}, ${USER_SETTINGS_DEFAULTS.resolved_topic_notice_auto_read_policy})
          when 'never' then true
          when 'except_followed' then coalesce(ut.visibility_policy = ${VISIBILITY.followed}, false)
          else false
        end`.execute(this.deps.store.db);
    return rows.map((r) => r.id);
  }

  /** The channel's topic policy for a send; the realm's settings are read only when they can matter. */
  private async checkTopic(topic: string): Promise<void> {
    const own = this.state.settings.topics_policy;
    if (topic !== "" && own !== "empty_topic_only") return;
    const refused = topicPolicyError(topic, own, await messageRules(this.deps.store.db, this.realmId));
    if (refused) throw refused;
  }

  /**
   * A send, then the topic visibility Zulip's automatic policies give: the sender's (a person's) per their follow /
   * unmute settings, and the mentioned users' (followed, per automatically_follow_topics_where_mentioned).
   */
  private async sendAs(msg: SendToChannel): Promise<typeof PARKED> {
    // A send of this topic still committing means this one does not start the topic. Everything else is decided
    // after the commit, off this actor's turn, so the next send need not wait for it.
    const afterInFlight = this.committing.has(msg.topic.toLowerCase());
    const settledKey = `${msg.senderId}:${msg.topic.toLowerCase()}`;
    const settled = (this.settledSenders.get(settledKey) ?? 0) > Date.now();
    return this.send(msg, msg.topic, async (id, mentions) => {
      const policy = await this.automaticPolicies(id, msg.topic, msg.automaticVisibility && !settled ? msg.senderId : undefined, mentions, afterInFlight);
      if (msg.automaticVisibility && !settled) {
        if (this.settledSenders.size >= MAX_SETTLED) this.settledSenders.clear();
        this.settledSenders.set(settledKey, Date.now() + SETTLED_MS);
      }
      return policy === undefined ? {} : { automatic_new_visibility_policy: policy };
    });
  }

  protected override async afterRedelivered(message: RedeliveredMessage, flags: Map<number, number>): Promise<void> {
    await this.automaticPolicies(message.id, message.topic, message.senderIsBot ? undefined : message.senderId, flags, false);
  }

  /**
   * The topic visibility Zulip's automatic policies give after message `id`: its sender's (`senderId`, when a person
   * whose settings apply) per their follow / unmute settings, and the mentioned users' (followed, per
   * automatically_follow_topics_where_mentioned). The sender's new policy if it changed.
   */
  private async automaticPolicies(id: number, topic: string, senderId: number | undefined, mentions: Map<number, number>, afterInFlight: boolean): Promise<number | undefined> {
    const mentioned = [...mentions].filter(([, bits]) => bits & FLAG_BITS.mentioned).map(([user]) => user);
    const [policy] = await Promise.all([
      senderId !== undefined ? this.applySenderPolicies(senderId, topic, id, afterInFlight) : undefined,
      mentioned.length ? this.topicPolicies.followWhereMentioned(mentioned, topic) : undefined,
    ]);
    return policy;
  }

  /** The sender's automatic follow / unmute settings applied to their message `id`; the policy if it changed. */
  private async applySenderPolicies(senderId: number, topic: string, id: number, afterInFlight: boolean): Promise<number | undefined> {
    const standing = await this.topicPolicies.standing(senderId, topic, id);
    const policy = visibilityAfterSend({ startsTopic: !standing.topicExists && !afterInFlight, ...standing });
    return policy !== undefined && (await this.topicPolicies.raise(senderId, topic, policy)) ? policy : undefined;
  }

  /**
   * A reaction or a submessage is participation (Zulip's do_add_reaction, do_add_submessage): a subscribed person's
   * automatic settings may follow or unmute the topic.
   */
  protected override async afterParticipation(acting: Acting, row: StoredMessage): Promise<void> {
    if (acting.is_bot) return;
    const standing = await this.topicPolicies.standing(acting.id, row.topic);
    if (standing.streamMuted === null) return;
    const policy = visibilityAfterParticipation(standing);
    if (policy !== undefined) await this.topicPolicies.raise(acting.id, row.topic, policy);
  }

  private async notify(msg: Notify): Promise<typeof PARKED> {
    const bot = await ensureSystemBot(this.deps.store, this.ctx.fence(), this.deps.keyring, this.realmId);
    return this.send(
      {
        op: "send",
        senderId: bot.id,
        sender: { email: bot.email, full_name: bot.full_name },
        content: msg.content,
        client: "Internal",
        sendKey: randomUUID(),
        readBySender: true,
        readFor: msg.readFor,
        unreadOnlyFor: msg.unreadOnlyFor,
      },
      msg.topic,
    );
  }

  private movedIn(msg: MovedIn): Record<string, never> {
    this.lastMessageId = Math.max(this.lastMessageId, msg.maxId);
    return {};
  }

  private async subscribe(userIds: number[]): Promise<SubscribeResult> {
    const added = userIds.filter((u) => !this.state.subscribers.has(u));
    const already = userIds.filter((u) => this.state.subscribers.has(u));
    if (added.length) {
      const db = this.deps.store.db;
      const counts = await db
        .selectFrom("subscriptions")
        .select(["user_id", sql<number>`count(*)`.as("n")])
        .where("user_id", "in", added)
        .groupBy("user_id")
        .execute();
      const have = new Map(counts.map((c) => [c.user_id, Number(c.n)]));
      // A former subscriber comes back with their old settings (Zulip reactivates the row).
      const rows = await this.deps.store.write(this.ctx.fence(), (trx) =>
        trx
          .insertInto("subscriptions")
          .values(
            added.map((user_id) => ({
              user_id,
              stream_id: this.state.id,
              active: true,
              color: COLORS[(have.get(user_id) ?? 0) % COLORS.length]!,
              is_muted: false,
              pin_to_top: false,
            })),
          )
          .onConflict((c) => c.columns(["user_id", "stream_id"]).doUpdateSet({ active: true }))
          .returning(["user_id", ...SUBSCRIPTION_COLUMNS])
          .execute(),
      );
      for (const u of added) this.state.subscribers.add(u);
      await this.announceSubscribers(rows);
    }
    return { added, already };
  }

  /** The channel's row and its channel object, as its events carry it. */
  private async channelObject() {
    const row = await this.deps.store.db.selectFrom("streams").selectAll().where("id", "=", this.state.id).executeTakeFirstOrThrow();
    return { row, object: streamObject(row, this.state.subscribers.size) };
  }

  /**
   * subscription add to each new subscriber (their own subscription object, with the subscriber list), preceded by
   * stream create for those who could not see the channel before; then peer_add to the others who see the
   * channel's subscriber list. New subscribers whose subscriptions look alike (most differ only in colour) share
   * one broadcast, so a thousand subscribers cost a dozen sends, not a thousand.
   */
  private async announceSubscribers(rows: Array<SubscriptionColumns & { user_id: number }>): Promise<void> {
    const system = this.deps.system();
    const { row, object } = await this.channelObject();
    const added = rows.map((r) => r.user_id);
    const addedSet = new Set(added);
    // Who sees the channel whoever subscribes (by role or permission group): a new subscriber not among them could
    // not see it before; they and the other subscribers watch its subscriber list.
    const seeingAnyway = await metadataWatchers(this.deps.store.db, row, []);
    const newcomers = added.filter((u) => !seeingAnyway.has(u));
    if (newcomers.length) await system.broadcast(User, newcomers, { op: "deliverEvent", event: { type: "stream", op: "create", streams: [object] } });
    const subscribers = [...this.state.subscribers].sort((a, b) => a - b);
    const alike = new Map<string, { event: Record<string, unknown>; users: number[] }>();
    for (const sub of rows) {
      const event = { type: "subscription", op: "add", subscriptions: [subscriptionObject(object, sub, subscribers)] };
      const key = JSON.stringify(SUBSCRIPTION_COLUMNS.map((c) => sub[c]));
      const group = alike.get(key) ?? alike.set(key, { event, users: [] }).get(key)!;
      group.users.push(sub.user_id);
    }
    await Promise.all([...alike.values()].map(({ event, users }) => system.broadcast(User, users, { op: "deliverEvent", event })));
    const peers = [...new Set([...seeingAnyway, ...this.state.subscribers])].filter((id) => !addedSet.has(id));
    await system.broadcast(User, peers, { op: "deliverEvent", event: { type: "subscription", op: "peer_add", stream_ids: [this.state.id], user_ids: added } });
  }

  /**
   * Zulip's bulk_remove_subscriptions for this channel: the rows go inactive (keeping their settings), the users
   * stop receiving its messages at once, get subscription remove, and those who watch the subscriber list
   * peer_remove. Whoever loses sight of the channel altogether (a non-administrator leaving a private channel, a
   * guest leaving a public one) also gets stream delete.
   */
  private async unsubscribe(userIds: number[]): Promise<UnsubscribeResult> {
    const removed = userIds.filter((u) => this.state.subscribers.has(u));
    const notSubscribed = userIds.filter((u) => !this.state.subscribers.has(u));
    if (!removed.length) return { removed, notSubscribed };
    const db = this.deps.store.db;
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx.updateTable("subscriptions").set({ active: false }).where("stream_id", "=", this.state.id).where("user_id", "in", removed).execute(),
    );
    for (const u of removed) this.state.subscribers.delete(u);
    const system = this.deps.system();
    const { row } = await this.channelObject();
    await system.broadcast(User, removed, { op: "deliverEvent", event: { type: "subscription", op: "remove", subscriptions: [{ name: this.state.name, stream_id: this.state.id }] } });
    const removedSet = new Set(removed);
    const seeing = await metadataWatchers(db, row, this.state.subscribers);
    const peers = [...seeing].filter((id) => !removedSet.has(id));
    await system.broadcast(User, peers, { op: "deliverEvent", event: { type: "subscription", op: "peer_remove", stream_ids: [this.state.id], user_ids: removed } });
    const blind = removed.filter((id) => !seeing.has(id));
    const event = { type: "stream", op: "delete", streams: [{ stream_id: this.state.id }], stream_ids: [this.state.id] };
    if (blind.length) await system.broadcast(User, blind, { op: "deliverEvent", event });
    return { removed, notSubscribed };
  }

  /**
   * PATCH /streams/{stream_id}: one commit, then Zulip's stream update event per changed property to those who saw
   * the channel and still do; a change of privacy also tells those who lost sight of it (stream delete) and those
   * who gained it (stream create).
   */
  private async updateChannel(msg: UpdateChannel): Promise<Record<string, never>> {
    const db = this.deps.store.db;
    const { row: before } = await this.channelObject();
    const settings = { ...(before.settings as Record<string, unknown>) };
    for (const [name, old] of Object.entries(msg.expected ?? {})) {
      if (!sameGroupSetting(settings[name], old)) throw errors.badRequest("'old' value does not match the expected value.");
    }
    if (msg.name !== undefined && msg.name.toLowerCase() !== this.state.name.toLowerCase()) {
      const taken = await db.selectFrom("streams").select("id").where("realm_id", "=", this.realmId).where(sql`lower(name)`, "=", msg.name.toLowerCase()).executeTakeFirst();
      if (taken) throw chatErrors.channelExists(msg.name);
    }
    Object.assign(settings, msg.settings ?? {});
    const renderedDescription = msg.description === undefined ? undefined : msg.description ? renderMarkdown(msg.description) : "";
    try {
      await this.deps.store.write(this.ctx.fence(), (trx) =>
        trx
          .updateTable("streams")
          .set({
            ...(msg.name !== undefined ? { name: msg.name } : {}),
            ...(msg.description !== undefined ? { description: msg.description, rendered_description: renderedDescription } : {}),
            ...(msg.inviteOnly !== undefined ? { invite_only: msg.inviteOnly } : {}),
            ...(msg.historyPublic !== undefined ? { history_public_to_subscribers: msg.historyPublic } : {}),
            settings: JSON.stringify(settings),
          })
          .where("id", "=", this.state.id)
          .execute(),
      );
    } catch (err) {
      // Another channel took the name meanwhile: the realm-wide unique index decides.
      if (msg.name !== undefined && /unique|duplicate/i.test(String((err as Error)?.message))) throw chatErrors.channelExists(msg.name);
      throw err;
    }
    const { row: after, object } = await this.channelObject();
    this.state.name = after.name;
    this.state.inviteOnly = after.invite_only;
    this.state.historyPublic = after.history_public_to_subscribers;
    this.state.settings = settings;

    const base = { type: "stream", op: "update", stream_id: after.id, name: before.name };
    const privacy = { history_public_to_subscribers: after.history_public_to_subscribers, is_web_public: after.is_web_public };
    const events: Array<Record<string, unknown>> = [];
    if (after.name !== before.name) events.push(Object.assign({}, base, { property: "name", value: after.name }));
    if (msg.description !== undefined && after.description !== before.description) {
      events.push(Object.assign({}, base, { property: "description", value: after.description, rendered_description: after.rendered_description }));
    }
    if (after.invite_only !== before.invite_only) events.push(Object.assign({}, base, { property: "invite_only", value: after.invite_only }, privacy));
    if (after.history_public_to_subscribers !== before.history_public_to_subscribers) {
      events.push(Object.assign({}, base, { property: "history_public_to_subscribers", value: after.history_public_to_subscribers }));
    }
    for (const [name, value] of Object.entries(msg.settings ?? {})) {
      if (!sameGroupSetting((before.settings as Record<string, unknown>)[name], value)) events.push(Object.assign({}, base, { property: name, value }));
    }
    const [seeing, saw] = await Promise.all([
      metadataWatchers(db, after, this.state.subscribers),
      metadataWatchers(db, before, this.state.subscribers),
    ]);
    const system = this.deps.system();
    // Those who just gained sight of the channel get it whole, in its new state, instead of its changes.
    const kept = [...seeing].filter((id) => saw.has(id));
    const lost = [...saw].filter((id) => !seeing.has(id));
    const gained = [...seeing].filter((id) => !saw.has(id));
    for (const event of events) await system.broadcast(User, kept, { op: "deliverEvent", event });
    if (lost.length) await system.broadcast(User, lost, { op: "deliverEvent", event: { type: "stream", op: "delete", streams: [{ stream_id: after.id }], stream_ids: [after.id] } });
    if (gained.length) await system.broadcast(User, gained, { op: "deliverEvent", event: { type: "stream", op: "create", streams: [object] } });
    return {};
  }

  /**
   * Zulip's do_deactivate_stream: the channel keeps its subscribers and messages and takes no more sends. Whoever
   * sees it learns that it is archived (stream update is_archived) or, if their client does not handle archived
   * channels, that it is gone (stream delete); it stops being a default channel; and Notification Bot says so in
   * the channel, read for everyone. The reply waits for that notice.
   */
  private async archive(): Promise<typeof PARKED> {
    if (this.state.archived) throw errors.badRequest("Channel is already deactivated");
    const db = this.deps.store.db;
    const { row } = await this.channelObject();
    const seeing = [...(await metadataWatchers(db, row, this.state.subscribers))];
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("streams").set({ deactivated: true }).where("id", "=", this.state.id).execute());
    this.state.archived = true;
    const system = this.deps.system();
    // The realm owns the default channels and the settings that name a channel; from now on it refuses to make
    // this one default.
    await system.ref(Realm, this.realmId).ask({ op: "channelArchived", streamId: this.state.id });
    const gone = { type: "stream", op: "delete", streams: [{ stream_id: this.state.id }], stream_ids: [this.state.id] };
    await this.tellArchived(seeing, true, gone);
    const notice = `Channel ${this.state.name} has been archived.`;
    return this.notify({ op: "notify", topic: CHANNEL_EVENTS_TOPIC, content: notice, unreadOnlyFor: [] });
  }

  /**
   * Zulip's do_unarchive_stream: the channel takes sends again, keeping its name; whoever sees it learns it is no
   * longer archived (or, if their client does not handle archived channels, gets it as a new channel); Notification
   * Bot says so in the channel. A private channel with nobody left in it stays archived.
   */
  private async unarchive(): Promise<typeof PARKED> {
    if (!this.state.archived) throw errors.badRequest("Channel is not currently deactivated");
    if (this.state.inviteOnly && !this.state.subscribers.size) throw errors.badRequest("Channel is private and have no subscribers");
    await this.deps.store.write(this.ctx.fence(), (trx) => trx.updateTable("streams").set({ deactivated: false }).where("id", "=", this.state.id).execute());
    this.state.archived = false;
    const { row, object } = await this.channelObject();
    const seeing = [...(await metadataWatchers(this.deps.store.db, row, this.state.subscribers))];
    await this.tellArchived(seeing, false, { type: "stream", op: "create", streams: [object] });
    return this.notify({ op: "notify", topic: CHANNEL_EVENTS_TOPIC, content: `Channel #**${this.state.name}** has been unarchived.` });
  }

  /** The stream update is_archived to clients that handle archived channels; `otherwise` to the others. */
  private async tellArchived(seeing: number[], archived: boolean, otherwise: Record<string, unknown>): Promise<void> {
    const system = this.deps.system();
    const update = { type: "stream", op: "update", stream_id: this.state.id, name: this.state.name, property: "is_archived", value: archived };
    await system.broadcast(User, seeing, { op: "deliverEvent", event: update, capability: { name: ARCHIVED_CHANNELS, declared: true } });
    await system.broadcast(User, seeing, { op: "deliverEvent", event: otherwise, capability: { name: ARCHIVED_CHANNELS, declared: false } });
  }

  /**
   * One batch of POST /streams/{stream_id}/delete_topic (Zulip's delete_in_topic): the newest messages of the topic
   * that the caller can read, deleted in one commit with one delete_message event. The last batch also resets the
   * topic's visibility policies of those who see nothing of it any more.
   */
  private async deleteTopic(msg: DeleteTopic): Promise<{ complete: boolean }> {
    const query = this.deps.store.db
      .selectFrom("messages")
      .select(["id", "topic"])
      .where("recipient_id", "=", this.recipientId)
      .where(sql`lower(topic)`, "=", msg.topic.toLowerCase());
    const rows = await this.readableBy(query, msg.actingId).orderBy("id", "desc").limit(msg.batchSize).execute();
    if (rows.length) await this.removeMessages(rows.map((r) => r.id), { stream_id: this.state.id, topic: rows[0]!.topic });
    if (rows.length === msg.batchSize) return { complete: false };
    await this.topicPolicies.forgetTopic(msg.topic);
    return { complete: true };
  }

  /** Zulip's bulk_access_stream_messages_query: with protected history, a user reads only what they received. */
  private readableBy<O>(query: SelectQueryBuilder<Database, "messages", O>, userId: number): SelectQueryBuilder<Database, "messages", O> {
    if (this.state.historyPublic) return query;
    return query.where(({ exists, selectFrom }) =>
      exists(selectFrom("user_messages").select("user_messages.user_id").whereRef("user_messages.message_id", "=", "messages.id").where("user_messages.user_id", "=", userId)),
    );
  }

  /** One property of a subscriber's subscription; `in_home_view` is the inverse of `is_muted`, stored as such. */
  private async updateSubscription(msg: UpdateSubscription): Promise<Record<string, never>> {
    if (!this.state.subscribers.has(msg.userId)) throw errors.badRequest(`Not subscribed to channel ID ${this.state.id}`);
    const column = msg.property === "in_home_view" ? "is_muted" : msg.property;
    const stored = msg.property === "in_home_view" ? !msg.value : msg.value;
    await this.deps.store.write(this.ctx.fence(), (trx) =>
      trx
        .updateTable("subscriptions")
        .set({ [column]: stored })
        .where("stream_id", "=", this.state.id)
        .where("user_id", "=", msg.userId)
        .execute(),
    );
    const event = { type: "subscription", op: "update", stream_id: this.state.id, property: msg.property, value: msg.value };
    await this.deps.system().broadcast(User, [msg.userId], { op: "deliverEvent", event });
    return {};
  }

  /**
   * Who loses and who gains the moved messages when they go to another channel (Zulip's do_update_message): everyone
   * ever subscribed here but not subscribed there loses their flag rows; of them, those who can no longer read the
   * messages (all of them for a private destination, guests for a public one) see the messages deleted. The
   * destination's subscribers get read flag rows when its history is protected, since that is how they read them.
   */
  private async accessChange(destination: { invite_only: boolean; history_public_to_subscribers: boolean }, destinationSubscribers: number[]): Promise<AccessChange> {
    const everSubscribed = await this.deps.store.db
      .selectFrom("subscriptions")
      .innerJoin("users", "users.id", "subscriptions.user_id")
      .select(["users.id", "users.role"])
      .where("subscriptions.stream_id", "=", this.state.id)
      .execute();
    const staying = new Set(destinationSubscribers);
    const leaving = everSubscribed.filter((u) => !staying.has(u.id));
    return {
      dropFlagsOf: leaving.map((u) => u.id),
      losingAccess: leaving.filter((u) => destination.invite_only || u.role === ROLE.guest).map((u) => u.id),
      readFlagsFor: destination.history_public_to_subscribers ? [] : destinationSubscribers,
    };
  }

  /**
   * A topic and/or channel move, checked as Zulip checks it (zerver/actions/message_edit.py): the permission
   * group of the kind of move, then its time limit for everyone below moderator. `change_all` past the limit is
   * MOVE_MESSAGES_TIME_LIMIT_EXCEEDED with what the caller may move instead.
   */
  protected async planMove(msg: EditMessage, row: StoredMessage, rules: MessageRules, now: number): Promise<MovePlan> {
    const db = this.deps.store.db;
    const topic = msg.topic ?? row.topic;
    const streamId = msg.streamId ?? this.state.id;
    const changesStream = streamId !== this.state.id;
    const changesTopic = topic !== row.topic;
    const resolveOnly =
      !changesStream && (topic === RESOLVED_TOPIC_PREFIX + row.topic || row.topic === RESOLVED_TOPIC_PREFIX + topic);
    // The prefix alone (trimmed to "✔" by the gateway, as Zulip strips topics) would resolve the empty topic.
    if (row.topic === "" && RESOLVED_TOPIC_PREFIX.startsWith(topic) && topic) throw errors.badRequest("General chat cannot be marked as resolved");

    let destination = { id: this.state.id, recipientId: this.recipientId, subscribers: [] as number[], topicsPolicy: this.state.settings.topics_policy };
    let access: AccessChange = { dropFlagsOf: [], readFlagsFor: [], losingAccess: [] };
    if (changesStream) {
      const stream = await db
        .selectFrom("streams")
        .select(["id", "invite_only", "history_public_to_subscribers", "realm_id", "settings"])
        .where("id", "=", streamId)
        .executeTakeFirst();
      if (!stream || stream.realm_id !== this.realmId) throw errors.badRequest("Invalid channel ID");
      const subs = await db.selectFrom("subscriptions").select("user_id").where("stream_id", "=", streamId).where("active", "=", true).execute();
      const subscribers = subs.map((s) => s.user_id);
      if (stream.invite_only && !subscribers.includes(msg.acting.id)) throw errors.badRequest("Invalid channel ID");
      // The destination's recipient row exists once its actor has activated: wake it first (a no-op move-in).
      await this.deps.system().ref(Channel, streamId).ask({ op: "movedIn", maxId: 0 });
      const recipient = await db.selectFrom("recipients").select("id").where("type", "=", RECIPIENT_STREAM).where("type_id", "=", streamId).executeTakeFirstOrThrow();
      const settings = (stream.settings ?? {}) as Record<string, unknown>;
      destination = { id: streamId, recipientId: recipient.id, subscribers, topicsPolicy: settings.topics_policy };
      if (!(await this.allowed(rules, "can_move_messages_between_channels_group", "can_move_messages_out_of_channel_group", msg.acting))) {
        throw errors.badRequest("You don't have permission to move this message");
      }
      access = await this.accessChange(stream, subscribers);
    }
    if (changesTopic || changesStream) {
      const refused = topicPolicyError(topic, destination.topicsPolicy, rules);
      if (refused) throw refused;
    }
    if (changesTopic) {
      const setting = resolveOnly ? "can_resolve_topics_group" : "can_move_messages_between_topics_group";
      if (!(await this.allowed(rules, setting, resolveOnly ? undefined : "can_move_messages_within_channel_group", msg.acting))) {
        throw errors.badRequest(resolveOnly ? "You don't have permission to resolve topics in this channel." : "You don't have permission to edit this message");
      }
    }

    let query = db
      .selectFrom("messages")
      .select(["id", "date_sent"])
      .where("recipient_id", "=", this.recipientId)
      .where(sql`lower(topic)`, "=", row.topic.toLowerCase());
    if (msg.propagateMode === "change_one") query = query.where("id", "=", row.id);
    else if (msg.propagateMode === "change_later") query = query.where("id", ">=", row.id);
    // Protected history: only what the caller received moves (or counts).
    const rows = await this.readableBy(query, msg.acting.id).orderBy("id").execute();
    if (!rows.some((r) => r.id === row.id)) rows.unshift({ id: row.id, date_sent: row.date_sent });

    if (!isModerator(msg.acting.role) && !resolveOnly) {
      const limit = changesStream ? rules.move_messages_between_streams_limit_seconds : rules.move_messages_within_stream_limit_seconds;
      const late = rows.filter((r) => pastLimit(limit, r.date_sent, now));
      if (late.length) {
        // Ids grow with time: for change_one / change_later a late message means the target itself is late.
        if (msg.propagateMode !== "change_all") {
          throw errors.badRequest(changesStream ? "The time limit for editing this message's channel has passed" : "The time limit for editing this message's topic has passed");
        }
        const allowedRows = rows.filter((r) => !pastLimit(limit, r.date_sent, now));
        throw new ChorusError(
          "MOVE_MESSAGES_TIME_LIMIT_EXCEEDED",
          `You only have permission to move the ${allowedRows.length}/${rows.length} most recent messages in this topic.`,
          400,
          {
            first_message_id_allowed_to_move: allowedRows[0]?.id ?? null,
            total_messages_in_topic: rows.length,
            total_messages_allowed_to_move: allowedRows.length,
          },
        );
      }
    }
    const messageIds = rows.map((r) => r.id);
    let wholeTopic = false;
    return {
      messageIds,
      topic,
      streamId: destination.id,
      recipientId: destination.recipientId,
      resolveOnly,
      alsoNotify: destination.subscribers,
      ...access,
      afterCommit: async () => {
        if (changesStream) await this.deps.system().ref(Channel, destination.id).ask({ op: "movedIn", maxId: Math.max(...messageIds) });
        // As Zulip decides it: change_all moves the whole topic; otherwise, whether the caller sees any message left.
        wholeTopic = msg.propagateMode === "change_all" || !(await this.topicPolicies.hasVisibleMessages(row.topic, msg.acting.id));
        if (wholeTopic) await this.topicPolicies.moveWholeTopic(row.topic, { streamId: destination.id, topic, messageIds }, access.losingAccess);
      },
      notices: () => this.moveNotices(msg, row.topic, { streamId: destination.id, topic, messageIds, resolveOnly, wholeTopic }),
    };
  }
}
