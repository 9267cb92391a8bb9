/**
 * Restoring a scaled cluster through the Administration API end to end, with real processes: a 3-broker cluster of
 * the local provisioner gets messages and a backup, then more messages, then is scaled through the API to brokers
 * 0, 2 and 3 (broker 3 added, broker 1 removed: ids the cluster's first configuration does not have). Restored
 * through the API, it comes back Healthy with the scaled brokers hosting the partitions they hosted before, every
 * message acknowledged before the backup is readable and none after, and it accepts writes. A cluster whose
 * partitions were added (experimental) refuses a backup of fewer partitions, naming both counts, and keeps its data,
 * and restores one taken after with all its partitions.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, everyPartitionLed, everyReplicaHealthy, type GatewayTopology } from "../support/cluster.js";
import { callWithToken } from "../support/http.js";
import { startTestPlatform, type TestPlatform } from "../support/platform.js";
import { createHealthyCluster, type ProvisionedClusterLinks } from "../support/provisioned-clusters.js";
import { requestToken } from "../support/tokens.js";

const clusterStartMs = 120_000;

interface ClusterStatusAnswer {
  version: number;
  brokers: { id: number; state: string; partitions: { id: number; state: string; priority: number }[] }[];
  pendingChange?: { id: number };
  lastChange?: { id: number; status: string };
}

let platform: TestPlatform;
let dataDirectory: string;
let adminToken: string;
let gatewayToken: string;

async function call(method: string, path: string, body?: unknown): Promise<Response> {
  return await callWithToken(`${platform.url}/admin`, adminToken, method, path, body);
}

async function clusterStatus(links: ProvisionedClusterLinks): Promise<ClusterStatusAnswer> {
  const response = await fetch(`${links.management}/actuator/cluster`, {
    headers: { authorization: `Bearer ${gatewayToken}` },
    signal: AbortSignal.timeout(15_000),
  });
  if (response.status !== 200) throw new Error(`GET /actuator/cluster answered ${response.status}`);
  return (await response.json()) as ClusterStatusAnswer;
}

/** Which partitions each broker hosts, with their priorities: the shape a restore must keep. */
function shapeOf(status: ClusterStatusAnswer): Record<number, string[]> {
  return Object.fromEntries(
    status.brokers.map((broker) => [
      broker.id,
      broker.partitions.map((partition) => `${partition.id}@${partition.priority}:${partition.state}`),
    ]),
  );
}

