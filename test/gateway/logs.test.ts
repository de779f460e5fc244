/**
 * The server's log as an operator reads it: `npm start`'s command in a child process, every line one JSON object
 * with level, time, worker and pid; an access line per request with the request id, status and the trace id of an
 * incoming traceparent; ACCESS_LOG=off and LOG_LEVEL silence what they name.
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { startChorus } from "../support/process.ts";

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";

function lines(output: string): any[] {
  return output
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
}

describe("structured logs", { timeout: 120_000 }, () => {
  it("writes JSON lines and an access line per request", async () => {
    const server = await startChorus();
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}/api/v1/server_settings`, {
        headers: { "x-request-id": "probe-req-1", traceparent: `00-${TRACE_ID}-00f067aa0ba902b7-01` },
      });
      expect(res.status).toBe(200);
      const refused = await fetch(`http://127.0.0.1:${server.port}/api/v1/users/me`);
      expect(refused.status).toBe(401);
      await fetch(`http://127.0.0.1:${server.port}/ready`);
    } finally {
      expect(await server.stop()).toBe(0);
      fs.rmSync(server.dataDir, { recursive: true, force: true });
    }
    const logged = lines(server.output()); // throws if a line is not JSON
    expect(logged[0].pid).toEqual(expect.any(Number));
    for (const entry of logged) {
      expect(entry).toMatchObject({ level: expect.any(Number), time: expect.any(Number), worker: 0, pid: logged[0].pid, msg: expect.any(String) });
    }
    expect(logged.some((e) => /worker 0 listening on port/.test(e.msg))).toBe(true);
    const access = logged.filter((e) => e.msg === "request");
    expect(access.find((e) => e.req_id === "probe-req-1")).toMatchObject({
      level: 30,
      method: "GET",
      path: "/api/v1/server_settings",
      status: 200,
      ms: expect.any(Number),
      trace_id: TRACE_ID,
    });
    const unauthorized = access.find((e) => e.path === "/api/v1/users/me");
    expect(unauthorized).toMatchObject({ status: 401, req_id: expect.stringMatching(/^0-[0-9a-z]+$/) });
    expect(unauthorized.trace_id).toBeUndefined();
    expect(access.some((e) => e.path === "/ready")).toBe(false); // probes stay out of the access log
  });

  it("ACCESS_LOG=off drops the access lines and LOG_LEVEL=warn the info lines", async () => {
    const server = await startChorus({ ACCESS_LOG: "off", LOG_LEVEL: "warn" });
    try {
      expect((await fetch(`http://127.0.0.1:${server.port}/api/v1/server_settings`)).status).toBe(200);
    } finally {
      expect(await server.stop()).toBe(0);
      fs.rmSync(server.dataDir, { recursive: true, force: true });
    }
    expect(lines(server.output()).filter((e) => e.level < 40)).toEqual([]);
  });
});
