/**
 * GET /health and GET /ready through a real listening server: unauthenticated, outside the rate limits, and /ready
 * turning 503 (naming the check) while a dependency is down, then 200 again once it is back. The Redis that goes
 * down is a private redis-server this test starts and restarts, never the shared one.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENGINES, engineConfig, startTestServer, type TestServer } from "../support/server.ts";
import { privateServicesAvailable, startPrivateRedis, type PrivateRedis } from "../support/private-services.ts";
import { startNode } from "../../gateway/main.ts";
import { freshRedisPrefix } from "../support/services.ts";

async function until(ok: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`not so within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const get = async (server: { url: string }, path: string) => {
  const res = await fetch(new URL(path, server.url));
  return { status: res.status, body: (await res.json()) as any };
};

describe.each(ENGINES)("probes (%s)", (engine) => {
  let server: TestServer;
  beforeAll(async () => {
    // One call a minute per address: a probe would be refused after the first if probes were rate limited.
    const strict = [{ seconds: 60, calls: 1 }];
    server = await startTestServer(engine, { rateLimits: { apiByUser: strict, apiByIp: strict, authenticateByUsername: strict, authenticateByIp: strict } });
  });
  afterAll(() => server.close());

  it("answers /health and /ready without credentials, as often as asked", async () => {
    // Just after start the first shards' leases may be older than a renewal period (taking 16 shards takes a
    // while on a busy machine, and tests use 3 s leases): ready once the first periodic renewal has run.
    await until(async () => (await get(server, "/ready")).status === 200, 10_000);
    for (let i = 0; i < 5; i++) {
      expect(await get(server, "/health")).toEqual({ status: 200, body: { status: "ok" } });
      const ready = await get(server, "/ready");
      expect(ready.status).toBe(200);
      const checks = engine === "embedded" ? { database: "ok", shards: "ok" } : { database: "ok", redis: "ok", shards: "ok" };
      expect(ready.body).toEqual({ status: "ready", checks });
    }
  });

  it("leaves other methods and paths to the routes", async () => {
    const res = await fetch(new URL("/ready", server.url), { method: "POST" });
    expect(res.status).not.toBe(200);
    expect((await get(server, "/readyz")).status).toBe(404);
  });
});

describe.skipIf(!privateServicesAvailable())("/ready with Redis down", () => {
  let redis: PrivateRedis;
  let release: () => Promise<void>;
  let node: Awaited<ReturnType<typeof startNode>>;
  let url: string;
  beforeAll(async () => {
    redis = await startPrivateRedis({ aof: false });
    const engine = await engineConfig("redis+postgres", { redisUrl: redis.url, redisPrefix: freshRedisPrefix().prefix });
    release = engine.release;
    node = await startNode(engine.config);
    url = `http://127.0.0.1:${node.port}`;
  });
  afterAll(async () => {
    await redis.stop();
    // Closing waits on Redis for the transport's last acknowledgements; it is gone, so do not wait long on it.
    await Promise.race([node.close(), new Promise((r) => setTimeout(r, 5_000))]);
    await release();
  });

  it("is 503 naming Redis while it is down, stays alive, and is ready again once it is back", async () => {
    await until(async () => (await get({ url }, "/ready")).status === 200, 10_000);
    const back = redis.restart(3_000);
    await new Promise((r) => setTimeout(r, 500));
    const down = await get({ url }, "/ready");
    expect(down.status).toBe(503);
    expect(down.body.status).toBe("unavailable");
    expect(down.body.checks.database).toBe("ok");
    expect(down.body.checks.redis).toEqual(expect.any(String));
    expect(down.body.checks.redis).not.toBe("ok");
    expect(await get({ url }, "/health")).toEqual({ status: 200, body: { status: "ok" } });
    await back;
    await until(async () => (await get({ url }, "/ready")).status === 200, 10_000);
  }, 30_000);
});
