/**
 * The transfer scenarios: one large file uploaded (POST /user_uploads, multipart) and downloaded (GET /user_uploads/…),
 * in MiB/s, against the same transfers to and from a raw uWebSockets.js server in this process (its ceiling: the body
 * read and dropped, the file answered from memory). The client is curl in its own process, so it shares neither the
 * server's event loop nor its CPU time. (That an upload streams, never whole in memory, the tests show: the file is
 * on disk before its body has arrived; this process's RSS, shared with PGlite and the load generator's ceilings, is
 * too coarse to show it.)
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import uws from "uWebSockets.js";
import type { Engine } from "./scenarios.ts";

const run = promisify(execFile);
const MIB = 1024 * 1024;

export const TRANSFER_SCENARIOS = ["upload", "download"] as const;
export type TransferScenario = (typeof TRANSFER_SCENARIOS)[number];

/** Size of the file moved each round, and the measured rounds (after one discarded). */
export const TRANSFER_MIB = 100;
const ROUNDS = 3;

export interface TransferMeasurement {
  name: TransferScenario | `ceiling:uws ${TransferScenario}`;
  engine?: string;
  mib: number;
  rounds: number;
  /** Best round, as MiB/s (the client's total time, connection included). */
  mibPerSec: number;
  meanMibPerSec: number;
  ratioToUws?: number;
}

/** A file of `mib` MiB of random-looking bytes in a temp directory, removed by the returned function. */
export function transferFile(mib = TRANSFER_MIB): { file: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-bench-transfer-"));
  const file = path.join(dir, "payload.bin");
  const fd = fs.openSync(file, "w");
  const chunk = Buffer.alloc(MIB);
  for (let i = 0; i < chunk.length; i++) chunk[i] = (i * 2654435761) >>> 24;
  for (let i = 0; i < mib; i++) fs.writeSync(fd, chunk);
  fs.closeSync(fd);
  return { file, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** One curl transfer: the status and the seconds it took. */
async function curl(args: string[]): Promise<{ status: number; seconds: number; body: string }> {
  const out = path.join(os.tmpdir(), `chorus-bench-curl-${process.pid}-${Math.random().toString(36).slice(2)}`);
  try {
    const { stdout } = await run("curl", ["-s", "-S", "-o", out, "-w", "%{http_code} %{time_total}", ...args], { maxBuffer: MIB });
    const [status, seconds] = stdout.trim().split(" ");
    const body = fs.statSync(out).size < 64 * 1024 ? fs.readFileSync(out, "utf8") : "";
    return { status: Number(status), seconds: Number(seconds), body };
  } finally {
    fs.rmSync(out, { force: true });
  }
}

async function rounds(name: TransferMeasurement["name"], mib: number, once: () => Promise<{ seconds: number }>): Promise<TransferMeasurement> {
  await once();
  const results = [];
  for (let i = 0; i < ROUNDS; i++) results.push(await once());
  const rates = results.map((r) => mib / r.seconds);
  return {
    name,
    mib,
    rounds: ROUNDS,
    mibPerSec: Math.max(...rates),
    meanMibPerSec: rates.reduce((a, b) => a + b, 0) / rates.length,
  };
}

/** The raw uWS ceiling: POST reads and drops the body; GET answers the file from memory. */
export async function measureTransferCeiling(file: string, mib: number): Promise<TransferMeasurement[]> {
  const payload = fs.readFileSync(file);
  const app = uws.App();
  app.post("/upload", (res) => {
    let aborted = false;
    res.onAborted(() => (aborted = true));
    res.onData((_chunk, last) => {
      if (last && !aborted) res.cork(() => res.end("{}"));
    });
  });
  app.get("/download", (res) => {
    res.onAborted(() => {});
    // tryEnd with onWritable (uWS's own streaming pattern): what a server sending a file from memory can at best do.
    res.cork(() => {
      const start = res.getWriteOffset();
      const [ok, done] = res.tryEnd(payload, payload.length);
      if (!ok && !done) res.onWritable((offset) => res.tryEnd(payload.subarray(offset - start), payload.length)[0]);
    });
  });
  const socket = await new Promise<uws.us_listen_socket>((resolve, reject) =>
    app.listen("127.0.0.1", 0, (s) => (s ? resolve(s) : reject(new Error("raw uWS transfer ceiling: cannot listen")))),
  );
  const base = `http://127.0.0.1:${uws.us_socket_local_port(socket as unknown as uws.us_socket)}`;
  try {
    const upload = await rounds("ceiling:uws upload", mib, () => curl(["-F", `file=@${file};type=application/octet-stream`, `${base}/upload`]));
    const download = await rounds("ceiling:uws download", mib, () => curl([`${base}/download`]));
    return [upload, download];
  } finally {
    uws.us_listen_socket_close(socket);
  }
}

/** Chorus: the owner uploads the file and downloads it back, through the node's real routes. */
export async function measureTransfer(engine: Engine, file: string, mib: number, which: readonly TransferScenario[]): Promise<TransferMeasurement[]> {
  const auth = ["-H", `Authorization: ${engine.authorization}`];
  const uploadOnce = async () => {
    const value = await curl([...auth, "-F", `file=@${file};type=application/octet-stream`, `${engine.baseUrl}/api/v1/user_uploads`]);
    if (value.status !== 200) throw new Error(`upload: HTTP ${value.status} ${value.body}`);
    return { seconds: value.seconds, url: JSON.parse(value.body).url as string };
  };
  const measured: TransferMeasurement[] = [];
  if (which.includes("upload")) measured.push({ ...(await rounds("upload", mib, uploadOnce)), engine: engine.name });
  if (which.includes("download")) {
    const { url } = await uploadOnce();
    const download = await rounds("download", mib, async () => {
      const got = await curl([...auth, `${engine.baseUrl}${url}`]);
      if (got.status !== 200) throw new Error(`download: HTTP ${got.status}`);
      return got;
    });
    measured.push({ ...download, engine: engine.name });
  }
  return measured;
}
