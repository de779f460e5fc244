/** Topics: the topics of a channel, and the user's topic visibility (POST /user_topics and the legacy muted_topics). */
import { sql } from "kysely";
import { errors } from "../../runtime/errors.ts";
import { UserTopics, type SetTopicVisibility } from "../../actors/chat/users/user-topics.protocol.ts";
import { EMPTY_TOPIC_DISPLAY_NAME, readableStream } from "../../actors/chat/reads/reads.ts";
import { VISIBILITY } from "../../actors/chat/users/user-topics.ts";
import type { RouteSpec } from "./app.ts";
import { Bool, Id, Str } from "../params.ts";
import { LIMITS } from "./zulip.ts";
import { normaliseTopic } from "./messages.ts";

const TOPIC = { type: "string", maxLength: LIMITS.max_topic_length } as const;

export const topicRoutes: RouteSpec[] = [
  {
    method: "GET",
    path: "/users/me/{stream_id}/topics",
    params: { type: "object", properties: { stream_id: Id, allow_empty_topic_name: { ...Bool, default: false } }, required: ["stream_id"] },
    async handle({ params, user, services }) {
      const db = services.store.db;
      const stream = await readableStream(db, user, { id: params.stream_id });
      // Topics match case-insensitively; a topic shows the name of its latest message, as in Zulip.
      let query = db
        .selectFrom("messages as m")
        .select([sql<string>`(array_agg(m.topic order by m.id desc))[1]`.as("name"), sql<number>`max(m.id)`.as("max_id")])
        .where("m.stream_id", "=", stream.id)
        .groupBy(sql`lower(m.topic)`);
      if (!stream.history_public_to_subscribers) {
        // Protected history: only the topics of messages the caller received count.
        query = query.where(({ exists, selectFrom }) =>
          exists(selectFrom("user_messages as um").select("um.user_id").whereRef("um.message_id", "=", "m.id").where("um.user_id", "=", user.id)),
        );
      }
      const rows = await query.execute();
      const topics = rows
        .map((r) => ({ name: r.name === "" && !params.allow_empty_topic_name ? EMPTY_TOPIC_DISPLAY_NAME : r.name, max_id: Number(r.max_id) }))
        .sort((a, b) => b.max_id - a.max_id);
      return { topics };
    },
  },
  {
    method: "POST",
    path: "/user_topics",
    params: {
      type: "object",
      properties: { stream_id: Id, topic: TOPIC, visibility_policy: { type: "integer", enum: Object.values(VISIBILITY) } },
      required: ["stream_id", "topic", "visibility_policy"],
    },
    async handle({ params, user, services }) {
      const stream = await readableStream(services.store.db, user, { id: params.stream_id });
      const msg: SetTopicVisibility = { op: "setVisibility", streamId: stream.id, topic: normaliseTopic(params.topic), policy: params.visibility_policy };
      await services.system.ref(UserTopics, user.id).ask(msg);
      return {};
    },
  },
  {
    method: "PATCH",
    path: "/users/me/subscriptions/muted_topics",
    params: {
      type: "object",
      properties: { stream_id: Id, stream: Str, topic: TOPIC, op: { type: "string", enum: ["add", "remove"] } },
      required: ["topic", "op"],
    },
    async handle({ params, user, services }) {
      if ((params.stream_id === undefined) === (params.stream === undefined)) throw errors.badRequest("Please choose one: 'stream' or 'stream_id'.");
      const ref = params.stream_id !== undefined ? { id: params.stream_id as number } : { name: String(params.stream) };
      const stream = await readableStream(services.store.db, user, ref);
      const topic = normaliseTopic(params.topic);
      const msg: SetTopicVisibility =
        params.op === "add"
          ? { op: "setVisibility", streamId: stream.id, topic, policy: VISIBILITY.muted }
          : { op: "setVisibility", streamId: stream.id, topic, policy: VISIBILITY.inherit, require: { policy: VISIBILITY.muted, error: "Topic is not muted" } };
      await services.system.ref(UserTopics, user.id).ask(msg);
      return {};
    },
  },
];
