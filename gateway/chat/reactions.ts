/**
 * Reactions: POST and DELETE /messages/{message_id}/reactions, validated against the emoji data in actors/chat/rendering/emoji.ts
 * and the realm's custom emoji (actors/chat/organization/realm-emoji.ts).
 */
import { errors } from "../../runtime/errors.ts";
import { chatErrors } from "../../actors/chat/errors.ts";
import { emojiCodeFor, isKnownUnicodeEmojiCode, isValidUnicodeEmoji, isValidZulipExtraEmoji, ZULIP_EXTRA_EMOJI_NAMES } from "../../actors/chat/rendering/emoji.ts";
import { activeRealmEmoji, realmEmojiById } from "../../actors/chat/organization/realm-emoji.ts";
import { readableMessage } from "../../actors/chat/reads/messages.ts";
import { reactionNameOn } from "../../actors/chat/reads/reactions.ts";
import type { RouteSpec, Services } from "./app.ts";
import type { Reaction } from "../../actors/chat/conversations/conversation.protocol.ts";
import { Id, Str } from "../params.ts";
import { acting, ownerOf } from "./messages.ts";

const REACTION_PARAMS = {
  type: "object",
  properties: {
    message_id: Id,
    emoji_name: Str,
    emoji_code: Str,
    reaction_type: { type: "string", enum: ["unicode_emoji", "realm_emoji", "zulip_extra_emoji", "service_extra_emoji"] },
  },
  required: ["message_id"],
} as const;

type DB = Services["store"]["db"];

/** Zulip's get_emoji_data: what a name alone means in the realm (its active custom emoji first). */
export async function emojiNamed(db: DB, realmId: number, name: string): Promise<{ code: string; type: string }> {
  const custom = await activeRealmEmoji(db, realmId, name);
  if (custom) return { code: custom.id, type: "realm_emoji" };
  if (ZULIP_EXTRA_EMOJI_NAMES.has(name)) return { code: name, type: "zulip_extra_emoji" };
  const code = emojiCodeFor(name);
  if (code !== undefined) return { code, type: "unicode_emoji" };
  throw errors.badRequest(`Emoji '${name}' does not exist`);
}

/** Zulip's check_emoji_request: may this (name, code, type) be used anew in the realm (a reaction, a status)? */
export async function checkEmojiRequest(db: DB, realmId: number, reaction: Reaction): Promise<void> {
  const { emoji_name: name, emoji_code: code } = reaction;
  switch (reaction.reaction_type) {
    case "realm_emoji": {
      const custom = await realmEmojiById(db, realmId, code);
      if (!custom) throw errors.badRequest("Invalid custom emoji.");
      if (custom.name !== name) throw errors.badRequest("Invalid custom emoji name.");
      if (custom.deactivated) throw errors.badRequest("This custom emoji has been deactivated.");
      return;
    }
    case "zulip_extra_emoji":
      if (!isValidZulipExtraEmoji(name, code)) throw errors.badRequest("Invalid emoji code.");
      return;
    default:
      if (!isKnownUnicodeEmojiCode(code)) throw errors.badRequest("Invalid emoji code.");
      if (!isValidUnicodeEmoji(name, code)) throw errors.badRequest("Invalid emoji name.");
  }
}

/**
 * The reaction a request names. With no code, the name decides (Zulip's get_emoji_data); an added reaction is then
 * checked unless it is a vote for one already on the message. Removal may name the emoji by code alone and is not
 * checked, as in Zulip: the reaction exists or not, and one whose emoji was deactivated since can still go.
 */
async function reactionOf(
  db: DB,
  realmId: number,
  messageId: number,
  params: { emoji_name?: string; emoji_code?: string; reaction_type?: string },
  adding: boolean,
): Promise<Reaction> {
  const name = params.emoji_name;
  if (name === undefined && adding) throw chatErrors.missing("emoji_name");
  let type = params.reaction_type === "service_extra_emoji" ? "zulip_extra_emoji" : params.reaction_type;
  let code = params.emoji_code;
  if (code === undefined) {
    if (name === undefined) throw chatErrors.missing("emoji_name");
    const named = await emojiNamed(db, realmId, name);
    code = named.code;
    type ??= named.type;
  }
  const reaction = { emoji_name: name ?? "", emoji_code: code, reaction_type: type ?? "unicode_emoji" };
  if (!adding) return reaction;
  // Zulip's check_add_reaction: the same emoji already on the message makes this a vote for that reaction, under
  // its name and unchecked (its emoji may have been deactivated since); only a new one must be valid now.
  const existing = await reactionNameOn(db, messageId, reaction);
  if (existing) reaction.emoji_name = existing;
  else await checkEmojiRequest(db, realmId, reaction);
  return reaction;
}

function route(method: "POST" | "DELETE"): RouteSpec {
  return {
    method,
    path: "/messages/{message_id}/reactions",
    params: REACTION_PARAMS as any,
    async handle({ params, user, services }) {
      const row = await readableMessage(services.store.db, user, params.message_id);
      const reaction = await reactionOf(services.store.db, user.realm_id, row.id, params, method === "POST");
      await ownerOf(services.system, row).ask({
        op: "react",
        add: method === "POST",
        messageId: row.id,
        acting: acting(user),
        reaction,
      });
      return {};
    },
  };
}

export const reactionRoutes: RouteSpec[] = [route("POST"), route("DELETE")];
