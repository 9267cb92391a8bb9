import SqliteDatabase from "better-sqlite3";
import { Kysely, SqliteDialect, sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { classifyingDialect } from "../../../src/platform/store/classifying-dialect.js";
import { callWithToken } from "../../support/http.js";
import { startTestPlatform } from "../../support/platform.js";
import { requestToken, tokenEndpointAnswer } from "../../support/tokens.js";

/** Things a test opened, closed after it whatever happened. */
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("a SQLite database locked by another process", () => {
  it("is waited for 5 s without holding up the process, then answered 503 on the API and the token endpoint", async () => {
    const platform = await startTestPlatform();
    cleanups.push(() => platform.close());
    const token = await requestToken(platform, platform.adminClient, "admin-api");
    const locker = new SqliteDatabase(`${platform.dataDirectory}/platform.sqlite`);
    locker.exec("BEGIN EXCLUSIVE");
    cleanups.push(async () => {
      if (locker.inTransaction) locker.exec("ROLLBACK");
      locker.close();
    });

    // The platform runs in this process: the longest pause of its event loop shows whether a waiting write blocks it.
    let longestPauseMs = 0;
    let lastTickMs = Date.now();
    const ticks = setInterval(() => {
      longestPauseMs = Math.max(longestPauseMs, Date.now() - lastTickMs);
      lastTickMs = Date.now();
    }, 10);
    const [invite, issued] = await Promise.all([
      callWithToken(platform.url, token, "POST", "/admin/members/locked@example.com", { orgRoles: ["developer"] }),
      tokenEndpointAnswer(platform),
    ]).finally(() => clearInterval(ticks));
    // The writes waited for the lock on timers, not in SQLite's busy handler, which held the thread (and every other
    // request of the process) for its whole 5 s wait.
    expect(longestPauseMs).toBeLessThan(1_000);
    const health = await fetch(`${platform.url}/health`);
    expect(invite.status).toBe(503);
    expect(invite.headers.get("retry-after")).toBe("5");
    expect(await invite.json()).toMatchObject({
      status: 503,
      detail: expect.stringMatching(/locked by another writer/),
    });
    expect(issued).toMatchObject({ status: 503, body: { error: "temporarily_unavailable" }, retryAfter: "5" });
    // The write-ahead log lets reads go on beside the writer holding the lock.
    expect(health.status).toBe(200);

    locker.exec("ROLLBACK");
    const retried = await callWithToken(platform.url, token, "POST", "/admin/members/locked@example.com", {
      orgRoles: ["developer"],
    });
    expect(retried.status).toBe(204);
  });
});

describe("a transaction SQLite ended by itself", () => {
  it("fails with the error that ended it, not with the rollback that found nothing to roll back", async () => {
    const database = new Kysely<{ items: { name: string } }>({
      dialect: classifyingDialect(new SqliteDialect({ database: new SqliteDatabase(":memory:") }), {
        retryWhileLockedMs: 0,
      }),
    });
    try {
      await sql`CREATE TABLE items (name TEXT)`.execute(database);
      // A trigger's RAISE(ROLLBACK) ends the whole transaction, as a full disk or an I/O error does.
      await sql`CREATE TRIGGER refuse BEFORE INSERT ON items BEGIN SELECT RAISE(ROLLBACK, 'refused by the trigger'); END`.execute(
        database,
      );
      const failure = database
        .transaction()
        .execute((transaction) => transaction.insertInto("items").values({ name: "one" }).execute());
      await expect(failure).rejects.toThrow("refused by the trigger");
    } finally {
      await database.destroy();
    }
  });
});
