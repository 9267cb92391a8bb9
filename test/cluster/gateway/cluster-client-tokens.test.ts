import { randomUUID } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openAccessPolicy, serializeAccessPolicy } from "../../../src/auth/access-policy.js";
import { systemClock } from "../../../src/auth/clock.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { ClusterClientService } from "../../../src/platform/admin/cluster-clients/service.js";
import { ClientSecretHasher } from "../../../src/platform/issuer/client-secrets.js";
import { ClientService } from "../../../src/platform/issuer/clients.js";
import { openStore, type Store } from "../../../src/platform/store/database.js";
import { createClusterAccessFixture } from "../../platform/admin/cluster-access-support.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken, type TestClient } from "../../support/tokens.js";
import { waitFor } from "../broker/support.js";
import { startFakeCluster } from "./fake-broker.js";

/**
 * The whole way of a cluster API client's token, with real parts on both sides: the platform issues it, the gateway
 * of its cluster accepts it, another cluster's gateway refuses it, and after a DELETE the platform's revocation list
 * reaches the gateway through the access policy file, as the provisioner delivers it (here written by the test).
 */
let platform: TestPlatform;
let fakeCluster: Awaited<ReturnType<typeof startFakeCluster>>;
let directory: string;
let secondStore: Store | undefined;
let adminToken: string;
const access = createClusterAccessFixture();
const gateways = new Map<string, { gateway: RunningGateway; policyFile: string }>();
let clusterA: string;
let clusterB: string;

/** Writes a cluster's access policy file from the platform's store, as the provisioner does on a change. */
async function deliverPolicy(clusterId: string): Promise<void> {
  const entry = gateways.get(clusterId);
  if (entry === undefined || secondStore === undefined) return;
  const clusterClients = new ClusterClientService({
    clients: new ClientService({
      database: secondStore.database,
      hasher: await ClientSecretHasher.open(secondStore.database, secondStore.secrets),
      clock: systemClock,
    }),
    clusters: access.options.clusters,
    onAccessPolicyChanged: async () => undefined,
    gatewayAudience: "gateway-api",
    tokenUrl: `${platform.issuerUrl}/oauth/token`,
    tokenLifetimeSeconds: 86_400,
    clock: systemClock,
    logger: pino({ level: "silent" }),
  });
  const policy = {
    ...openAccessPolicy(clusterId, platform.organizationId),
    revokedClients: await clusterClients.revokedClients(platform.organizationId, clusterId),
  };
  await writeFile(`${entry.policyFile}.next`, serializeAccessPolicy(policy), { mode: 0o600 });
  await rename(`${entry.policyFile}.next`, entry.policyFile);
}

async function startClusterGateway(clusterId: string): Promise<RunningGateway> {
  const policyFile = join(directory, `${clusterId}.json`);
  await writeFile(policyFile, serializeAccessPolicy(openAccessPolicy(clusterId, platform.organizationId)), {
    mode: 0o600,
  });
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.gateway.port": 0,
      "service.management.port": 0,
      "service.cluster.secret": TEST_CLUSTER_SECRET,
      "service.gateway.issuerUrl": platform.issuerUrl,
      "service.gateway.contactPoints": fakeCluster.brokers
        .map((broker) => `127.0.0.1:${broker.address?.port}`)
        .join(","),
      "service.gateway.accessPolicyFile": policyFile,
    },
  });
  const gateway = await startGateway(configuration, { logger: pino({ level: "silent" }) });
  gateways.set(clusterId, { gateway, policyFile });
  return gateway;
}

async function createClusterClient(clusterId: string, name: string): Promise<TestClient> {
  const response = await fetch(`${platform.url}/admin/clusters/${clusterId}/clients`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ clientName: name, permissions: ["gateway"] }),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as TestClient;
}

function topology(gateway: RunningGateway, token: string): Promise<Response> {
  return fetch(`${gateway.url}/v2/topology`, { headers: { authorization: `Bearer ${token}` } });
}

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), "flowplane-cluster-clients-"));
  platform = await startTestPlatform(
    {},
    { clusterAccess: { clusters: access.options.clusters, onAccessPolicyChanged: deliverPolicy } },
  );
  secondStore = await openStore({ url: "", dataDirectory: platform.dataDirectory });
  clusterA = access.addCluster(platform.organizationId, randomUUID()).id;
  clusterB = access.addCluster(platform.organizationId, randomUUID()).id;
  adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  fakeCluster = await startFakeCluster();
  await startClusterGateway(clusterA);
  await startClusterGateway(clusterB);
});

afterAll(async () => {
  await Promise.all([...gateways.values()].map((entry) => entry.gateway.close()));
  await fakeCluster?.close();
  await secondStore?.close();
  await platform?.close();
  if (directory !== undefined) await rm(directory, { recursive: true, force: true });
});

describe("a cluster API client's token at the gateways", () => {
  it("opens its own cluster's REST API, not the management API, and not another cluster's gateway", async () => {
    const gatewayA = gateways.get(clusterA)?.gateway as RunningGateway;
    const gatewayB = gateways.get(clusterB)?.gateway as RunningGateway;
    const token = await requestToken(platform, await createClusterClient(clusterA, "worker"), "gateway-api");
    expect((await topology(gatewayA, token)).status).toBe(200);
    const management = await fetch(`${gatewayA.managementUrl}/actuator/cluster`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(management.status).toBe(403);
    expect(((await management.json()) as { detail: string }).detail).toContain("'cluster'");
    const elsewhere = await topology(gatewayB, token);
    expect(elsewhere.status).toBe(403);
    expect(((await elsewhere.json()) as { type: string }).type).toBe("urn:flowplane:problem:token-for-another-cluster");
  });

  it("stops working at its gateway after DELETE, while the cluster's other clients keep working", async () => {
    const gatewayA = gateways.get(clusterA)?.gateway as RunningGateway;
    const doomed = await createClusterClient(clusterA, "doomed");
    const survivor = await createClusterClient(clusterA, "survivor");
    const doomedToken = await requestToken(platform, doomed, "gateway-api");
    const survivorToken = await requestToken(platform, survivor, "gateway-api");
    expect((await topology(gatewayA, doomedToken)).status).toBe(200);

    const deleted = await fetch(`${platform.url}/admin/clusters/${clusterA}/clients/${doomed.clientId}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(deleted.status).toBe(204);
    await waitFor(
      async () => (await topology(gatewayA, doomedToken)).status === 401,
      "the deleted client's token is refused by its gateway",
      1_000,
    );
    expect((await topology(gatewayA, survivorToken)).status).toBe(200);
  });
});
