/**
 * The backup coordinator's rules against a real filesystem store and a fake cluster: no backup while a cluster change
 * runs, parts of unreachable or restarted writers reported FAILED (never left IN_PROGRESS), INCOMPLETE when a
 * partition has no part, and the partitions that took no checkpoint named. The backup's record: written before any
 * checkpoint, its partition count the backup's whatever count a part recorded, removed first by a delete, and a backup
 * the store holds only stray parts of never listed; backups from before records are still counted by their parts.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import type { BackupPartManifest, BackupRecord } from "../../../src/cluster/backup/store.js";
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
let checkpointAnswer: (
  partitionId: number,
  checkpointId: number,
) => CheckpointAnswer | null | Promise<CheckpointAnswer | null>;
/** Partitions whose checkpoint request reached its answering leader after an attempt that may have proposed it. */
let uncertainAttempts: Set<number>;

function coordinator(): BackupCoordinator {
  return new BackupCoordinator({
    nodeId: 0,
    logger: pino({ level: "silent" }),
    store,
    configuration: () => configuration,
    isReachable: (brokerId) => reachable.has(brokerId),
    checkpoint: async (partitionId, checkpointId) => {
      const answer = await checkpointAnswer(partitionId, checkpointId);
      return answer === null ? null : { answer, afterUncertainAttempt: uncertainAttempts.has(partitionId) };
    },
    nowMs: () => nowMs,
    flowplaneVersion: "0.0.0-test",
  });
}

function record(backupId: number, partitionCount: number): BackupRecord {
  return {
    formatVersion: 1,
    backupId,
    partitionCount,
    takenAt: "2026-01-01T00:00:00.000Z",
    flowplaneVersion: "0.0.0-test",
  };
}

