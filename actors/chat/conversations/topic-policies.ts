/**
 * What a channel's events do to its users' topic visibility policies, as Zulip does it: a send or a reaction may
 * follow or unmute the topic for the person acting (their automatic settings), a mention may make the mentioned
 * follow it, and a whole topic moved takes its policies along. The channel actor decides when, this module what;
 * every change goes through the user's user-topics actor, which writes it and queues the user_topic event.
 */
import { sql } from "kysely";
import type { ActorDeps } from "../../deps.ts";
import { topicHasOtherMessages } from "../reads/topics.ts";
import { UserTopics, type SetTopicVisibility } from "../users/user-topics.protocol.ts";
import { USER_SETTINGS_DEFAULTS, userSetting } from "../users/settings.ts";
import { VISIBILITY } from "../users/user-topics.ts";

/**
 * Zulip's values of the `automatically_follow_topics_policy` and `automatically_unmute_topics_in_muted_streams_policy`
 * user settings (UserProfile.AUTOMATICALLY_CHANGE_VISIBILITY_POLICY_*).
 */
export const AUTOMATIC_POLICY = { onParticipation: 1, onSend: 2, onInitiation: 3, never: 4 } as const;

/** Where a user stands with a topic (see TopicPolicies.standing). */
export interface Standing {
  followPolicy: number;
  unmutePolicy: number;
  current: number;
  /** null: not subscribed. */
  streamMuted: boolean | null;
  topicExists: boolean;
}

/**
 * The policy a send gives the sender's topic, as Zulip decides it (zerver/lib/message.py
 * visibility_policy_for_send_message): following beats unmuting; sending is participating; starting the topic is
 * both; unmuting applies only in a muted channel. Undefined when the send changes nothing.
 */
export function visibilityAfterSend(s: Standing & { startsTopic: boolean }): number | undefined {
  const applies = (setting: number) =>
    setting === AUTOMATIC_POLICY.onSend || setting === AUTOMATIC_POLICY.onParticipation || (s.startsTopic && setting === AUTOMATIC_POLICY.onInitiation);
  return raise(s, applies);
}

/** What reacting (participating without sending) does: Zulip's visibility_policy_for_participation. */
export function visibilityAfterParticipation(s: Standing): number | undefined {
  return raise(s, (setting) => setting === AUTOMATIC_POLICY.onParticipation);
}

/** Follow if the follow setting applies, else unmute a muted channel's topic if that one does; never lower. */
function raise(s: Standing, applies: (setting: number) => boolean): number | undefined {
  if (s.current === VISIBILITY.followed) return undefined;
  const policy = applies(s.followPolicy) ? VISIBILITY.followed : s.streamMuted && applies(s.unmutePolicy) ? VISIBILITY.unmuted : undefined;
  return policy === s.current ? undefined : policy;
}

/** The more visible of two policies (Zulip's get_visibility_policy_after_merge): followed, unmuted, inherit, muted. */
export function mostVisible(a: number, b: number): number {
  for (const policy of [VISIBILITY.followed, VISIBILITY.unmuted, VISIBILITY.inherit]) if (a === policy || b === policy) return policy;
  return VISIBILITY.muted;
}

/** The channel as these rules need it. */
export interface ChannelView {
  id: number;
  historyPublic: boolean;
}

export class TopicPolicies {
  constructor(
    private readonly deps: ActorDeps,
    private readonly channel: () => ChannelView,
  ) {}

  /**
   * Where a user stands with a topic, in one query: their automatic follow / unmute settings, their policy for the
   * topic, whether they muted the channel, and whether the topic has messages they can see (older than
   * `before`, when given: the message that asks).
   */
  async standing(userId: number, topic: string, before?: number): Promise<Standing> {
    const { id } = this.channel();
    const key = topic.toLowerCase();
    const older = before === undefined ? sql`` : sql`and m.id < ${before}`;
    const { rows } = await sql<{ follow_policy: string | null; unmute_policy: string | null; current: number | null; stream_muted: boolean | null; topic_exists: boolean }>`
      select
        ${userSetting(sql`${String(userId)}`, "automatically_follow_topics_policy")} as follow_policy,
        ${userSetting(sql`${String(userId)}`, "automatically_unmute_topics_in_muted_streams_policy")} as unmute_policy,
        (select visibility_policy from user_topics where user_id = ${userId} and stream_id = ${id} and topic_key = ${key}) as current,
        (select is_muted from subscriptions where user_id = ${userId} and stream_id = ${id} and active) as stream_muted,
        exists (select 1 from messages m where m.stream_id = ${id} and lower(m.topic) = ${key} ${older} ${this.seenBy(userId)}) as topic_exists`.execute(this.deps.store.db);
    const row = rows[0]!;
    return {
      followPolicy: row.follow_policy === null ? USER_SETTINGS_DEFAULTS.automatically_follow_topics_policy : Number(row.follow_policy),
      unmutePolicy: row.unmute_policy === null ? USER_SETTINGS_DEFAULTS.automatically_unmute_topics_in_muted_streams_policy : Number(row.unmute_policy),
      current: row.current ?? VISIBILITY.inherit,
      streamMuted: row.stream_muted,
      topicExists: row.topic_exists,
    };
  }

