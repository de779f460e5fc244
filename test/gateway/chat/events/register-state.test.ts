/**
 * POST /register's initial state for the features built on other actors: scheduled messages, topic visibility, the
 * recent direct-message conversations.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, createUser, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";

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

  // The mobile app's "Direct messages" screen lists recent_private_conversations (zulip-flutter RecentDmConversationsView).
  it("lists the recent direct-message conversations, newest first, with the other members", async () => {
    const [ann, ben, cat] = await Promise.all(["ann", "ben", "cat"].map((n) => createUser(server, `${n}@example.com`)));
    const dm = async (as: typeof ann, to: number[]) => {
      const res = await api(server, "POST", "/messages", { as, params: { type: "direct", to: JSON.stringify(to), content: "hi" } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.id as number;
    };
    const recent = async (as: typeof ann) =>
      (await api(server, "POST", "/register", { as, params: { fetch_event_types: ["recent_private_conversations"] } })).body.recent_private_conversations;
    expect(await recent(ann)).toEqual([]);
    await dm(ann, [ben.id]);
    const group = await dm(cat, [ann.id, ben.id]);
    const self = await dm(ann, [ann.id]);
    const toBen = await dm(ben, [ann.id]); // the conversation with Ben again, now its newest
    const deleted = await dm(cat, [ben.id]);
    expect(await recent(ann)).toEqual([
      { max_message_id: toBen, user_ids: [ben.id] },
      { max_message_id: self, user_ids: [] },
      { max_message_id: group, user_ids: [ben.id, cat.id].sort((a, b) => a - b) },
    ]);
    expect((await api(server, "DELETE", `/messages/${deleted}`, { as: cat, template: "/messages/{message_id}" })).status).toBe(200);
    expect(await recent(ben)).toEqual([
      { max_message_id: toBen, user_ids: [ann.id] },
      { max_message_id: group, user_ids: [ann.id, cat.id].sort((a, b) => a - b) },
    ]);
  });

  it("says what the user may do from the realm's group settings, through subgroups", async () => {
    const [inner, outside] = [await createUser(server, "inner-member@example.com"), await createUser(server, "outside-member@example.com")];
    const group = async (name: string, params: Record<string, unknown>) =>
      (await api(server, "POST", "/user_groups/create", { as: server.owner, params: { name, description: name, members: [], ...params } })).body.group_id as number;
    const innerGroup = await group("creators-inner", { members: [inner.id] });
    const creators = await group("creators", { subgroups: [innerGroup] });
    const nobody = (await api(server, "GET", "/user_groups", { as: server.owner })).body.user_groups.find((g: { name: string }) => g.name === "role:nobody").id;
    const patched = await api(server, "PATCH", "/realm", {
      as: server.owner,
      params: {
        can_create_public_channel_group: { new: { direct_members: [], direct_subgroups: [creators] } },
        can_create_private_channel_group: { new: nobody },
        can_invite_users_group: { new: creators },
        can_add_subscribers_group: { new: { direct_members: [outside.id], direct_subgroups: [] } },
      },
      validate: false,
    });
    expect(patched.status).toBe(200);
    const may = async (as: typeof inner) => {
      const state = (await api(server, "POST", "/register", { as, params: { fetch_event_types: ["realm_user"] } })).body;
      const fields = ["can_create_streams", "can_create_public_streams", "can_create_private_streams", "can_invite_others_to_realm", "can_subscribe_other_users"];
      return Object.fromEntries(fields.map((f) => [f, state[f]]));
    };
    expect(await may(inner)).toEqual({ can_create_streams: true, can_create_public_streams: true, can_create_private_streams: false, can_invite_others_to_realm: true, can_subscribe_other_users: false });
    expect(await may(outside)).toEqual({ can_create_streams: false, can_create_public_streams: false, can_create_private_streams: false, can_invite_others_to_realm: false, can_subscribe_other_users: true });
  });
});
