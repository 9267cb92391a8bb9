import { randomUUID } from "node:crypto";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { createClusterAccessFixture } from "../../platform/admin/cluster-access-support.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import { startFakeCluster } from "./fake-broker.js";

let platform: TestPlatform;
let cluster: Awaited<ReturnType<typeof startFakeCluster>>;
let gateway: RunningGateway;
let clusterClientToken: string;

beforeAll(async () => {
  const access = createClusterAccessFixture();
  platform = await startTestPlatform({}, { clusterAccess: access.options });
  const clusterId = access.addCluster(platform.organizationId, randomUUID()).id;
  const adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  const response = await fetch(`${platform.url}/admin/clusters/${clusterId}/clients`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ clientName: "worker", permissions: ["gateway"] }),
  });
  const created = (await response.json()) as { clientId: string; clientSecret: string };
  clusterClientToken = await requestToken(platform, created, "gateway-api");
  cluster = await startFakeCluster();
  const configuration = loadConfiguration({
    environment: {},
    flags: {
      "service.gateway.port": 0,
      "service.management.port": 0,
      "service.cluster.secret": TEST_CLUSTER_SECRET,
      "service.gateway.issuerUrl": platform.issuerUrl,
      "service.gateway.contactPoints": cluster.brokers.map((broker) => `127.0.0.1:${broker.address?.port}`).join(","),
    },
  });
  gateway = await startGateway(configuration, { logger: pino({ level: "silent" }) });
});

afterAll(async () => {
  await gateway?.close();
  await cluster?.close();
  await platform?.close();
});

describe("a cluster API client's token at the gateway", () => {
  it("opens the REST API but not the management API, which resizes the cluster", async () => {
    const headers = { authorization: `Bearer ${clusterClientToken}` };
    expect((await fetch(`${gateway.url}/v2/topology`, { headers })).status).toBe(200);
    const management = await fetch(`${gateway.managementUrl}/actuator/cluster`, { headers });
    expect(management.status).toBe(403);
    expect(((await management.json()) as { detail: string }).detail).toContain("'cluster'");
  });
});
