/** What Chorus tells clients about itself, and Zulip's limits (the values Zulip reports in POST /register). */
export const ZULIP_FEATURE_LEVEL = 420;
export const ZULIP_VERSION = "11.0-chorus";
export const ZULIP_MERGE_BASE = "11.0";

export const LIMITS = {
  max_message_length: 10000,
  max_topic_length: 60,
  max_stream_name_length: 60,
  max_stream_description_length: 1024,
  max_messages_per_fetch: 5000,
} as const;

/**
 * Zulip's parse_user_agent (zerver/lib/user_agent.py): a client's name is its User-Agent's first token, before the
 * version ("ZulipTerminal/0.7.0 Linux" is ZulipTerminal, "ZulipMobile/27.1 (Android 11)" ZulipMobile); a request
 * without one is "Unspecified". Zulip's Client names are at most 30 characters.
 */
const USER_AGENT = /^(?<name>[^/ ]*[^0-9/(]*)(\/(?<version>[^/ ]*))?([ /].*)?$/;
const MAX_CLIENT_NAME = 30;

export function clientName(userAgent: string | undefined): string {
  if (userAgent === undefined) return "Unspecified";
  return (USER_AGENT.exec(userAgent)?.groups?.name ?? userAgent).slice(0, MAX_CLIENT_NAME);
}
