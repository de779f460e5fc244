import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // uWS is a native add-on: separate processes, not worker threads.
    pool: "forks",
    // Two files at a time: most of a file's time is waiting on servers, Postgres and Redis, so two forks on this
    // 2-core machine take the suite from about 10.5 to 7.5 minutes (each file has its own database and key prefix).
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    globalSetup: ["test/support/global-setup.ts"],
  },
});
