import { randomUUID } from "node:crypto";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { installAuthentication } from "../../../../src/auth/authenticate.js";
import { scopeValues } from "../../../../src/auth/scopes.js";
import { loadConfiguration } from "../../../../src/config/load.js";
import { createHttpServer } from "../../../../src/http/server.js";
import { connectorSecretRoutes } from "../../../../src/platform/admin/connector-secrets/routes.js";
import {
  type ClusterDirectory,
  ConnectorSecretService,
} from "../../../../src/platform/admin/connector-secrets/service.js";
import { issuerRoutes } from "../../../../src/platform/issuer/routes.js";
import { createIssuerServices, createPlatformVerifier } from "../../../../src/platform/issuer/services.js";
import { openStore, type Store } from "../../../../src/platform/store/database.js";
import { createTestDatabase } from "../../../support/databases.js";
import { defaultHttpServerLimits } from "../../../support/http.js";
import type { TestClient } from "../../../support/tokens.js";

/** An in-memory cluster directory: `clusters` maps each cluster id to the id of the organization owning it. */
export function clusterDirectoryOf(clusters: Record<string, string>): ClusterDirectory {
  return {
    async find(organizationId, clusterId) {
      return Object.hasOwn(clusters, clusterId) && clusters[clusterId] === organizationId
        ? { id: clusterId }
        : undefined;
    },
  };
}

/** A running token issuer and connector-secret routes over a fresh SQLite database, listening on 127.0.0.1. */
export interface ConnectorSecretsServer {
  url: string;
  store: Store;
  service: ConnectorSecretService;
  organizationId: string;
  otherOrganizationId: string;
  /** A cluster of `organizationId`. */
  clusterId: string;
  /** A cluster of `otherOrganizationId`. */
  foreignClusterId: string;
  /** A client of `organizationId` holding every scope. */
  adminClient: TestClient;
  /** Creates a client of `owner` (by default `organizationId`) with exactly `scopes`. */
  createClient(scopes: readonly string[], owner?: string): Promise<TestClient>;
  /** Every line the server logged, at every level. */
  logLines: string[];
  dataDirectory: string;
  close(): Promise<void>;
}

/**
 * Starts the issuer and the Administration API's connector-secret routes (under `/admin`) with an in-memory
 * cluster directory, as the platform assembles them; the server logs at trace level into `logLines`.
 */
export async function startConnectorSecretsServer(): Promise<ConnectorSecretsServer> {
  const testDatabase = await createTestDatabase("sqlite");
  const store = await openStore({ url: testDatabase.url, dataDirectory: testDatabase.dataDirectory });
  const organizationId = randomUUID();
  const otherOrganizationId = randomUUID();
  const clusterId = randomUUID();
  const foreignClusterId = randomUUID();
  const timestamp = new Date(0).toISOString();
  await store.database
    .insertInto("organizations")
    .values([
      { id: organizationId, name: "one", created_at: timestamp },
      { id: otherOrganizationId, name: "two", created_at: timestamp },
    ])
    .execute();
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.platform.publicUrl": "https://issuer.test",
      "service.rateLimit.burst": 10_000,
      "service.rateLimit.refillPerSecond": 10_000,
    },
  });
  const issuer = await createIssuerServices({ store, configuration });
  const service = new ConnectorSecretService({
    database: store.database,
    secrets: store.secrets,
    clusters: clusterDirectoryOf({ [clusterId]: organizationId, [foreignClusterId]: otherOrganizationId }),
  });
  const logLines: string[] = [];
  const logger = pino({ level: "trace" }, { write: (line: string) => logLines.push(line) });
  const server = createHttpServer({
    logger,
    bodyLimitBytes: configuration.platform.bodyLimitBytes,
    trustProxy: false,
    limits: defaultHttpServerLimits,
  });
  await server.register(issuerRoutes, issuer);
  await server.register(
    async (context) => {
      installAuthentication(context, { verifier: createPlatformVerifier(issuer, configuration.audiences.admin) });
      connectorSecretRoutes(context, service);
    },
    { prefix: "/admin" },
  );
  await server.listen({ host: "127.0.0.1", port: 0 });
  const { port } = server.server.address() as AddressInfo;
  const createClient = async (scopes: readonly string[], owner = organizationId): Promise<TestClient> => {
    const { client, secret } = await issuer.clients.create({ organizationId: owner, name: "test client", scopes });
    return { clientId: client.clientId, clientSecret: secret };
  };
  return {
    url: `http://127.0.0.1:${port}`,
    store,
    service,
    organizationId,
    otherOrganizationId,
    clusterId,
    foreignClusterId,
    adminClient: await createClient([...scopeValues]),
    createClient,
    logLines,
    dataDirectory: testDatabase.dataDirectory,
    async close() {
      await server.close();
      await store.close();
      await testDatabase.drop();
    },
  };
}
