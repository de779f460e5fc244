/**
 * The SSE load for bench/assistant.ts, in its own process (so it neither shares the server's event loop nor
 * counts in its CPU time): `rounds` times, `concurrency` embed questions with `stream: true` at once, each timed
 * from sending the request to the first `data:` event and to the end of the stream. Answers over IPC.
 */
export interface SseRequest {
  url: string;
  body: string;
  concurrency: number;
  rounds: number;
}
export interface SseFigures {
  firstEventMs: number[];
  completeMs: number[];
  failures: number;
}

async function one(url: string, body: string): Promise<{ first: number; done: number } | undefined> {
  const t0 = performance.now();
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
  if (res.status !== 200 || !res.body) return undefined;
  let first = 0;
  let text = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    text += decoder.decode(chunk, { stream: true });
    if (!first && text.includes("data: ")) first = performance.now() - t0;
  }
  if (!text.includes('"done":true')) return undefined;
  return { first, done: performance.now() - t0 };
}

process.on("message", async (req: SseRequest) => {
  const figures: SseFigures = { firstEventMs: [], completeMs: [], failures: 0 };
  for (let r = 0; r < req.rounds; r++) {
    const results = await Promise.all(Array.from({ length: req.concurrency }, () => one(req.url, req.body).catch(() => undefined)));
    for (const x of results) {
      if (!x) figures.failures++;
      else {
        figures.firstEventMs.push(x.first);
        figures.completeMs.push(x.done);
      }
    }
  }
  process.send!(figures);
});
process.send!({ ready: true });
