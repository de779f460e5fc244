/** POST /register's initial state for the features built on other actors: scheduled messages and topic visibility. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";

describe.each(ENGINES)("register state on %s", (engine) => {
  let server: TestServer;
  let channelId: number;
  beforeAll(async () => {
    server = await startTestServer(engine);
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "stateful" }] } });
    channelId = (await api(server, "GET", "/users/me/subscriptions", { as: server.owner })).body.subscriptions[0].stream_id;
  });
  afterAll(async () => server?.close());

  it("includes scheduled messages and user_topics", async () => {
    const when = Math.floor(Date.now() / 1000) + 3600;
    const scheduled = await api(server, "POST", "/scheduled_messages", {
      as: server.owner,
      params: { type: "stream", to: channelId, topic: "later", content: "see you", scheduled_delivery_timestamp: when },
    });
    expect(scheduled.status).toBe(200);
    const muted = await api(server, "POST", "/user_topics", { as: server.owner, params: { stream_id: channelId, topic: "noise", visibility_policy: 1 } });
    expect(muted.status).toBe(200);
    const state = await api(server, "POST", "/register", { as: server.owner, params: { event_types: ["scheduled_messages", "user_topic"] } });
    expect(state.body.scheduled_messages).toEqual([
      expect.objectContaining({ scheduled_message_id: scheduled.body.scheduled_message_id, to: channelId, topic: "later", scheduled_delivery_timestamp: when, failed: false }),
    ]);
    expect(state.body.user_topics).toEqual([{ stream_id: channelId, topic_name: "noise", last_updated: expect.any(Number), visibility_policy: 1 }]);
  });
});
