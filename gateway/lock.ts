/**
 * Guards against two servers on one deployment. PGlite is a single-process database: a second process opening
 * the same directory would corrupt it, so the embedded engine takes `DATA_DIR/chorus.pid`. And uWS listens with
 * SO_REUSEPORT, so a stale server on the same port would silently take half the traffic: the port is probed first.
 */
import fs from "node:fs";
import net from "node:net";
import path from "node:path";

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err: any) {
    return err.code === "EPERM";
  }
}

/** Take the data directory for this process; throws if a live process holds it. Returns the release function. */
export function lockDataDir(dataDir: string, what = "a Chorus server"): () => void {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, "chorus.pid");
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(file, String(process.pid), { flag: "wx" });
      return () => {
        try {
          if (fs.readFileSync(file, "utf8") === String(process.pid)) fs.unlinkSync(file);
        } catch {
          // already gone
        }
      };
    } catch (err: any) {
      if (err.code !== "EEXIST") throw err;
      const holder = Number(fs.readFileSync(file, "utf8"));
      if (holder && holder !== process.pid && alive(holder)) {
        throw new Error(`${dataDir} is in use by process ${holder} (${what} on the embedded store); stop it first`);
      }
      fs.unlinkSync(file); // left by a process that died
    }
  }
  throw new Error(`cannot lock ${dataDir}`);
}

/** Throws if something already accepts connections on host:port. */
export async function ensurePortFree(host: string, port: number): Promise<void> {
  if (!port) return;
  const probeHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
  const inUse = await new Promise<boolean>((resolve) => {
    const socket = net.connect({ host: probeHost, port, timeout: 1000 });
    socket.once("connect", () => (socket.destroy(), resolve(true)));
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => (socket.destroy(), resolve(false)));
  });
  if (inUse) throw new Error(`port ${port} is already in use (a stale server would silently share it through SO_REUSEPORT)`);
}
