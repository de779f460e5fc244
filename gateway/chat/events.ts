/** Zulip's event system: POST /register, long-poll GET /events, DELETE /events. */
import { ChorusError } from "../../runtime/errors.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import type { HttpStream, StreamSink } from "../http.ts";
import { User, type Polled } from "../../actors/chat/users/user.protocol.ts";
import { parseNarrow } from "../../actors/chat/reads/narrow.ts";
import { realmUsersFor, realmUsersJson, type UserRow } from "../../actors/chat/reads/users.ts";
import { defaultChannelIds } from "../../actors/chat/reads/channels.ts";
import { registerChannelLists, type RegisterChannelLists } from "../../actors/chat/reads/channel-lists.ts";
import { ARCHIVED_CHANNELS } from "../../actors/chat/conversations/channel.protocol.ts";
import { unreadMessages } from "../../actors/chat/reads/unreads.ts";
import { recentPrivateConversations } from "../../actors/chat/reads/recent-conversations.ts";
import { realmIconUrl } from "../../actors/chat/rendering/message-format.ts";
import { maxMessageId } from "../../actors/chat/reads/messages.ts";
import { realmNameAndDate } from "../../actors/chat/reads/realms.ts";
import { userTopicsOf } from "../../actors/chat/reads/topics.ts";
import { CUSTOM_PROFILE_FIELD_TYPES, profileFieldObjects } from "../../actors/chat/organization/profile-fields.ts";
import { envelope, fieldsJson, JsonValue, SerializedFields, type RouteSpec, type Services } from "./app.ts";
import { Bool, Str, type ParamsSchema } from "../params.ts";
import { LIMITS, ZULIP_FEATURE_LEVEL, ZULIP_MERGE_BASE, ZULIP_VERSION } from "./zulip.ts";
import { ROLE, userGroupObjects } from "../../actors/chat/organization/groups.ts";
import { draftsOf, viewsOf, mutedUsersOf, userStatuses } from "../../actors/chat/users/user-data.ts";
import { alertWordsOf } from "../../actors/chat/users/alert-words.ts";
import { Presence } from "../../actors/chat/users/presence.protocol.ts";
import { accessibleUsers, presencesSeenBy } from "../../actors/chat/organization/accounts.ts";
import { remindersOf, scheduledMessagesOf } from "../../actors/chat/conversations/scheduler.ts";
import { realmSettings, realmUserSettingsDefaults, storedUserSettings, USER_SETTINGS_DEFAULTS } from "../../actors/chat/users/settings.ts";
import { realmEmojiObjects } from "../../actors/chat/organization/realm-emoji.ts";
import { linkifierObjects } from "../../actors/chat/organization/linkifiers.ts";
import { playgroundObjects } from "../../actors/chat/organization/realm-playgrounds.ts";
import { snippetsOf } from "../../actors/chat/users/saved-snippets.ts";
import { channelFolderObjects } from "../../actors/chat/organization/channel-folders.ts";
import { mutedTopics, ownUserState, serverRealmState, starredMessages } from "../../actors/chat/reads/register-state.ts";

const StrList = { type: "array", items: Str } as const;

/** An event stream's parameters (SSE and WebSocket): its queue, and the last event the client has. */
const QUEUE_STREAM_PARAMS: ParamsSchema = { type: "object", properties: { queue_id: Str, last_event_id: { type: "integer", minimum: -1 } }, required: ["queue_id"] };

interface InitialStateOptions {
  clientGravatar: boolean;
  includeSubscribers: boolean;
  slimPresence: boolean;
  /** The `empty_topic_name` client capability: the empty topic is sent as "" rather than its display name. */
  emptyTopicName: boolean;
  /** The `user_list_incomplete` client capability: users the viewer may not see are left out, not placeholders. */
  userListIncomplete: boolean;
  /** The `linkifier_url_template` client capability: without it, realm_linkifiers is empty. */
  linkifierUrlTemplate: boolean;
  /** The `include_deactivated_groups` client capability: without it, deactivated groups are left out. */
  includeDeactivatedGroups: boolean;
  /** The `archived_channels` client capability: archived channels are listed (with is_archived), not left out. */
  archivedChannels: boolean;
}

