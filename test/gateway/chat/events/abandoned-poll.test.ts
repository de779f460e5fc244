/**
 * GET /api/v1/events whose client goes away while the poll is parked: the server lets go of the poll at once (its
 * pending ask, and what it holds), instead of keeping it until the next event or the heartbeat (50 s). The queue
 * itself stays, with its events, for the client's next poll.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";

async function until(check: () => boolean, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`condition not met within ${ms} ms: ${check.toString()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.each(ENGINES)("an abandoned long-poll on %s", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer(engine);
  });
  afterAll(async () => server?.close());

  it("is finished when its client goes away, and the queue keeps serving", async () => {
    const queue = (await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["message"] } })).body.queue_id;
    const before = server.node.system.waitingAsks;
    const gone = new AbortController();
    const abandoned = api(server, "GET", "/events", { as: server.owner, params: { queue_id: queue, last_event_id: -1 }, signal: gone.signal }).catch(
      (err: Error) => err.name,
    );
    await until(() => server.node.system.waitingAsks === before + 1); // parked
    gone.abort();
    expect(await abandoned).toBe("AbortError");
    await until(() => server.node.system.waitingAsks === before);

    const sent = await api(server, "POST", "/messages", { as: server.owner, params: { type: "private", to: JSON.stringify([server.owner.email]), content: "still here" } });
    const polled = await api(server, "GET", "/events", { as: server.owner, params: { queue_id: queue, last_event_id: -1, dont_block: true } });
    expect(polled.body.events.map((e: any) => e.message?.id)).toContain(sent.body.id);
  });
});
