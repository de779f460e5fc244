/**
 * Reminders (POST /reminders): a scheduled message to oneself about another message, which Notification Bot
 * delivers at the time. Its content is made when the reminder is, worded as Zulip words it
 * (zerver/lib/reminders.py): what the message was, the note, who said it with a link, and the message quoted.
 */
import type { Kysely } from "kysely";
import { errors } from "../../../runtime/errors.ts";
import { encodeHashComponent } from "../rendering/markdown.ts";
import { characterLength, truncateCharacters } from "./characters.ts";
import type { Database } from "../../schema.ts";

/** Zulip's MAX_REMINDER_NOTE_LENGTH. */
export const MAX_REMINDER_NOTE_LENGTH = 1000;

export interface RemindedMessage {
  id: number;
  sender_id: number;
  stream_id: number | null;
  topic: string;
  content: string;
  dm_key: string | null;
}

/** A code fence longer than any backtick run that starts a line of the quoted text, so the quote cannot end early. */
function unusedFence(text: string): string {
  const longest = Math.max(0, ...[...text.matchAll(/^\s*(`+)/gm)].map((m) => m[1]!.length));
  return "`".repeat(Math.max(3, longest + 1));
}

/** The reminder's content: `maxLength` is the longest message, past which the quoted text is truncated. */
export async function reminderContent(db: Kysely<Database>, siteUrl: string, m: RemindedMessage, rawNote: string | undefined, maxLength: number): Promise<string> {
  const note = rawNote?.trimEnd().replace(/^\n+/, "");
  if (note && characterLength(note) > MAX_REMINDER_NOTE_LENGTH) throw errors.badRequest(`Maximum reminder note length: ${MAX_REMINDER_NOTE_LENGTH} characters`);
  const sender = await db.selectFrom("users").select(["id", "full_name"]).where("id", "=", m.sender_id).executeTakeFirstOrThrow();
  let what: string;
  let url: string;
  if (m.stream_id !== null) {
    const stream = await db.selectFrom("streams").select(["id", "name"]).where("id", "=", m.stream_id).executeTakeFirstOrThrow();
    what = `#**${stream.name}>${m.topic}@${m.id}**`;
    url = `${siteUrl}/#narrow/channel/${stream.id}-${encodeHashComponent(stream.name.replaceAll(" ", "-"))}/topic/${encodeHashComponent(m.topic)}/near/${m.id}`;
  } else {
    what = "the following direct message";
    url = `${siteUrl}/#narrow/dm/${m.dm_key}/near/${m.id}`;
  }
  let content = `You requested a reminder for ${what}.${note ? ` Note:\n > ${note}` : ""}\n\n`;
  const who = `@_**${sender.full_name}|${sender.id}**`;
  if (m.content.startsWith("/poll")) return content + `${who} [sent](${url}) a poll.`;
  if (m.content.startsWith("/todo")) return content + `${who} [sent](${url}) a todo list.`;
  content += `${who} [said](${url}):\n`;
  const fence = unusedFence(m.content);
  const room = maxLength - characterLength(content + fence + fence + "quote\n\n");
  const quoted = truncateCharacters(m.content, room, "\n[message truncated]");
  return content + `${fence}quote\n${quoted}\n${fence}`;
}
