/**
 * Reading server-sent events as their text arrives in pieces: the server reads an LLM's streamed completion with it
 * (gateway/assistant/generate.ts) and the widget's browser bundle reads the embed endpoint's stream
 * (gateway/pages/widget/browser/embed-client.ts). It imports nothing and touches neither Node's nor the browser's
 * globals, so both can bundle it.
 */

/** Collects pieces of an event stream and hands out the `data` of each event once its blank line has arrived. */
export class SseDataReader {
  private buffer = "";

  /**
   * The data of every event `text` completes, in order: an event's `data:` lines joined by newlines, each without
   * the one space that may follow the colon (as the HTML standard reads them). Events whose data is empty (`: ping`
   * comments, bare `id:` lines) are left out, as a browser's EventSource dispatches none for them.
   */
  push(text: string): string[] {
    this.buffer += text;
    const data: string[] = [];
    let end: number;
    while ((end = this.buffer.search(/\r?\n\r?\n/)) >= 0) {
      const event = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const joined = event
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""))
        .join("\n");
      if (joined) data.push(joined);
    }
    return data;
  }
}
