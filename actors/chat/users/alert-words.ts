/**
 * Alert words: each user's list (stored by the user actor, which sends the alert_words events) and the has_alert_word
 * flag a new or edited message gets for the recipients whose words it contains (Zulip's AlertWordNotificationProcessor).
 */
import type { Kysely, Transaction } from "kysely";
import type { Database } from "../../schema.ts";
import type { ActorSystem } from "../../../runtime/system.ts";

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

/**
 * Each realm's alert words by user (lower-cased), so a send costs no query while they are cached: most realms have
 * none, and a send then checks nothing. The worker whose user actor changes a list forgets its realm's entry and
 * tells the others (ALERT_WORDS_CHANGED); one that misses the notice reloads within CACHE_MS, so for that moment a
 * message may miss a just-added word's flag (or keep a just-removed one's), as a message sent a moment earlier would.
 */
const CACHE_MS = 2000;
const wordsByRealm = new Map<number, { until: number; byUser: Promise<Map<number, string[]>> }>();

function realmAlertWords(db: DB, realmId: number): Promise<Map<number, string[]>> {
  const hit = wordsByRealm.get(realmId);
  if (hit && hit.until > Date.now()) return hit.byUser;
  const byUser = db
    .selectFrom("alert_words")
    .innerJoin("users", "users.id", "alert_words.user_id")
    .select(["alert_words.user_id", "alert_words.word"])
    .where("alert_words.realm_id", "=", realmId)
    .where("users.is_active", "=", true)
    .execute()
    .then((rows) => {
      const out = new Map<number, string[]>();
      for (const r of rows) out.set(r.user_id, [...(out.get(r.user_id) ?? []), r.word.toLowerCase()]);
      return out;
    });
  wordsByRealm.set(realmId, { until: Date.now() + CACHE_MS, byUser });
  byUser.catch(() => wordsByRealm.delete(realmId));
  return byUser;
}

/** The recipients (`among`) whose alert words the content contains. */
export async function usersAlertedBy(db: DB, realmId: number, content: string, among: ReadonlySet<number>): Promise<number[]> {
  const byUser = await realmAlertWords(db, realmId);
  if (!byUser.size) return [];
  const text = content.replace(/\r\n?/g, "\n").toLowerCase();
  const alerted: number[] = [];
  for (const [user, words] of byUser) if (among.has(user) && words.some((w) => containsAlertWord(text, w))) alerted.push(user);
  return alerted;
}

/** The notice (ActorSystem.announce) that a realm's alert words changed: `alert-words-changed:<realm id>`. */
const ALERT_WORDS_CHANGED = "alert-words-changed:";

/** Forget the realm's words here and on every other worker. */
export async function alertWordsChanged(system: ActorSystem, realmId: number): Promise<void> {
  wordsByRealm.delete(realmId);
  await system.announce(ALERT_WORDS_CHANGED + realmId).catch((err) => console.error("alert words: telling the other workers failed", err));
}

/** Every worker's listener for that notice (wired in gateway/main.ts). */
export function onAlertWordsNotice(notice: string): void {
  if (notice.startsWith(ALERT_WORDS_CHANGED)) wordsByRealm.delete(Number(notice.slice(ALERT_WORDS_CHANGED.length)));
}
