/**
 * A user's saved snippets (Zulip's SavedSnippet, zerver/views/saved_snippets.py): the objects the API lists and
 * the checks the user actor makes before writing.
 */
import type { Kysely, Selectable, Transaction } from "kysely";
import { ChorusError, errors } from "../../../runtime/errors.ts";
import type { Database } from "../../schema.ts";
import type { SavedSnippetTable } from "../schema.ts";

type DB = Kysely<Database> | Transaction<Database>;

/** Zulip's SavedSnippet.MAX_TITLE_LENGTH. */
export const MAX_SNIPPET_TITLE_LENGTH = 60;

export function snippetObject(row: Selectable<SavedSnippetTable>) {
  return { id: row.id, title: row.title, content: row.content, date_created: Number(row.date_created) };
}

export async function snippetsOf(db: DB, userId: number) {
  const rows = await db.selectFrom("saved_snippets").selectAll().where("user_id", "=", userId).orderBy("id").execute();
  return rows.map(snippetObject);
}

export async function ownSnippet(db: DB, userId: number, id: number) {
  const row = await db.selectFrom("saved_snippets").selectAll().where("id", "=", id).where("user_id", "=", userId).executeTakeFirst();
  if (!row) throw new ChorusError("BAD_REQUEST", "Saved snippet does not exist.", 404);
  return row;
}

/** A title or content as stored: surrounding white space dropped, never empty. */
export function snippetText(value: string, what: "Title" | "Content"): string {
  const text = value.trim();
  if (!text) throw errors.badRequest(`${what} cannot be empty.`);
  return text;
}