/** The initial state of each event type we serve; types not listed contribute nothing. */
const initialState: Record<string, (s: Services, u: UserRow, o: InitialStateOptions) => Promise<Record<string, unknown>>> = {
  async message(s, u) {
    return { max_message_id: await maxMessageId(s.store.db, u.realm_id) };
  },
  // Former subscriptions the user can still see are `unsubscribed`; channels they see and never joined,
  // `never_subscribed` (administrators see every channel's metadata).
  async subscription(s, u, o) {
    const lists = await registerChannels(s, u, o);
    return { subscriptions: new JsonValue([lists.subscriptions]), unsubscribed: new JsonValue([lists.unsubscribed]), never_subscribed: new JsonValue([lists.neverSubscribed]) };
  },
  async stream(s, u, o) {
    return { streams: new JsonValue([(await registerChannels(s, u, o)).streams]) };
  },
  // Guests are not told which channels new users join (Zulip's fetch_initial_state_data); nor are there groups of
  // default channels yet.
  async default_streams(s, u) {
    return { realm_default_streams: u.role === ROLE.guest ? [] : await defaultChannelIds(s.store.db, u.realm_id) };
  },
  async default_stream_groups() {
    return { realm_default_stream_groups: [] };
  },
  async realm(s, u, o) {
    const realm = await realmNameAndDate(s.store.db, u.realm_id);
    const url = s.siteUrl();
    return {
      realm_name: realm.name,
      realm_date_created: realm.date_created,
      realm_url: url,
      realm_uri: url,
      realm_icon_url: realmIconUrl(u.realm_id),
      realm_icon_source: "G",
      ...serverRealmState(url),
      max_file_upload_size_mib: s.chat.maxFileUploadSizeMib,
      realm_upload_quota_mib: s.chat.realmUploadQuotaMib ?? null,
      ...(await registerRealmSettings(s, u, o)),
    };
  },
  async user_settings(s, u) {
    return { user_settings: Object.assign({}, USER_SETTINGS_DEFAULTS, { timezone: u.timezone }, await storedUserSettings(s.store, u.id)) };
  },
  async realm_user_settings_defaults(s, u) {
    return { realm_user_settings_defaults: await realmUserSettingsDefaults(s.store.db, u.realm_id) };
  },
  async realm_user_groups(s, u, o) {
    const groups = await userGroupObjects(s.store.db, u.realm_id);
    return { realm_user_groups: o.includeDeactivatedGroups ? groups : groups.filter((g) => !g.deactivated) };
  },
  async update_message_flags(s, u, o) {
    return { unread_msgs: await unreadMessages(s.store.db, u.id, { emptyTopicName: o.emptyTopicName }) };
  },
  async presence(s, u, o) {
    const state = await s.system.ref(Presence, u.realm_id).ask({ op: "state", modern: o.slimPresence, historyLimitDays: 14 });
    const presences = await presencesSeenBy(s.store.db, u, state.presences ?? {}, !o.slimPresence);
    return { presences, presence_last_update_id: state.presence_last_update_id, server_timestamp: state.server_timestamp };
  },
  async drafts(s, u) {
    return { drafts: await draftsOf(s.store.db, u.id) };
  },
  async user_topic(s, u) {
    return { user_topics: await userTopicsOf(s.store.db, u.id) };
  },
  async navigation_views(s, u) {
    return { navigation_views: await viewsOf(s.store.db, u.id) };
  },
  async scheduled_messages(s, u) {
    return { scheduled_messages: await scheduledMessagesOf(s.store.db, u.id) };
  },
  async reminders(s, u) {
    return { reminders: await remindersOf(s.store.db, u.id) };
  },
  async realm_emoji(s, u) {
    return { realm_emoji: await realmEmojiObjects(s.store.db, u.realm_id) };
  },
  async realm_linkifiers(s, u, o) {
    return { realm_linkifiers: o.linkifierUrlTemplate ? await linkifierObjects(s.store.db, u.realm_id) : [] };
  },
  // The legacy form is always empty since Zulip 7.0 (feature level 176).
  async realm_filters() {
    return { realm_filters: [] };
  },
  async saved_snippets(s, u) {
    return { saved_snippets: await snippetsOf(s.store.db, u.id) };
  },
  // Archived folders too: clients show the folders of archived channels.
  async channel_folders(s, u) {
    return { channel_folders: await channelFolderObjects(s.store.db, u.realm_id, true) };
  },
  async realm_playgrounds(s, u) {
    return { realm_playgrounds: await playgroundObjects(s.store.db, u.realm_id) };
  },
  async alert_words(s, u) {
    return { alert_words: await alertWordsOf(s.store.db, u.id) };
  },
  async muted_users(s, u) {
    return { muted_users: await mutedUsersOf(s.store.db, u.id) };
  },
  // Only the statuses of users the viewer may see (Zulip's get_all_users_status_dict).
  async user_status(s, u) {
    const [statuses, access] = await Promise.all([userStatuses(s.store.db, u.realm_id), accessibleUsers(s.store.db, u)]);
    return { user_status: access ? Object.fromEntries(Object.entries(statuses).filter(([id]) => access.has(Number(id)))) : statuses };
  },
  async recent_private_conversations(s, u) {
    return { recent_private_conversations: await recentPrivateConversations(s.store.db, u.id) };
  },
  async realm_user(s, u, o) {
    const options = { clientGravatar: o.clientGravatar, includeProfileData: true, siteUrl: s.siteUrl(), omitInaccessible: o.userListIncomplete, withBots: false };
    const db = s.store.db;
    // Deactivated users are listed apart, in realm_non_active_users.
    const everyUser = async () => (await realmUsersFor(db, u, options)).filter((x) => x.is_active);
    const [cached, settings] = await Promise.all([realmUsersJson(db, u, o.clientGravatar), registerRealmSettings(s, u, o)]);
    const users = cached === undefined ? await everyUser() : new JsonValue(cached);
    return { realm_users: users, ...(await ownUserState(db, u, settings, o.clientGravatar)) };
  },
  async muted_topics(s, u) {
    return { muted_topics: await mutedTopics(s.store.db, u.id) };
  },
  async starred_messages(s, u) {
    return { starred_messages: await starredMessages(s.store.db, u.id) };
  },
  async custom_profile_fields(s, u) {
    return { custom_profile_fields: await profileFieldObjects(s.store.db, u.realm_id), custom_profile_field_types: CUSTOM_PROFILE_FIELD_TYPES };
  },
};

