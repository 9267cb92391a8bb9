/**
 * Backups and restore through the Administration API end to end, with a real 1-broker cluster run by the local
 * provisioner: a backup is taken until Complete (into the cluster's own directory), more messages are published, the
 * cluster is restored through the API, and then only the messages published before the backup exist while the
 * cluster is Healthy again and takes writes; the backup is deleted, and every change is in the activity log. A
 * restore that fails on the way puts the cluster's previous data back and starts it again.
 */
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
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
let gatewayToken: string;

async function call(method: string, path: string, body?: unknown): Promise<Response> {
  return await callWithToken(`${platform.url}/admin`, adminToken, method, path, body);
}

async function clusterStatus(clusterId: string): Promise<{ status: { ready: string }; links: { gateway: string } }> {
  return (await (await call("GET", `/clusters/${clusterId}`)).json()) as {
    status: { ready: string };
    links: { gateway: string };
  };
}

/** Publishes one message and answers its key, retrying while the cluster is not ready for it. */
async function publish(gateway: string, messageId: string): Promise<string> {
  return await eventually(`message ${messageId} published`, 30_000, async () => {
    const response = await fetch(`${gateway}/v2/messages/publication`, {
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
async function read(gateway: string, key: string): Promise<number> {
  return await eventually(`message ${key} read`, 30_000, async () => {
    const response = await fetch(`${gateway}/v2/messages/${key}`, {
      headers: { authorization: `Bearer ${gatewayToken}` },
    });
    return response.status === 200 || response.status === 404 ? response.status : undefined;
  });
}

beforeAll(async () => {
  dataDirectory = mkdtempSync(join(tmpdir(), "flowplane-e2e-admin-backups-"));
  platform = await startTestPlatform(
    { "service.provisioner.healthCheckIntervalMs": 200, "service.log.level": "warn" },
    { dataDirectory, localClusters: { createPrimaryCluster: false } },
  );
  adminToken = await requestToken(platform, platform.adminClient, "admin-api");
  gatewayToken = await requestToken(platform, platform.adminClient, "gateway-api");
}, 60_000);

afterAll(async () => {
  await platform?.close();
  if (dataDirectory !== undefined) rmSync(dataDirectory, { recursive: true, force: true });
}, 60_000);

describe("backups of the Administration API end to end", () => {
  it("takes a backup, restores the cluster to it through the API, and deletes it", async () => {
    const parameters = clusterParameters();
    const channel = parameters.channels[0];
    const created = await call("POST", "/clusters", {
      name: "orders",
      planTypeId: planTypes.find((plan) => plan.shape.brokers === 1)?.uuid,
      channelId: channel?.uuid,
      generationId: channel?.defaultGeneration.uuid,
      regionId: parameters.regions[0]?.uuid,
    });
    expect(created.status).toBe(200);
    const { clusterId } = (await created.json()) as { clusterId: string };
    const gateway = await eventually("the cluster Healthy", 90_000, async () => {
      const cluster = await clusterStatus(clusterId);
      return cluster.status.ready === "Healthy" ? cluster.links.gateway : undefined;
    });

    const before: string[] = [];
    for (let index = 0; index < 5; index += 1) before.push(await publish(gateway, `before-${index}`));

    const taken = await call("POST", `/clusters/${clusterId}/backups`);
    expect(taken.status).toBe(200);
    const backup = (await taken.json()) as { uuid: string; status: string };
    const complete = await eventually("the backup Complete", 60_000, async () => {
      const listed = (await (await call("GET", `/clusters/${clusterId}/backups`)).json()) as {
        uuid: string;
        status: string;
        completed: string | null;
      }[];
      const found = listed.find((entry) => entry.uuid === backup.uuid);
      return found?.status === "In progress" ? undefined : found;
    });
    expect(complete.status).toBe("Complete");
    expect(complete.completed).not.toBeNull();
    // The cluster's backups are kept in its own directory.
    const clusterDirectory = join(dataDirectory, "clusters", clusterId);
    expect(readdirSync(join(clusterDirectory, "backups")).length).toBeGreaterThan(0);

    const after: string[] = [];
    for (let index = 0; index < 5; index += 1) after.push(await publish(gateway, `after-${index}`));
    for (const key of after) expect(await read(gateway, key)).toBe(200);

    // A restore that fails (the store holds no backup 999) puts the previous data back and starts the cluster again.
    const provisioner = platform.running.provisioner;
    if (provisioner === undefined) throw new Error("the platform runs no provisioner");
    const specification = {
      clusterId,
      organizationId: platform.organizationId,
      shape: { brokers: 1, partitions: 1, replicationFactor: 1 },
      primary: false,
    };
    const { links } = (await (await call("GET", `/clusters/${clusterId}`)).json()) as { links: { management: string } };
    const configuration = await fetch(`${links.management}/actuator/cluster`, {
      headers: { authorization: `Bearer ${gatewayToken}` },
    });
    expect(configuration.status).toBe(200);
    const target = { brokerIds: [0], configurationDocument: await configuration.text() };
    await expect(provisioner.restore(specification, 999n, target)).rejects.toThrow(/restore of broker 0 failed/);
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);
    await eventually("the cluster Healthy after the failed restore", 90_000, async () =>
      (await clusterStatus(clusterId)).status.ready === "Healthy" ? true : undefined,
    );
    for (const key of [...before, ...after]) expect(await read(gateway, key), key).toBe(200);

    const restoring = await call("POST", `/clusters/${clusterId}/backups/${backup.uuid}/restore`);
    expect(restoring.status).toBe(202);
    expect(((await restoring.json()) as { state: string }).state).toBe("PENDING");
    // One restore at a time.
    expect((await call("POST", `/clusters/${clusterId}/backups/${backup.uuid}/restore`)).status).toBe(409);
    const states = new Set<string>();
    const restored = await eventually("the restore ended", 120_000, async () => {
      const response = await call("GET", `/clusters/${clusterId}/backups/${backup.uuid}/restore`);
      const body = (await response.json()) as { state: string; failureReason: string | null };
      states.add(body.state);
      return body.state === "COMPLETED" || body.state === "FAILED" ? body : undefined;
    });
    expect(restored, JSON.stringify(restored)).toEqual(expect.objectContaining({ state: "COMPLETED" }));
    expect(states.has("IN_PROGRESS")).toBe(true);
    // The previous data is deleted once the restored cluster is ready.
    expect(existsSync(join(clusterDirectory, "brokers.before-restore"))).toBe(false);

    await eventually("the restored cluster Healthy", 90_000, async () =>
      (await clusterStatus(clusterId)).status.ready === "Healthy" ? true : undefined,
    );
    for (const key of before) expect(await read(gateway, key), key).toBe(200);
    for (const key of after) expect(await read(gateway, key), key).toBe(404);
    expect(await read(gateway, await publish(gateway, "after-restore"))).toBe(200);

    const deleted = await call("DELETE", `/clusters/${clusterId}/backups/${backup.uuid}`);
    expect(deleted.status).toBe(200);
    const remaining = (await (await call("GET", `/clusters/${clusterId}/backups`)).json()) as { uuid: string }[];
    expect(remaining.map((entry) => entry.uuid)).not.toContain(backup.uuid);

    const activity = JSON.stringify(await (await call("GET", "/activity/json")).json());
    for (const entity of ["cluster-backup", "cluster-restore"]) expect(activity).toContain(entity);
    expect(activity).toContain(`${clusterId}/${backup.uuid}`);

    expect((await call("DELETE", `/clusters/${clusterId}`)).status).toBe(204);
    expect(existsSync(clusterDirectory)).toBe(false);
  }, 300_000);
});
