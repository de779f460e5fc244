import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // uWS is a native add-on: separate processes, not worker threads.
    pool: "forks",
    // Two files at a time: most of a file's time is waiting on servers, Postgres and Redis, so two forks on this
    // 2-core machine take the suite from about 10.5 to 7.5 minutes (each file has its own database and key prefix).
    maxWorkers: 2,
    // A fork runs its files one after another in one process instead of a fresh process per file (2-4 s each, about
    // 120 files): the files share that process's module state, so a file leaves no singleton or setting behind.
    isolate: false,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ["test/support/global-setup.ts"],
    setupFiles: ["test/support/fork-setup.ts"],
  },
});