/** What more than one part of a register reads, read once per register (keyed by its options object). */
function oncePerRegister<T>(make: (s: Services, u: UserRow, o: InitialStateOptions) => Promise<T>) {
  const made = new WeakMap<InitialStateOptions, Promise<T>>();
  return (s: Services, u: UserRow, o: InitialStateOptions): Promise<T> => {
    let value = made.get(o);
    if (!value) made.set(o, (value = make(s, u, o)));
    return value;
  };
}

/** The channel lists, for `subscription` and `stream`. */
const registerChannels = oncePerRegister((s, u, o): Promise<RegisterChannelLists> =>
  registerChannelLists(s.store.db, u, { includeSubscribers: o.includeSubscribers, archived: o.archivedChannels }),
);
/** The realm's settings, for `realm` and `realm_user`. */
const registerRealmSettings = oncePerRegister((s, u) => realmSettings(s.store.db, u.realm_id));

export const eventRoutes: RouteSpec[] = [
  {
    method: "POST",
    path: "/register",
    params: {
      type: "object",
      properties: {
        event_types: { oneOf: [StrList, { type: "null" }] },
        fetch_event_types: { oneOf: [StrList, { type: "null" }] },
        narrow: { type: "array" },
        all_public_streams: { ...Bool, default: false },
        client_capabilities: { type: "object" },
        apply_markdown: { ...Bool, default: false },
        client_gravatar: { ...Bool, default: true },
        slim_presence: { ...Bool, default: false },
        include_subscribers: { oneOf: [Bool, { type: "string", enum: ["true", "false", "partial"] }], default: false },
      },
    },
    async handle({ params, user, services }) {
      const eventTypes: string[] | null = params.event_types ?? null;
      const narrow = parseNarrow(params.narrow);
      // The queue first, then the state: an event racing with this call is in the queue (at worst also
      // reflected in the state), never in neither.
      const queue = await services.system.ref(User, user.id).ask({
        op: "register",
        eventTypes,
        narrow,
        applyMarkdown: params.apply_markdown,
        clientGravatar: params.client_gravatar,
        allPublicStreams: params.all_public_streams,
        clientCapabilities: params.client_capabilities ?? {},
      });
      const stateTypes: string[] = params.fetch_event_types ?? eventTypes ?? Object.keys(initialState);
      const options: InitialStateOptions = {
        clientGravatar: params.client_gravatar,
        includeSubscribers: params.include_subscribers === true || params.include_subscribers === "true",
        slimPresence: params.slim_presence,
        emptyTopicName: params.client_capabilities?.empty_topic_name === true,
        userListIncomplete: params.client_capabilities?.user_list_incomplete === true,
        linkifierUrlTemplate: params.client_capabilities?.linkifier_url_template === true,
        includeDeactivatedGroups: params.client_capabilities?.include_deactivated_groups === true,
        archivedChannels: params.client_capabilities?.[ARCHIVED_CHANNELS] === true,
      };
      const parts = await Promise.all(
        stateTypes
          .filter((t) => t in initialState)
          .map((t) => initialState[t]!(services, user, options)),
      );
      return fieldsJson({
        queue_id: queue.queue_id,
        last_event_id: queue.last_event_id,
        zulip_feature_level: ZULIP_FEATURE_LEVEL,
        zulip_version: ZULIP_VERSION,
        zulip_merge_base: ZULIP_MERGE_BASE,
        max_message_length: LIMITS.max_message_length,
        max_topic_length: LIMITS.max_topic_length,
        max_stream_name_length: LIMITS.max_stream_name_length,
        max_stream_description_length: LIMITS.max_stream_description_length,
        event_queue_longpoll_timeout_seconds: services.chat.heartbeatSeconds + 40,
        server_presence_ping_interval_seconds: 60,
        server_presence_offline_threshold_seconds: 200,
        ...Object.assign({}, ...parts),
      });
    },
  },
  {
    method: "GET",
    path: "/events",
    params: {
      type: "object",
      properties: { queue_id: Str, last_event_id: { type: "integer", minimum: -1 }, dont_block: { ...Bool, default: false } },
      required: ["queue_id"],
    },
    async handle({ params, user, services, req }) {
      if (params.last_event_id === undefined) throw chatErrors.missing("last_event_id");
      // The actor answers with a heartbeat after heartbeatSeconds; the ask only guards against a lost worker.
      const timeout = services.chat.heartbeatSeconds * 1000 + 15_000;
      // Transient: served without the transport when this worker holds the user (see askTransient).
      const poll = (dontBlock: boolean) =>
        services.system.ref(User, user.id).askTransient({ op: "poll", queueId: params.queue_id, lastEventId: params.last_event_id, dontBlock }, timeout);
      // A client gone would leave its poll parked until an event or the heartbeat: finish it now (see streamQueue).
      req.onAbort(() => void poll(true).catch(() => {}));
      const polled = await poll(params.dont_block);
      if (req.aborted) return { events: [] }; // nobody to tell; the events stay queued until acknowledged
      return new SerializedFields(`"events":[${polled.events.map(eventJson).join(",")}],"queue_id":${JSON.stringify(params.queue_id)}`);
    },
  },
  {
    // Beyond Zulip: the same queue as server-sent events, one `id:` per event; a client that reconnects with
    // Last-Event-ID resumes after that event.
    method: "GET",
    path: "/events/stream",
    params: QUEUE_STREAM_PARAMS,
    async handle({ params, user, services, req }) {
      const header = req.headers["last-event-id"];
      const resumeFrom = header !== undefined && /^-?\d{1,16}$/.test(header.trim()) ? Number(header.trim()) : (params.last_event_id ?? -1);
      const stream = await queueStream(services, user.id, params.queue_id, resumeFrom, SSE_FRAMING);
      return {
        status: 200,
        headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache, no-transform", "x-accel-buffering": "no" },
        ...stream,
      };
    },
  },
  {
    // Beyond Zulip: the same queue over a WebSocket. Each text frame is what GET /events would answer (a batch of
    // events, with the queue id); a client that reconnects with last_event_id resumes after that event.
    method: "GET",
    path: "/events/ws",
    params: QUEUE_STREAM_PARAMS,
    async handle({ params, user, services, req }) {
      if (!req.webSocket) throw new ChorusError("BAD_REQUEST", "This endpoint is a WebSocket: send an upgrade request", 400);
      const stream = await queueStream(services, user.id, params.queue_id, params.last_event_id ?? -1, webSocketFraming(params.queue_id));
      return { status: 101, webSocket: true, ...stream };
    },
  },
  {
    method: "DELETE",
    path: "/events",
    params: { type: "object", properties: { queue_id: Str }, required: ["queue_id"] },
    async handle({ params, user, services }) {
      await services.system.ref(User, user.id).ask({ op: "deleteQueue", queueId: params.queue_id });
      return {};
    },
  },
];

