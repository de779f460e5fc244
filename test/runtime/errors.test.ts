/**
 * The store or the transport out of reach is a 503 a client may retry (SERVICE_UNAVAILABLE), never a 500: the
 * errors here are the real ones pg and ioredis raise against a port nothing listens on and a terminated backend.
 */
import pg from "pg";
import { Redis } from "ioredis";
import { describe, expect, it } from "vitest";
import { ChorusError } from "../../runtime/errors.ts";
import { freePort } from "../support/process.ts";
import { PG_ADMIN_URL } from "../support/services.ts";

async function thrown(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("expected a failure");
}

describe("ChorusError.wrap", () => {
  it("makes Postgres refusing connections a 503", async () => {
    const port = await freePort();
    const client = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
    const err = await thrown(client.connect());
    expect(ChorusError.wrap(err)).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
  });

  it("makes a Postgres backend terminated under a query a 503", async () => {
    const victim = new pg.Client({ connectionString: PG_ADMIN_URL });
    victim.on("error", () => {});
    await victim.connect();
    const pid = (await victim.query("select pg_backend_pid() as pid")).rows[0].pid;
    const admin = new pg.Client({ connectionString: PG_ADMIN_URL });
    await admin.connect();
    try {
      const running = thrown(victim.query("select pg_sleep(5)"));
      await new Promise((r) => setTimeout(r, 100));
      await admin.query("select pg_terminate_backend($1)", [pid]);
      expect(ChorusError.wrap(await running)).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
      // And the next query on the dead connection.
      expect(ChorusError.wrap(await thrown(victim.query("select 1")))).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
    } finally {
      await admin.end();
      await victim.end().catch(() => {});
    }
  });

  it("makes Redis out of reach a 503, with or without the offline queue", async () => {
    const port = await freePort();
    for (const options of [{ maxRetriesPerRequest: 0 }, { enableOfflineQueue: false }]) {
      const conn = new Redis({ port, host: "127.0.0.1", lazyConnect: false, retryStrategy: () => 50, ...options });
      conn.on("error", () => {});
      try {
        const err = await thrown(conn.call("PING"));
        expect(ChorusError.wrap(err)).toMatchObject({ code: "SERVICE_UNAVAILABLE", status: 503 });
      } finally {
        conn.disconnect();
      }
    }
  });

  it("keeps other failures 500s that hide their detail", () => {
    expect(ChorusError.wrap(new TypeError("x is undefined"))).toMatchObject({ code: "INTERNAL_SERVER_ERROR", status: 500, message: "Internal server error" });
  });
});
