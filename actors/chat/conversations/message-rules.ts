/**
 * Who may edit, move, delete: the realm's message settings with Zulip's defaults, and group-setting membership.
 * Read by the actor owning the conversation at the moment it decides, so a settings change applies at once.
 */
import type { Kysely, Transaction } from "kysely";
import { errors, type ChorusError } from "../../../runtime/errors.ts";
import { ROLE, type GroupSettingValue } from "../organization/groups.ts";
import { realmSettings } from "../users/settings.ts";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database> | Transaction<Database>;

/** The realm settings that govern editing, moving and deleting messages, and the topic rules of a send. */
export interface MessageRules {
  allow_message_editing: boolean;
  message_content_edit_limit_seconds: number | null;
  message_content_delete_limit_seconds: number | null;
  move_messages_within_stream_limit_seconds: number | null;
  move_messages_between_streams_limit_seconds: number | null;
  can_move_messages_between_topics_group: GroupSettingValue;
  can_move_messages_between_channels_group: GroupSettingValue;
  can_resolve_topics_group: GroupSettingValue;
  can_delete_any_message_group: GroupSettingValue;
  can_delete_own_message_group: GroupSettingValue;
  can_mention_many_users_group: GroupSettingValue;
  topics_policy: string;
  mandatory_topics: boolean;
}

/**
 * The realm's settings as POST /register reports them (`realm_*`: the stored ones over Zulip's defaults, one
 * source for both), without the prefix.
 */
export async function messageRules(db: DB, realmId: number): Promise<MessageRules> {
  const all = await realmSettings(db, realmId);
  const pick = <K extends keyof MessageRules>(k: K) => all[`realm_${k}`] as MessageRules[K];
  return {
    allow_message_editing: pick("allow_message_editing"),
    message_content_edit_limit_seconds: pick("message_content_edit_limit_seconds"),
    message_content_delete_limit_seconds: pick("message_content_delete_limit_seconds"),
    move_messages_within_stream_limit_seconds: pick("move_messages_within_stream_limit_seconds"),
    move_messages_between_streams_limit_seconds: pick("move_messages_between_streams_limit_seconds"),
    can_move_messages_between_topics_group: pick("can_move_messages_between_topics_group"),
    can_move_messages_between_channels_group: pick("can_move_messages_between_channels_group"),
    can_resolve_topics_group: pick("can_resolve_topics_group"),
    can_delete_any_message_group: pick("can_delete_any_message_group"),
    can_delete_own_message_group: pick("can_delete_own_message_group"),
    can_mention_many_users_group: pick("can_mention_many_users_group"),
    topics_policy: pick("topics_policy"),
    mandatory_topics: pick("mandatory_topics"),
  };
}

/** One of the realm's group settings (`can_add_subscribers_group`, ...), without its `realm_` prefix. */
export async function realmGroupSetting(db: DB, realmId: number, name: string): Promise<GroupSettingValue> {
  return (await realmSettings(db, realmId))[`realm_${name}`] as GroupSettingValue;
}

/**
 * What a channel's topics_policy (its own, or when it inherits, the realm's topics_policy and mandatory_topics)
 * says of a topic: whether the empty topic ("general chat") may, must or must not be used. Applies to sends and
 * to the destination of moves (Zulip's build_message_edit_request).
 */
export function topicPolicyError(topic: string, channelPolicy: unknown, rules: MessageRules): ChorusError | undefined {
  const own = String(channelPolicy ?? "inherit");
  if (own === "empty_topic_only") return topic === "" ? undefined : errors.badRequest("Only the general chat topic is allowed in this channel.");
  if (topic !== "") return undefined;
  if (own === "inherit" && rules.mandatory_topics) return errors.badRequest("Topics are required in this organization.");
  const policy = own === "inherit" ? rules.topics_policy : own;
  return policy === "disable_empty_topic" ? errors.badRequest("Sending messages to the general chat is not allowed in this channel.") : undefined;
}

/** Zulip allows edits this long past a limit, for the round trip of a client that started in time. */
export const EDIT_LIMIT_GRACE_SECONDS = 20;

/** Whether the time since `sentAt` is past a limit (null: no limit), with Zulip's grace. */
export function pastLimit(limitSeconds: number | null, sentAt: number, now: number): boolean {
  return limitSeconds !== null && limitSeconds > 0 && now - sentAt > limitSeconds + EDIT_LIMIT_GRACE_SECONDS;
}

/**
 * Why the acting user may not change a message's content now (Zulip's validate_user_can_edit_message for content),
 * or undefined when they may: editing on, their own message, within the time limit.
 */
export function contentEditRefusal(rules: MessageRules, message: { sender_id: number; date_sent: number }, actingId: number, now: number): ChorusError | undefined {
  if (!rules.allow_message_editing) return errors.badRequest("Your organization has turned off message editing");
  if (message.sender_id !== actingId) return errors.badRequest("You don't have permission to edit this message");
  if (pastLimit(rules.message_content_edit_limit_seconds, message.date_sent, now)) return errors.badRequest("The time limit for editing this message has passed");
  return undefined;
}

export const isModerator = (role: number) => role <= ROLE.moderator;
