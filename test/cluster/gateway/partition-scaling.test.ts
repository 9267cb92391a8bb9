/**
 * Adding partitions to a running cluster (experimental), with real in-process brokers and a real gateway: 3 → 6
 * partitions while messages are published, every acknowledged message readable by the key it was acknowledged with
 * (relocated ones by forwarding), message ids unique across the old and the new partition, expiry once, and the
 * routing states the spec names. No backup is taken while partitions are added; one taken afterwards covers all six,
 * and the new partitions write no part of the backups taken before them (a kept one stays three partitions, a deleted
 * one does not reappear), although relocated messages carry the latest one's checkpoint to them. Two more scale-ups
 * (6 → 7 → 8) then move some messages a second and a third time: each stays readable by its first key.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import type { Broker } from "../../../src/cluster/broker/broker.js";
import { partitionForCorrelationKey } from "../../../src/cluster/engine/index.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import { partitionSettled, removeDirectory, startBrokers, temporaryDirectory, waitFor } from "../broker/support.js";

let platform: TestPlatform;
let root: string;
let brokers: Broker[];
let gateway: RunningGateway;
let token: string;
let backupDirectory: string;
let backupStore: FilesystemBackupStore;
/** Messages acknowledged before the first scale-up: their key and correlation key, read back after every later one. */
const acknowledgedBefore = new Map<string, string>();

