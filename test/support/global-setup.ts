import type { TestProject } from "vitest/node";
import { buildChildCommand } from "./child-command.js";
import { ensureConsoleBuilt } from "./console-build.js";
import { findPostgresBinaries, type PostgresServer, startPostgresServer } from "./postgres-server.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** URL of the throwaway PostgreSQL server's maintenance database, or null when none could be started. */
    postgresUrl: string | null;
    /** Why PostgreSQL tests are skipped, when they are. */
    postgresSkipReason: string | null;
  }
}

let server: PostgresServer | null = null;

/**
 * Builds the web console when its build is missing or stale, transpiles the sources the run's child processes start
 * from, and starts one PostgreSQL server for the whole run when PostgreSQL is installed; REQUIRE_POSTGRES=1 makes it
 * mandatory.
 */
export async function setup(project: TestProject): Promise<void> {
  await ensureConsoleBuilt();
  await buildChildCommand();
  // In watch mode the setup runs once; each rerun transpiles again, so that children run the sources just changed.
  project.onTestsRerun(() => buildChildCommand());
  const required = process.env.REQUIRE_POSTGRES === "1";
  const binaries = findPostgresBinaries();
  if (binaries === null) {
    if (required) throw new Error("REQUIRE_POSTGRES=1 but no PostgreSQL server is installed under /usr/lib/postgresql");
    const reason = "PostgreSQL is not installed (apt-get install postgresql); PostgreSQL variants are skipped";
    console.warn(`[flowplane tests] ${reason}`);
    project.provide("postgresUrl", null);
    project.provide("postgresSkipReason", reason);
    return;
  }
  try {
    server = await startPostgresServer(binaries);
  } catch (error) {
    if (required) throw error;
    const reason = `PostgreSQL could not be started (${(error as Error).message}); PostgreSQL variants are skipped`;
    console.warn(`[flowplane tests] ${reason}`);
    project.provide("postgresUrl", null);
    project.provide("postgresSkipReason", reason);
    return;
  }
  project.provide("postgresUrl", server.url);
  project.provide("postgresSkipReason", null);
}

/** Stops the PostgreSQL server started by `setup`. */
export async function teardown(): Promise<void> {
  await server?.stop();
}
