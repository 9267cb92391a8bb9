import pino from "pino";
import type { Clock } from "../../../src/auth/clock.js";
import { loadConfiguration } from "../../../src/config/load.js";
import type { Configuration } from "../../../src/config/schema.js";
import { createHttpServer, type HttpServer } from "../../../src/http/server.js";
import { issuerRoutes } from "../../../src/platform/issuer/routes.js";
import { createIssuerServices, type IssuerServices } from "../../../src/platform/issuer/services.js";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import { createTestDatabase, type TestDatabase } from "../../support/databases.js";
import { defaultHttpServerLimits } from "../../support/http.js";

/** A clock the test moves by hand. */
export interface ManualClock {
  readonly now: Clock;
  advance(durationMs: number): void;
}

/** A clock starting at `startMs` that only moves when the test says so. */
export function manualClock(startMs = Date.UTC(2030, 0, 1)): ManualClock {
  let nowMs = startMs;
  return {
    now: () => nowMs,
    advance: (durationMs) => {
      nowMs += durationMs;
    },
  };
}

/** Configuration with defaults and the given `service.*` keys set (as CLI flags would). */
export function testConfiguration(flags: Record<string, string | number | boolean> = {}): Configuration {
  return loadConfiguration({ environment: {}, flags });
}

/** Opens a second store handle on the same database, like another platform replica would. */
export async function openSecondHandle(database: TestDatabase): Promise<Store> {
  return await openStore({ url: database.url, dataDirectory: database.dataDirectory });
}

/** A fresh database of `kind` with one organization; `close` releases every handle and drops the database. */
export async function openTestStore(kind: "sqlite" | "postgres"): Promise<{
  database: TestDatabase;
  store: Store;
  organizationId: string;
  close(): Promise<void>;
}> {
  const database = await createTestDatabase(kind);
  const store = await openStore({ url: database.url, dataDirectory: database.dataDirectory });
  const organizationId = "organization-1";
  await store.database
    .insertInto("organizations")
    .values({ id: organizationId, name: "Test organization", created_at: new Date(0).toISOString() })
    .execute();
  return {
    database,
    store,
    organizationId,
    async close() {
      await store.close();
      await database.drop();
    },
  };
}

/** A running token issuer over a fresh database, with a manual clock and every service exposed. */
export interface IssuerFixture {
  server: HttpServer;
  services: IssuerServices;
  store: Store;
  database: TestDatabase;
  clock: ManualClock;
  configuration: Configuration;
  organizationId: string;
  close(): Promise<void>;
}

/** Starts the issuer routes on an in-process server (requests go through `server.inject`). */
export async function startIssuer(
  kind: "sqlite" | "postgres",
  flags: Record<string, string | number | boolean> = {},
  /** Registers more routes (e.g. guarded ones) before the server is made ready. */
  beforeReady?: (server: HttpServer, services: IssuerServices, clock: ManualClock) => Promise<void>,
): Promise<IssuerFixture> {
  const opened = await openTestStore(kind);
  const clock = manualClock();
  const configuration = testConfiguration({ "service.platform.publicUrl": "https://issuer.test", ...flags });
  const services = await createIssuerServices({ store: opened.store, configuration, clock: clock.now });
  const server = createHttpServer({
    logger: pino({ level: "silent" }),
    bodyLimitBytes: 1024 * 1024,
    trustProxy: configuration.platform.trustProxy,
    limits: defaultHttpServerLimits,
  });
  await server.register(issuerRoutes, services);
  await beforeReady?.(server, services, clock);
  await server.ready();
  return {
    server,
    services,
    store: opened.store,
    database: opened.database,
    clock,
    configuration,
    organizationId: opened.organizationId,
    async close() {
      await server.close();
      await opened.close();
    },
  };
}
