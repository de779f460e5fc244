/**
 * Alert words: each user's list (stored by the user actor, which sends the alert_words events) and the has_alert_word
 * flag a new or edited message gets for the recipients whose words it contains (Zulip's AlertWordNotificationProcessor).
 */
import type { Kysely, Transaction } from "kysely";
import type { Database } from "../../schema.ts";
import { NoticedRealmCache } from "../realm-cache.ts";

type DB = Kysely<Database> | Transaction<Database>;

/** Zulip's limit on one alert word (or phrase). */
export const MAX_ALERT_WORD_LENGTH = 100;

/** The user's alert words, in the order they were added. */
export async function alertWordsOf(db: DB, userId: number): Promise<string[]> {
  const rows = await db.selectFrom("alert_words").select("word").where("user_id", "=", userId).orderBy("id").execute();
  return rows.map((r) => r.word);
}

/** New words not already there (case-insensitively), each once, keeping the first spelling given. */
export function newAlertWords(existing: string[], words: string[]): string[] {
  const seen = new Set(existing.map((w) => w.toLowerCase()));
  const fresh: string[] = [];
  for (const word of words) {
    if (seen.has(word.toLowerCase())) continue;
    seen.add(word.toLowerCase());
    fresh.push(word);
  }
  return fresh;
}

// ---- matching, on the send path -----------------------------------------------------------------------------

/** What may stand just before and just after an alert word for it to count (Zulip's sets). */
const BEFORE = new Set([" ", "\n", "(", '"', ".", ",", "'", ";", "[", "*", "`", ">"]);
const AFTER = new Set([" ", "\n", ")", "?", ":", ".", ",", "'", ";", "]", "!", "*", "`"]);

/** Whether lower-cased content holds the (lower-cased) word standing on its own. */
export function containsAlertWord(content: string, word: string): boolean {
  for (let at = content.indexOf(word); at >= 0; at = content.indexOf(word, at + 1)) {
    const end = at + word.length;
    if ((at === 0 || BEFORE.has(content[at - 1]!)) && (end >= content.length || AFTER.has(content[end]!))) return true;
  }
  return false;
}

/** Each realm's alert words by active user (lower-cased): most realms have none, and a send then checks nothing. */
export const realmAlertWords = new NoticedRealmCache("alert-words-changed", async (db, realmId) => {
  const rows = await db
    .selectFrom("alert_words")
    .innerJoin("users", "users.id", "alert_words.user_id")
    .select(["alert_words.user_id", "alert_words.word"])
    .where("alert_words.realm_id", "=", realmId)
    .where("users.is_active", "=", true)
    .execute();
  const out = new Map<number, string[]>();
  for (const r of rows) out.set(r.user_id, [...(out.get(r.user_id) ?? []), r.word.toLowerCase()]);
  return out;
});

/**
 * The content without its code: fenced code blocks (``` or ~~~, to their closing fence or the end) and inline code
 * spans, where Zulip's markdown processor does not look for alert words. Quote and spoiler fences hold markdown,
 * so their text is kept.
 */
export function outsideCode(content: string): string {
  const kept: string[] = [];
  let fence: { marker: string; code: boolean } | undefined;
  for (const line of content.split("\n")) {
    const opening = line.match(/^\s{0,3}(`{3,}|~{3,})\s*(\S*)/);
    const marker = opening?.[1];
    if (fence && marker && marker[0] === fence.marker[0] && marker.length >= fence.marker.length && line.trim() === marker) {
      fence = undefined;
    } else if (!fence && marker) {
      fence = { marker, code: !/^(quote|spoiler)$/i.test(opening![2]!) };
    } else if (!fence?.code) {
      kept.push(line.replace(/(`+)[^`]*?\1/g, " "));
    }
  }
  return kept.join("\n");
}

/** The recipients (`among`) whose alert words the content contains. */
export async function usersAlertedBy(db: Kysely<Database>, realmId: number, content: string, among: ReadonlySet<number>): Promise<number[]> {
  const byUser = await realmAlertWords.get(db, realmId);
  if (!byUser.size) return [];
  const text = outsideCode(content.replace(/\r\n?/g, "\n")).toLowerCase();
  const alerted: number[] = [];
  for (const [user, words] of byUser) if (among.has(user) && words.some((w) => containsAlertWord(text, w))) alerted.push(user);
  return alerted;
}