/** A part as this version's leaders write it: against the backup's record, with the recorded count. */
function recordedPart(overrides: Partial<BackupPartManifest>): BackupPartManifest {
  return part({ backupRecorded: true, ...overrides });
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
  uncertainAttempts = new Set();
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
      flowplaneVersion: "0.0.0-test",
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

  it("a backup from before records counts its partitions by its parts: one added later is not the backup's", async () => {
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

  it("records the backup's partition count before it proposes any checkpoint", async () => {
    const recordedWhenProposed: unknown[] = [];
    checkpointAnswer = async (_, checkpointId) => {
      recordedWhenProposed.push((await store.backupRecords(checkpointId)).map((stored) => stored.record));
      return { outcome: "checkpointed", checkpointId, position: 5, taken: true };
    };
    nowMs = Date.parse("2026-03-01T12:00:00.000Z");
    expect(await coordinator().take(4)).toMatchObject({ outcome: "backup", backup: { partitionCount: 2 } });
    const expected = { ...record(4, 2), takenAt: "2026-03-01T12:00:00.000Z" };
    expect(recordedWhenProposed).toEqual([[expected], [expected]]);
    expect(await store.backupRecords()).toEqual([{ backupId: 4, record: expected, problem: null }]);
  });

  it("keeps the recorded count when a leader recorded a lower one (its view of the cluster lagged behind)", async () => {
    await store.writeBackupRecord(record(6, 3));
    // Partition 1's leader had not heard of partition 3 yet (an older broker's part records its own view).
    await store.writeManifest(part({ backupId: 6, partitionId: 1, partitionCount: 2 }));
    await store.writeManifest(recordedPart({ backupId: 6, partitionId: 2, partitionCount: 3 }));
    const answer = await coordinator().status(6);
    expect(answer).toMatchObject({
      outcome: "backup",
      backup: { partitionCount: 3, state: "INCOMPLETE", failureReason: expect.stringMatching(/^partition 3: /) },
    });
    await store.writeManifest(recordedPart({ backupId: 6, partitionId: 3, partitionCount: 3 }));
    expect(await coordinator().status(6)).toMatchObject({ backup: { partitionCount: 3, state: "COMPLETED" } });
  });

  it("removes the record first when deleting, and never shows a deleted backup again from a stray part", async () => {
    const backups = coordinator();
    await store.writeBackupRecord(record(7, 2));
    await store.writeManifest(recordedPart({ backupId: 7, partitionId: 1 }));
    await store.writeManifest(recordedPart({ backupId: 7, partitionId: 2 }));
    expect(await backups.delete(7)).toMatchObject({ outcome: "backup", backup: { state: "COMPLETED" } });
    expect(await store.backupRecords(7)).toEqual([]);
    // A writer that read the record just before the delete leaves its part behind.
    await store.writeManifest(recordedPart({ backupId: 7, partitionId: 3, partitionCount: 2, state: "IN_PROGRESS" }));
    expect(await backups.list()).toEqual({ outcome: "backups", backups: [] });
    expect(await backups.status(7)).toMatchObject({ outcome: "refused", status: 404 });
    expect(await backups.blockingBackup()).toBeNull();
    // Its id stays used.
    expect(await backups.take(7)).toMatchObject({ status: 409, detail: expect.stringMatching(/latest backup is 7/) });
    // Deleting it again removes the stray part, still answering that there is no such backup.
    expect(await backups.delete(7)).toMatchObject({
      outcome: "refused",
      status: 404,
      detail: expect.stringMatching(/parts a deletion left behind were removed/),
    });
    expect(await store.manifests(7)).toEqual([]);
    expect(await backups.delete(7)).toMatchObject({ outcome: "refused", status: 404, detail: "there is no backup 7" });
  });

  it("gives a partition without a part its grace from the record's time after the coordinator failed over", async () => {
    // Broker 0 wrote the record, proposed the checkpoints and died; this coordinator never took the backup.
    nowMs = Date.parse("2026-03-01T12:00:00.000Z");
    await store.writeBackupRecord({ ...record(9, 2), takenAt: new Date(nowMs - 10_000).toISOString() });
    await store.writeManifest(recordedPart({ backupId: 9, partitionId: 1 }));
    const successor = coordinator();
    expect(await successor.status(9)).toMatchObject({ backup: { state: "IN_PROGRESS" } });
    expect(await successor.blockingBackup()).toBe("backup 9 is in progress; no cluster change starts during a backup");
    nowMs += 60_000;
    expect(await successor.status(9)).toMatchObject({ backup: { state: "INCOMPLETE" } });
    expect(await successor.blockingBackup()).toBeNull();
  });

  it("keeps a backup whose checkpoint a partition already held when the request was retried with a new leader", async () => {
    // The first leader of partition 2 appended checkpoint 6 and lost its leadership; the retry reached the new leader,
    // which had applied it already.
    checkpointAnswer = (partitionId, checkpointId) => ({
      outcome: "checkpointed",
      checkpointId,
      position: 5,
      taken: partitionId === 1,
    });
    uncertainAttempts = new Set([2]);
    expect(await coordinator().take(6)).toMatchObject({ outcome: "backup", backup: { backupId: 6 } });
    expect(await store.backupRecords(6)).toHaveLength(1);
    // Held without such an attempt, the checkpoint is older than this take: the id of a deleted backup, refused.
    uncertainAttempts = new Set();
    nowMs += 120_000;
    expect(await coordinator().take(7)).toMatchObject({
      status: 409,
      detail: expect.stringMatching(/has taken checkpoint 7 already/),
    });
    expect(await store.backupRecords(7)).toEqual([]);
  });

  it("lists recorded backups, the one without parts yet included, and old backups without a record", async () => {
    await store.writeManifest(part({ backupId: 2, partitionId: 1 }));
    await store.writeManifest(part({ backupId: 2, partitionId: 2 }));
    await store.writeBackupRecord(record(3, 2));
    const listed = await coordinator().list();
    expect(listed).toMatchObject({
      outcome: "backups",
      backups: [
        { backupId: 3, state: "INCOMPLETE", partitionCount: 2 },
        { backupId: 2, state: "COMPLETED", partitionCount: 2 },
      ],
    });
  });

  it("reports a backup whose record is damaged FAILED, naming the file", async () => {
    await store.writeBackupRecord(record(5, 2));
    await store.writeManifest(recordedPart({ backupId: 5, partitionId: 1 }));
    await store.writeManifest(recordedPart({ backupId: 5, partitionId: 2 }));
    await writeFile(store.recordPath(5), "{not json");
    expect(await coordinator().status(5)).toMatchObject({
      backup: { state: "FAILED", failureReason: `the backup's record: ${store.recordPath(5)}: the record is not JSON` },
    });
  });

  it("refuses a deleted backup's id before asking any partition, even when the first leader asked does not answer", async () => {
    const backups = coordinator();
    expect(await backups.take(5)).toMatchObject({ outcome: "backup" });
    await store.writeManifest(recordedPart({ backupId: 5, partitionId: 1 }));
    await store.writeManifest(recordedPart({ backupId: 5, partitionId: 2 }));
    expect(await backups.delete(5)).toMatchObject({ outcome: "backup" });
    // Every partition holds checkpoint 5 already, and the first leader asked did not answer: its answer alone cannot
    // tell this take from the deleted one.
    const asked: number[] = [];
    checkpointAnswer = (partitionId, checkpointId) => {
      asked.push(partitionId);
      return { outcome: "checkpointed", checkpointId, position: 5, taken: false };
    };
    uncertainAttempts = new Set([1, 2]);
    nowMs += 120_000;
    expect(await coordinator().take(5)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "backup ids are never reused and must be above every earlier id, deleted backups' included; id 5 was taken before and its backup no longer exists",
    });
    expect(asked).toEqual([]);
    expect(await store.backupRecords(5)).toEqual([]);
    expect(await backups.list()).toEqual({ outcome: "backups", backups: [] });
  });

  it("keeps an id taken when the coordinator stopped between its mark and its record, across coordinators", async () => {
    await store.markTaken(8);
    // Another coordinator (a restarted broker, the next lowest broker id) on the same store directory.
    const successor = () =>
      new BackupCoordinator({
        nodeId: 0,
        logger: pino({ level: "silent" }),
        store: new FilesystemBackupStore(directory),
        configuration: () => configuration,
        isReachable: () => true,
        checkpoint: async (_, checkpointId) => ({
          answer: { outcome: "checkpointed", checkpointId, position: 5, taken: true },
          afterUncertainAttempt: false,
        }),
        nowMs: () => nowMs,
        flowplaneVersion: "0.0.0-test",
      });
    expect(await successor().list()).toEqual({ outcome: "backups", backups: [] });
    expect(await successor().take(8)).toMatchObject({ status: 409, detail: expect.stringMatching(/id 8 was taken/) });
    expect(await successor().take(9)).toMatchObject({ outcome: "backup", backup: { backupId: 9 } });
  });

  it("refuses the id of a deleted backup that an older version took (its store held no mark)", async () => {
    await store.writeManifest(part({ backupId: 3, partitionId: 1 }));
    await store.writeManifest(part({ backupId: 3, partitionId: 2 }));
    const backups = coordinator();
    expect(await backups.delete(3)).toMatchObject({ outcome: "backup", backup: { backupId: 3 } });
    expect(await backups.take(3)).toMatchObject({ status: 409, detail: expect.stringMatching(/id 3 was taken/) });
  });

  it("removes the record of a take the partitions refused (the id of a deleted backup)", async () => {
    checkpointAnswer = (partitionId, checkpointId) => ({
      outcome: "checkpointed",
      checkpointId: partitionId === 1 ? checkpointId : checkpointId + 1,
      position: 5,
      taken: partitionId === 1,
    });
    expect(await coordinator().take(3)).toMatchObject({ status: 409 });
    expect(await store.backupRecords()).toEqual([]);
    expect(await coordinator().list()).toEqual({ outcome: "backups", backups: [] });
  });

  it("proposes no checkpoint when the record cannot be written", async () => {
    const failing = Object.create(store) as FilesystemBackupStore;
    failing.writeBackupRecord = async () => {
      throw new Error("the disk is full");
    };
    let proposed = 0;
    const backups = new BackupCoordinator({
      nodeId: 0,
      logger: pino({ level: "silent" }),
      store: failing,
      configuration: () => configuration,
      isReachable: () => true,
      checkpoint: async () => {
        proposed += 1;
        return null;
      },
      nowMs: () => nowMs,
      flowplaneVersion: "0.0.0-test",
    });
    expect(await backups.take(1)).toEqual({
      outcome: "refused",
      status: 503,
      detail: "the backup store could not record backup 1; no checkpoint was taken",
    });
    expect(proposed).toBe(0);
  });
});
