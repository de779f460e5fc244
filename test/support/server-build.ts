/**
 * The server and the management CLI as `npm start` and `npm run manage` run them: built ahead of time
 * (gateway/build.ts). The global setup builds them once per run (`makeServerBuild`); a file run without it builds
 * into the checkout's `dist/` on first use.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { buildServer } from "../../gateway/build.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const BUILD_ENV = "CHORUS_TEST_SERVER_BUILD";

/** Builds into a directory of this run's own (inside the checkout, as packages resolve from there); removed after. */
export async function makeServerBuild(): Promise<() => void> {
  fs.mkdirSync(path.join(ROOT, "dist"), { recursive: true });
  const outdir = fs.mkdtempSync(path.join(ROOT, "dist", "test-"));
  await buildServer({ outdir });
  process.env[BUILD_ENV] = outdir;
  return () => fs.rmSync(outdir, { recursive: true, force: true });
}

/** The run's built lease renewer thread (see fork-setup.ts), if the global setup built the server. */
export function builtRenewerThread(): string | undefined {
  const outdir = process.env[BUILD_ENV];
  return outdir ? path.join(outdir, "lease-renewer-thread.mjs") : undefined;
}

const builds = new Map<string, Promise<{ main: string; manage: string }>>();

/**
 * The built server (`main`) and CLI (`manage`) of this run, or of another checkout (`root`: a base worktree for A/B
 * benchmarks, built by this checkout's gateway/build.ts into its own `dist/`), built once per process.
 */
export function serverBuild(root?: string): Promise<{ main: string; manage: string }> {
  const outdir = root ? undefined : process.env[BUILD_ENV];
  const key = root ?? ROOT;
  let built = builds.get(key);
  if (!built) {
    built = outdir ? Promise.resolve({ main: path.join(outdir, "main.mjs"), manage: path.join(outdir, "manage.mjs") }) : buildServer({ root });
    builds.set(key, built);
  }
  return built;
}

/** Node's flags for the server, as package.json's `start` script gives them. */
export const SERVER_NODE_FLAGS = ["--max-semi-space-size=64", "--enable-source-maps"];