  /** Whether the topic has messages the user can see. */
  async hasVisibleMessages(topic: string, userId: number): Promise<boolean> {
    const { rows } = await sql`
      select 1 from messages m where m.stream_id = ${this.channel().id} and lower(m.topic) = ${topic.toLowerCase()} ${this.seenBy(userId)} limit 1`.execute(
      this.deps.store.db,
    );
    return rows.length > 0;
  }

  /** An automatic change of one user's policy for a topic of this channel; whether it changed anything. */
  async raise(userId: number, topic: string, policy: number): Promise<boolean> {
    const set: SetTopicVisibility = { op: "setVisibility", streamId: this.channel().id, topic, policy, automatic: true };
    return (await this.deps.system().ref(UserTopics, userId).ask(set)).changed;
  }

  /**
   * The mentioned people who want to follow where they are mentioned (automatically_follow_topics_where_mentioned,
   * on by default) follow the topic, unless they muted it or follow it already.
   */
  async followWhereMentioned(userIds: number[], topic: string): Promise<void> {
    const { rows } = await sql<{ id: number }>`
      select u.id from users u
      left join user_topics ut on ut.user_id = u.id and ut.stream_id = ${this.channel().id} and ut.topic_key = ${topic.toLowerCase()}
      where u.id in (${sql.join(userIds)}) and not u.is_bot
        and coalesce((${userSetting(sql.ref("u.id"), "automatically_follow_topics_where_mentioned")})::boolean, ${USER_SETTINGS_DEFAULTS.automatically_follow_topics_where_mentioned})
        and coalesce(ut.visibility_policy, ${VISIBILITY.inherit}) not in (${VISIBILITY.muted}, ${VISIBILITY.followed})`.execute(this.deps.store.db);
    await Promise.all(rows.map((r) => this.raise(r.id, topic, VISIBILITY.followed)));
  }

  /**
   * A whole topic moved: its policies go with it (zerver/actions/message_edit.py). Each user with a policy for the
   * old or the new topic ends with the old topic's policy at the destination, or, where the destination already
   * had messages, the more visible of the two; the old topic's policy is dropped. Those who lost access to the
   * messages only lose the old topic's policy.
   */
  async moveWholeTopic(oldTopic: string, to: { streamId: number; topic: string; messageIds: number[] }, losingAccess: number[]): Promise<void> {
    const db = this.deps.store.db;
    const { id } = this.channel();
    const [oldKey, newKey] = [oldTopic.toLowerCase(), to.topic.toLowerCase()];
    if (to.streamId === id && oldKey === newKey) return; // a change of case keeps the same row
    const [rows, targetHadMessages] = await Promise.all([
      db
        .selectFrom("user_topics")
        .select(["user_id", "stream_id", "topic_key", "visibility_policy"])
        .where((eb) =>
          eb.or([
            eb.and([eb("stream_id", "=", id), eb("topic_key", "=", oldKey)]),
            eb.and([eb("stream_id", "=", to.streamId), eb("topic_key", "=", newKey)]),
          ]),
        )
        .execute(),
      topicHasOtherMessages(db, to.streamId, to.topic, to.messageIds),
    ]);
    const policies = new Map<number, { old: number; target: number }>();
    for (const r of rows) {
      const entry = policies.get(r.user_id) ?? { old: VISIBILITY.inherit, target: VISIBILITY.inherit };
      if (r.stream_id === id && r.topic_key === oldKey) entry.old = r.visibility_policy;
      else entry.target = r.visibility_policy;
      policies.set(r.user_id, entry);
    }
    const losing = new Set(losingAccess);
    const set = (userId: number, streamId: number, topic: string, policy: number) =>
      this.deps.system().ref(UserTopics, userId).ask({ op: "setVisibility", streamId, topic, policy });
    await Promise.all(
      [...policies].map(async ([userId, { old, target }]) => {
        if (old !== VISIBILITY.inherit) await set(userId, id, oldTopic, VISIBILITY.inherit);
        if (losing.has(userId)) return;
        const next = targetHadMessages ? mostVisible(old, target) : old;
        if (next !== target) await set(userId, to.streamId, to.topic, next);
      }),
    );
  }

  /**
   * After a topic's messages were deleted (Zulip's delete_in_topic), the visibility policies for it go back to
   * inherit, except for those who still see some of its messages (protected history: what they received).
   */
  async forgetTopic(topic: string): Promise<void> {
    const { id } = this.channel();
    const rows = await this.deps.store.db.selectFrom("user_topics").select("user_id").where("stream_id", "=", id).where("topic_key", "=", topic.toLowerCase()).execute();
    await Promise.all(
      rows.map(async ({ user_id }) => {
        if (await this.hasVisibleMessages(topic, user_id)) return;
        await this.deps.system().ref(UserTopics, user_id).ask({ op: "setVisibility", streamId: id, topic, policy: VISIBILITY.inherit });
      }),
    );
  }

  /** In a channel with protected history, a user sees only the messages they received: the SQL condition on `m`. */
  private seenBy(userId: number) {
    return this.channel().historyPublic ? sql`` : sql`and exists (select 1 from user_messages um where um.message_id = m.id and um.user_id = ${userId})`;
  }
}
