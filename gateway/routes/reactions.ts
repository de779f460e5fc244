/** Reactions: POST and DELETE /messages/{message_id}/reactions, validated against the emoji data in actors/emoji.ts. */
import { errors } from "../../runtime/errors.ts";
import { emojiCodeFor, isKnownUnicodeEmojiCode, isValidUnicodeEmoji, isValidZulipExtraEmoji, ZULIP_EXTRA_EMOJI_NAMES } from "../../actors/emoji.ts";
import type { Reaction } from "../../actors/protocol.ts";
import { readableMessage } from "../../actors/reads.ts";
import type { RouteSpec } from "../app.ts";
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

/**
 * The reaction a request names, checked as Zulip's check_emoji_request does: with no code, the name decides
 * (unicode first, then the extra emoji); with a code, it must exist and the name must be one of its names.
 * Chorus has no custom (realm) emoji yet, so every realm_emoji is invalid.
 */
function reactionOf(params: { emoji_name?: string; emoji_code?: string; reaction_type?: string }, requireName: boolean): Reaction {
  const name = params.emoji_name;
  if (name === undefined && requireName) throw errors.missing("emoji_name");
  let type = params.reaction_type === "service_extra_emoji" ? "zulip_extra_emoji" : params.reaction_type;
  let code = params.emoji_code;
  if (code === undefined) {
    if (name === undefined) throw errors.missing("emoji_name");
    if (type === undefined || type === "unicode_emoji") code = emojiCodeFor(name);
    if (code !== undefined) type = "unicode_emoji";
    else if (ZULIP_EXTRA_EMOJI_NAMES.has(name) && (type === undefined || type === "zulip_extra_emoji")) [code, type] = [name, "zulip_extra_emoji"];
    else throw errors.badRequest(`Emoji '${name}' does not exist`);
  }
  type ??= "unicode_emoji";
  if (type === "realm_emoji") throw errors.badRequest("Invalid custom emoji.");
  if (name === undefined) return { emoji_name: "", emoji_code: code, reaction_type: type };
  if (type === "unicode_emoji") {
    if (!isKnownUnicodeEmojiCode(code)) throw errors.badRequest("Invalid emoji code.");
    if (!isValidUnicodeEmoji(name, code)) throw errors.badRequest("Invalid emoji name.");
  } else if (!isValidZulipExtraEmoji(name, code)) throw errors.badRequest("Invalid emoji code.");
  return { emoji_name: name, emoji_code: code, reaction_type: type };
}

function route(method: "POST" | "DELETE"): RouteSpec {
  return {
    method,
    path: "/messages/{message_id}/reactions",
    params: REACTION_PARAMS as any,
    async handle({ params, user, services }) {
      // Removal may name the emoji by code alone, as Zulip allows.
      const reaction = reactionOf(params, method === "POST");
      const row = await readableMessage(services.store.db, user, params.message_id);
      await services.system.ask(ownerOf(row), {
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
