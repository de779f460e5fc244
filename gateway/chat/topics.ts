/** Topics: the topics of a channel, and the user's topic visibility (POST /user_topics and the legacy muted_topics). */
import { errors } from "../../runtime/errors.ts";
import { channelTopics } from "../../actors/chat/reads/topics.ts";
import { readableStream } from "../../actors/chat/reads/subscriptions.ts";
import { UserTopics, type SetTopicVisibility } from "../../actors/chat/users/user-topics.protocol.ts";
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
      return { topics: await channelTopics(db, stream, user.id, { emptyTopicName: params.allow_empty_topic_name }) };
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
