/**
 * The backup coordinator's rules against a real filesystem store and a fake cluster: no backup while a cluster change
 * runs, parts of unreachable or restarted writers reported FAILED (never left IN_PROGRESS), INCOMPLETE when a
 * partition has no part, and the partitions that took no checkpoint named.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import type { BackupPartManifest } from "../../../src/cluster/backup/store.js";
import { BackupCoordinator, failAbandonedParts } from "../../../src/cluster/broker/backups.js";
import type { CheckpointAnswer } from "../../../src/cluster/broker/peer-requests.js";
import {
  type ClusterConfiguration,
  initialConfiguration,
  roundRobinDistribution,
} from "../../../src/cluster/topology/index.js";

let directory: string;
let store: FilesystemBackupStore;
let configuration: ClusterConfiguration;
let reachable: Set<number>;
let nowMs: number;
let checkpointAnswer: (partitionId: number, checkpointId: number) => CheckpointAnswer | null;

function coordinator(): BackupCoordinator {
  return new BackupCoordinator({
    nodeId: 0,
    logger: pino({ level: "silent" }),
    store,
    configuration: () => configuration,
    isReachable: (brokerId) => reachable.has(brokerId),
    checkpoint: async (partitionId, checkpointId) => checkpointAnswer(partitionId, checkpointId),
    nowMs: () => nowMs,
  });
}

function part(overrides: Partial<BackupPartManifest>): BackupPartManifest {
  return {
    formatVersion: 1,
    backupId: 1,
    partitionId: 1,
    brokerId: 1,
    state: "COMPLETED",
    failureReason: null,
    flowplaneVersion: "0.0.0-test",
    partitionCount: 2,
    checkpointPosition: 10,
    snapshot: null,
    log: { firstIndex: 1, lastIndex: 10 },
    files: [],
    writtenBytes: 0,
    startedAt: "2026-01-01T00:00:00.000Z",
    finishedAt: "2026-01-01T00:00:01.000Z",
    ...overrides,
  };
}

beforeEach(async () => {
  directory = await mkdtemp(join(tmpdir(), "flowplane-backup-coordinator-"));
  store = new FilesystemBackupStore(directory);
  configuration = initialConfiguration({
    clusterSize: 3,
    partitionCount: 2,
    replicationFactor: 3,
    distribution: roundRobinDistribution([0, 1, 2], 2, 3),
    nowIso: "2026-01-01T00:00:00.000Z",
  });
  reachable = new Set([0, 1, 2]);
  nowMs = 1_000_000;
  checkpointAnswer = (_, checkpointId) => ({ outcome: "checkpointed", checkpointId, position: 5, taken: true });
});

afterEach(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe("BackupCoordinator", () => {
  it("takes no backup while a cluster change runs, naming the change", async () => {
    configuration = {
      ...configuration,
      pendingChange: { id: 7, status: "IN_PROGRESS", startedAt: "x", completed: [], pending: [] },
    };
    expect(await coordinator().take(1)).toEqual({
      outcome: "refused",
      status: 409,
      detail: "cluster change 7 is in progress; no backup is taken while the cluster changes",
    });
  });

  it("redirects to the acting coordinator when a broker with a lower id is reachable", async () => {
    const other = new BackupCoordinator({
      nodeId: 1,
      logger: pino({ level: "silent" }),
      store,
      configuration: () => configuration,
      isReachable: () => true,
      checkpoint: async () => null,
      nowMs: () => nowMs,
    });
    expect(await other.take(1)).toEqual({ outcome: "not-coordinator", coordinatorId: 0 });
  });

  it("names a partition that took no checkpoint: MISSING, and the backup INCOMPLETE", async () => {
    checkpointAnswer = (partitionId, checkpointId) =>
      partitionId === 2 ? null : { outcome: "checkpointed", checkpointId, position: 5, taken: true };
    const backups = coordinator();
    await backups.take(4);
    await store.writeManifest(part({ backupId: 4, partitionId: 1 }));
    const answer = await backups.status(4);
    expect(answer).toMatchObject({
      outcome: "backup",
      backup: {
        state: "INCOMPLETE",
        failureReason: "partition 2: no leader of partition 2 took the checkpoint",
        details: [{ state: "COMPLETED" }, { state: "MISSING" }],
      },
    });
  });

  it("counts the partitions at the cut: a part written by a partition added later is not the backup's", async () => {
    const backups = coordinator();
    await store.writeManifest(part({ backupId: 3, partitionId: 1 }));
    await store.writeManifest(part({ backupId: 3, partitionId: 2 }));
    // Partition 3, added by a later scale-up, took checkpoint 3 from a relocated record and recorded its own count.
    await store.writeManifest(part({ backupId: 3, partitionId: 3, partitionCount: 3 }));
    const answer = await backups.status(3);
    expect(answer).toMatchObject({ outcome: "backup", backup: { state: "COMPLETED", partitionCount: 2 } });
    expect((answer as { backup: { details: unknown[] } }).backup.details).toHaveLength(2);
  });

  it("counts a partition without a part yet as in progress right after the checkpoint, and blocks changes", async () => {
    const backups = coordinator();
    await backups.take(5);
    expect((await backups.status(5)) as unknown).toMatchObject({ backup: { state: "IN_PROGRESS" } });
    expect(await backups.blockingBackup()).toBe("backup 5 is in progress; no cluster change starts during a backup");
    nowMs += 120_000;
    expect((await backups.status(5)) as unknown).toMatchObject({ backup: { state: "INCOMPLETE" } });
    expect(await backups.blockingBackup()).toBeNull();
  });

  it("reports the part of an unreachable writer FAILED, and a restarted broker fails the parts it left", async () => {
    await store.writeManifest(
      part({ backupId: 3, partitionId: 1, brokerId: 2, state: "IN_PROGRESS", finishedAt: null }),
    );
    await store.writeManifest(part({ backupId: 3, partitionId: 2, brokerId: 1 }));
    const backups = coordinator();
    expect(await backups.blockingBackup()).toMatch(/backup 3 is in progress/);
    reachable.delete(2);
    expect(await backups.status(3)).toMatchObject({
      backup: {
        state: "FAILED",
        failureReason: "partition 1: broker 2, which was writing this part, is unreachable",
      },
    });
    expect(await backups.blockingBackup()).toBeNull();
    reachable.add(2);
    expect(await failAbandonedParts(store, 2, "2026-01-01T00:01:00.000Z")).toBe(1);
    expect(await backups.status(3)).toMatchObject({
      backup: { state: "FAILED", failureReason: "partition 1: broker 2 stopped while it wrote this part" },
    });
    expect(await failAbandonedParts(store, 2, "2026-01-01T00:01:00.000Z")).toBe(0);
  });

  it("a COMPLETED part of a new leader wins over the FAILED part of the old one", async () => {
    await store.writeManifest(part({ backupId: 6, partitionId: 1, brokerId: 2, state: "FAILED", failureReason: "x" }));
    await store.writeManifest(part({ backupId: 6, partitionId: 1, brokerId: 0 }));
    await store.writeManifest(part({ backupId: 6, partitionId: 2, brokerId: 1 }));
    expect(await coordinator().status(6)).toMatchObject({
      backup: { state: "COMPLETED", details: [{ brokerId: 0, state: "COMPLETED" }, { state: "COMPLETED" }] },
    });
  });

  it("answers 404 for a backup it does not know, and refuses ids that are not above the latest", async () => {
    const backups = coordinator();
    expect(await backups.status(9)).toMatchObject({ outcome: "refused", status: 404 });
    await store.writeManifest(part({ backupId: 8 }));
    expect(await backups.take(8)).toMatchObject({ status: 409, detail: expect.stringMatching(/latest backup is 8/) });
  });
});