async function call(base: string, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${base}${path}`, {
    ...init,
    headers: {
      authorization: `Bearer ${token}`,
      ...(init.body === undefined ? {} : { "content-type": "application/json" }),
    },
    signal: AbortSignal.timeout(15_000),
  });
}

/** Publishes, retrying the answers that mean "not now" (503, 502 for an unknown outcome only with a message id). */
/** Takes backup `backupId` and waits for its end; resolves with its state and partition count. */
async function takeBackup(backupId: number): Promise<[string, number]> {
  const taken = await call(gateway.managementUrl, "/actuator/backups", {
    method: "POST",
    body: JSON.stringify({ backupId }),
  });
  expect(taken.status, await taken.clone().text()).toBe(202);
  let view = { state: "IN_PROGRESS", partitionCount: 0 };
  await waitFor(async () => {
    view = (await (await call(gateway.managementUrl, `/actuator/backups/${backupId}`)).json()) as typeof view;
    return view.state !== "IN_PROGRESS";
  }, `backup ${backupId} ends`);
  return [view.state, view.partitionCount];
}

async function publish(body: Record<string, unknown>): Promise<{ status: number; key?: string }> {
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const response = await call(gateway.url, "/v2/messages/publication", {
      method: "POST",
      body: JSON.stringify(body),
    });
    if (response.status === 200)
      return { status: 200, key: ((await response.json()) as { messageKey: string }).messageKey };
    if (response.status === 503) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      continue;
    }
    return { status: response.status };
  }
  throw new Error("publication kept being refused");
}

beforeAll(async () => {
  platform = await startTestPlatform();
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  root = await temporaryDirectory("partitions");
  backupDirectory = await mkdtemp(join(tmpdir(), "flowplane-scaling-backups-"));
  backupStore = new FilesystemBackupStore(backupDirectory);
  brokers = await startBrokers(root, 3, () => ({ partitionScalingEnabled: true, backupStore }));
  for (const partitionId of [1, 2, 3]) {
    await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
  }
  gateway = await startGateway(
    loadConfiguration({
      environment: {},
      flags: {
        "service.gateway.port": 0,
        "service.management.port": 0,
        "service.cluster.secret": TEST_CLUSTER_SECRET,
        "service.gateway.issuerUrl": platform.issuerUrl,
        "service.gateway.contactPoints": brokers.map((broker) => `127.0.0.1:${broker.clusterAddress.port}`).join(","),
      },
    }),
    { logger: pino({ level: "silent" }), topologyRefreshIntervalMs: 100 },
  );
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all((brokers ?? []).map((broker) => broker.close()));
  if (root !== undefined) await removeDirectory(root);
  if (backupDirectory !== undefined) await rm(backupDirectory, { recursive: true, force: true });
  await platform?.close();
});

describe("adding partitions to a running cluster", () => {
  it("grows from 3 to 6 partitions; every message stays readable by its key, ids stay unique, routing follows the spec", async () => {
    const before = acknowledgedBefore;
    for (let index = 0; index < 60; index += 1) {
      const correlationKey = `order-${index}`;
      const published = await publish({
        name: "order",
        correlationKey,
        messageId: `id-${index}`,
        timeToLive: 600_000,
        variables: { index },
      });
      expect(published.status).toBe(200);
      before.set(published.key as string, correlationKey);
    }
    // Backup 0 is kept; backup 1 is deleted, but its checkpoint is the partitions' latest: relocations carry it.
    expect(await takeBackup(0)).toEqual(["COMPLETED", 3]);
    expect(await takeBackup(1)).toEqual(["COMPLETED", 3]);
    expect((await call(gateway.managementUrl, "/actuator/backups/1", { method: "DELETE" })).status).toBe(200);
    // A message that expires during the change must expire exactly once: it is gone afterwards, wherever it went.
    const shortLived = await publish({ name: "short", correlationKey: "order-7", timeToLive: 1_500, variables: {} });

    let publishing = true;
    const during = new Map<string, string>();
    const publisher = (async () => {
      for (let index = 0; publishing; index += 1) {
        const correlationKey = `during-${index}`;
        const published = await publish({ name: "during", correlationKey, timeToLive: 600_000, variables: { index } });
        if (published.status === 200) during.set(published.key as string, correlationKey);
      }
    })();

    const response = await call(gateway.managementUrl, "/actuator/cluster", {
      method: "PATCH",
      body: JSON.stringify({ partitions: { count: 6, replicationFactor: 3 } }),
    });
    expect(response.status, await response.clone().text()).toBe(202);
    const change = (await response.json()) as {
      changeId: number;
      plannedChanges: { operation: string; partitionId?: number }[];
    };
    expect(change.plannedChanges.map((operation) => operation.operation)).toEqual([
      "START_PARTITION_SCALE_UP",
      "PARTITION_BOOTSTRAP",
      "PARTITION_JOIN",
      "PARTITION_JOIN",
      "PARTITION_BOOTSTRAP",
      "PARTITION_JOIN",
      "PARTITION_JOIN",
      "PARTITION_BOOTSTRAP",
      "PARTITION_JOIN",
      "PARTITION_JOIN",
      "AWAIT_REDISTRIBUTION",
      "AWAIT_RELOCATION",
    ]);
    // No backup is taken while partitions are added (messages move between partitions meanwhile).
    const backupDuringChange = await call(gateway.managementUrl, "/actuator/backups", {
      method: "POST",
      body: JSON.stringify({ backupId: 1 }),
    });
    expect(backupDuringChange.status).toBe(409);
    expect(((await backupDuringChange.json()) as { detail: string }).detail).toBe(
      `cluster change ${change.changeId} is in progress; no backup is taken while the cluster changes`,
    );
    const routingsSeen = new Set<string>();
    let cancelAnswer: { status: number; detail: string } | null = null;
    await waitFor(
      async () => {
        const status = (await (await call(gateway.managementUrl, "/actuator/cluster")).json()) as {
          lastChange?: { id: number; status: string };
          pendingChange?: { completed: { operation: string }[] };
          routing: { requestHandling: { strategy: string } };
        };
        routingsSeen.add(status.routing.requestHandling.strategy);
        const started = status.pendingChange?.completed.some((done) => done.operation === "START_PARTITION_SCALE_UP");
        if (started === true && cancelAnswer === null) {
          // Once the routing started to change, cancelling would strand moved keys: the coordinator refuses.
          const cancel = await call(gateway.managementUrl, `/actuator/cluster/changes/${change.changeId}`, {
            method: "DELETE",
          });
          cancelAnswer = { status: cancel.status, detail: ((await cancel.json()) as { detail: string }).detail };
        }
        return status.lastChange?.id === change.changeId;
      },
      "the partition scale-up completed",
      3_000,
    );
    expect(cancelAnswer).toMatchObject({ status: 409, detail: expect.stringMatching(/cannot be cancelled now/) });
    publishing = false;
    await publisher;
    const configuration = brokers[0]!.configuration;
    expect(configuration.lastChange?.status).toBe("COMPLETED");
    expect(configuration.routing).toMatchObject({
      requestHandling: { strategy: "AllPartitions", partitionCount: 6 },
      messageCorrelation: { strategy: "HashMod", partitionCount: 6 },
    });
    expect(routingsSeen.has("ActivePartitions") || routingsSeen.size === 1).toBe(true);

    // Every message acknowledged before or during the change reads back by its key, wherever it lives now.
    for (const [key, correlationKey] of [...before, ...during]) {
      const read = await call(gateway.url, `/v2/messages/${key}`);
      expect(read.status, `message ${key}`).toBe(200);
      expect(((await read.json()) as { correlationKey: string }).correlationKey).toBe(correlationKey);
    }
    // Messages whose key moved live on their new owner: a new publication with the same id is a duplicate there.
    const moved = [...before.values()].find(
      (correlationKey) =>
        partitionForCorrelationKey(correlationKey, 3) !== partitionForCorrelationKey(correlationKey, 6),
    );
    expect(moved).toBeDefined();
    const index = Number(moved?.split("-")[1]);
    const again = await publish({
      name: "order",
      correlationKey: moved,
      messageId: `id-${index}`,
      timeToLive: 600_000,
    });
    expect(again.status).toBe(409);
    // The short-lived message expired once and stays gone.
    await new Promise((resolve) => setTimeout(resolve, 1_600));
    expect((await call(gateway.url, `/v2/messages/${shortLived.key}`)).status).toBe(404);
    // New publications go to all six partitions.
    const partitions = new Set<number>();
    for (let count = 0; count < 60; count += 1) {
      const published = await publish({ name: "after", correlationKey: `after-${count}`, timeToLive: 60_000 });
      partitions.add(Number(BigInt(published.key as string) >> 51n));
    }
    expect([...partitions].sort()).toEqual([1, 2, 3, 4, 5, 6]);

    // A backup taken after the change covers all six partitions.
    expect(await takeBackup(2)).toEqual(["COMPLETED", 6]);
    // The new partitions took checkpoint 1 from relocated messages before checkpoint 2, and wrote no part of it.
    expect(await backupStore.manifests(1n)).toEqual([]);
    const listed = (await (await call(gateway.managementUrl, "/actuator/backups")).json()) as {
      backupId: number;
      state: string;
      partitionCount: number;
    }[];
    expect(listed.map((backup) => [backup.backupId, backup.state, backup.partitionCount])).toEqual([
      [2, "COMPLETED", 6],
      [0, "COMPLETED", 3],
    ]);
  }, 120_000);

  it("keeps a message readable by its first key after later scale-ups moved it again and again", async () => {
    expect(acknowledgedBefore.size, "the messages of the 3 → 6 test above, which this one continues").toBeGreaterThan(
      0,
    );
    for (const count of [7, 8]) {
      const response = await call(gateway.managementUrl, "/actuator/cluster", {
        method: "PATCH",
        body: JSON.stringify({ partitions: { count, replicationFactor: 3 } }),
      });
      expect(response.status, await response.clone().text()).toBe(202);
      const { changeId } = (await response.json()) as { changeId: number };
      await waitFor(
        async () =>
          ((await (await call(gateway.managementUrl, "/actuator/cluster")).json()) as { lastChange?: { id: number } })
            .lastChange?.id === changeId,
        `the scale-up to ${count} partitions completed`,
        3_000,
      );
    }
    // Moved by all three scale-ups: read through three forwards, each to the key a later scale-up gave it.
    const owners = (correlationKey: string) =>
      [3, 6, 7, 8].map((count) => partitionForCorrelationKey(correlationKey, count));
    const movedThrice = [...acknowledgedBefore].filter(([, correlationKey]) => {
      const [first, second, third, fourth] = owners(correlationKey);
      return first !== second && second !== third && third !== fourth;
    });
    expect(movedThrice.length).toBeGreaterThan(0);
    for (const [key, correlationKey] of acknowledgedBefore) {
      const read = await call(gateway.url, `/v2/messages/${key}`);
      expect(read.status, `message ${key} (${correlationKey})`).toBe(200);
      const message = (await read.json()) as { correlationKey: string; partitionId: number };
      expect(message.correlationKey).toBe(correlationKey);
      expect(message.partitionId).toBe(partitionForCorrelationKey(correlationKey, 8));
    }
  }, 120_000);
});
