/**
 * channel:<id>: one channel's subscribers and its message stream. A send takes an id, is group-committed by the
 * store, and is then fanned out to the subscribers' user actors (one entry per shard); the sender's success
 * reply waits for both, so the message is durable and in every queue before the client hears "success".
 */
import { sql } from "kysely";
import { PARKED, type Actor, type ActorContext } from "../runtime/actor.ts";
import { ChorusError, errors } from "../runtime/errors.ts";
import type { ActorDeps } from "./deps.ts";
import { renderMarkdown, type MessageRecord } from "./message-format.ts";
import { USER, type ChannelMessage, type DeliverMessage, type SendToChannel, type Sent, type SubscribeResult } from "./protocol.ts";

/** Zulip's default subscription colours, handed out in turn. */
const COLORS = ["#76ce90", "#fae589", "#a6c7e5", "#e79ab5", "#bfd56f", "#f4ae55", "#b0a5fd", "#addfe5", "#f5ce6e", "#c2726a", "#94c849", "#bd86e5"];

interface ChannelState {
  id: number;
  realmId: number;
  realmStr: string;
  name: string;
  inviteOnly: boolean;
  subscribers: Set<number>;
  lastMessageId: number;
}

export class ChannelActor implements Actor {
  private state!: ChannelState;

  constructor(
    private readonly ctx: ActorContext,
    private readonly deps: ActorDeps,
  ) {}

  async activate(): Promise<void> {
    const db = this.deps.store.db;
    const id = Number(this.ctx.key);
    const stream = await db
      .selectFrom("streams")
      .innerJoin("realms", "realms.id", "streams.realm_id")
      .select(["streams.id", "streams.realm_id", "streams.name", "streams.invite_only", "realms.string_id"])
      .where("streams.id", "=", id)
      .executeTakeFirst();
    if (!stream) throw errors.streamNotFound({ stream_id: id });
    const subs = await db.selectFrom("subscriptions").select("user_id").where("stream_id", "=", id).where("active", "=", true).execute();
    const last = await db.selectFrom("messages").select(sql<number>`coalesce(max(id), 0)`.as("max")).where("stream_id", "=", id).executeTakeFirst();
    this.state = {
      id,
      realmId: stream.realm_id,
      realmStr: stream.string_id,
      name: stream.name,
      inviteOnly: stream.invite_only,
      subscribers: new Set(subs.map((s) => s.user_id)),
      lastMessageId: Number(last?.max ?? 0),
    };
  }

  receive(msg: ChannelMessage): unknown {
    switch (msg.op) {
      case "subscribe":
        return this.subscribe(msg.userIds);
      case "send":
        return this.send(msg);
    }
  }

  private async subscribe(userIds: number[]): Promise<SubscribeResult> {
    const added = userIds.filter((u) => !this.state.subscribers.has(u));
    const already = userIds.filter((u) => this.state.subscribers.has(u));
    if (added.length) {
      const counts = await this.deps.store.db
        .selectFrom("subscriptions")
        .select(["user_id", sql<number>`count(*)`.as("n")])
        .where("user_id", "in", added)
        .groupBy("user_id")
        .execute();
      const have = new Map(counts.map((c) => [c.user_id, Number(c.n)]));
      await this.deps.store.write(this.ctx.fence(), (trx) =>
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
          .execute(),
      );
      for (const u of added) this.state.subscribers.add(u);
    }
    return { added, already };
  }

  private async send(msg: SendToChannel): Promise<typeof PARKED> {
    const s = this.state;
    if (s.inviteOnly && !s.subscribers.has(msg.senderId)) {
      throw errors.badRequest(`Not authorized to send to channel '${s.name}'`);
    }
    const id = await this.deps.ids.take(s.lastMessageId);
    s.lastMessageId = id;
    const reply = this.ctx.defer<Sent>();
    const record: MessageRecord = {
      id,
      type: "stream",
      sender_id: msg.senderId,
      sender_email: msg.sender.email,
      sender_full_name: msg.sender.full_name,
      sender_realm_str: s.realmStr,
      recipient_id: s.id,
      stream_id: s.id,
      display_recipient: s.name,
      subject: msg.topic,
      content: msg.content,
      rendered_content: renderMarkdown(msg.content),
      timestamp: Math.floor(Date.now() / 1000),
      client: msg.client,
    };
    const recipients = [...s.subscribers].map((u) => `${USER}:${u}`);
    // The turn ends here: the next send may take its id while this one commits (the store batches them).
    void this.deps.store
      .appendMessage(
        {
          id,
          realm_id: s.realmId,
          sender_id: msg.senderId,
          recipient_type: "stream",
          recipient_id: s.id,
          stream_id: s.id,
          topic: msg.topic,
          content: record.content,
          rendered_content: record.rendered_content,
          date_sent: record.timestamp,
          sending_client: msg.client,
          send_key: msg.sendKey,
        },
        this.ctx.fence(),
      )
      .then(async (storedId) => {
        const delivery: DeliverMessage = {
          op: "deliverMessage",
          message: storedId === id ? record : { ...record, id: storedId },
          flags: [],
          flagsFor: msg.readBySender ? { [msg.senderId]: ["read"] } : undefined,
          queueId: msg.queueId,
          localId: msg.localId,
        };
        await this.deps.system().broadcast(recipients, delivery);
        reply.resolve({ id: storedId });
      })
      .catch((err) => reply.reject(ChorusError.wrap(err)));
    return PARKED;
  }
}
