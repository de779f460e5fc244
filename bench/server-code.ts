/**
 * The server code the bench runs in its own process: by default the build `npm start` runs (gateway/build.ts, built
 * here first), so that the figures are those of what is deployed; with BENCH_SOURCE=1 the TypeScript as tsx loads
 * it (the bench's figures before 2026-11-28 were the source's: docs/performance.md). Only what the bench drives comes
 * from here (starting a node, switching the metrics); the rest of the bench talks to the node over HTTP or through
 * the objects startNode returns.
 */
import { pathToFileURL } from "node:url";
import { serverBuild } from "../test/support/server-build.ts";

type ServerCode = Pick<typeof import("../gateway/main.ts"), "startNode" | "setMetricsEnabled">;

const fromSource = process.env.BENCH_SOURCE === "1";

/** Which code the bench runs, for the report. */
export const SERVER_CODE = fromSource ? "source through tsx (BENCH_SOURCE=1)" : "the build npm start runs (dist/main.mjs)";

let loaded: Promise<ServerCode> | undefined;

export function serverCode(): Promise<ServerCode> {
  loaded ??= fromSource ? import("../gateway/main.ts") : serverBuild().then(({ main }) => import(pathToFileURL(main).href) as Promise<ServerCode>);
  return loaded;
}
