/**
 * The unicode emoji document of POST /register's `server_emoji_data_url` (Zulip 6.0, feature level 140): every
 * emoji code this server accepts with its names, canonical first. The mobile app fetches it at start-up for its
 * emoji picker and quick reactions, and retries until it has it (zulip-flutter fetchServerEmojiData).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, ENGINES, startTestServer, type TestServer } from "../../../support/server.ts";
import { messageApi } from "../../../support/messages.ts";

describe.each(ENGINES)("the emoji data document on %s", (engine) => {
  let server: TestServer;
  const { toChannel, subscribe } = messageApi(() => server);
  let url: string;

  beforeAll(async () => {
    server = await startTestServer(engine);
    const state = await api(server, "POST", "/register", { as: server.owner, params: { fetch_event_types: ["realm"] } });
    expect(state.status).toBe(200);
    // An absolute URL, as Zulip's; fetched here from the test server itself.
    url = new URL(new URL(state.body.server_emoji_data_url).pathname, server.url).href;
  });
  afterAll(async () => server?.close());

  it("serves every unicode emoji's names, canonical first, and the names are those reactions accept", async () => {
    const res = await fetch(url);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get("cache-control")).toContain("max-age");
    const { code_to_names: codeToNames } = (await res.json()) as { code_to_names: Record<string, string[]> };
    expect(Object.keys(codeToNames).length).toBeGreaterThan(1000);
    expect(codeToNames["1f44d"]![0]).toBe("+1");
    expect(codeToNames["1f44d"]).toContain("thumbs_up");
    await subscribe(server.owner, ["emoji"]);
    const message = await toChannel(server.owner, "t", "react to me", "emoji");
    for (const [code, names] of [["1f44d", codeToNames["1f44d"]!], ["1f600", codeToNames["1f600"]!]] as const) {
      for (const name of names) {
        const add = await api(server, "POST", `/messages/${message}/reactions`, {
          as: server.owner,
          params: { emoji_name: name, emoji_code: code, reaction_type: "unicode_emoji" },
          template: "/messages/{message_id}/reactions",
        });
        expect([200, 400], JSON.stringify(add.body)).toContain(add.status);
        // A second name of an emoji already reacted with is refused as that reaction again, never as an unknown emoji.
        if (add.status === 400) expect(add.body.msg).toBe("Reaction already exists.");
      }
    }
  });

  it("answers only its own path, to GET and HEAD", async () => {
    expect((await fetch(url, { method: "HEAD" })).status).toBe(200);
    expect((await fetch(url.replace(/emoji_api\.[0-9a-f]+\.json$/, "emoji_api.0000.json"))).status).toBe(404);
    expect((await fetch(url, { method: "POST" })).status).toBe(405);
  });
});
