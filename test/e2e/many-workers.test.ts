/**
 * What one worker changes, every worker serves at once: two workers on Redis Streams and Postgres, each with its
 * caches warm (the owner's credentials; the organization's custom emoji; direct-message conversations'
 * participants). After a change answered by one worker, every later request sees it, whichever worker serves it.
 * Before the transport's notices, the other worker served its cached copy for up to two seconds.
 */
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { startDistributed } from "../support/process.ts";
import { api, createUser, meOnNewConnection as me, readZuliprc } from "../support/server.ts";

const cleanups: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

let deployment: Promise<{ port: number; target: { url: string }; owner: ReturnType<typeof readZuliprc> }> | undefined;
/** One two-worker deployment for the tests of this file. */
function twoWorkers() {
  deployment ??= (async () => {
    const server = await startDistributed({}, cleanups);
    return { port: server.port, target: { url: `http://127.0.0.1:${server.port}` }, owner: readZuliprc(path.join(server.dataDir, "zuliprc")) };
  })();
  return deployment;
}

it("drops every worker's cached credentials when an account changes", async () => {
  const server = await twoWorkers();
  const owner = server.owner;

  for (const name of ["Renamed once", "Renamed twice"]) {
    // Both workers cache the owner's account (thirty connections: both get some, but for a 2^-29 chance).
    for (let i = 0; i < 30; i++) await me(server.port, owner);
    const changed = await api(server.target, "PATCH", "/settings", { as: owner, params: { full_name: name } });
    expect(changed.status).toBe(200);
    const names = new Set<string>();
    for (let i = 0; i < 30; i++) names.add((await me(server.port, owner)).full_name);
    expect([...names]).toEqual([name]);
  }
}, 60_000);

it("renders a new custom emoji at once in every worker's conversations", async () => {
  const { target, owner } = await twoWorkers();
  // Channels on both workers' shards (their conversations render the messages), each rendering once before the
  // emoji exists, so both workers cache the organization's emoji set without it.
  const channels = Array.from({ length: 8 }, (_, i) => `emoji-${i}`);
  expect((await api(target, "POST", "/users/me/subscriptions", { as: owner, params: { subscriptions: channels.map((name) => ({ name })) } })).status).toBe(200);
  const rendered = async (channel: string) => {
    const sent = await api(target, "POST", "/messages", { as: owner, params: { type: "stream", to: channel, topic: "t", content: ":party_parrot:" } });
    expect(sent.status).toBe(200);
    const got = await api(target, "GET", "/messages", { as: owner, params: { anchor: sent.body.id, num_before: 0, num_after: 0 } });
    return got.body.messages[0].content as string;
  };
  for (const channel of channels) expect(await rendered(channel)).toBe("<p>:party_parrot:</p>");
  // A worker's emoji set is cached for 2 s from its load: let the loads above expire, then load it afresh on both
  // workers at once, so that without a notice both would still serve it for the rest of the test.
  await new Promise((r) => setTimeout(r, 2100));
  for (const content of await Promise.all(channels.map(rendered))) expect(content).toBe("<p>:party_parrot:</p>");
  const png = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==", "base64");
  const uploaded = await api(target, "POST", "/realm/emoji/party_parrot", {
    as: owner,
    files: [{ filename: "parrot.png", type: "image/png", data: png }],
    multipart: true,
    template: "/realm/emoji/{emoji_name}",
  });
  expect(uploaded.status).toBe(200);
  for (const content of await Promise.all(channels.map(rendered))) expect(content).toMatch(/^<p><img alt=":party_parrot:" class="emoji" src="[^"]+" title="party parrot"><\/p>$/);
}, 60_000);

it("names a renamed participant at once in every worker's direct-message conversations", async () => {
  const { target, owner } = await twoWorkers();
  const others = await Promise.all(Array.from({ length: 8 }, (_, i) => createUser({ ...target, owner }, `dm-${i}@example.com`, `DM ${i}`)));
  const ownerId = (await api(target, "GET", "/users/me", { as: owner })).body.user_id as number;
  const dm = async (to: number, content: string) =>
    expect((await api(target, "POST", "/messages", { as: owner, params: { type: "direct", to: JSON.stringify([to]), content } })).status).toBe(200);
  // Eight conversations, so both workers hold some (but for a 2^-7 chance), each caching its participants by a send.
  for (const u of others) await dm(u.id, "before");
  const queues = await Promise.all(
    others.map(async (u) => (await api(target, "POST", "/register", { as: u, params: { event_types: ["message"] } })).body.queue_id as string),
  );
  expect((await api(target, "PATCH", "/settings", { as: owner, params: { full_name: "Owner Anew" } })).status).toBe(200);
  for (const u of others) await dm(u.id, "after");
  for (const [i, u] of others.entries()) {
    const polled = await api(target, "GET", "/events", { as: u, params: { queue_id: queues[i], last_event_id: -1, dont_block: true } });
    const [event] = polled.body.events;
    expect(event.message.display_recipient.find((r: any) => r.id === ownerId).full_name).toBe("Owner Anew");
  }
}, 60_000);
