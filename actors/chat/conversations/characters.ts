/**
 * Zulip's limits on text (a message's length, a topic's, a reminder's note) count characters as Python does (code
 * points): an emoji is one character, not the two UTF-16 units of a JavaScript string, and a cut never splits one.
 */

/** How many characters (code points) the text holds. */
export function characterLength(text: string): number {
  let length = 0;
  for (const _ of text) length++;
  return length;
}

/**
 * The text cut to at most `max` characters, ending in `marker` when cut (Zulip's truncate_content,
 * zerver/lib/message.py: truncated rather than refused).
 */
export function truncateCharacters(text: string, max: number, marker: string): string {
  // At most `max` UTF-16 units is at most `max` characters: most texts stop here.
  if (text.length <= max) return text;
  const chars = Array.from(text);
  return chars.length > max ? chars.slice(0, max - Array.from(marker).length).join("") + marker : text;
}