/**
 * A queue's events as a stream that starts at `resumeFrom`, once a first poll found the queue: an unknown queue is
 * answered as a JSON error, before the stream opens (or the WebSocket is upgraded).
 */
async function queueStream(services: Services, userId: number, queueId: string, resumeFrom: number, framing: StreamFraming): Promise<Pick<HttpStream, "start">> {
  // The actor answers with a heartbeat after heartbeatSeconds without events; the ask only guards against a lost worker.
  const timeout = services.chat.heartbeatSeconds * 1000 + 15_000;
  const queue = services.system.ref(User, userId);
  const polls: QueuePolls = {
    poll: (lastEventId, after, dontBlock) => queue.askTransient({ op: "poll", queueId, lastEventId, after, dontBlock }, timeout),
    subscribe: (lastEventId, after, onBatch) => queue.askStream({ op: "poll", queueId, lastEventId, after, dontBlock: false, stream: true }, onBatch, timeout),
  };
  const first = await polls.poll(resumeFrom, resumeFrom, true);
  return { start: (sink) => void streamQueue(sink, first.events, resumeFrom, polls, framing) };
}

/** How a stream frames what it writes: server-sent events, or WebSocket frames. */
interface StreamFraming {
  /** Written before any event (SSE: a comment, which opens the stream for the client at once). */
  opening?: string;
  /** What carries events the stream has not written before. */
  batch(events: Polled["events"]): string;
  /** The last thing written when the stream fails (its queue is gone): Zulip's error envelope's body. */
  error(envelopeBody: string): string;
}

