import { randomBytes, randomUUID } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { sql } from "kysely";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { ConnectorSecretService } from "../../../../src/platform/admin/connector-secrets/service.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../../support/databases.js";
import { clusterDirectoryOf } from "./support.js";

beforeAll(() => reportSkippedPostgres());

/** Every spelling of `value` that would give it away: its bytes in UTF-8 and UTF-16, base64, base64url and hex. */
function encodingsOf(value: string): Buffer[] {
  const bytes = Buffer.from(value, "utf8");
  return [
    bytes,
    Buffer.from(value, "utf16le"),
    Buffer.from(bytes.toString("base64")),
    Buffer.from(bytes.toString("base64url")),
    Buffer.from(bytes.toString("hex")),
  ];
}

/** Every file under `root`, recursively. */
function filesUnder(root: string): string[] {
  return readdirSync(root).flatMap((name) => {
    const path = join(root, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/** The files under `root` holding some spelling of one of `values`, with the value found. */
function filesRevealing(root: string, values: readonly string[]): string[] {
  const found: string[] = [];
  for (const file of filesUnder(root)) {
    const content = readFileSync(file);
    for (const value of values) {
      if (encodingsOf(value).some((encoding) => content.includes(encoding))) found.push(`${file}: ${value}`);
    }
  }
  return found;
}

/** Every row of every table of the database, as JSON text, keyed by table. */
async function everyRow(store: Store): Promise<Record<string, string>> {
  const tables =
    store.kind === "sqlite"
      ? await sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'`.execute(store.database)
      : await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables
          WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`.execute(store.database);
  const rows: Record<string, string> = {};
  for (const { name } of tables.rows) {
    const result = await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(name)}`.execute(store.database);
    rows[name] = JSON.stringify(result.rows, (_, value: unknown) =>
      Buffer.isBuffer(value) ? value.toString("latin1") : typeof value === "bigint" ? String(value) : value,
    );
  }
  return rows;
}

describe.each(databaseKinds)("connector secrets at rest (%s)", (kind) => {
  let testDatabase: TestDatabase;
  let store: Store | undefined;

  afterEach(async () => {
    await store?.close();
    store = undefined;
    await testDatabase.drop();
  });

  it("leaves no plain value in any file of the data directory or any row of any table", async () => {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    const organizationId = randomUUID();
    const clusterId = randomUUID();
    await store.database
      .insertInto("organizations")
      .values({ id: organizationId, name: "o", created_at: new Date(0).toISOString() })
      .execute();
    const service = new ConnectorSecretService({
      database: store.database,
      secrets: store.secrets,
      clusters: clusterDirectoryOf({ [clusterId]: organizationId }),
    });
    const canary = () => `canary-${randomBytes(12).toString("hex")}`;
    const kept = [canary(), canary(), `${canary()} with ünïcode`, `${canary()}\n${"long ".repeat(2_000)}`];
    const replaced = canary();
    const deleted = canary();
    for (const [index, value] of kept.entries())
      await service.create(organizationId, clusterId, `KEPT_${index}`, value);
    await service.create(organizationId, clusterId, "REPLACED", replaced);
    await service.update(organizationId, clusterId, "REPLACED", kept[0] as string);
    await service.create(organizationId, clusterId, "DELETED", deleted);
    await service.remove(organizationId, clusterId, "DELETED");
    const everyValue = [...kept, replaced, deleted];
    // The values are really there: the service reads them back.
    expect(Object.values(await service.list(organizationId, clusterId))).toContain(kept[2]);

    // With the store open, SQLite's write-ahead log still holds the latest pages.
    expect(filesRevealing(testDatabase.dataDirectory, everyValue)).toEqual([]);
    const rows = await everyRow(store);
    expect(Object.keys(rows)).toContain("connector_secrets");
    expect(rows.connector_secrets).toContain("sealed:v1:");
    for (const [table, text] of Object.entries(rows)) {
      for (const value of everyValue) {
        for (const encoding of encodingsOf(value)) expect(`${table}: ${text}`).not.toContain(encoding.toString());
      }
    }
    await store.close();
    store = undefined;
    expect(filesUnder(testDatabase.dataDirectory).length).toBeGreaterThan(0);
    expect(filesRevealing(testDatabase.dataDirectory, everyValue)).toEqual([]);
  });
});
