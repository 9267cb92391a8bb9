/**
 * Restoring a scaled cluster through the Administration API end to end, with real processes: a 3-broker cluster of
 * the local provisioner gets messages and a backup, then more messages, then is scaled through the API to brokers
 * 0, 2 and 3 (broker 3 added, broker 1 removed: ids the cluster's first configuration does not have). Restored
 * through the API, it comes back Healthy with the scaled brokers hosting the partitions they hosted before, every
 * message acknowledged before the backup is readable and none after, and it accepts writes.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, everyPartitionLed, everyReplicaHealthy, type GatewayTopology } from "../support/cluster.js";
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
let clusterId: string;
let links: ProvisionedClusterLinks;

async function call(method: string, path: string, body?: unknown): Promise<Response> {
  return await fetch(`${platform.url}/admin${path}`, {
    method,
    headers: {
      authorization: `Bearer ${adminToken}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

async function clusterStatus(): Promise<ClusterStatusAnswer> {
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
async function publish(messageId: string): Promise<string> {
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
async function read(key: string): Promise<number> {
  return await eventually(`message ${key} read`, 30_000, async () => {
    const response = await fetch(`${links.gateway}/v2/messages/${key}`, {
      headers: { authorization: `Bearer ${gatewayToken}` },
    });
    return response.status === 200 || response.status === 404 ? response.status : undefined;
  });
}

beforeAll(async () => {
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-e2e-restore-scaled-"));
  platform = await startTestPlatform(
    { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
    { dataDirectory, localClusters: { createPrimaryCluster: false, readyTimeoutMs: 100_000 } },
  );
  adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  gatewayToken = await requestToken(platform, platform.adminClient, "gateway-api");
  const created = await createHealthyCluster(platform, adminToken, {
    name: "orders",
    brokers: 3,
    timeoutMs: clusterStartMs,
  });
  clusterId = created.clusterId;
  links = created.links;
}, clusterStartMs + 30_000);

afterAll(async () => {
  await platform?.close();
  if (dataDirectory !== undefined) rmSync(dataDirectory, { recursive: true, force: true });
}, 60_000);

describe("restoring a scaled cluster through the Administration API", () => {
  it("restores the scaled brokers with the partitions they host, the messages before the backup and none after", async () => {
    const before: string[] = [];
    for (let index = 0; index < 12; index += 1) before.push(await publish(`before-${index}`));
    const taken = await call("POST", `/clusters/${clusterId}/backups`);
    expect(taken.status).toBe(200);
    const backup = (await taken.json()) as { uuid: string };
    const complete = await eventually("the backup Complete", 60_000, async () => {
      const listed = (await (await call("GET", `/clusters/${clusterId}/backups`)).json()) as {
        uuid: string;
        status: string;
      }[];
      const found = listed.find((entry) => entry.uuid === backup.uuid);
      return found?.status === "In progress" ? undefined : found;
    });
    expect(complete.status).toBe("Complete");
    const after: string[] = [];
    for (let index = 0; index < 12; index += 1) after.push(await publish(`after-${index}`));

    // Broker 3 joins and broker 1 leaves in one change: the brokers are 0, 2 and 3 from then on.
    const scaled = await call("POST", `/clusters/${clusterId}/scale`, { brokers: { add: [3], remove: [1] } });
    expect(scaled.status, await scaled.clone().text()).toBe(202);
    const { changeId } = (await scaled.json()) as { changeId: number };
    const settled = await eventually(`change ${changeId} completed`, 120_000, async () => {
      const status = await clusterStatus();
      return status.lastChange?.id === changeId && status.pendingChange === undefined ? status : undefined;
    });
    expect(settled.lastChange?.status).toBe("COMPLETED");
    expect(settled.brokers.map((broker) => broker.id)).toEqual([0, 2, 3]);
    // The platform stops the broker that left once the change completed.
    const provisioner = platform.running.provisioner;
    if (provisioner === undefined) throw new Error("the platform runs no provisioner");
    await eventually("broker 1 stopped by the platform", 30_000, async () => {
      const brokers = await provisioner.brokers(clusterId);
      return brokers.map((broker) => broker.nodeId).join(",") === "0,2,3" ? true : undefined;
    });
    const shapeBefore = shapeOf(settled);
    for (const key of after) expect(await read(key)).toBe(200);

    const restoring = await call("POST", `/clusters/${clusterId}/backups/${backup.uuid}/restore`);
    expect(restoring.status).toBe(202);
    // No scale request is taken while the restore runs.
    const refusedScale = await call("POST", `/clusters/${clusterId}/scale`, { brokers: { add: [4] } });
    expect(refusedScale.status).toBe(409);
    expect(((await refusedScale.json()) as { detail: string }).detail).toContain("A restore of cluster");
    const restored = await eventually("the restore ended", 180_000, async () => {
      const response = await call("GET", `/clusters/${clusterId}/backups/${backup.uuid}/restore`);
      const body = (await response.json()) as { state: string; failureReason: string | null };
      return body.state === "COMPLETED" || body.state === "FAILED" ? body : undefined;
    });
    expect(restored, JSON.stringify(restored)).toEqual(expect.objectContaining({ state: "COMPLETED" }));

    await eventually("the restored cluster Healthy", 90_000, async () => {
      const cluster = (await (await call("GET", `/clusters/${clusterId}`)).json()) as { status: { ready: string } };
      return cluster.status.ready === "Healthy" ? true : undefined;
    });
    expect((await provisioner.brokers(clusterId)).map((broker) => broker.nodeId)).toEqual([0, 2, 3]);
    const status = await clusterStatus();
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

    for (const key of before) expect(await read(key), key).toBe(200);
    for (const key of after) expect(await read(key), key).toBe(404);
    expect(await read(await publish("after-restore"))).toBe(200);
  }, 480_000);
});