/** Publishes one message and answers its key, retrying while the cluster is not ready for it. */
async function publish(links: ProvisionedClusterLinks, messageId: string): Promise<string> {
  return await eventually(`message ${messageId} published`, 30_000, async () => {
    const response = await fetch(`${links.gateway}/v2/messages/publication`, {
      method: "POST",
      headers: { authorization: `Bearer ${gatewayToken}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "m", correlationKey: messageId, messageId, timeToLive: 3_600_000 }),
    });
    if (response.status === 200) return ((await response.json()) as { messageKey: string }).messageKey;
    if (response.status >= 500) return undefined;
    throw new Error(`publication answered ${response.status}: ${await response.text()}`);
  });
}

/** Whether the cluster holds the message: 200 or 404, retrying other answers. */
async function read(links: ProvisionedClusterLinks, key: string): Promise<number> {
  return await eventually(`message ${key} read`, 30_000, async () => {
    const response = await fetch(`${links.gateway}/v2/messages/${key}`, {
      headers: { authorization: `Bearer ${gatewayToken}` },
    });
    return response.status === 200 || response.status === 404 ? response.status : undefined;
  });
}

/** Takes a backup through the API and waits until it is Complete; answers its id. */
async function completeBackup(clusterId: string): Promise<string> {
  const taken = await call("POST", `/clusters/${clusterId}/backups`);
  expect(taken.status).toBe(200);
  const { uuid } = (await taken.json()) as { uuid: string };
  const complete = await eventually(`backup ${uuid} Complete`, 60_000, async () => {
    const listed = (await (await call("GET", `/clusters/${clusterId}/backups`)).json()) as {
      uuid: string;
      status: string;
    }[];
    const found = listed.find((entry) => entry.uuid === uuid);
    return found?.status === "In progress" ? undefined : found;
  });
  expect(complete.status).toBe("Complete");
  return uuid;
}

/** Starts a restore through the API and answers how it ended. */
async function restoreFrom(
  clusterId: string,
  backupId: string,
): Promise<{ state: string; failureReason: string | null }> {
  // Brokers a scale-down removed may still be stopping (their names leave the brokers file first): the platform
  // answers 409 and asks to try again in a moment, as a client would.
  const restoring = await eventually(`the restore from ${backupId} accepted`, 30_000, async () => {
    const response = await call("POST", `/clusters/${clusterId}/backups/${backupId}/restore`);
    const text = await response.clone().text();
    return response.status === 409 && text.includes("are being stopped") ? undefined : response;
  });
  expect(restoring.status, await restoring.clone().text()).toBe(202);
  return await eventually(`the restore from ${backupId} ended`, 180_000, async () => {
    const response = await call("GET", `/clusters/${clusterId}/backups/${backupId}/restore`);
    const body = (await response.json()) as { state: string; failureReason: string | null };
    return body.state === "COMPLETED" || body.state === "FAILED" ? body : undefined;
  });
}

/** Waits until the cluster is Healthy. */
async function healthy(clusterId: string): Promise<void> {
  await eventually(`cluster ${clusterId} Healthy`, 90_000, async () => {
    const cluster = (await (await call("GET", `/clusters/${clusterId}`)).json()) as { status: { ready: string } };
    return cluster.status.ready === "Healthy" ? true : undefined;
  });
}

/** Scales through the API and waits until the change completed; answers the cluster's configuration then. */
async function scaled(clusterId: string, links: ProvisionedClusterLinks, body: unknown): Promise<ClusterStatusAnswer> {
  const response = await call("POST", `/clusters/${clusterId}/scale`, body);
  expect(response.status, await response.clone().text()).toBe(202);
  const { changeId } = (await response.json()) as { changeId: number };
  const settled = await eventually(`change ${changeId} completed`, 120_000, async () => {
    const status = await clusterStatus(links);
    return status.lastChange?.id === changeId && status.pendingChange === undefined ? status : undefined;
  });
  expect(settled.lastChange?.status).toBe("COMPLETED");
  return settled;
}

beforeAll(async () => {
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-e2e-restore-scaled-"));
  platform = await startTestPlatform(
    { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
    {
      dataDirectory,
      localClusters: {
        createPrimaryCluster: false,
        readyTimeoutMs: 100_000,
        // Adding partitions is experimental; the second test adds one.
        environment: { ...process.env, SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLEPARTITIONSCALING: "true" },
      },
    },
  );
  adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  gatewayToken = await requestToken(platform, platform.adminClient, "gateway-api");
}, 60_000);

afterAll(async () => {
  await platform?.close();
  // E2E_KEEP_DATA=1 keeps the clusters' data, logs and backups for a look afterwards.
  if (dataDirectory !== undefined && process.env.E2E_KEEP_DATA !== "1") {
    rmSync(dataDirectory, { recursive: true, force: true });
  }
}, 60_000);

describe("restoring a scaled cluster through the Administration API", () => {
  it("restores the scaled brokers with the partitions they host, the messages before the backup and none after", async () => {
    const { clusterId, links } = await createHealthyCluster(platform, adminToken, {
      name: "orders",
      brokers: 3,
      timeoutMs: clusterStartMs,
    });
    const before: string[] = [];
    for (let index = 0; index < 12; index += 1) before.push(await publish(links, `before-${index}`));
    const backupId = await completeBackup(clusterId);
    const after: string[] = [];
    for (let index = 0; index < 12; index += 1) after.push(await publish(links, `after-${index}`));

    // Broker 3 joins and broker 1 leaves in one change: the brokers are 0, 2 and 3 from then on.
    const settled = await scaled(clusterId, links, { brokers: { add: [3], remove: [1] } });
    expect(settled.brokers.map((broker) => broker.id)).toEqual([0, 2, 3]);
    // The platform stops the broker that left once the change completed.
    const provisioner = platform.running.provisioner;
    if (provisioner === undefined) throw new Error("the platform runs no provisioner");
    await eventually("broker 1 stopped by the platform", 30_000, async () => {
      const brokers = await provisioner.brokers(clusterId);
      return brokers.map((broker) => broker.nodeId).join(",") === "0,2,3" ? true : undefined;
    });
    const shapeBefore = shapeOf(settled);
    for (const key of after) expect(await read(links, key)).toBe(200);

    const restoring = restoreFrom(clusterId, backupId);
    // No scale request is taken while the restore runs.
    await eventually("the restore running", 10_000, async () => {
      const listed = (await (await call("GET", `/clusters/${clusterId}/restores`)).json()) as { state: string }[];
      return listed.length > 0 ? true : undefined;
    });
    const refusedScale = await call("POST", `/clusters/${clusterId}/scale`, { brokers: { add: [4] } });
    expect(refusedScale.status).toBe(409);
    expect(((await refusedScale.json()) as { detail: string }).detail).toContain("A restore of cluster");
    const restored = await restoring;
    expect(restored, JSON.stringify(restored)).toEqual(expect.objectContaining({ state: "COMPLETED" }));

    await healthy(clusterId);
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 2, 3]);
    const status = await clusterStatus(links);
    expect(status.pendingChange).toBeUndefined();
    expect(shapeOf(status)).toEqual(shapeBefore);
    const topology = await eventually("every partition led by the restored brokers", 60_000, async () => {
      const response = await fetch(`${links.gateway}/v2/topology`, {
        headers: { authorization: `Bearer ${gatewayToken}` },
      });
      const current = (await response.json()) as GatewayTopology;
      return everyPartitionLed(current, [1, 2, 3]) && everyReplicaHealthy(current) ? current : undefined;
    });
    expect(topology.brokers.map((broker) => broker.nodeId)).toEqual([0, 2, 3]);
    expect(topology.partitionsCount).toBe(3);
    expect(topology.replicationFactor).toBe(3);

    for (const key of before) expect(await read(links, key), key).toBe(200);
    for (const key of after) expect(await read(links, key), key).toBe(404);
    expect(await read(links, await publish(links, "after-restore"))).toBe(200);
  }, 480_000);

  it("refuses a backup of fewer partitions after partitions were added, and restores one taken after", async () => {
    const { clusterId, links } = await createHealthyCluster(platform, adminToken, {
      name: "ledger",
      brokers: 1,
      timeoutMs: clusterStartMs,
    });
    const first: string[] = [];
    for (let index = 0; index < 5; index += 1) first.push(await publish(links, `first-${index}`));
    const onePartition = await completeBackup(clusterId);
    const settled = await scaled(clusterId, links, { partitions: { count: 2, replicationFactor: 1 } });
    expect(shapeOf(settled)[0]?.map((entry) => entry.split("@")[0])).toEqual(["1", "2"]);

    // Refused naming both counts, and the cluster keeps every message. The new partition may have written a part of
    // the backup too (a relocated record carried its id), but the management API counts the partitions the backup
    // had at its cut, as the brokers' restore does, so the platform refuses it at VALIDATING, before anything stops.
    const refused = await restoreFrom(clusterId, onePartition);
    expect(refused.state).toBe("FAILED");
    expect(refused.failureReason).toContain(
      `backup ${onePartition} holds 1 partitions but the cluster has 2; the partition counts must be equal`,
    );
    await healthy(clusterId);
    const second: string[] = [];
    for (let index = 0; index < 8; index += 1) second.push(await publish(links, `second-${index}`));
    for (const key of first) expect(await read(links, key)).toBe(200);

    const twoPartitions = await completeBackup(clusterId);
    const last: string[] = [];
    for (let index = 0; index < 8; index += 1) last.push(await publish(links, `last-${index}`));
    expect(await restoreFrom(clusterId, twoPartitions)).toMatchObject({ state: "COMPLETED" });
    await healthy(clusterId);
    expect(shapeOf(await clusterStatus(links))).toEqual(shapeOf(settled));
    for (const key of [...first, ...second]) expect(await read(links, key), key).toBe(200);
    for (const key of last) expect(await read(links, key), key).toBe(404);
    expect(await read(links, await publish(links, "after-restore"))).toBe(200);
  }, 300_000);
});
