/**
 * user-topics:<user id>: the user's per-topic visibility policies (Zulip's UserTopic: muted, unmuted, followed).
 * Its own kind while `user:<id>` is being reworked (see flags.ts); the table is the same either way.
 */
import type { Actor, ActorContext } from "../../../runtime/actor.ts";
import { errors } from "../../../runtime/errors.ts";
import type { ActorDeps } from "../../deps.ts";
import { dispatch, type Handlers, type MessageOf } from "../../../runtime/protocol.ts";
import type { SetTopicVisibility, TopicVisibilitySet, UserTopicsProtocol } from "./user-topics.protocol.ts";
import { User } from "./user.protocol.ts";

/** Zulip's visibility policies. */
export const VISIBILITY = { inherit: 0, muted: 1, unmuted: 2, followed: 3 } as const;

export class UserTopicsActor implements Actor {
  private readonly userId: number;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {
    this.userId = Number(ctx.key);
  }

  /** The implementation of user-topics.protocol.ts. */
  private static readonly handlers: Handlers<UserTopicsProtocol, UserTopicsActor> = {
    setVisibility: (userTopics, msg) => userTopics.setVisibility(msg),
  };

  receive(msg: MessageOf<UserTopicsProtocol>): unknown {
    return dispatch(UserTopicsActor.handlers, this, msg);
  }

  private async setVisibility(msg: SetTopicVisibility): Promise<TopicVisibilitySet> {
    const key = msg.topic.toLowerCase();
    const now = Math.floor(Date.now() / 1000);
    const changed = await this.deps.store.write(this.ctx.fence(), async (trx) => {
      const current = await trx
        .selectFrom("user_topics")
        .select("visibility_policy")
        .where("user_id", "=", this.userId)
        .where("stream_id", "=", msg.streamId)
        .where("topic_key", "=", key)
        .executeTakeFirst();
      const policy = current?.visibility_policy ?? VISIBILITY.inherit;
      if (msg.require && policy !== msg.require.policy) throw errors.badRequest(msg.require.error);
      if (policy === msg.policy) return false;
      // Automatic changes only ever raise visibility: a topic followed meanwhile stays followed.
      if (msg.automatic && policy === VISIBILITY.followed) return false;
      if (msg.policy === VISIBILITY.inherit) {
        await trx.deleteFrom("user_topics").where("user_id", "=", this.userId).where("stream_id", "=", msg.streamId).where("topic_key", "=", key).execute();
      } else {
        await trx
          .insertInto("user_topics")
          .values({ user_id: this.userId, stream_id: msg.streamId, topic_name: msg.topic, topic_key: key, visibility_policy: msg.policy, last_updated: now })
          .onConflict((c) => c.columns(["user_id", "stream_id", "topic_key"]).doUpdateSet({ visibility_policy: msg.policy, last_updated: now, topic_name: msg.topic }))
          .execute();
      }
      return true;
    });
    // Repeating a request changes nothing and, as in Zulip since feature level 169, still succeeds quietly.
    if (changed) {
      const event = { type: "user_topic", stream_id: msg.streamId, topic_name: msg.topic, last_updated: now, visibility_policy: msg.policy };
      await this.deps.system().broadcast(User, [this.userId], { op: "deliverEvent", event }); // in the queue before success
    }
    return { changed };
  }
}