/** One `id:` and `data:` per event: a client that reconnects with Last-Event-ID resumes after that event. */
const SSE_FRAMING: StreamFraming = {
  opening: ": connected\n\n",
  batch: (events) => events.map((event) => `id: ${event.id}\ndata: ${eventJson(event)}\n\n`).join(""),
  error: (body) => `event: error\ndata: ${body}\n\n`,
};

/** A frame per batch, as GET /events answers it; an error is the envelope alone, and the socket then closes. */
function webSocketFraming(queueId: string): StreamFraming {
  const tail = `],"queue_id":${JSON.stringify(queueId)}}`;
  return {
    batch: (events) => `{"result":"success","msg":"","events":[${events.map(eventJson).join(",")}${tail}`,
    error: (body) => body,
  };
}

/** How an event stream reads its queue: single polls, and a subscription that hears each batch as it comes. */
interface QueuePolls {
  poll(lastEventId: number, after: number, dontBlock: boolean): Promise<Polled>;
  /** Resolves when the subscription ends: with its last events, or undefined when it was cut (ask again). */
  subscribe(lastEventId: number, after: number, onBatch: (polled: Polled) => void): Promise<Polled | undefined>;
}

/**
 * Batches a stream writes before it acknowledges them (by finishing its subscription and subscribing again): what
 * a streaming queue keeps at most, beyond the batch in flight.
 */
