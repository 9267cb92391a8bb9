import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import pg from "pg";
import { inject } from "vitest";

/** One database a test can run against, and how to throw it away. */
export interface TestDatabase {
  readonly kind: "sqlite" | "postgres";
  /** Value for `service.database.url`. */
  readonly url: string;
  /** Data directory to pass along with the URL. */
  readonly dataDirectory: string;
  drop(): Promise<void>;
}

/** The database kinds store tests run against: SQLite always, PostgreSQL whenever the run could start one. */
export const databaseKinds: readonly ("sqlite" | "postgres")[] =
  inject("postgresUrl") === null ? ["sqlite"] : ["sqlite", "postgres"];

/** Says, once per file, why PostgreSQL variants are missing. */
export function reportSkippedPostgres(): void {
  const reason = inject("postgresSkipReason");
  if (reason !== null) console.warn(`[flowplane tests] ${reason}`);
}

/** Creates a fresh, empty database of the given kind. */
export async function createTestDatabase(kind: "sqlite" | "postgres"): Promise<TestDatabase> {
  const dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-test-"));
  if (kind === "sqlite") {
    return {
      kind,
      url: "",
      dataDirectory,
      async drop() {
        rmSync(dataDirectory, { recursive: true, force: true });
      },
    };
  }
  const maintenanceUrl = inject("postgresUrl");
  if (maintenanceUrl === null) throw new Error("PostgreSQL is not available in this run");
  const name = `flowplane_${randomUUID().replaceAll("-", "")}`;
  const admin = new pg.Client({ connectionString: maintenanceUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(maintenanceUrl);
  url.pathname = `/${name}`;
  return {
    kind,
    url: url.toString(),
    dataDirectory,
    async drop() {
      const client = new pg.Client({ connectionString: maintenanceUrl });
      await client.connect();
      try {
        // A pool's end() resolves before its sockets have closed; dropping WITH (FORCE) would then kill a closing
        // connection, which surfaces as an unhandled error in whatever test runs next. Wait for them first.
        for (let attempt = 0; attempt < 200; attempt++) {
          const result = await client.query<{ count: string }>(
            "SELECT count(*) AS count FROM pg_stat_activity WHERE datname = $1",
            [name],
          );
          if (Number(result.rows[0]?.count ?? 0) === 0) break;
          await delay(10);
        }
        await client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await client.end();
      }
      rmSync(dataDirectory, { recursive: true, force: true });
    },
  };
}
