import SqliteDatabase from "better-sqlite3";
import { sql } from "kysely";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import {
  DatabaseUnavailableError,
  databaseUnavailable,
  databaseUnavailableReason,
  logBackgroundFailure,
} from "../../../src/platform/store/unavailable.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";
import { callWithToken } from "../../support/http.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { startTcpProxy, type TcpProxy } from "../../support/tcp-proxy.js";
import { requestToken } from "../../support/tokens.js";

reportSkippedPostgres();

/** Things a test opened, closed after it whatever happened. */
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Asks for a token the way a client application does; answers the status, the body and `Retry-After`. */
async function tokenRequest(platform: TestPlatform) {
  const response = await fetch(`${platform.url}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "client_credentials",
      audience: "admin-api",
      client_id: platform.adminClient.clientId,
      client_secret: platform.adminClient.clientSecret,
    }),
  });
  return { status: response.status, body: await response.json(), retryAfter: response.headers.get("retry-after") };
}

describe("which driver errors say the database cannot serve now", () => {
  it("names a reason for locks, shutdowns, lost connections and timeouts, and none for anything else", () => {
    const coded = (code: string, message = "driver error") => Object.assign(new Error(message), { code });
    expect(databaseUnavailableReason(coded("SQLITE_BUSY"))).toMatch(/locked/);
    expect(databaseUnavailableReason(coded("SQLITE_BUSY_SNAPSHOT"))).toMatch(/locked/);
    expect(databaseUnavailableReason(coded("SQLITE_FULL"))).toMatch(/disk .* full/);
    expect(databaseUnavailableReason(coded("57P01"))).toMatch(/shutting down/);
    expect(databaseUnavailableReason(coded("08006"))).toMatch(/connection/);
    expect(databaseUnavailableReason(coded("53300"))).toMatch(/out of connections/);
    expect(databaseUnavailableReason(coded("57014"))).toMatch(/statement timeout/);
    expect(databaseUnavailableReason(coded("ECONNREFUSED"))).toMatch(/cannot be reached/);
    expect(databaseUnavailableReason(new Error("Connection terminated unexpectedly"))).not.toBeNull();
    expect(databaseUnavailableReason(new Error("Query read timeout"))).not.toBeNull();
    // A request's own mistakes and the platform's defects stay what they are.
    expect(databaseUnavailableReason(coded("SQLITE_CONSTRAINT_UNIQUE"))).toBeNull();
    expect(databaseUnavailableReason(coded("23505"))).toBeNull();
    expect(databaseUnavailableReason(coded("42P01"))).toBeNull();
    expect(databaseUnavailableReason(new TypeError("x is undefined"))).toBeNull();
    expect(databaseUnavailableReason("SQLITE_BUSY")).toBeNull();
  });

  it("turns only the store's classified errors into a 503 with Retry-After", () => {
    const lost = new DatabaseUnavailableError("the database cannot be reached", { cause: new Error("ECONNREFUSED") });
    expect(databaseUnavailable(lost)).toMatchObject({ status: 503, headers: { "retry-after": "5" } });
    // The same code from another dependency is not the database's.
    expect(databaseUnavailable(Object.assign(new Error("connect failed"), { code: "ECONNREFUSED" }))).toBeNull();
  });
});

describe("background work that meets a database that cannot serve", () => {
  it("logs one warning with the reason, and any other failure as an error with its stack", () => {
    const lines: { level: number; reason?: string; err?: { stack?: string } }[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const away = new DatabaseUnavailableError("the database cannot be reached", { cause: new Error("refused") });
    logBackgroundFailure(logger, away, { clusterId: "c" }, "could not poll a cluster's health");
    logBackgroundFailure(logger, new TypeError("a defect"), {}, "could not poll a cluster's health");
    expect(lines).toEqual([
      expect.objectContaining({ level: 40, reason: "the database cannot be reached", clusterId: "c" }),
      expect.objectContaining({
        level: 50,
        err: expect.objectContaining({ stack: expect.stringMatching(/a defect/) }),
      }),
    ]);
    expect(lines[0]).not.toHaveProperty("err");
  });
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
      tokenRequest(platform),
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

describe.runIf(databaseKinds.includes("postgres"))("a PostgreSQL server that goes away", () => {
  /** A fresh database reached through a proxy the test can cut, and the URL naming the proxy. */
  async function proxiedDatabase(): Promise<{ database: TestDatabase; proxy: TcpProxy; url: string }> {
    const database = await createTestDatabase("postgres");
    cleanups.push(() => database.drop());
    const direct = new URL(database.url);
    const proxy = await startTcpProxy(direct.hostname, Number(direct.port));
    cleanups.push(() => proxy.close());
    const url = new URL(database.url);
    url.port = String(proxy.port);
    return { database, proxy, url: url.toString() };
  }

  async function openProxiedStore(
    url: string,
    dataDirectory: string,
    options: { statementTimeoutMs?: number; idleErrors?: Error[] } = {},
  ): Promise<Store> {
    const store = await openStore({
      url,
      dataDirectory,
      ...(options.statementTimeoutMs === undefined ? {} : { postgresStatementTimeoutMs: options.statementTimeoutMs }),
      onIdleConnectionError: (error) => options.idleErrors?.push(error),
    });
    cleanups.push(() => store.close());
    return store;
  }

  it("closing idle connections does not end the process, and the next query connects again", async () => {
    const { database, proxy, url } = await proxiedDatabase();
    const idleErrors: Error[] = [];
    const store = await openProxiedStore(url, database.dataDirectory, { idleErrors });
    await sql`SELECT 1`.execute(store.database);

    // Without a listener for the pool's errors, this is an uncaught error that ends the process (and fails the run).
    await proxy.cut();
    await expect.poll(() => idleErrors.length).toBeGreaterThan(0);
    await expect(sql`SELECT 1`.execute(store.database)).rejects.toBeInstanceOf(DatabaseUnavailableError);

    await proxy.restore();
    expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(store.database)).rows).toEqual([{ one: 1 }]);
  });

  it("a server that stops answering fails a statement within the statement timeout, not never", async () => {
    const { database, proxy, url } = await proxiedDatabase();
    const store = await openProxiedStore(url, database.dataDirectory, { statementTimeoutMs: 500 });
    await sql`SELECT 1`.execute(store.database);
    proxy.freeze();
    const startedMs = Date.now();
    const error = await sql`SELECT 1`.execute(store.database).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    // The client waits the statement timeout and its margin, then gives up: well under the 30 s default.
    expect(Date.now() - startedMs).toBeGreaterThanOrEqual(2_000);
    expect(Date.now() - startedMs).toBeLessThan(10_000);
    proxy.thaw();
    expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(store.database)).rows).toEqual([{ one: 1 }]);
  });

  it("a connection that went silent is closed after its timeout, so the next query does not wait on it", async () => {
    const { database, proxy, url } = await proxiedDatabase();
    const store = await openProxiedStore(url, database.dataDirectory, { statementTimeoutMs: 500 });
    await sql`SELECT 1`.execute(store.database);
    proxy.silenceExisting();
    await expect(sql`SELECT 1`.execute(store.database)).rejects.toBeInstanceOf(DatabaseUnavailableError);
    // The pooled connection would answer nothing ever again; a new one is opened instead of waiting on it again.
    const startedMs = Date.now();
    expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(store.database)).rows).toEqual([{ one: 1 }]);
    expect(Date.now() - startedMs).toBeLessThan(2_000);
  });

  it("requests are answered 503 while it is away, and served again once it is back, without a restart", async () => {
    const { proxy, url } = await proxiedDatabase();
    const platform = await startTestPlatform({ "service.database.url": url });
    cleanups.push(() => platform.close());
    const token = await requestToken(platform, platform.adminClient, "admin-api");

    await proxy.cut();
    const [members, issued, health] = await Promise.all([
      callWithToken(platform.url, token, "GET", "/admin/members"),
      tokenRequest(platform),
      fetch(`${platform.url}/health`),
    ]);
    expect(members.status).toBe(503);
    expect(members.headers.get("retry-after")).toBe("5");
    expect(await members.json()).toMatchObject({ detail: expect.stringMatching(/database cannot serve/) });
    expect(issued).toMatchObject({ status: 503, body: { error: "temporarily_unavailable" }, retryAfter: "5" });
    expect(health.status).toBe(503);

    await proxy.restore();
    expect((await callWithToken(platform.url, token, "GET", "/admin/members")).status).toBe(200);
    expect((await tokenRequest(platform)).status).toBe(200);
  });
});
