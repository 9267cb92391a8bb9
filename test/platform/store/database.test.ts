import { chmodSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import SqliteDatabase from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { AddressRateLimiter, TokenRateLimiter } from "../../../src/platform/issuer/rate-limit.js";
import { describeDatabase, openStore, type Store, sqliteDialect } from "../../../src/platform/store/database.js";
import { migrationProvider } from "../../../src/platform/store/migrations/index.js";
import { createPostgresPool } from "../../../src/platform/store/postgres-pool.js";
import type { PlatformDatabase } from "../../../src/platform/store/schema.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";
import { entriesOpenToOthers, modeOf } from "../../support/file-modes.js";

reportSkippedPostgres();

describe("describeDatabase", () => {
  it("defaults to a SQLite file in the data directory", () => {
    expect(describeDatabase({ url: "", dataDirectory: "/var/lib/flowplane" })).toEqual({
      kind: "sqlite",
      location: "/var/lib/flowplane/platform.sqlite",
    });
  });

  it("selects PostgreSQL for postgres:// URLs without exposing the password", () => {
    const described = describeDatabase({
      url: "postgres://user:secret@db.internal:6543/flowplane",
      dataDirectory: ".",
    });
    expect(described).toEqual({ kind: "postgres", location: "db.internal:6543/flowplane" });
  });
});

describe.each(databaseKinds)("store on %s", (kind) => {
  let testDatabase: TestDatabase;
  const opened: Store[] = [];

  async function open(): Promise<Store> {
    const store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    opened.push(store);
    return store;
  }

  afterEach(async () => {
    for (const store of opened.splice(0)) await store.close();
    await testDatabase?.drop();
  });

  it("migrates an empty database and reopens it without migrating twice", async () => {
    testDatabase = await createTestDatabase(kind);
    const first = await open();
    expect(first.kind).toBe(kind);
    await first.database.insertInto("settings").values({ name: "probe", value: "kept" }).execute();
    await first.close();
    opened.pop();
    const second = await open();
    const row = await second.database.selectFrom("settings").selectAll().where("name", "=", "probe").executeTakeFirst();
    expect(row).toEqual({ name: "probe", value: "kept" });
  });

  it("refuses a database a newer version migrated, saying so, and changes nothing", async () => {
    testDatabase = await createTestDatabase(kind);
    const first = await open();
    await sql`INSERT INTO kysely_migration (name, timestamp) VALUES ('999-from-a-newer-version', '2027-01-01')`.execute(
      first.database,
    );
    await first.close();
    opened.pop();
    await expect(open()).rejects.toThrow(
      "the database was upgraded by a newer flowplane (it applied migration 999-from-a-newer-version",
    );
  });

  it("returns the same JavaScript types from both engines (parity)", async () => {
    testDatabase = await createTestDatabase(kind);
    const store = await open();
    await store.database
      .insertInto("rate_limits")
      .values({ address: "192.0.2.1", tokens: 2.5, updated_at_ms: 1_763_700_000_123, blocked_until_ms: 0 })
      .execute();
    const row = await store.database.selectFrom("rate_limits").selectAll().executeTakeFirstOrThrow();
    expect(row).toEqual({ address: "192.0.2.1", tokens: 2.5, updated_at_ms: 1_763_700_000_123, blocked_until_ms: 0 });
    expect(typeof row.updated_at_ms).toBe("number");
  });

  it("lets two handles share one database, as two platform replicas do", async () => {
    testDatabase = await createTestDatabase(kind);
    const first = await open();
    const second = await open();
    await first.database.insertInto("settings").values({ name: "shared", value: "yes" }).execute();
    const seen = await second.database
      .selectFrom("settings")
      .select("value")
      .where("name", "=", "shared")
      .executeTakeFirst();
    expect(seen?.value).toBe("yes");
  });
});

describe("store files on SQLite", () => {
  const roots: string[] = [];
  const root = (): string => {
    const directory = mkdtempSync(join(tmpdir(), "flowplane-store-files-"));
    roots.push(directory);
    return directory;
  };
  afterEach(() => {
    for (const directory of roots.splice(0)) rmSync(directory, { recursive: true, force: true });
  });

  it("creates the data directory 0700 and the database, its log and its shared memory 0600", async () => {
    const dataDirectory = join(root(), "data");
    const store = await openStore({ url: "", dataDirectory });
    try {
      // A write makes SQLite create the write-ahead log and the shared-memory file.
      await store.database.insertInto("settings").values({ name: "probe", value: "1" }).execute();
      expect(modeOf(dataDirectory)).toBe(0o700);
      for (const name of ["platform.sqlite", "platform.sqlite-wal", "platform.sqlite-shm"]) {
        expect(modeOf(join(dataDirectory, name)), name).toBe(0o600);
      }
      expect(entriesOpenToOthers(dataDirectory)).toEqual({});
    } finally {
      await store.close();
    }
  });

  it("narrows a database file an earlier version left world-readable", async () => {
    const dataDirectory = root();
    const first = await openStore({ url: "", dataDirectory });
    await first.close();
    for (const name of readdirSync(dataDirectory).filter((entry) => entry.startsWith("platform.sqlite"))) {
      chmodSync(join(dataDirectory, name), 0o644);
    }
    const second = await openStore({ url: "", dataDirectory });
    try {
      expect(modeOf(join(dataDirectory, "platform.sqlite"))).toBe(0o600);
    } finally {
      await second.close();
    }
  });
});

describe.each(databaseKinds)("migration 040 on %s", (kind) => {
  it("moves the diff-link buckets to the '|' separator, keeping their blocks, and leaves no row no limiter prunes", async () => {
    const testDatabase = await createTestDatabase(kind);
    const database = new Kysely<PlatformDatabase>({
      dialect:
        kind === "sqlite"
          ? sqliteDialect(new SqliteDatabase(join(testDatabase.dataDirectory, "platform.sqlite")))
          : new PostgresDialect({
              pool: createPostgresPool({
                url: testDatabase.url,
                size: 2,
                statementTimeoutMs: 10_000,
                onIdleConnectionError: () => {},
              }),
            }),
    });
    try {
      const migrator = new Migrator({ db: database, provider: migrationProvider });
      expect((await migrator.migrateTo("039-backup-schedule-ended-runs")).error).toBeUndefined();
      const nowMs = Date.UTC(2030, 0, 1);
      const blockedUntilMs = nowMs + 30_000;
      const bucket = (address: string, blocked = 0) => ({
        address,
        tokens: 0,
        updated_at_ms: nowMs,
        blocked_until_ms: blocked,
      });
      await database
        .insertInto("rate_limits")
        .values([
          bucket("198.51.100.40"),
          bucket("2001:db8:40:1::/64"),
          bucket("diff-link/198.51.100.40"),
          bucket("diff-link/2001:db8:40:1::/64", blockedUntilMs),
          // What the token endpoint stored for a proxy's X-Forwarded-For entry that was no address.
          bucket("forwarded|garbage"),
        ])
        .execute();
      expect((await migrator.migrateToLatest()).error).toBeUndefined();
      const rows = async () =>
        (await database.selectFrom("rate_limits").select(["address", "blocked_until_ms"]).execute())
          .map((row) => `${row.address} ${Number(row.blocked_until_ms)}`)
          .sort();
      expect(await rows()).toEqual([
        "198.51.100.40 0",
        "2001:db8:40:1::/64 0",
        "diff-link|198.51.100.40 0",
        `diff-link|2001:db8:40:1::/64 ${blockedUntilMs}`,
      ]);

      let clockMs = nowMs;
      const settings = { burst: 5, refillPerSecond: 1, blockSeconds: 60 };
      const diffLinks = new AddressRateLimiter({ database, settings, clock: () => clockMs, scope: "diff-link" });
      // The block still holds after the upgrade.
      expect((await diffLinks.consume("2001:db8:40:1::9")).allowed).toBe(false);
      clockMs += 24 * 3_600_000;
      const tokens = new TokenRateLimiter({
        database,
        settings: { ...settings, failureDelayBaseMs: 0, failureDelayMaxMs: 0 },
        clock: () => clockMs,
      });
      await tokens.prune();
      await diffLinks.prune();
      expect(await rows()).toEqual([]);
    } finally {
      await database.destroy();
      await testDatabase.drop();
    }
  });
});

describe("SQLite migrations", () => {
  it("039 counts the runs claimed before it as ended, so none of them runs again after the upgrade", async () => {
    const database = new Kysely<Record<string, never>>({ dialect: sqliteDialect(new SqliteDatabase(":memory:")) });
    try {
      const migrator = new Migrator({ db: database, provider: migrationProvider });
      expect((await migrator.migrateTo("038-backup-schedule-retries")).error).toBeUndefined();
      await sql`INSERT INTO cluster_backup_schedules (cluster_id, organization_id, cron, keep_count, updated_at, last_run_at)
        VALUES ('ran', 'o', '0 * * * *', 1, '2026-01-01T00:00:00.000Z', '2026-01-01T01:00:00.000Z'),
               ('never-ran', 'o', '0 * * * *', 1, '2026-01-01T00:00:00.000Z', NULL)`.execute(database);
      expect((await migrator.migrateToLatest()).error).toBeUndefined();
      const rows = await sql<{ cluster_id: string; last_run_at: string | null; ended_run_at: string | null }>`
        SELECT cluster_id, last_run_at, ended_run_at FROM cluster_backup_schedules ORDER BY cluster_id`.execute(
        database,
      );
      expect(rows.rows).toEqual([
        { cluster_id: "never-ran", last_run_at: null, ended_run_at: null },
        { cluster_id: "ran", last_run_at: "2026-01-01T01:00:00.000Z", ended_run_at: "2026-01-01T01:00:00.000Z" },
      ]);
    } finally {
      await database.destroy();
    }
  });

  it("apply whole or not at all: a migration that fails after its first statement leaves nothing behind", async () => {
    const database = new Kysely<Record<string, never>>({ dialect: sqliteDialect(new SqliteDatabase(":memory:")) });
    try {
      const migrator = new Migrator({
        db: database,
        provider: {
          getMigrations: async () => ({
            "001-half": {
              up: async (db: Kysely<unknown>) => {
                await db.schema.createTable("first_table").addColumn("id", "integer").execute();
                throw new Error("the process died here");
              },
            },
          }),
        },
      });
      const { error } = await migrator.migrateToLatest();
      expect(error).toBeInstanceOf(Error);
      const tables = await database.introspection.getTables();
      expect(tables.map((table) => table.name)).not.toContain("first_table");
    } finally {
      await database.destroy();
    }
  });
});
