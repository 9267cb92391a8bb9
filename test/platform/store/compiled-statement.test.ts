import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { CompiledStatement } from "../../../src/platform/store/compiled-statement.js";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";

reportSkippedPostgres();

describe.each(databaseKinds)("compiled statements on %s", (kind) => {
  let testDatabase: TestDatabase | undefined;
  let store: Store | undefined;

  afterEach(async () => {
    await store?.close();
    await testDatabase?.drop();
    store = undefined;
    testDatabase = undefined;
  });

  async function open(): Promise<Store> {
    testDatabase = await createTestDatabase(kind);
    store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
    return store;
  }

  it("runs with fresh slot values each time, a slot used twice taking one value, fixed values kept", async () => {
    const { database } = await open();
    const fixedTokens = 7.5;
    const upsert = new CompiledStatement(
      database,
      (slot) => sql<{ address: string; tokens: number; updated_at_ms: number; blocked_until_ms: number }>`
        INSERT INTO rate_limits (address, tokens, updated_at_ms, blocked_until_ms)
        VALUES (${slot("address")}, CAST(${fixedTokens} AS DOUBLE PRECISION), CAST(${slot("now")} AS BIGINT),
          CAST(${slot("now")} AS BIGINT) + 1)
        ON CONFLICT (address) DO UPDATE SET updated_at_ms = CAST(${slot("now")} AS BIGINT)
        RETURNING address, tokens, updated_at_ms, blocked_until_ms`,
    );
    expect(await upsert.execute({ address: "192.0.2.1", now: 1_000 })).toEqual([
      { address: "192.0.2.1", tokens: fixedTokens, updated_at_ms: 1_000, blocked_until_ms: 1_001 },
    ]);
    expect(await upsert.execute({ address: "192.0.2.2", now: 2_000 })).toEqual([
      { address: "192.0.2.2", tokens: fixedTokens, updated_at_ms: 2_000, blocked_until_ms: 2_001 },
    ]);
    expect(await upsert.execute({ address: "192.0.2.1", now: 3_000 })).toEqual([
      { address: "192.0.2.1", tokens: fixedTokens, updated_at_ms: 3_000, blocked_until_ms: 1_001 },
    ]);
  });

  it("binds slot values as parameters, so text that looks like SQL stays a value", async () => {
    const { database } = await open();
    await database.insertInto("settings").values({ name: "probe", value: "kept" }).execute();
    const find = new CompiledStatement(
      database,
      (slot) => sql<{ value: string }>`SELECT value FROM settings WHERE name = ${slot("name")}`,
    );
    expect(await find.execute({ name: "probe" })).toEqual([{ value: "kept" }]);
    expect(await find.execute({ name: "x' OR '1'='1" })).toEqual([]);
  });

  it("refuses a slot the statement never uses", async () => {
    const { database } = await open();
    expect(
      () =>
        new CompiledStatement(database, (slot) => {
          slot("forgotten");
          return sql<{ one: number }>`SELECT 1 AS one`;
        }),
    ).toThrow(/never uses its slots forgotten/);
  });
});
