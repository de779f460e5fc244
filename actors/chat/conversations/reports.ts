/**
 * Message reports (POST /messages/{id}/report): the notice Notification Bot posts to the organization's
 * moderation request channel, worded as Zulip words it (zerver/views/message_report.py).
 */
import type { Kysely } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import type { Database } from "../../schema.ts";

export const REPORT_TYPES = ["spam", "harassment", "inappropriate", "norms", "other"] as const;
/** Zulip's Realm.MAX_REPORT_MESSAGE_EXPLANATION_LENGTH. */
export const MAX_REPORT_DESCRIPTION = 1000;

const silentMention = (u: { id: number; full_name: string }) => `@_**${u.full_name}|${u.id}**`;

/** The moderation request channel's id, from the realm settings; Zulip's error when reporting is not set up. */
export async function moderationChannel(db: Kysely<Database>, realmId: number): Promise<number> {
  const realm = await db.selectFrom("realms").select("settings").where("id", "=", realmId).executeTakeFirst();
  const id = (realm?.settings as Record<string, unknown> | undefined)?.realm_moderation_request_channel_id;
  const stream = typeof id === "number" && id > 0 ? await db.selectFrom("streams").select("id").where("id", "=", id).where("realm_id", "=", realmId).executeTakeFirst() : undefined;
  if (!stream) throw errors.badRequest("Moderation request channel must be specified to enable message reporting.");
  return stream.id;
}

export interface ReportedMessage {
  id: number;
  sender_id: number;
  stream_id: number | null;
  topic: string;
  content: string;
  dm_key: string | null;
}

/** The notice's topic and content. */
export async function reportNotice(db: Kysely<Database>, reporterId: number, m: ReportedMessage, reportType: string, description: string) {
  const ids = [reporterId, m.sender_id, ...(m.dm_key ? m.dm_key.split(",").map(Number) : [])];
  const users = new Map((await db.selectFrom("users").select(["id", "full_name"]).where("id", "in", ids).execute()).map((u) => [u.id, u]));
  const who = (id: number) => silentMention(users.get(id) ?? { id, full_name: "Unknown user" });
  let sentTo: string;
  if (m.stream_id === null) {
    sentTo = `a private chat with between ${m.dm_key!.split(",").map((id) => who(Number(id))).join(", ")}`;
  } else {
    const stream = await db.selectFrom("streams").select("name").where("id", "=", m.stream_id).executeTakeFirstOrThrow();
    sentTo = `#**${stream.name}>${m.topic}@${m.id}**`;
  }
  const content =
    `${who(reporterId)} reported: ${sentTo}\n` +
    "``` spoiler Message sent by " + who(m.sender_id) + "\n" + m.content + "\n```\n" +
    `- Reason: ${reportType}\n- Explanation: ${description}\n`;
  return { topic: `User (${m.sender_id}) reports`, content };
}
