/** Emoji names and codes as Zulip's reactions and markdown use them. */
import { describe, expect, it } from "vitest";
import {
  emojiCodeFor,
  emojiCodeOfText,
  emojiNameFor,
  isKnownUnicodeEmojiCode,
  isValidUnicodeEmoji,
  isValidZulipExtraEmoji,
  unicodeEmojiNames,
} from "../../../../actors/chat/rendering/emoji.ts";

describe("unicode emoji", () => {
  it("maps names to Zulip's codes: lowercase hex code points, dash-separated, without U+FE0F", () => {
    expect(emojiCodeFor("smile")).toBe("1f604");
    expect(emojiCodeFor("octopus")).toBe("1f419");
    expect(emojiCodeFor("heart")).toBe("2764");
    expect(emojiCodeFor("hash")).toBe("0023-20e3");
    expect(emojiCodeFor("woman_shrugging")).toBe("1f937-200d-2640");
  });

  it("accepts every name of an emoji, Zulip's and iamcal's", () => {
    expect(emojiCodeFor("+1")).toBe("1f44d");
    expect(emojiCodeFor("thumbs_up")).toBe("1f44d");
    expect(emojiCodeFor("thumbsup")).toBe("1f44d");
    expect(emojiCodeFor("poop")).toBe("1f4a9");
    expect(emojiCodeFor("hankey")).toBe("1f4a9");
  });

  it("gives Zulip's meaning where Zulip renamed an emoji", () => {
    expect(emojiCodeFor("cat")).toBe("1f408");
    expect(emojiCodeFor("kitten")).toBe("1f431");
    expect(emojiCodeFor("slight_smile")).toBe("1f642");
  });

  it("knows no skin tones, dashed names or made-up names", () => {
    expect(emojiCodeFor("skin_tone_2")).toBeUndefined();
    expect(emojiCodeFor("woman-shrugging")).toBeUndefined();
    expect(emojiCodeFor("not_an_emoji")).toBeUndefined();
  });

  it("names codes canonically", () => {
    expect(emojiNameFor("1f44d")).toBe("+1");
    expect(emojiNameFor("1f4a9")).toBe("poop");
    expect(emojiNameFor("1f431")).toBe("kitten");
    expect(emojiNameFor("1f600")).toBe("grinning");
    expect(emojiNameFor("fffff")).toBeUndefined();
  });

  it("validates a reaction's name against its code", () => {
    expect(isValidUnicodeEmoji("octopus", "1f419")).toBe(true);
    expect(isValidUnicodeEmoji("thumbs_up", "1f44d")).toBe(true);
    expect(isValidUnicodeEmoji("smile", "1f600")).toBe(false);
    expect(isValidUnicodeEmoji("cat", "1f431")).toBe(false);
    expect(isValidUnicodeEmoji("smile", "1F604")).toBe(false);
    expect(isKnownUnicodeEmojiCode("1f604")).toBe(true);
    expect(isKnownUnicodeEmojiCode("1f3fb")).toBe(false); // a skin tone on its own
  });

  it("lists every emoji with its names for clients, each name leading to its code", () => {
    const all = unicodeEmojiNames();
    expect(all.size).toBeGreaterThan(1800);
    expect(all.get("1f44d")).toEqual(["+1", "thumbs_up", "thumbsup"]);
    for (const [code, names] of all) for (const name of names) expect(emojiCodeFor(name)).toBe(code);
  });

  it("reads emoji text as written, with or without variation selectors", () => {
    expect(emojiCodeOfText("⬆️")).toBe("2b06");
    expect(emojiCodeOfText("⬆")).toBe("2b06");
    expect(emojiCodeOfText("#️⃣")).toBe("0023-20e3");
    expect(emojiCodeOfText("🐦‍🔥")).toBe("1f426-200d-1f525");
    expect(emojiCodeOfText("🍋‍🟪")).toBeUndefined();
    expect(emojiCodeOfText("a")).toBeUndefined();
  });
});

describe("Zulip's extra emoji", () => {
  it("has only :zulip:, whose code is its name", () => {
    expect(isValidZulipExtraEmoji("zulip", "zulip")).toBe(true);
    expect(isValidZulipExtraEmoji("zulip", "1f419")).toBe(false);
    expect(isValidZulipExtraEmoji("octopus", "octopus")).toBe(false);
  });
});
