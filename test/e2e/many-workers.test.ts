/**
 * What one worker changes, every worker serves at once: two workers on Redis Streams and Postgres, each holding the
 * owner's credentials in its cache; the owner renames themself through one of them, and every request after the
 * answer, on fresh connections (the kernel spreads them over both workers), sees the new name. Before the transport's
 * notices, the other worker served its cached account for up to two seconds.
 */
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { startChorus } from "../support/process.ts";
import { freshDatabase, freshRedisPrefix, REDIS_URL } from "../support/services.ts";
import { api, readZuliprc } from "../support/server.ts";
import { expectZulipResponse } from "../support/openapi.ts";

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

/** GET /users/me on a connection of its own (no keep-alive), so successive calls land on either worker. */
function me(port: number, auth: { email: string; key: string }): Promise<any> {
  const authorization = `Basic ${Buffer.from(`${auth.email}:${auth.key}`).toString("base64")}`;
  return new Promise((resolve, reject) => {
    const req = http.get({ host: "127.0.0.1", port, path: "/api/v1/users/me", agent: false, headers: { authorization } }, (res) => {
      let text = "";
      res.on("data", (chunk) => (text += chunk));
      res.on("end", () => {
        const body = JSON.parse(text);
        expect(res.statusCode).toBe(200);
        expectZulipResponse("GET", "/users/me", 200, body);
        resolve(body);
      });
    });
    req.on("error", reject);
  });
}

it("drops every worker's cached credentials when an account changes", async () => {
  const db = await freshDatabase();
  const redis = freshRedisPrefix();
  cleanups.push(db.drop, redis.clean);
  const server = await startChorus({ REDIS_URL, DATABASE_URL: db.url, REDIS_PREFIX: redis.prefix, WORKERS: "2" });
  cleanups.push(async () => void (await server.stop()), async () => fs.rmSync(server.dataDir, { recursive: true, force: true }));
  for (let i = 0; i < 50 && !/worker 1 listening/.test(server.output()); i++) await new Promise((r) => setTimeout(r, 100));
  const owner = readZuliprc(path.join(server.dataDir, "zuliprc"));

  for (const name of ["Renamed once", "Renamed twice"]) {
    // Both workers cache the owner's account (thirty connections: both get some, but for a 2^-29 chance).
    for (let i = 0; i < 30; i++) await me(server.port, owner);
    const changed = await api({ url: `http://127.0.0.1:${server.port}` }, "PATCH", "/settings", { as: owner, params: { full_name: name } });
    expect(changed.status).toBe(200);
    const names = new Set<string>();
    for (let i = 0; i < 30; i++) names.add((await me(server.port, owner)).full_name);
    expect([...names]).toEqual([name]);
  }
}, 60_000);
