/**
 * HTTP client helpers shared by the bench's client processes (bench/event-client.ts, bench/fanout-client.ts): one
 * request on a kept-alive connection, and latency figures from a list of samples.
 */
import http from "node:http";
import type { Auth, LatencyFigures } from "./event-client.ts";

export const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 4096, scheduling: "lifo" });

export interface Answer {
  status: number;
  body: any;
  end: number;
}

/**
 * One request on a kept-alive connection. A pooled connection the server closed while it sat idle fails with
 * ECONNRESET / EPIPE before the server saw anything: that is retried (Node's documented pattern, reusedSocket).
 */
export async function request(url: URL, method: string, auth: Auth | undefined, form?: string, onRequest?: (r: http.ClientRequest) => void): Promise<Answer> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await requestOnce(url, method, auth, form, onRequest);
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { reused?: boolean };
      if (!(e.reused && (e.code === "ECONNRESET" || e.code === "EPIPE")) || attempt >= 3) throw err;
    }
  }
}

function requestOnce(url: URL, method: string, auth: Auth | undefined, form?: string, onRequest?: (r: http.ClientRequest) => void): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = {};
    if (auth) headers.authorization = auth;
    if (form !== undefined) {
      headers["content-type"] = "application/x-www-form-urlencoded";
      headers["content-length"] = Buffer.byteLength(form);
    }
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const end = performance.now();
        const text = Buffer.concat(chunks).toString("utf8");
        let body: unknown = text;
        if ((res.headers["content-type"] ?? "").includes("json")) {
          try {
            body = JSON.parse(text);
          } catch {
            // keep the text
          }
        }
        resolve({ status: res.statusCode ?? 0, body, end });
      });
      res.on("error", reject);
    });
    req.on("error", (err: NodeJS.ErrnoException & { reused?: boolean }) => {
      err.reused = req.reusedSocket;
      reject(err);
    });
    onRequest?.(req);
    req.end(form);
  });
}

export function figures(values: number[]): LatencyFigures {
  if (!values.length) return { count: 0, mean: NaN, p50: NaN, p90: NaN, p99: NaN, max: NaN };
  const sorted = Float64Array.from(values).sort();
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
  let sum = 0;
  for (const v of sorted) sum += v;
  return { count: sorted.length, mean: sum / sorted.length, p50: at(50), p90: at(90), p99: at(99), max: sorted[sorted.length - 1]! };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const describeError = (a: Answer | unknown) =>
  a && typeof a === "object" && "status" in a ? `${(a as Answer).status} ${JSON.stringify((a as Answer).body).slice(0, 200)}` : String(a);