export const STREAM_ACKNOWLEDGE_EVERY = 16;

/**
 * Write a queue's events to an open stream until the client goes away. The stream acknowledges one batch behind
 * what it has written: a client whose connection dropped can resume from any event of the last batch it saw.
 * Events come by subscription (one ask that the user actor answers batch after batch; see Poll.stream), not a
 * poll per batch: a poll per batch cost each delivery an ask, its timer, a turn to park it and a heartbeat timer.
 * A subscription ends when the socket cannot take more (it resumes once drained), every STREAM_ACKNOWLEDGE_EVERY
 * batches (the next subscription acknowledges what was written), when the actor finishes it (a newer poll, a
 * hand-over) or when the runtime cuts it; each time the stream subscribes again from what it has written, so a
 * batch that did not reach it (or that it did not take) comes again, and one that came twice is written once.
 */
async function streamQueue(sink: StreamSink, firstEvents: Polled["events"], resumeFrom: number, polls: QueuePolls, framing: StreamFraming): Promise<void> {
  let acknowledged = resumeFrom;
  let written = resumeFrom;
  let drained: Promise<void> | undefined;
  /** Write the events not written yet; false once the socket is full (and `drained` then says when it is not). */
  const write = (events: Polled["events"]): boolean => {
    let open = true;
    const previous = written;
    // An event heard twice (a subscription cut while a batch was on its way, and the next one answering it again).
    const fresh = events.length && Number(events[0]!.id) > written ? events : events.filter((event) => Number(event.id) > written);
    if (fresh.length) {
      open = sink.write(framing.batch(fresh));
      written = Number(fresh.at(-1)!.id);
      acknowledged = previous;
    }
    if (!open && !drained && !sink.closed) drained = new Promise<void>((resolve) => sink.onDrain(resolve));
    return open;
  };
  // A poll of the queue finishes its subscription (a newer poll of a queue finishes the older one): when the client
  // goes away (the loop then ends), and when the socket is full (the loop waits for it to drain, then subscribes
  // again). Its own answer is not written: those events stay queued for the next subscription.
  const finishSubscription = () => void polls.poll(acknowledged, written, true).catch(() => {});
  sink.onClose(finishSubscription);
  if (framing.opening) sink.write(framing.opening);
  try {
    write(firstEvents);
    while (!sink.closed) {
      if (drained) {
        await drained;
        drained = undefined;
        if (sink.closed) return;
      }
      let full = false;
      let batches = 0;
      const last = await polls.subscribe(acknowledged, written, (polled) => {
        if (sink.closed || full) return;
        if (!write(polled.events)) {
          full = true;
          finishSubscription();
        } else if (++batches === STREAM_ACKNOWLEDGE_EVERY) finishSubscription();
      });
      if (last && !sink.closed && !full) write(last.events);
    }
  } catch (err) {
    sink.write(framing.error(envelope(ChorusError.wrap(err)).body as string));
    sink.end();
  }
}

/** A message object's JSON, by the object: the user actors share one per message and format (formatSharedMessage). */
const messageJson = new WeakMap<object, string>();

/**
 * An event as JSON. A message event's message is the same object for every member who takes it in the same
 * format, so it is serialized once for all of them; the event's own fields (id, flags) are per member.
 */
function eventJson(event: Polled["events"][number]): string {
  const message = event.type === "message" ? event.message : undefined;
  if (!message || typeof message !== "object") return JSON.stringify(event);
  let json = messageJson.get(message);
  if (json === undefined) messageJson.set(message, (json = JSON.stringify(message)));
  const { message: _message, ...own } = event;
  return `${JSON.stringify(own).slice(0, -1)},"message":${json}}`;
}

