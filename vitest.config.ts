import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One throwaway PostgreSQL server for the whole run, when PostgreSQL is installed.
    globalSetup: ["test/support/global-setup.ts"],
    // Integration tests start real servers and databases; give them room on a 2-core machine.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    reporters: ["default"],
    coverage: { provider: "v8", include: ["src/**"] },
  },
});
