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
import {
  BackupCoordinator,
  type BackupCoordinatorContext,
  failAbandonedParts,
  type LargeCheckpointIdSupport,
  summaryDetails,
} from "../../../src/cluster/broker/backups.js";
import type { CheckpointAnswer } from "../../../src/cluster/broker/peer-requests.js";
import {
  type ClusterConfiguration,
  encodeConfiguration,
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
  checkpointId: bigint,
) => CheckpointAnswer | null | Promise<CheckpointAnswer | null>;
/** Brokers whose `describe` answer does not say they apply checkpoint ids above 2^53 − 1 (an earlier version). */
let earlierVersionBrokers: number[];
/** Brokers that do not answer `describe`. */
let silentBrokers: number[];
/** The brokers each check of large checkpoint ids asked. */
let askedForSupport: number[][];

/** What the brokers asked answer about large checkpoint ids, as `earlierVersionBrokers` and `silentBrokers` say. */
async function largeCheckpointIdSupport(brokerIds: readonly number[]): Promise<LargeCheckpointIdSupport> {
  askedForSupport.push([...brokerIds]);
  return {
    unanswered: brokerIds.filter((brokerId) => silentBrokers.includes(brokerId)),
    unsupported: brokerIds
      .filter((brokerId) => earlierVersionBrokers.includes(brokerId) && !silentBrokers.includes(brokerId))
      .map((brokerId) => ({ brokerId, version: "1.0.0" })),
  };
}

/** Partitions whose checkpoint request reached its answering leader after an attempt that may have proposed it. */
let uncertainAttempts: Set<number>;

/** A coordinator of broker 0 on the test's store and fakes, with `overrides` of its context. */
function coordinator(overrides: Partial<BackupCoordinatorContext> = {}): BackupCoordinator {
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
    largeCheckpointIdSupport,
    nowMs: () => nowMs,
    monotonicNowMs: () => nowMs,
    flowplaneVersion: "0.0.0-test",
    ...overrides,
  });
}

