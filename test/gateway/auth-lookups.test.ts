/**
 * The send path's cached lookups (gateway/auth.ts's credentials, requireStream's channels) are read once per key
 * however many requests ask at the same moment: when an entry expires under load, every concurrent request used to
 * query the store. Counted with a kysely plugin on the node's real store.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from "kysely";
import { Authenticator } from "../../gateway/auth.ts";
import { requireStream } from "../../actors/chat/reads/channels.ts";
import { Keyring } from "../../runtime/secrets.ts";
import { api, startTestServer, type TestServer } from "../support/server.ts";

/** Counts the statements run through it, by the table they read first. */
class StatementCounter implements KyselyPlugin {
  readonly byTable = new Map<string, number>();
  transformQuery({ node }: PluginTransformQueryArgs): RootOperationNode {
    const table = node.kind === "SelectQueryNode" ? (node.from?.froms[0] as { table?: { identifier?: { name?: string } } })?.table?.identifier?.name : undefined;
    if (table) this.byTable.set(table, (this.byTable.get(table) ?? 0) + 1);
    return node;
  }
  async transformResult({ result }: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return result;
  }
}

describe("lookups on the send path", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer("embedded");
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "lookups" }] } });
  });
  afterAll(() => server?.close());

  it("checks a header's credentials once for requests that arrive together, and again after an account changes", async () => {
    const counter = new StatementCounter();
    const db = server.node.store.db.withPlugin(counter);
    const auth = new Authenticator(db, Keyring.load(server.dataDir, server.node.config.secret), async () => {}, server.node.config.authCacheMs);
    const header = "Basic " + Buffer.from(`${server.owner.email}:${server.owner.key}`).toString("base64");
    const users = await Promise.all(Array.from({ length: 20 }, () => auth.authenticate(header)));
    expect(new Set(users.map((u) => u.id)).size).toBe(1);
    expect(users[0]!.delivery_email).toBe(server.owner.email);
    expect(counter.byTable.get("users")).toBe(1);
    // Refusals are shared alike, and not cached: each later request asks again.
    const wrong = "Basic " + Buffer.from(`${server.owner.email}:not-the-key`).toString("base64");
    const refused = await Promise.allSettled(Array.from({ length: 5 }, () => auth.authenticate(wrong)));
    expect(refused.every((r) => r.status === "rejected" && /Invalid API key/.test(String(r.reason.message)))).toBe(true);
    expect(counter.byTable.get("users")).toBe(2);
    await auth.forget();
    await Promise.all(Array.from({ length: 5 }, () => auth.authenticate(header)));
    expect(counter.byTable.get("users")).toBe(3);
  });

  it("reads a channel named by requests that arrive together once", async () => {
    const counter = new StatementCounter();
    const db = server.node.store.db.withPlugin(counter);
    const realmId = (await server.node.store.db.selectFrom("realms").select("id").executeTakeFirstOrThrow()).id;
    // A name no earlier lookup cached (the cache keeps a row for a moment).
    await api(server, "POST", "/users/me/subscriptions", { as: server.owner, params: { subscriptions: [{ name: "Lookups Two" }] } });
    const rows = await Promise.all(Array.from({ length: 20 }, () => requireStream(db, realmId, { name: "lookups two" })));
    expect(new Set(rows.map((r) => r.id)).size).toBe(1);
    expect(rows[0]!.name).toBe("Lookups Two");
    expect(counter.byTable.get("streams")).toBe(1);
    await expect(Promise.all([requireStream(db, realmId, { name: "no such channel" }), requireStream(db, realmId, { name: "No Such Channel" })])).rejects.toThrow();
    expect(counter.byTable.get("streams")).toBe(2);
  });
});
