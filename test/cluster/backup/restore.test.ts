/**
 * Backup and restore end to end, with real in-process brokers, a real gateway and a filesystem backup store: publish
 * N messages, take a backup while 16 publishers keep writing, publish M more, destroy every data directory, restore
 * every broker: exactly the messages acknowledged before each partition's checkpoint are there and none published
 * after the backup was taken, on every partition, and the cluster accepts writes again. Then the refusals: a
 * corrupted byte (the file named), another partition count (both counts named), a failed backup, a non-empty
 * data directory; each leaves the data directory empty.
 */
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { BackupPartDamagedError } from "../../../src/cluster/backup/read-part.js";
import { RestoreRefusedError, restoreBroker } from "../../../src/cluster/backup/restore.js";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { InterruptedRestoreError, RESTORE_MARKER_FILE_NAME } from "../../../src/cluster/broker/files.js";
import { initialDistribution } from "../../../src/cluster/broker/options.js";
import type { BackupView } from "../../../src/cluster/broker/protocol.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { startTestPlatform, type TestPlatform } from "../../support/platform.js";
import { requestToken } from "../../support/tokens.js";
import {
  partitionSettled,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  testBrokerOptions,
  waitFor,
} from "../broker/support.js";

let platform: TestPlatform;
let root: string;
let storeDirectory: string;
let store: FilesystemBackupStore;
let brokers: Broker[] = [];
let gateway: RunningGateway | undefined;
let token: string;

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

function activeGateway(): RunningGateway {
  if (gateway === undefined) throw new Error("no gateway");
  return gateway;
}

