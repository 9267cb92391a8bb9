import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import { DatabaseUnavailableError } from "../../../src/platform/store/unavailable.js";
import {
  createTestDatabase,
  databaseKinds,
  reportSkippedPostgres,
  type TestDatabase,
} from "../../support/databases.js";
import { callWithToken } from "../../support/http.js";
import { startTestPlatform } from "../../support/platform.js";
import { startTcpProxy, type TcpProxy } from "../../support/tcp-proxy.js";
import { requestToken, tokenEndpointAnswer } from "../../support/tokens.js";

reportSkippedPostgres();

/** Things a test opened, closed after it whatever happened. */
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
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
      tokenEndpointAnswer(platform),
      fetch(`${platform.url}/health`),
    ]);
    expect(members.status).toBe(503);
    expect(members.headers.get("retry-after")).toBe("5");
    expect(await members.json()).toMatchObject({ detail: expect.stringMatching(/database cannot serve/) });
    expect(issued).toMatchObject({ status: 503, body: { error: "temporarily_unavailable" }, retryAfter: "5" });
    expect(health.status).toBe(503);

    await proxy.restore();
    expect((await callWithToken(platform.url, token, "GET", "/admin/members")).status).toBe(200);
    expect((await tokenEndpointAnswer(platform)).status).toBe(200);
  });
});
