/**
 * The lookups markdown.ts needs to render mentions, channel links and custom emoji, prepared for one message
 * (which also gets inline media previews, as Zulip's messages do).
 * markdown.ts asks synchronously, so the candidates are fetched first: only names and ids the content could
 * mention (a loose scan; markdown decides what really is a mention, e.g. not inside code), and the realm's active
 * custom emoji (cached per realm) only when the content has some `:name:`, the realm's linkifiers (cached), and the
 * image records of the uploads it links.
 */
import { sql, type Kysely } from "kysely";
import type { MarkdownContext, MentionableUser } from "./markdown.ts";
import { activeRealmEmojiByName } from "../organization/realm-emoji.ts";
import { compiledLinkifiers } from "../organization/linkifiers.ts";
import { uploadPreviews } from "../organization/attachments.ts";
import { linkedUploadPaths } from "./thumbnails.ts";
import type { Database } from "../../schema.ts";

const USER_MENTION = /@_?\*\*([^*|]+?)(?:\|(\d{1,15}))?\*\*/g;
const CHANNEL_LINK = /#\*\*([^*>]+)/g;
/** What markdown.ts's `:name:` rule could take for an emoji name. */
const EMOJI_SYNTAX = /:[\p{L}\p{N}_+-]+:/u;

/** Every message renders with Zulip's inline media previews, whatever else it needs. */
const MESSAGE: MarkdownContext = Object.freeze({ inlinePreviews: true });

export async function markdownContext(db: Kysely<Database>, realmId: number, content: string): Promise<MarkdownContext> {
  const uploads = linkedUploadPaths(content);
  const [context, linkifiers, previews] = await Promise.all([
    lookups(db, realmId, content),
    compiledLinkifiers.get(db, realmId),
    uploads.length ? uploadPreviews(db, realmId, uploads) : undefined,
  ]);
  const extra: Partial<MarkdownContext> = {};
  if (linkifiers.length) extra.linkifiers = linkifiers;
  if (previews?.size) extra.uploadPreview = (path: string) => previews.get(path);
  return Object.keys(extra).length ? Object.assign({}, context, extra) : context;
}

async function lookups(db: Kysely<Database>, realmId: number, content: string): Promise<MarkdownContext> {
  if (!EMOJI_SYNTAX.test(content)) return mentionLookups(db, realmId, content);
  const [mentions, customEmoji] = await Promise.all([mentionLookups(db, realmId, content), activeRealmEmojiByName(db, realmId)]);
  return customEmoji.size ? Object.assign({}, mentions, { realmEmojiByName: (name: string) => customEmoji.get(name) }) : mentions;
}

async function mentionLookups(db: Kysely<Database>, realmId: number, content: string): Promise<MarkdownContext> {
  if (!content.includes("**")) return MESSAGE;
  const names = new Set<string>();
  const ids = new Set<number>();
  for (const m of content.matchAll(USER_MENTION)) {
    names.add(m[1]!.trim().toLowerCase());
    if (m[2]) ids.add(Number(m[2]));
  }
  const channels = new Set([...content.matchAll(CHANNEL_LINK)].map((m) => m[1]!.trim().toLowerCase()));
  const [users, streams] = await Promise.all([
    names.size || ids.size
      ? db
          .selectFrom("users")
          .select(["id", "full_name", "is_active"])
          .where("realm_id", "=", realmId)
          .where((eb) => eb.or([eb(sql`lower(full_name)`, "in", [...names, ""]), ...(ids.size ? [eb("id", "in", [...ids])] : [])]))
          .execute()
      : [],
    channels.size
      ? db.selectFrom("streams").select(["id", "name"]).where("realm_id", "=", realmId).where(sql`lower(name)`, "in", [...channels]).execute()
      : [],
  ]);
  const byName = new Map<string, MentionableUser[]>();
  for (const u of users) byName.set(u.full_name.toLowerCase(), [...(byName.get(u.full_name.toLowerCase()) ?? []), u]);
  return {
    inlinePreviews: true,
    // Zulip mentions by name only when the name is unambiguous.
    userByName: (name) => {
      const found = byName.get(name.toLowerCase());
      return found?.length === 1 ? found[0] : undefined;
    },
    userById: (id) => users.find((u) => u.id === id),
    channelByName: (name) => streams.find((s) => s.name.toLowerCase() === name.toLowerCase()),
  };
}
