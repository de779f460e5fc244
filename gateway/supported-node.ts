/**
 * Refuses to start on a Node that Chorus does not support, with one line and exit code 1, before anything loads
 * uWebSockets.js. Imported first by main.ts, for its effect: ES modules evaluate in import order, so this runs
 * before http.ts (the only uWS module) is evaluated.
 *
 * Why: the uWS package (an npm alias, see package.json) ships native builds for a few Node ABIs only and, on any
 * other, silently loads a JavaScript fallback that says "listening" and fails on the first request. Supported is
 * Node 20.9 or later 20.x (package.json's `engines`; sharp, which makes the thumbnails, needs 20.9); the measurements behind that choice are in docs/operations.md.
 */
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

export const SUPPORTED_NODE = ">=20.9 <21";

/** Why this Node cannot run Chorus, or undefined when it can. */
export function unsupportedNode(versions: NodeJS.ProcessVersions = process.versions, platform: string = process.platform, arch: string = process.arch): string | undefined {
  const [major, minor] = versions.node.split(".").map(Number) as [number, number];
  const binary = `uws_${platform}_${arch}_${versions.modules}.node`;
  const uwsDir = path.dirname(createRequire(import.meta.url).resolve("uWebSockets.js/package.json"));
  if (!fs.existsSync(path.join(uwsDir, "binaries", binary))) {
    return `chorus: Node ${versions.node} is not supported: uWebSockets.js has no native build for it (${binary}); run Chorus on Node 20 (${SUPPORTED_NODE})`;
  }
  if (major !== 20 || minor < 9) return `chorus: Node ${versions.node} is not supported; run Chorus on Node 20 (${SUPPORTED_NODE})`;
  return undefined;
}

const refusal = unsupportedNode();
if (refusal) {
  process.stderr.write(refusal + "\n");
  process.exit(1);
}
