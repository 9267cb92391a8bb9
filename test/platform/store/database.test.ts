import { afterEach, describe, expect, it } from "vitest";
import { describeDatabase, openStore, type Store } from "../../../src/platform/store/database.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";

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
