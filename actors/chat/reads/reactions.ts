/** Reads of the `reactions` table outside a message page (GET /messages reads a page's reactions with its messages). Nothing here writes. */
import type { Kysely } from "kysely";
import type { Database } from "../../schema.ts";

type DB = Kysely<Database>;

/** The name an emoji already has on the message (any user's reaction with that code and type), if it is on it. */
export async function reactionNameOn(db: DB, messageId: number, emoji: { emoji_code: string; reaction_type: string }): Promise<string | undefined> {
  const existing = await db
    .selectFrom("reactions")
    .select("emoji_name")
    .where("message_id", "=", messageId)
    .where("emoji_code", "=", emoji.emoji_code)
    .where("reaction_type", "=", emoji.reaction_type)
    .executeTakeFirst();
  return existing?.emoji_name;
}
