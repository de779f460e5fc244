/**
 * Migrated stores to start test servers from, made once per run by the global setup: a PGlite data directory and a
 * Postgres template database, each with every migration applied and nothing else (each server still creates its own
 * organization). A fresh PGlite directory costs its initdb and the migrations, a fresh database the migrations:
 * together most of a test server's start (docs/testing.md). A server's store is a copy of its engine's template:
 * a cold copy of a closed PGlite directory, or CREATE DATABASE … TEMPLATE. Without them (a file run outside the
 * global setup), stores start empty and migrate, as they did before.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { pgliteDirectory } from "../../runtime/store/db.ts";

/** Where the global setup says the templates are (forks inherit its environment). */
const PGLITE_TEMPLATE_ENV = "CHORUS_TEST_PGLITE_TEMPLATE";
const PG_TEMPLATE_ENV = "CHORUS_TEST_PG_TEMPLATE";

/**
 * Makes both templates and says where they are in the environment; the answer removes them. `database` makes an
 * empty database. The migrations run in a child process (this file, run as a script): the global setup's module
 * runner cannot load PGlite's kysely dialect (no `import.meta.resolve`).
 */
export async function makeStoreTemplates(database: () => Promise<{ url: string; name: string; drop(): Promise<void> }>): Promise<() => Promise<void>> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chorus-template-"));
  const db = await database();
  const remove = async () => {
    await db.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
    await promisify(execFile)(process.execPath, ["--import", "tsx", fileURLToPath(import.meta.url), dir, db.url], { cwd: root });
  } catch (err) {
    await remove();
    throw new Error(`making the migrated store templates failed: ${(err as { stderr?: string }).stderr || (err as Error).message}`);
  }
  process.env[PGLITE_TEMPLATE_ENV] = pgliteDirectory(dir);
  process.env[PG_TEMPLATE_ENV] = db.name;
  return remove;
}

/** As a script: migrate a PGlite store under argv[2] and the Postgres database at argv[3]. */
async function migrateTemplates(dataDir: string, databaseUrl: string): Promise<void> {
  const [{ openDatabase }, { SqlStore }, { migrations }] = await Promise.all([
    import("../../runtime/store/db.ts"),
    import("../../runtime/store/sql-store.ts"),
    import("../../actors/migrations/index.ts"),
  ]);
  await Promise.all(
    [{ dataDir }, { dataDir, databaseUrl }].map(async (opts) => {
      const store = new SqlStore(await openDatabase(opts));
      try {
        await store.migrate(migrations);
      } finally {
        await store.close();
      }
    }),
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  await migrateTemplates(process.argv[2]!, process.argv[3]!);
}

/** Fills `dataDir` with a copy of the migrated PGlite directory, if the run has one. */
export function copyPgliteTemplate(dataDir: string): void {
  const template = process.env[PGLITE_TEMPLATE_ENV];
  if (template && fs.existsSync(template)) fs.cpSync(template, pgliteDirectory(dataDir), { recursive: true });
}

/** The migrated template database's name, if the run has one. */
export function postgresTemplate(): string | undefined {
  return process.env[PG_TEMPLATE_ENV] || undefined;
}