function record(backupId: bigint, partitionCount: number): BackupRecord {
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
    backupId: 1n,
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
  earlierVersionBrokers = [];
  silentBrokers = [];
  askedForSupport = [];
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
    expect(await coordinator().take(1n)).toEqual({
      outcome: "refused",
      status: 409,
      detail: "cluster change 7 is in progress; no backup is taken while the cluster changes",
    });
  });

  it("takes no backup while the change coordinator records a change, from its look at the backups to its release", async () => {
    const backups = coordinator();
    // The change coordinator's look at the backups reads the store; a take that starts meanwhile must not run beside
    // the change it is about to record.
    const holding = backups.holdForChange();
    expect(await backups.take(1n)).toEqual({
      outcome: "refused",
      status: 409,
      detail: "a cluster change is being recorded; no backup is taken while the cluster changes",
    });
    const hold = await holding;
    if (!("release" in hold)) throw new Error(`not held: ${hold.refusal}`);
    expect(await backups.take(1n)).toMatchObject({ outcome: "refused", status: 409 });
    hold.release();
    hold.release();
    expect(await backups.take(1n)).toMatchObject({ outcome: "backup" });
    // A backup in progress refuses the next change, and holds nothing off.
    expect(await backups.holdForChange()).toEqual({
      refusal: "backup 1 is in progress; no cluster change starts during a backup",
    });
    nowMs += 120_000;
    expect(await backups.take(2n)).toMatchObject({ outcome: "backup" });
  });

  it("holds no change while a backup is being taken", async () => {
    // Leaders answer only once the test lets them.
    let answered = false;
    const waiting: (() => void)[] = [];
    checkpointAnswer = async (_, checkpointId) => {
      if (!answered) await new Promise<void>((resolve) => waiting.push(resolve));
      return { outcome: "checkpointed", checkpointId, position: 5, taken: true };
    };
    const backups = coordinator();
    const taking = backups.take(4n);
    // Wait until the take asks a leader: it has recorded the backup and is waiting for the checkpoint's answer.
    for (let turn = 0; turn < 1_000 && (await store.backupIds()).length === 0; turn += 1) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    expect(await backups.holdForChange()).toEqual({
      refusal: "backup 4 is being taken; no cluster change starts during a backup",
    });
    answered = true;
    for (const answer of waiting) answer();
    expect(await taking).toMatchObject({ outcome: "backup" });
  });

  it("redirects to the acting coordinator when a broker with a lower id is reachable", async () => {
    const other = new BackupCoordinator({
      nodeId: 1,
      logger: pino({ level: "silent" }),
      store,
      configuration: () => configuration,
      isReachable: () => true,
      checkpoint: async () => null,
      largeCheckpointIdSupport,
      nowMs: () => nowMs,
      monotonicNowMs: () => nowMs,
      flowplaneVersion: "0.0.0-test",
    });
    expect(await other.take(1n)).toEqual({ outcome: "not-coordinator", coordinatorId: 0 });
  });

  it("names a partition that took no checkpoint: MISSING, and the backup INCOMPLETE", async () => {
    checkpointAnswer = (partitionId, checkpointId) =>
      partitionId === 2 ? null : { outcome: "checkpointed", checkpointId, position: 5, taken: true };
    const backups = coordinator();
    await backups.take(4n);
    await store.writeManifest(part({ backupId: 4n, partitionId: 1 }));
    const answer = await backups.status(4n);
    expect(answer).toMatchObject({
      outcome: "backup",
      backup: {
        state: "INCOMPLETE",
        failureReason: "partition 2: no leader of partition 2 took the checkpoint",
        details: [{ state: "COMPLETED" }, { state: "MISSING" }],
      },
    });
  });

  it("says a partition that took the checkpoint but wrote no part its coordinator can see may write to another store", async () => {
    const backups = coordinator();
    await backups.take(4n);
    await store.writeManifest(part({ backupId: 4n, partitionId: 1 }));
    expect(await backups.status(4n)).toMatchObject({ backup: { details: [{}, { state: "IN_PROGRESS" }] } });
    nowMs += 120_000;
    const answer = await backups.status(4n);
    expect(answer).toMatchObject({ backup: { details: [{ state: "COMPLETED" }, { state: "MISSING" }] } });
    expect((answer as { backup: { failureReason: string } }).backup.failureReason).toMatch(
      /^partition 2: partition 2 took the checkpoint, but the backup store this broker reads holds no part of it: .*basePath/,
    );
  });

  it("times a partition's grace on the monotonic clock, so a step back of the wall clock does not extend it", async () => {
    let monotonicMs = 5_000;
    const backups = coordinator({ monotonicNowMs: () => monotonicMs });
    await backups.take(4n);
    await store.writeManifest(part({ backupId: 4n, partitionId: 1 }));
    expect(await backups.status(4n)).toMatchObject({ backup: { details: [{}, { state: "IN_PROGRESS" }] } });
    // Two minutes pass while the wall clock is stepped back two hours.
    monotonicMs += 120_000;
    nowMs -= 2 * 60 * 60 * 1000;
    expect(await backups.status(4n)).toMatchObject({ backup: { details: [{}, { state: "MISSING" }] } });
  });

  it("a backup from before records counts its partitions by its parts: one added later is not the backup's", async () => {
    const backups = coordinator();
    await store.writeManifest(part({ backupId: 3n, partitionId: 1 }));
    await store.writeManifest(part({ backupId: 3n, partitionId: 2 }));
    // Partition 3, added by a later scale-up, took checkpoint 3 from a relocated record and recorded its own count.
    await store.writeManifest(part({ backupId: 3n, partitionId: 3, partitionCount: 3 }));
    const answer = await backups.status(3n);
    expect(answer).toMatchObject({ outcome: "backup", backup: { state: "COMPLETED", partitionCount: 2 } });
    expect((answer as { backup: { details: unknown[] } }).backup.details).toHaveLength(2);
  });

  it("counts a partition without a part yet as in progress right after the checkpoint, and blocks changes", async () => {
    const backups = coordinator();
    await backups.take(5n);
    expect((await backups.status(5n)) as unknown).toMatchObject({ backup: { state: "IN_PROGRESS" } });
    expect(await backups.blockingBackup()).toBe("backup 5 is in progress; no cluster change starts during a backup");
    nowMs += 120_000;
    expect((await backups.status(5n)) as unknown).toMatchObject({ backup: { state: "INCOMPLETE" } });
    expect(await backups.blockingBackup()).toBeNull();
  });

  it("reports the part of an unreachable writer FAILED, and a restarted broker fails the parts it left", async () => {
    await store.writeManifest(
      part({ backupId: 3n, partitionId: 1, brokerId: 2, state: "IN_PROGRESS", finishedAt: null }),
    );
    await store.writeManifest(part({ backupId: 3n, partitionId: 2, brokerId: 1 }));
    const backups = coordinator();
    expect(await backups.blockingBackup()).toMatch(/backup 3 is in progress/);
    reachable.delete(2);
    expect(await backups.status(3n)).toMatchObject({
      backup: {
        state: "FAILED",
        failureReason: "partition 1: broker 2, which was writing this part, is unreachable",
      },
    });
    expect(await backups.blockingBackup()).toBeNull();
    reachable.add(2);
    // A part the restarted process began itself (started at or after its start) is not its previous process's.
    await store.writeManifest(
      part({
        backupId: 4n,
        partitionId: 2,
        brokerId: 2,
        state: "IN_PROGRESS",
        finishedAt: null,
        startedAt: "2026-01-01T00:01:00.000Z",
      }),
    );
    expect(await failAbandonedParts(store, 2, "2026-01-01T00:01:05.000Z", "2026-01-01T00:01:00.000Z")).toBe(1);
    expect(await backups.status(3n)).toMatchObject({
      backup: { state: "FAILED", failureReason: "partition 1: broker 2 stopped while it wrote this part" },
    });
    expect(await failAbandonedParts(store, 2, "2026-01-01T00:01:05.000Z", "2026-01-01T00:01:00.000Z")).toBe(0);
    expect(await backups.blockingBackup()).toMatch(/backup 4 is in progress/);
  });

  it("a COMPLETED part of a new leader wins over the FAILED part of the old one", async () => {
    await store.writeManifest(part({ backupId: 6n, partitionId: 1, brokerId: 2, state: "FAILED", failureReason: "x" }));
    await store.writeManifest(part({ backupId: 6n, partitionId: 1, brokerId: 0 }));
    await store.writeManifest(part({ backupId: 6n, partitionId: 2, brokerId: 1 }));
    expect(await coordinator().status(6n)).toMatchObject({
      backup: { state: "COMPLETED", details: [{ brokerId: 0, state: "COMPLETED" }, { state: "COMPLETED" }] },
    });
  });

  it("answers 404 for a backup it does not know, and refuses ids that are not above the latest", async () => {
    const backups = coordinator();
    expect(await backups.status(9n)).toMatchObject({ outcome: "refused", status: 404 });
    await store.writeManifest(part({ backupId: 8n }));
    expect(await backups.take(8n)).toMatchObject({ status: 409, detail: expect.stringMatching(/latest backup is 8/) });
  });

  it("records the backup's partition count and configuration before it proposes any checkpoint", async () => {
    const recordedWhenProposed: unknown[] = [];
    checkpointAnswer = async (_, checkpointId) => {
      recordedWhenProposed.push((await store.backupRecords(checkpointId)).map((stored) => stored.record));
      return { outcome: "checkpointed", checkpointId, position: 5, taken: true };
    };
    nowMs = Date.parse("2026-03-01T12:00:00.000Z");
    expect(await coordinator().take(4n)).toMatchObject({ outcome: "backup", backup: { partitionCount: 2 } });
    const expected = { ...record(4n, 2), takenAt: "2026-03-01T12:00:00.000Z" };
    expect(recordedWhenProposed).toEqual([[expected], [expected]]);
    expect(await store.backupRecords()).toEqual([{ backupId: 4n, record: expected, problem: null }]);
    // The backup holds the cluster configuration it was taken in, as the spec wants, for a restore into its shape.
    expect(await store.backupConfiguration(4n)).toBe(encodeConfiguration(configuration));
  });

  it("keeps the recorded count when a leader recorded a lower one (its view of the cluster lagged behind)", async () => {
    await store.writeBackupRecord(record(6n, 3));
    // Partition 1's leader had not heard of partition 3 yet (an older broker's part records its own view).
    await store.writeManifest(part({ backupId: 6n, partitionId: 1, partitionCount: 2 }));
    await store.writeManifest(recordedPart({ backupId: 6n, partitionId: 2, partitionCount: 3 }));
    const answer = await coordinator().status(6n);
    expect(answer).toMatchObject({
      outcome: "backup",
      backup: { partitionCount: 3, state: "INCOMPLETE", failureReason: expect.stringMatching(/^partition 3: /) },
    });
    await store.writeManifest(recordedPart({ backupId: 6n, partitionId: 3, partitionCount: 3 }));
    expect(await coordinator().status(6n)).toMatchObject({ backup: { partitionCount: 3, state: "COMPLETED" } });
  });

  it("removes the record first when deleting, and never shows a deleted backup again from a stray part", async () => {
    const backups = coordinator();
    await store.writeBackupRecord(record(7n, 2));
    await store.writeManifest(recordedPart({ backupId: 7n, partitionId: 1 }));
    await store.writeManifest(recordedPart({ backupId: 7n, partitionId: 2 }));
    expect(await backups.delete(7n)).toMatchObject({ outcome: "backup", backup: { state: "COMPLETED" } });
    expect(await store.backupRecords(7n)).toEqual([]);
    // A writer that read the record just before the delete leaves its part behind.
    await store.writeManifest(recordedPart({ backupId: 7n, partitionId: 3, partitionCount: 2, state: "IN_PROGRESS" }));
    expect(await backups.list()).toEqual({ outcome: "backups", backups: [] });
    expect(await backups.status(7n)).toMatchObject({ outcome: "refused", status: 404 });
    expect(await backups.blockingBackup()).toBeNull();
    // Its id stays used.
    expect(await backups.take(7n)).toMatchObject({ status: 409, detail: expect.stringMatching(/latest backup is 7/) });
    // Deleting it again removes the stray part, still answering that there is no such backup.
    expect(await backups.delete(7n)).toMatchObject({
      outcome: "refused",
      status: 404,
      detail: expect.stringMatching(/parts a deletion left behind were removed/),
    });
    expect(await store.manifests(7n)).toEqual([]);
    expect(await backups.delete(7n)).toMatchObject({ outcome: "refused", status: 404, detail: "there is no backup 7" });
  });

  it("gives a partition without a part its grace from the record's time after the coordinator failed over", async () => {
    // Broker 0 wrote the record, proposed the checkpoints and died; this coordinator never took the backup.
    nowMs = Date.parse("2026-03-01T12:00:00.000Z");
    await store.writeBackupRecord({ ...record(9n, 2), takenAt: new Date(nowMs - 10_000).toISOString() });
    await store.writeManifest(recordedPart({ backupId: 9n, partitionId: 1 }));
    const successor = coordinator();
    expect(await successor.status(9n)).toMatchObject({ backup: { state: "IN_PROGRESS" } });
    expect(await successor.blockingBackup()).toBe("backup 9 is in progress; no cluster change starts during a backup");
    nowMs += 60_000;
    expect(await successor.status(9n)).toMatchObject({ backup: { state: "INCOMPLETE" } });
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
    expect(await coordinator().take(6n)).toMatchObject({ outcome: "backup", backup: { backupId: 6 } });
    expect(await store.backupRecords(6n)).toHaveLength(1);
    // Held without such an attempt, the checkpoint is older than this take: the id of a deleted backup, refused.
    uncertainAttempts = new Set();
    nowMs += 120_000;
    expect(await coordinator().take(7n)).toMatchObject({
      status: 409,
      detail: expect.stringMatching(/has taken checkpoint 7 already/),
      // Named for a caller choosing the next id, also when the store's mark does not know it (a store wiped or
      // replaced): the platform steps over it.
      highestUsedBackupId: 7,
    });
    expect(await store.backupRecords(7n)).toEqual([]);
  });

  it("lists recorded backups, the one without parts yet included, and old backups without a record", async () => {
    await store.writeManifest(part({ backupId: 2n, partitionId: 1 }));
    await store.writeManifest(part({ backupId: 2n, partitionId: 2 }));
    await store.writeBackupRecord(record(3n, 2));
    const listed = await coordinator().list();
    expect(listed).toMatchObject({
      outcome: "backups",
      backups: [
        { backupId: 3, state: "INCOMPLETE", partitionCount: 2 },
        { backupId: 2, state: "COMPLETED", partitionCount: 2 },
      ],
    });
  });

  it("lists in summary only the parts that carry a backup's earliest creation and latest update, with its state", async () => {
    await store.writeBackupRecord(record(4n, 3));
    await store.writeManifest(recordedPart({ backupId: 4n, partitionId: 1, startedAt: "2026-01-01T00:00:02.000Z" }));
    await store.writeManifest(
      recordedPart({
        backupId: 4n,
        partitionId: 2,
        startedAt: "2026-01-01T00:00:01.000Z",
        finishedAt: "2026-01-01T00:00:03.000Z",
      }),
    );
    await store.writeManifest(
      recordedPart({
        backupId: 4n,
        partitionId: 3,
        state: "FAILED",
        failureReason: "x",
        startedAt: "2026-01-01T00:00:05.000Z",
        finishedAt: "2026-01-01T00:00:09.000Z",
      }),
    );
    const full = await coordinator().list();
    const summary = await coordinator().list(true);
    if (full.outcome !== "backups" || summary.outcome !== "backups") throw new Error("not listed");
    expect(full.backups[0]?.details.map((detail) => detail.partitionId)).toEqual([1, 2, 3]);
    expect(summary.backups[0]).toEqual({
      ...full.backups[0],
      details: full.backups[0]?.details.filter((detail) => detail.partitionId !== 1),
    });
    expect(summary.backups[0]).toMatchObject({ state: "FAILED", details: [{ partitionId: 2 }, { partitionId: 3 }] });
    expect(summaryDetails([])).toEqual([]);
  });

  it("reports a backup whose record is damaged FAILED, naming the file", async () => {
    await store.writeBackupRecord(record(5n, 2));
    await store.writeManifest(recordedPart({ backupId: 5n, partitionId: 1 }));
    await store.writeManifest(recordedPart({ backupId: 5n, partitionId: 2 }));
    await writeFile(store.recordPath(5n), "{not json");
    expect(await coordinator().status(5n)).toMatchObject({
      backup: {
        state: "FAILED",
        failureReason: `the backup's record: ${store.recordPath(5n)}: the record is not JSON`,
      },
    });
  });

  it("refuses a deleted backup's id before asking any partition, even when the first leader asked does not answer", async () => {
    const backups = coordinator();
    expect(await backups.take(5n)).toMatchObject({ outcome: "backup" });
    await store.writeManifest(recordedPart({ backupId: 5n, partitionId: 1 }));
    await store.writeManifest(recordedPart({ backupId: 5n, partitionId: 2 }));
    expect(await backups.delete(5n)).toMatchObject({ outcome: "backup" });
    // Every partition holds checkpoint 5 already, and the first leader asked did not answer: its answer alone cannot
    // tell this take from the deleted one.
    const asked: number[] = [];
    checkpointAnswer = (partitionId, checkpointId) => {
      asked.push(partitionId);
      return { outcome: "checkpointed", checkpointId, position: 5, taken: false };
    };
    uncertainAttempts = new Set([1, 2]);
    nowMs += 120_000;
    expect(await coordinator().take(5n)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "backup ids are never reused and must be above every earlier id; id 5 is used (a backup of it was taken or attempted); take an id above 5",
      highestUsedBackupId: 5,
    });
    expect(asked).toEqual([]);
    expect(await store.backupRecords(5n)).toEqual([]);
    expect(await backups.list()).toEqual({ outcome: "backups", backups: [] });
  });

  it("keeps an id taken when the coordinator stopped between its mark and its record, across coordinators", async () => {
    await store.markTaken(8n);
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
        largeCheckpointIdSupport,
        nowMs: () => nowMs,
        monotonicNowMs: () => nowMs,
        flowplaneVersion: "0.0.0-test",
      });
    expect(await successor().list()).toEqual({ outcome: "backups", backups: [] });
    expect(await successor().take(8n)).toMatchObject({ status: 409, detail: expect.stringMatching(/id 8 is used/) });
    expect(await successor().take(9n)).toMatchObject({ outcome: "backup", backup: { backupId: 9 } });
  });

  it("refuses the id of a deleted backup that an older version took (its store held no mark)", async () => {
    await store.writeManifest(part({ backupId: 3n, partitionId: 1 }));
    await store.writeManifest(part({ backupId: 3n, partitionId: 2 }));
    const backups = coordinator();
    expect(await backups.delete(3n)).toMatchObject({ outcome: "backup", backup: { backupId: 3 } });
    expect(await backups.take(3n)).toMatchObject({ status: 409, detail: expect.stringMatching(/id 3 is used/) });
  });

  it("takes an id above 2^53 − 1 only when every broker says it applies such ids, and keeps it exact", async () => {
    const beyondSafe = 2n ** 53n + 1n;
    const proposed: bigint[] = [];
    checkpointAnswer = (_, checkpointId) => {
      proposed.push(checkpointId);
      return { outcome: "checkpointed", checkpointId, position: 5, taken: true };
    };
    earlierVersionBrokers = [1];
    silentBrokers = [2];
    expect(await coordinator().take(beyondSafe)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "backup ids above 9007199254740991 need every broker to run a version that takes them: broker 1 (version 1.0.0) answered without saying it does; broker 2 did not answer; upgrade the brokers of an earlier version and make sure the brokers that did not answer run and are reachable, or take an id of at most 9007199254740991",
    });
    // Every other broker of the configuration was asked.
    expect(askedForSupport).toEqual([[1, 2]]);
    expect(proposed).toEqual([]);
    expect(await store.backupIds()).toEqual([]);
    expect(await store.highestTakenBackupId()).toBeNull();
    // An id up to 2^53 − 1 is taken whatever the brokers' versions: earlier versions take it too.
    expect(await coordinator().take(7n)).toMatchObject({ outcome: "backup", backup: { backupId: 7 } });
    nowMs += 120_000;
    earlierVersionBrokers = [];
    silentBrokers = [];
    const largest = 2n ** 63n - 1n;
    expect(await coordinator().take(largest)).toMatchObject({ outcome: "backup", backup: { backupId: largest } });
    expect(proposed).toEqual([7n, 7n, largest, largest]);
    expect((await store.backupRecords(largest))[0]?.record).toMatchObject({ backupId: largest });
    expect(await store.highestTakenBackupId()).toBe(largest);
    expect(await coordinator().take(beyondSafe)).toMatchObject({ status: 409 });
  });

  it("once the store holds an id above 2^53 − 1, takes the next with a broker down, but not with an earlier version", async () => {
    silentBrokers = [];
    expect(await coordinator().take(2n ** 53n)).toMatchObject({ outcome: "backup" });
    nowMs += 120_000;
    // Broker 2 is down: it is not asked, and it keeps no backup from being taken (it applied such ids before).
    reachable.delete(2);
    silentBrokers = [2];
    askedForSupport = [];
    expect(await coordinator().take(2n ** 53n + 1n)).toMatchObject({ outcome: "backup" });
    expect(askedForSupport).toEqual([[1]]);
    nowMs += 120_000;
    // A reachable broker that does not answer in time blocks nothing either.
    silentBrokers = [1, 2];
    expect(await coordinator().take(2n ** 53n + 2n)).toMatchObject({ outcome: "backup" });
    nowMs += 120_000;
    // A broker that answers as an earlier version does, named with its version; no id up to 2^53 − 1 is left to advise.
    silentBrokers = [];
    earlierVersionBrokers = [1];
    expect(await coordinator().take(2n ** 53n + 3n)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "backup ids above 9007199254740991 need every broker to run a version that takes them: broker 1 (version 1.0.0) answered without saying it does; upgrade the brokers of an earlier version",
    });
    expect(await store.highestTakenBackupId()).toBe(2n ** 53n + 2n);
  });

  it("advises an id up to 2^53 − 1 only while one is left above every used id, deleted and attempted ones included", async () => {
    silentBrokers = [2];
    await store.markTaken(2n ** 53n - 2n);
    expect(await coordinator().take(2n ** 53n)).toMatchObject({
      status: 409,
      detail: expect.stringMatching(/: broker 2 did not answer; .*, or take an id of at most 9007199254740991$/),
    });
    await store.markTaken(2n ** 53n - 1n);
    expect(await coordinator().take(2n ** 53n)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "backup ids above 9007199254740991 need every broker to run a version that takes them: broker 2 did not answer; make sure the brokers that did not answer run and are reachable",
    });
  });

  it("keeps brokers without large checkpoint ids out of cluster changes once the store holds such an id", async () => {
    const backups = coordinator();
    earlierVersionBrokers = [3];
    silentBrokers = [4];
    // No large id yet: nothing is asked.
    await store.markTaken(2n ** 53n - 1n);
    expect(await backups.largeBackupIdProblem([0, 3, 4])).toBeNull();
    expect(askedForSupport).toEqual([]);
    // A deleted backup's large id counts (its checkpoint stays in the partitions' logs and snapshots).
    await store.markTaken(2n ** 53n);
    expect(await backups.largeBackupIdProblem([0, 3, 4])).toBe(
      "the backup store holds backup id 9007199254740992, above 9007199254740991, so every broker that hosts a replica must run a version that applies such ids (an earlier version rejects the records that carry them): broker 3 (version 1.0.0) answered without saying it does; broker 4 did not answer; upgrade the brokers of an earlier version and make sure the brokers that did not answer run and are reachable before this change",
    );
    // This broker (0) applies them and is not asked.
    expect(askedForSupport).toEqual([[3, 4]]);
    expect(await backups.largeBackupIdProblem([1, 2])).toBeNull();
    expect(await backups.largeBackupIdProblem([0])).toBeNull();
  });

  it("removes the record of a take the partitions refused (the id of a deleted backup)", async () => {
    checkpointAnswer = (partitionId, checkpointId) => ({
      outcome: "checkpointed",
      checkpointId: partitionId === 1 ? checkpointId : checkpointId + 1n,
      position: 5,
      taken: partitionId === 1,
    });
    expect(await coordinator().take(3n)).toMatchObject({ status: 409 });
    expect(await store.backupRecords()).toEqual([]);
    expect(await coordinator().list()).toEqual({ outcome: "backups", backups: [] });
  });

  it("proposes no checkpoint when the record cannot be written", async () => {
    const failing = Object.create(store) as FilesystemBackupStore;
    failing.writeBackupRecord = async () => {
      throw new Error("the disk is full");
    };
    let proposed = 0;
    const backups = coordinator({
      store: failing,
      checkpoint: async () => {
        proposed += 1;
        return null;
      },
    });
    expect(await backups.take(1n)).toEqual({
      outcome: "refused",
      status: 503,
      detail: "the backup store could not record backup 1 (the disk is full); no checkpoint was taken",
    });
    expect(proposed).toBe(0);
    // The configuration written before the record does not stay behind without it.
    expect(await store.backupConfiguration(1n)).toBeNull();
  });

  it("quotes at most 300 characters of the store's error, so that the advice after it survives a relay", async () => {
    const failing = Object.create(store) as FilesystemBackupStore;
    failing.writeBackupRecord = async (record) => {
      await store.markTaken(record.backupId);
      throw new Error(`EACCES: permission denied, rename '/${"d".repeat(2_000)}'`);
    };
    const refusal = await coordinator({ store: failing }).take(5n);
    expect(refusal).toMatchObject({ outcome: "refused", status: 503 });
    const detail = (refusal as { detail: string }).detail;
    expect(detail).toContain(`(EACCES: permission denied, rename '/${"d".repeat(300 - 36)})`);
    expect(detail).toMatch(
      /; id 5 is used now \(a backup of it was attempted\); take a higher id once the store works$/,
    );
    expect(detail.length).toBeLessThan(1_000);
  });

  it("says a take whose record failed after the store marked its id used that id, and advises a higher one", async () => {
    const failing = Object.create(store) as FilesystemBackupStore;
    failing.writeBackupRecord = async (record) => {
      await store.markTaken(record.backupId);
      throw new Error("the disk is full");
    };
    expect(await coordinator({ store: failing }).take(4n)).toEqual({
      outcome: "refused",
      status: 503,
      detail:
        "the backup store could not record backup 4 (the disk is full); no checkpoint was taken; id 4 is used now (a backup of it was attempted); take a higher id once the store works",
    });
    // No backup of 4 ever existed: the refusal says so.
    expect(await coordinator().take(4n)).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "backup ids are never reused and must be above every earlier id; id 4 is used (a backup of it was taken or attempted); take an id above 4",
      highestUsedBackupId: 4,
    });
  });
});
