/**
 * The server and the management CLI as two ES modules built ahead of time (`npm start` and `npm run manage` build,
 * then run them; `node --import tsx gateway/build.ts [outdir]` alone builds into `dist/`).
 *
 * Why not run the TypeScript through tsx as before: tsx compiles each of about 1,100 modules through a loader
 * thread at every start (2-3 s of a process start's CPU, per worker, against about 0.9 s for the bundle: docs/performance.md,
 * 2026-11-28), and compiles with esbuild's keepNames, which names every named closure as it is created (a
 * defineProperty each time: see the note in actors/chat/users/user.ts). The bundle holds our code only; packages
 * stay in node_modules (`packages: "external"`), so the output must sit inside the checkout for their imports to
 * resolve, as `dist/` does.
 *
 * Modules that find files beside themselves (`import.meta.url`: the pages' sources, the lease renewer's thread,
 * data files read with createRequire) still find them at their sources: in every module but the entry,
 * `import.meta.url` is rewritten to the source file's address, relative to the bundle. The entry keeps its own,
 * which is how gateway/main.ts tells that it is the program being run.
 */
import path from "node:path";
import fs from "node:fs/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import * as esbuild from "esbuild";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/**
 * What is built: the server (`main.mjs`), the management CLI (`manage.mjs`), and the lease renewer's thread
 * (`lease-renewer-thread.mjs`), which a built server starts without compiling it (runtime/lease-keeper.ts).
 */
const ENTRIES = { main: "gateway/main.ts", manage: "gateway/manage.ts", "lease-renewer-thread": "runtime/lease-renewer-thread.ts" };

/**
 * Build the entries of the checkout at `root` (default: this one) into `outdir` (default `<root>/dist`, which must
 * be inside `root`). Resolves with the paths of the built files.
 */
export async function buildServer(opts: { root?: string; outdir?: string } = {}): Promise<{ main: string; manage: string; "lease-renewer-thread": string }> {
  const root = path.resolve(opts.root ?? ROOT);
  const outdir = path.resolve(opts.outdir ?? path.join(root, "dist"));
  if (path.relative(root, outdir).startsWith("..")) throw new Error(`${outdir} is outside ${root}: the bundle's packages would not resolve`);
  const built = await Promise.all(
    Object.entries(ENTRIES).map(async ([name, entry]) => {
      const outfile = path.join(outdir, `${name}.mjs`);
      const result = await esbuild.build({
        entryPoints: [path.join(root, entry)],
        outfile,
        bundle: true,
        platform: "node",
        format: "esm",
        target: "node20",
        packages: "external",
        sourcemap: "linked",
        logLevel: "warning",
        plugins: [sourceAddresses(path.join(root, entry), outdir)],
        // The built renewer thread's address, as the lease keeper's module sees it (its import.meta.url is its source's).
        define: { CHORUS_BUILT_RENEWER_THREAD: JSON.stringify(path.relative(path.join(root, "runtime"), path.join(outdir, "lease-renewer-thread.mjs")).split(path.sep).join("/")) },
        write: false,
      });
      // Each file replaced whole (written beside, then renamed over): a server started meanwhile (a worker forked
      // while `npm run manage` builds) reads the old build or the new one, never half a file.
      await fs.mkdir(outdir, { recursive: true });
      for (const file of result.outputFiles) {
        const partial = `${file.path}.${process.pid}.partial`;
        await fs.writeFile(partial, file.contents);
        await fs.rename(partial, file.path);
      }
      return [name, outfile] as const;
    }),
  );
  return Object.fromEntries(built) as { main: string; manage: string; "lease-renewer-thread": string };
}

/** The esbuild plugin that gives modules other than `entry` their source's `import.meta.url` (see above). */
function sourceAddresses(entry: string, outdir: string): esbuild.Plugin {
  return {
    name: "source-addresses",
    setup(build) {
      build.onLoad({ filter: /\.ts$/ }, async (args) => {
        const source = await fs.readFile(args.path, "utf8");
        if (args.path === entry || args.path.includes(`${path.sep}node_modules${path.sep}`) || !source.includes("import.meta.url")) {
          return { contents: source, loader: "ts" };
        }
        const relative = path.relative(outdir, args.path).split(path.sep).join("/");
        const address = `new URL(${JSON.stringify(relative)}, import.meta.url).href`;
        return { contents: source.replaceAll("import.meta.url", address), loader: "ts" };
      });
    },
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const outdir = process.argv[2];
  buildServer({ outdir }).catch((err: unknown) => {
    process.stderr.write(`chorus: the build failed: ${(err as Error)?.message ?? String(err)}\n`);
    process.exit(1);
  });
}