/** Publishes with a unique message id; retries "not now" answers. Resolves with the key, or null if refused. */
async function publish(messageId: string): Promise<string> {
  for (let attempt = 0; attempt < 400; attempt += 1) {
    const response = await call(activeGateway().url, "/v2/messages/publication", {
      method: "POST",
      body: JSON.stringify({ name: "m", correlationKey: messageId, messageId, timeToLive: 3_600_000 }),
    });
    if (response.status === 200) return ((await response.json()) as { messageKey: string }).messageKey;
    if (response.status !== 503 && response.status !== 504 && response.status !== 502) {
      throw new Error(`publication answered ${response.status}: ${await response.text()}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error("publication kept being refused");
}

async function read(key: string): Promise<number> {
  for (let attempt = 0; attempt < 400; attempt += 1) {
    const response = await call(activeGateway().url, `/v2/messages/${key}`);
    if (response.status === 200 || response.status === 404) return response.status;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`reading ${key} kept failing`);
}

async function startCluster(): Promise<void> {
  brokers = await startBrokers(root, 3, () => ({ backupStore: store }));
  for (const partitionId of [1, 2, 3]) {
    await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 3_000);
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
}

async function stopCluster(): Promise<void> {
  await gateway?.close();
  gateway = undefined;
  await Promise.all(brokers.map((broker) => broker.close()));
  brokers = [];
}

function distribution() {
  return initialDistribution(testBrokerOptions(root, 0));
}

beforeAll(async () => {
  platform = await startTestPlatform();
  token = await requestToken(platform, platform.adminClient, "gateway-api");
  root = await temporaryDirectory("restore");
  storeDirectory = await mkdtemp(join(tmpdir(), "flowplane-restore-store-"));
  store = new FilesystemBackupStore(storeDirectory);
  await startCluster();
});

afterAll(async () => {
  await stopCluster();
  if (root !== undefined) await removeDirectory(root);
  if (storeDirectory !== undefined) await rm(storeDirectory, { recursive: true, force: true });
  await platform?.close();
});

describe("backup and restore", () => {
  it("restores exactly the messages before each partition's checkpoint, and the cluster takes writes again", async () => {
    const before: string[] = [];
    for (let index = 0; index < 60; index += 1) before.push(await publish(`before-${index}`));
    // 16 publishers keep writing while the backup is taken.
    let writing = true;
    const acknowledgedBeforeBackup: string[] = [];
    const sentAfterBackup: string[] = [];
    let backupAnswered = false;
    let backupAsked = false;
    const publishers = Array.from({ length: 16 }, async (_, publisher) => {
      for (let index = 0; writing; index += 1) {
        const sentAfter = backupAnswered;
        const key = await publish(`during-${publisher}-${index}`);
        if (!backupAsked) acknowledgedBeforeBackup.push(key);
        if (sentAfter) sentAfterBackup.push(key);
      }
    });
    await waitFor(() => acknowledgedBeforeBackup.length >= 50, "publishers are writing");
    backupAsked = true;
    const taken = await call(activeGateway().managementUrl, "/actuator/backups", {
      method: "POST",
      body: JSON.stringify({ backupId: 10 }),
    });
    backupAnswered = true;
    expect(taken.status, await taken.clone().text()).toBe(202);
    await waitFor(() => sentAfterBackup.length >= 50, "publishers wrote after the backup");
    writing = false;
    await Promise.all(publishers);
    const after: string[] = [];
    for (let index = 0; index < 30; index += 1) after.push(await publish(`after-${index}`));
    let view: BackupView | undefined;
    await waitFor(async () => {
      view = (await (await call(activeGateway().managementUrl, "/actuator/backups/10")).json()) as BackupView;
      return view.state !== "IN_PROGRESS";
    }, "the backup ends");
    expect(view?.state).toBe("COMPLETED");

    // Every broker's disk is lost.
    await stopCluster();
    await rm(join(root, "brokers"), { recursive: true, force: true });
    for (const nodeId of [0, 1, 2]) {
      const report = await restoreBroker({
        store,
        backupId: 10n,
        nodeId,
        dataDirectory: testBrokerOptions(root, nodeId).dataDirectory,
        distribution: distribution(),
      });
      expect(report.partitions.map((partition) => partition.partitionId)).toEqual([1, 2, 3]);
    }
    await startCluster();

    for (const key of [...before, ...acknowledgedBeforeBackup]) expect(await read(key), key).toBe(200);
    for (const key of [...sentAfterBackup, ...after]) expect(await read(key), key).toBe(404);
    // The cluster takes writes again, and the restored message ids are still unique.
    expect(await read(await publish("after-restore"))).toBe(200);
    const duplicate = await call(activeGateway().url, "/v2/messages/publication", {
      method: "POST",
      body: JSON.stringify({ name: "m", correlationKey: "before-3", messageId: "before-3", timeToLive: 60_000 }),
    });
    expect(duplicate.status).toBe(409);
    // Backup ids go on above the restored checkpoint.
    const reused = await call(activeGateway().managementUrl, "/actuator/backups", {
      method: "POST",
      body: JSON.stringify({ backupId: 10 }),
    });
    expect(reused.status).toBe(409);
  });

  it("refuses a corrupted backup naming the file, another partition count naming both, and leaves nothing", async () => {
    const target = join(root, "refused");
    const [part] = (await store.manifests(10n)).filter(
      (manifest) => manifest.partitionId === 2 && manifest.state === "COMPLETED",
    );
    if (part === undefined) throw new Error("no part of partition 2");
    const path = join(store.partDirectory(part), "log.bin");
    const original = await readFile(path);
    const corrupted = Buffer.from(original);
    const middle = Math.floor(corrupted.byteLength / 2);
    corrupted[middle] = (corrupted[middle] as number) ^ 0x01;
    await writeFile(path, corrupted);
    const corruptedRestore = restoreBroker({
      store,
      backupId: 10n,
      nodeId: 0,
      dataDirectory: target,
      distribution: distribution(),
    });
    await expect(corruptedRestore).rejects.toThrow(BackupPartDamagedError);
    await expect(
      restoreBroker({ store, backupId: 10n, nodeId: 0, dataDirectory: target, distribution: distribution() }),
    ).rejects.toThrow(/partition 2 .*log\.bin does not match its CRC-32C checksum/);
    await writeFile(path, original);

    const fourPartitions = initialDistribution(testBrokerOptions(root, 0, { partitionsCount: 4 }));
    await expect(
      restoreBroker({ store, backupId: 10n, nodeId: 0, dataDirectory: target, distribution: fourPartitions }),
    ).rejects.toThrow("backup 10 holds 3 partitions but this cluster has 4; the partition counts must be equal");

    await store.writeBackupRecord({
      formatVersion: 1,
      backupId: 11n,
      partitionCount: 3,
      takenAt: new Date().toISOString(),
      flowplaneVersion: "0.0.0-test",
    });
    await store.writeManifest({
      ...part,
      backupId: 11n,
      state: "FAILED",
      failureReason: "broker 1 lost the leadership",
    });
    const failed = restoreBroker({
      store,
      backupId: 11n,
      nodeId: 0,
      dataDirectory: target,
      distribution: distribution(),
    });
    await expect(failed).rejects.toThrow(RestoreRefusedError);
    await expect(
      restoreBroker({ store, backupId: 11n, nodeId: 0, dataDirectory: target, distribution: distribution() }),
    ).rejects.toThrow(/partition 1 has no part; partition 2 FAILED: broker 1 lost the leadership/);

    await mkdir(target, { recursive: true });
    await writeFile(join(target, "leftover"), "x");
    await expect(
      restoreBroker({ store, backupId: 10n, nodeId: 0, dataDirectory: target, distribution: distribution() }),
    ).rejects.toThrow(/needs an empty data directory/);
    await rm(join(target, "leftover"));
    // Nothing was written by any refused restore.
    await expect(readFile(join(target, "broker.pid"))).rejects.toThrow();
  });

  it("leaves a marker while it writes: a broker refuses what a killed restore left, and the same restore starts over", async () => {
    const target = join(root, "killed");
    const options = { store, backupId: 10n, nodeId: 0, dataDirectory: target, distribution: distribution() };
    const restored = await restoreBroker(options);
    await expect(readdir(target)).resolves.not.toContain(RESTORE_MARKER_FILE_NAME);
    // What a restore killed after its first partition leaves: its marker, the partitions written so far, and a
    // broker.pid naming a process that is gone.
    await writeFile(join(target, RESTORE_MARKER_FILE_NAME), "");
    await writeFile(join(target, "broker.pid"), "2147483646");
    await writeFile(join(target, "written-before-the-kill"), "");
    await expect(Broker.start(testBrokerOptions(root, 0, { dataDirectory: target }))).rejects.toBeInstanceOf(
      InterruptedRestoreError,
    );
    expect(await restoreBroker(options)).toEqual(restored);
    const entries = await readdir(target);
    expect(entries).not.toContain(RESTORE_MARKER_FILE_NAME);
    expect(entries).not.toContain("written-before-the-kill");
    expect(entries).toContain("raft");
  });

  it("restores a backup whose manifests an earlier build wrote with SHA-256 checksums to the same state", async () => {
    const options = { store, backupId: 10n, nodeId: 0, distribution: distribution() };
    const current = await restoreBroker({ ...options, dataDirectory: join(root, "restored-crc32c") });
    const parts = (await store.manifests(10n)).filter((part) => part.state === "COMPLETED");
    expect(parts.flatMap((part) => part.files.map((file) => Object.keys(file).sort()))).toContainEqual([
      "crc32c",
      "name",
      "sizeBytes",
    ]);
    for (const part of parts) {
      const files = await Promise.all(
        part.files.map(async ({ name, sizeBytes }) => ({
          name,
          sizeBytes,
          sha256: createHash("sha256")
            .update(await readFile(join(store.partDirectory(part), name)))
            .digest("hex"),
        })),
      );
      await store.writeManifest({ ...part, files });
    }
    try {
      const earlier = await restoreBroker({ ...options, dataDirectory: join(root, "restored-sha256") });
      expect(earlier).toEqual(current);
      expect(current.partitions.length).toBeGreaterThan(0);
    } finally {
      for (const part of parts) await store.writeManifest(part);
    }
  });
});
