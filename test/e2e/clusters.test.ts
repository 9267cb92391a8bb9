/**
 * End to end through the Administration API: two real clusters created by the local provisioner (1-broker plan),
 * a cluster API client of the first one, and what its token opens. The policy each gateway enforces is the one the
 * platform builds from its store and delivers through the provisioner, so this checks the whole chain: a client's
 * token works at its own cluster's gateway, another cluster's gateway refuses it, and once the client is deleted its
 * own gateway refuses it too.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clusterParameters, planTypes } from "../../src/platform/admin/clusters/parameters.js";
import { eventually } from "../support/cluster.js";
import { callWithToken } from "../support/http.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { requestToken } from "../support/tokens.js";

let platform: TestPlatform;
let dataDirectory: string;
let adminToken: string;

async function call(method: string, path: string, body?: unknown): Promise<Response> {
  return await callWithToken(`${platform.url}/admin`, adminToken, method, path, body);
}

/** Creates a 1-broker cluster and waits until it is Healthy; answers its gateway URL. */
async function healthyCluster(name: string): Promise<{ clusterId: string; gateway: string }> {
  const parameters = clusterParameters();
  const channel = parameters.channels[0];
  const response = await call("POST", "/clusters", {
    name,
    planTypeId: planTypes.find((plan) => plan.shape.brokers === 1)?.uuid,
    channelId: channel?.uuid,
    generationId: channel?.defaultGeneration.uuid,
    regionId: parameters.regions[0]?.uuid,
  });
  expect(response.status).toBe(200);
  const { clusterId } = (await response.json()) as { clusterId: string };
  return await eventually(`cluster ${name} Healthy`, 90_000, async () => {
    const cluster = (await (await call("GET", `/clusters/${clusterId}`)).json()) as {
      status: { ready: string };
      links: { gateway: string };
    };
    return cluster.status.ready === "Healthy" ? { clusterId, gateway: cluster.links.gateway } : undefined;
  });
}

beforeAll(async () => {
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-e2e-clusters-"));
  platform = await startTestPlatform(
    { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
    { dataDirectory, localClusters: { createPrimaryCluster: false } },
  );
  adminToken = await requestToken(platform, platform.adminClient, "admin-api");
}, 60_000);

afterAll(async () => {
  await platform?.close();
  if (dataDirectory !== undefined) rmSync(dataDirectory, { recursive: true, force: true });
}, 60_000);

describe("clusters of the Administration API end to end", () => {
  it("binds a cluster client's token to its cluster, and its gateway refuses it once the client is deleted", async () => {
    const [orders, billing] = await Promise.all([healthyCluster("orders"), healthyCluster("billing")]);
    const created = await call("POST", `/clusters/${orders.clusterId}/clients`, { clientName: "order-worker" });
    expect(created.status).toBe(200);
    const client = (await created.json()) as { clientId: string; clientSecret: string };
    const token = await requestToken(platform, client, "gateway-api");
    const topology = async (gateway: string): Promise<number> =>
      (await fetch(`${gateway}/v2/topology`, { headers: { authorization: `Bearer ${token}` } })).status;

    expect(await topology(orders.gateway)).toBe(200);
    expect(await topology(billing.gateway)).toBe(403);

    expect((await call("DELETE", `/clusters/${orders.clusterId}/clients/${client.clientId}`)).status).toBe(204);
    await eventually("the client's own gateway refusing its token", 10_000, async () =>
      (await topology(orders.gateway)) === 401 ? true : undefined,
    );

    for (const cluster of [orders, billing]) {
      expect((await call("DELETE", `/clusters/${cluster.clusterId}`)).status).toBe(204);
    }
  }, 180_000);
});
