/**
 * `POST /admin/clusters/{clusterId}/scale` against a real platform running a real one-broker cluster of the local
 * provisioner: a dry run answers the plan and starts nothing, a scale-up starts the new broker's process before the
 * change and completes, and a scale-down stops the removed broker's process and deletes its data once it completed.
 */
import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { brokerDataDirectory } from "../../../../src/platform/provisioner/child-environment.js";
import type { LocalProvisioner } from "../../../../src/platform/provisioner/local-provisioner.js";
import { eventually } from "../../../support/cluster.js";
import { startTestPlatform, type TestPlatform } from "../../../support/platform.js";
import { createHealthyCluster } from "../../../support/provisioned-clusters.js";
import { requestToken } from "../../../support/tokens.js";

const clusterStartMs = 120_000;

interface ClusterStatusAnswer {
  brokers: { id: number; partitions: { id: number }[] }[];
  pendingChange?: { id: number };
  lastChange?: { id: number; status: string };
}

describe("cluster scaling through the Administration API", () => {
  let platform: TestPlatform;
  let adminToken: string;
  let gatewayToken: string;
  let clusterId: string;
  let managementUrl: string;
  let provisioner: LocalProvisioner;

  const scale = async (body: unknown, query = ""): Promise<Response> =>
    await fetch(`${platform.url}/admin/clusters/${clusterId}/scale${query}`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const clusterStatus = async (): Promise<ClusterStatusAnswer> =>
    (await (
      await fetch(`${managementUrl}/actuator/cluster`, { headers: { authorization: `Bearer ${gatewayToken}` } })
    ).json()) as ClusterStatusAnswer;
  const completed = async (changeId: number): Promise<ClusterStatusAnswer> =>
    await eventually(`change ${changeId} COMPLETED`, 60_000, async () => {
      const status = await clusterStatus();
      if (status.lastChange?.id === changeId && status.pendingChange === undefined) {
        expect(status.lastChange.status).toBe("COMPLETED");
        return status;
      }
      return undefined;
    });
  const scalingEntries = async (): Promise<number> => {
    const response = await fetch(`${platform.url}/admin/activity/json?limit=100`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    const entries = (await response.json()) as { entity: string; entityId: string }[];
    return entries.filter((entry) => entry.entity === "cluster-scaling" && entry.entityId === clusterId).length;
  };

  beforeAll(async () => {
    platform = await startTestPlatform(
      { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
      { localClusters: { createPrimaryCluster: false, readyTimeoutMs: 100_000 } },
    );
    provisioner = platform.running.provisioner as LocalProvisioner;
    adminToken = await requestToken(platform, platform.adminClient, "admin-api");
    gatewayToken = await requestToken(platform, platform.adminClient, "gateway-api");
    const created = await createHealthyCluster(platform, adminToken, {
      name: "orders",
      brokers: 1,
      timeoutMs: clusterStartMs,
    });
    clusterId = created.clusterId;
    managementUrl = created.links.management;
  }, clusterStartMs + 30_000);
  afterAll(async () => {
    await platform?.close();
  });

  it("refuses bad input with a 400 naming the field, and an unknown cluster with a 404", async () => {
    const zero = await scale({ brokers: { count: 0 } });
    expect(zero.status).toBe(400);
    expect(JSON.stringify(await zero.json())).toContain("body/brokers/count");
    const both = await scale({ brokers: { count: 2, add: [1] } });
    expect(both.status).toBe(400);
    expect(((await both.json()) as { detail: string }).detail).toContain("body/brokers");
    const unknownField = await scale({ brokers: { count: 2 }, nodes: 3 });
    expect(unknownField.status).toBe(400);
    expect(JSON.stringify(await unknownField.json())).toContain("nodes");
    const tooMany = await scale({ brokers: { add: Array.from({ length: 40 }, (_, id) => id + 1) } });
    expect(tooMany.status).toBe(400);
    const empty = await scale({});
    expect(empty.status).toBe(400);
    // The cluster's own refusal keeps its reason: a replication factor above the broker count.
    const refused = await scale({ partitions: { count: 1, replicationFactor: 3 } });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { detail: string }).detail).toMatch(/^The cluster refused the change: /);
    // A scale-up the cluster refuses starts no process.
    const refusedScaleUp = await scale({ brokers: { count: 2 }, partitions: { count: 1, replicationFactor: 3 } });
    expect(refusedScaleUp.status).toBe(400);
    const missing = await fetch(`${platform.url}/admin/clusters/${crypto.randomUUID()}/scale`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ brokers: { count: 2 } }),
    });
    expect(missing.status).toBe(404);
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0]);
  });

  it("is documented in the Administration API's OpenAPI document", async () => {
    const document = (await (await fetch(`${platform.url}/admin/openapi.json`)).json()) as {
      paths: Record<string, { post?: { parameters?: { name: string; in: string }[]; requestBody?: unknown } }>;
    };
    const operation = document.paths["/clusters/{clusterId}/scale"]?.post;
    expect(operation?.requestBody).toBeDefined();
    expect(operation?.parameters?.map((parameter) => `${parameter.in}:${parameter.name}`)).toEqual(
      expect.arrayContaining(["path:clusterId", "query:dryRun"]),
    );
  });

  it("answers a scale-up's plan as a dry run and starts nothing", async () => {
    const response = await scale({ brokers: { count: 2 } }, "?dryRun=true");
    expect(response.status).toBe(202);
    const plan = (await response.json()) as { plannedChanges: { operation: string; brokerId: number }[] };
    expect(plan.plannedChanges[0]).toMatchObject({ operation: "BROKER_ADD", brokerId: 1 });
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0]);
    const status = await clusterStatus();
    expect(status.pendingChange).toBeUndefined();
    expect(status.lastChange).toBeUndefined();
    expect(await scalingEntries()).toBe(0);
  });

  it("starts the added broker's process, then the change, which completes", async () => {
    const response = await scale({ brokers: { count: 2 }, partitions: { count: 1, replicationFactor: 2 } });
    expect(response.status).toBe(202);
    const started = (await response.json()) as { changeId: number; plannedChanges: { operation: string }[] };
    expect(started.plannedChanges.map((operation) => operation.operation)).toContain("PARTITION_JOIN");
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 1]);
    const status = await completed(started.changeId);
    expect(status.brokers.map((broker) => broker.id)).toEqual([0, 1]);
    expect(status.brokers.find((broker) => broker.id === 1)?.partitions.map((partition) => partition.id)).toEqual([1]);
    expect(await scalingEntries()).toBe(1);
    // The new broker is a member: the cleanup after the change leaves it running.
    // Two polls: a removal needs two in a row that agree.
    await platform.running.clusters.pollHealth();
    await platform.running.clusters.pollHealth();
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 1]);
  }, 90_000);

  it("stops the removed broker's process and deletes its data once a scale-down completed", async () => {
    const broker = (await provisioner.brokers(clusterId)).find((entry) => entry.nodeId === 1)!;
    const dataDirectory = brokerDataDirectory((await provisioner.directoryOf(clusterId))!, 1);
    expect(existsSync(dataDirectory)).toBe(true);
    const response = await scale({ brokers: { remove: [1] }, partitions: { count: 1, replicationFactor: 1 } });
    expect(response.status).toBe(202);
    const started = (await response.json()) as { changeId: number };
    const status = await completed(started.changeId);
    expect(status.brokers.map((entry) => entry.id)).toEqual([0]);
    await eventually("broker 1 stopped and its data deleted", 30_000, async () => {
      const listed = (await provisioner.brokers(clusterId)).map((entry) => entry.nodeId);
      return listed.length === 1 && !existsSync(dataDirectory) ? true : undefined;
    });
    await expect(
      fetch(`${broker.managementUrl}/actuator/health/liveness`, { signal: AbortSignal.timeout(2_000) }),
    ).rejects.toThrow();
    expect(await scalingEntries()).toBe(2);
  }, 90_000);
});
