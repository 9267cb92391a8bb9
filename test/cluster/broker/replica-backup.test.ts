/**
 * A partition replica's part of a backup: the leader writes it in the background once it applies the checkpoint
 * (writes keep flowing), the part holds exactly the partition's state at the checkpoint position, and a leader that
 * loses its leadership mid-backup fails only that part, which the new leader writes instead; the next backup
 * completes from the new leader. A partition added after a backup takes its checkpoint from a relocated record but
 * writes no part of it, nor of a deleted backup, and a part records the backup's recorded partition count.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino, { type Logger } from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { BackupActivity } from "../../../src/cluster/backup/backup-activity.js";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { rebuildEngine } from "../../../src/cluster/backup/read-part.js";
import type { BackupPartManifest, BackupStore } from "../../../src/cluster/backup/store.js";
import {
  PartitionReplica,
  type PartitionReplicaOptions,
  type ReplicaClock,
  type SnapshotReport,
  systemClock,
} from "../../../src/cluster/broker/partition-replica.js";
import type { PublishMessageCommand } from "../../../src/cluster/broker/protocol.js";
import {
  BACKUP_PART_LOG_LIMIT_INTERVALS,
  ReplicaBackup,
  type ReplicaBackupOptions,
} from "../../../src/cluster/broker/replica-backup.js";
import { partitionForCorrelationKey } from "../../../src/cluster/engine/correlation.js";
import type { Checkpoint } from "../../../src/cluster/engine/index.js";
import { parseKey } from "../../../src/cluster/engine/keys.js";
import { DEFAULT_TENANT_ID, engineCodec } from "../../../src/cluster/engine/records.js";
import { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import { delegatingStore } from "../../support/backup-store.js";
import { detachedMessage } from "../../support/replica-messages.js";
import { removeDirectory, temporaryDirectory, waitFor } from "./support.js";

function command(messageId: string): PublishMessageCommand {
  return { name: "tick", correlationKey: "", timeToLiveMs: 600_000, variables: {}, messageId, tenantId: "<default>" };
}

/** A correlation key that partition `owner` owns over `count` partitions. */
function keyOwnedBy(owner: number, count: number): string {
  for (let index = 0; index < 100_000; index += 1) {
    if (partitionForCorrelationKey(`key-${index}`, count) === owner) return `key-${index}`;
  }
  throw new Error("no such key");
}

let storeDirectory: string;
let store: FilesystemBackupStore;
let ended: BackupPartManifest[];

function backupOptions(target: BackupStore = store): ReplicaBackupOptions {
  return {
    store: target,
    flowplaneVersion: "0.0.0-test",
    onPartEnded: (manifest) => ended.push(manifest),
  };
}

/** Records backup `backupId` in the store, as the coordinator does before it proposes the checkpoint. */
async function recordBackup(backupId: bigint, partitionCount = 1): Promise<void> {
  await store.writeBackupRecord({
    formatVersion: 1,
    backupId,
    partitionCount,
    takenAt: "2026-01-01T00:00:00.000Z",
    flowplaneVersion: "0.0.0-test",
  });
}

/** The test's `store`, whose file writes wait until `release` is called. */
interface HeldStore {
  readonly store: BackupStore;
  release(): void;
  /** Writes that waited for `release`. */
  readonly writesHeld: number;
}

/** A `HeldStore` whose writes, once released, fail while `failWrites` says so. */
function heldStore(failWrites: () => boolean = () => false): HeldStore {
  let release = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const state = {
    writesHeld: 0,
    release: () => release(),
    store: delegatingStore(store, {
      createFile: async (part, name) => {
        const file = await store.createFile(part, name);
        return {
          ...file,
          write: async (bytes) => {
            state.writesHeld += 1;
            await held;
            if (failWrites()) throw new Error("the disk is full");
            await file.write(bytes);
          },
        };
      },
    }),
  };
  return state;
}

beforeEach(async () => {
  storeDirectory = await mkdtemp(join(tmpdir(), "flowplane-backup-store-"));
  store = new FilesystemBackupStore(storeDirectory);
  ended = [];
});

afterEach(async () => {
  await rm(storeDirectory, { recursive: true, force: true });
});

/**
 * The only replica of partition `partitionId` in `environment`, writing backup parts, once it leads; a snapshot every
 * 10 entries unless `overrides` say otherwise.
 */
async function openLeadingReplica(
  environment: StorageEnvironment,
  partitionId: number,
  logger: Logger,
  overrides: Partial<PartitionReplicaOptions> = {},
): Promise<PartitionReplica> {
  const replica = await PartitionReplica.open({
    partitionId,
    memberId: 0,
    environment,
    bootstrap: [{ id: 0, role: "voter", priority: 1 }],
    heartbeatIntervalMs: 10,
    electionTimeoutMs: 50,
    snapshotIntervalEntries: 10,
    maxPendingProposals: 256,
    maxApplyLagEntries: 1000,
    send: () => {},
    onFailure: (error) => {
      throw error;
    },
    backups: backupOptions(),
    logger,
    ...overrides,
  });
  await waitFor(() => replica.report().role === "leader", "replica leads");
  return replica;
}

describe("a single-member partition's backup part", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let replica: PartitionReplica;

  beforeEach(async () => {
    directory = await temporaryDirectory("backup-replica");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    replica = await openLeadingReplica(environment, 1, pino({ level: "silent" }));
  });

  afterEach(async () => {
    await replica.close();
    await environment.close();
    await removeDirectory(directory);
  });

  it("holds exactly the messages applied before the checkpoint, while publications keep flowing", async () => {
    const before: string[] = [];
    for (let sequence = 0; sequence < 25; sequence += 1) {
      const published = await replica.publish(command(`before-${sequence}`));
      if (published.outcome !== "published") throw new Error(JSON.stringify(published));
      before.push(published.key);
    }
    // Publications race the checkpoint: some apply before it, some after.
    const racing = Array.from({ length: 40 }, (_, sequence) => replica.publish(command(`racing-${sequence}`)));
    await recordBackup(1n);
    const checkpoint = await replica.takeCheckpoint(1n);
    const racingKeys = (await Promise.all(racing)).map((answer) => {
      if (answer.outcome !== "published") throw new Error(JSON.stringify(answer));
      return answer.key;
    });
    expect(checkpoint).toMatchObject({ kind: "applied", result: { kind: "checkpointed" } });
    if (checkpoint.kind !== "applied" || checkpoint.result.kind !== "checkpointed") throw new Error("no checkpoint");
    const position = checkpoint.result.checkpoint.position;
    await waitFor(() => ended.length === 1, "the backup part ends");
    const [manifest] = ended as [BackupPartManifest];
    expect(manifest).toMatchObject({ state: "COMPLETED", backupId: 1n, partitionId: 1, checkpointPosition: position });
    // A snapshot every 10 entries: the part is a snapshot plus the log after it.
    expect(manifest.snapshot).not.toBeNull();
    for (let sequence = 0; sequence < 20; sequence += 1) await replica.publish(command(`after-${sequence}`));

    const restored = await rebuildEngine(store, manifest);
    expect(restored.lastAppliedIndex).toBe(position);
    expect(restored.latestCheckpoint).toEqual({ id: 1n, position });
    for (const key of before) expect(restored.getMessage(key)).toBeDefined();
    // Keys count up in apply order: the part holds a prefix of the racing messages and nothing after them.
    const held = racingKeys.filter((key) => restored.getMessage(key) !== undefined);
    const counters = racingKeys.map((key) => parseKey(key)?.counter as number);
    const heldCounters = held.map((key) => parseKey(key)?.counter as number);
    const cut = Math.max(0, ...heldCounters);
    expect(heldCounters.sort((a, b) => a - b)).toEqual(
      counters.filter((counter) => counter <= cut).sort((a, b) => a - b),
    );
    expect(restored.bufferedMessageCount).toBe(before.length + held.length);
  });

  it("a hand-over answered with a higher checkpoint id takes that checkpoint first and writes its part", async () => {
    const key = keyOwnedBy(2, 2);
    const published = await replica.publish({ ...command("moving"), correlationKey: key });
    expect(published.outcome).toBe("published");
    expect(await replica.routeMessages(2, 1, true)).toMatchObject({ kind: "applied" });
    await recordBackup(3n);
    await recordBackup(8n);
    await replica.takeCheckpoint(3n);
    await waitFor(() => ended.length === 1, "the part of checkpoint 3 ends");
    const sent: (bigint | null)[] = [];
    const progress = await replica.relocateMessages(
      async (_owner, messages, checkpointId) => {
        sent.push(checkpointId);
        // The new owner has taken checkpoint 8 already (its own record came before this hand-over).
        return { keys: messages.map(() => "4503599627370497"), checkpointId: 8n };
      },
      { maxBatches: 4, untilMs: Number.POSITIVE_INFINITY, nowMs: Date.now },
    );
    expect(progress).toMatchObject({ outcome: "progress", moved: 1, remaining: 0 });
    // The hand-over carried this partition's latest checkpoint, and the answer's higher one was taken here first.
    expect(sent).toEqual([3n]);
    expect(replica.latestCheckpointId).toBe(8n);
    await waitFor(() => ended.length === 2, "the part of checkpoint 8 ends");
    const manifest = ended[1] as BackupPartManifest;
    expect(manifest).toMatchObject({ state: "COMPLETED", backupId: 8n });
    // Checkpoint 8 lies before the relocatedOut record: the message is still outbound in the part, not forwarded.
    const restored = await rebuildEngine(store, manifest);
    expect(restored.outboundMessages().map((message) => message.correlationKey)).toEqual([key]);
  });

  it("a checkpoint at or below the latest is not taken again and writes no second part", async () => {
    await recordBackup(5n);
    await recordBackup(2n);
    await replica.takeCheckpoint(5n);
    await waitFor(() => ended.length === 1, "the first part ends");
    expect(await replica.takeCheckpoint(5n)).toMatchObject({ result: { kind: "checkpoint-ignored" } });
    expect(await replica.takeCheckpoint(2n)).toMatchObject({ result: { kind: "checkpoint-ignored" } });
    expect((await store.manifests()).map((part) => part.backupId)).toEqual([5n]);
  });
});

describe("a partition added after a backup", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let replica: PartitionReplica;
  let logged: { msg: string; backupId?: number; reason?: string }[];

  beforeEach(async () => {
    logged = [];
    directory = await temporaryDirectory("backup-added-partition");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    replica = await openLeadingReplica(
      environment,
      3,
      pino({ level: "info" }, { write: (line: string) => logged.push(JSON.parse(line)) }),
    );
  });

  afterEach(async () => {
    await replica.close();
    await environment.close();
    await removeDirectory(directory);
  });

  function skipped(backupId: bigint): string | undefined {
    return logged.find((line) => line.msg === "no backup part written" && line.backupId === Number(backupId))?.reason;
  }

  it("writes no part of a backup taken before it existed, nor of a deleted one; a later backup's part is written", async () => {
    // Backup 4 was taken with partitions 1 and 2; a message relocated to partition 3 carries its checkpoint id.
    await recordBackup(4n, 2);
    const moved = {
      sourceKey: "2251799813685249",
      name: "moved",
      correlationKey: keyOwnedBy(3, 3),
      timeToLiveMs: 600_000,
      variablesBytes: engineCodec.pack({}),
      tenantId: DEFAULT_TENANT_ID,
      publishedAtMs: Date.now(),
    };
    expect(await replica.receiveRelocated([moved], 4n)).toMatchObject({ kind: "applied" });
    expect(replica.latestCheckpointId).toBe(4n);
    await waitFor(() => skipped(4n) !== undefined, "partition 3 decides about backup 4");
    expect(skipped(4n)).toBe("the backup holds partitions 1..2; partition 3 was added after it");

    // Backup 6 was deleted (its record first) while its checkpoint still travels through the logs.
    await recordBackup(6n, 3);
    await store.deleteBackup(6n);
    expect(await replica.receiveRelocated([{ ...moved, sourceKey: "2251799813685250" }], 6n)).toMatchObject({
      kind: "applied",
    });
    await waitFor(() => skipped(6n) !== undefined, "partition 3 decides about backup 6");
    expect(skipped(6n)).toMatch(/holds no record of it/);
    expect(await store.manifests()).toEqual([]);

    await recordBackup(9n, 3);
    await replica.takeCheckpoint(9n);
    await waitFor(() => ended.length === 1, "the part of backup 9 ends");
    expect(ended[0]).toMatchObject({ backupId: 9n, partitionId: 3, state: "COMPLETED", partitionCount: 3 });
    expect(ended[0]?.backupRecorded).toBe(true);
    expect((await store.manifests()).map((part) => part.backupId)).toEqual([9n]);
  });
});

describe("the snapshots of a broker writing a backup part", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let activity: BackupActivity;
  /** Leads partition 1 and writes its part of backup 1, whose writes wait for `release`. */
  let writer: PartitionReplica;
  /** Leads partition 2 on the same broker, with a snapshot every 10 entries. */
  let other: PartitionReplica;
  let snapshots: SnapshotReport[];
  /** What `other` logged. */
  let logged: { msg: string; partitionId?: number }[];
  /** What `writer` logged. */
  let writerLogged: { msg: string; partitionId?: number; backupId?: number }[];
  let release: () => void;
  let failWrites: boolean;
  /** Writes of the part that waited for `release`. */
  let heldWrites: () => number;

  beforeEach(async () => {
    snapshots = [];
    logged = [];
    writerLogged = [];
    failWrites = false;
    const held = heldStore(() => failWrites);
    release = held.release;
    heldWrites = () => held.writesHeld;
    directory = await temporaryDirectory("backup-deferral");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    activity = new BackupActivity();
    const logger = pino({ level: "warn" }, { write: (line: string) => writerLogged.push(JSON.parse(line)) });
    writer = await openLeadingReplica(environment, 1, logger, {
      backups: { ...backupOptions(held.store), activity },
      onSnapshot: (report) => snapshots.push(report),
    });
    const otherLogger = pino({ level: "debug" }, { write: (line: string) => logged.push(JSON.parse(line)) });
    other = await openLeadingReplica(environment, 2, otherLogger, {
      backups: { ...backupOptions(), activity },
      onSnapshot: (report) => snapshots.push(report),
    });
    await writer.publish(command("in-the-part"));
    await recordBackup(1n, 2);
    await writer.takeCheckpoint(1n);
    await waitFor(() => activity.writing, "the part is being written");
  });

  afterEach(async () => {
    release();
    // The part ends before its replica closes, so that it reports into this test's list, not the next one's.
    await waitFor(() => !activity.writing, "the part ends");
    await Promise.all([writer.close(), other.close()]);
    await environment.close();
    await removeDirectory(directory);
  });

  async function publishToOther(count: number): Promise<void> {
    for (let sequence = 0; sequence < count; sequence += 1) {
      expect(await other.publish(command(`other-${sequence}`))).toMatchObject({ outcome: "published" });
    }
  }

  it("are deferred until the part ends, then taken", async () => {
    await publishToOther(15);
    const deferral = "snapshot deferred until the backup parts written on this broker end";
    await waitFor(() => logged.some((line) => line.msg === deferral), "the snapshot is deferred");
    expect(snapshots).toEqual([]);
    expect(other.latestSnapshotIndex).toBe(0);
    release();
    await waitFor(() => ended.length === 1, "the part ends");
    expect(ended[0]).toMatchObject({ state: "COMPLETED", partitionId: 1 });
    // No publication after the part: the replica's next tick starts the deferred snapshot.
    await waitFor(() => other.latestSnapshotIndex >= 15, "the deferred snapshot is taken");
    expect(snapshots.map((report) => report.partitionId)).toEqual([2]);
  });

  it("are taken anyway once the log holds three snapshot intervals", async () => {
    await publishToOther(35);
    await waitFor(() => snapshots.length === 1, "the snapshot past the bound");
    expect(snapshots[0]?.index).toBeGreaterThanOrEqual(30);
    // Said once, not at every look while the snapshot is taken.
    const bound = logged.filter((line) => line.msg === "snapshot taken during a backup: the log reached its bound");
    expect(bound).toEqual([expect.objectContaining({ partitionId: 2 })]);
    expect(activity.writing).toBe(true);
    expect(ended).toEqual([]);
  });

  it("are deferred from a checkpoint's proposal on, and no longer once a checkpoint that writes no part is applied", async () => {
    release();
    await waitFor(() => !activity.writing, "the part ends");
    // Backup 5 has no record: partition 2 takes its checkpoint but writes no part of it.
    const taking = other.takeCheckpoint(5n);
    expect(activity.writing).toBe(true);
    expect(await taking).toMatchObject({ kind: "applied", result: { kind: "checkpointed" } });
    await waitFor(() => !activity.writing, "the checkpoint's deferral ends");
    expect(await store.manifests(5n)).toEqual([]);
  });

  it("are no longer deferred once the writer closes while its part's store call hangs", async () => {
    await publishToOther(15);
    await waitFor(() => heldWrites() > 0, "the part's write hangs");
    await writer.close();
    expect(activity.writing).toBe(false);
    await waitFor(() => other.latestSnapshotIndex >= 15, "the deferred snapshot is taken");
    // The hung write goes on and the part ends FAILED (reported here, not into the next test's list).
    release();
    await waitFor(() => ended.length === 1, "the part ends");
    expect(ended[0]).toMatchObject({ state: "FAILED", partitionId: 1 });
  });

  it("include the writing leader's own, once its log passes its bound while the store does not answer", async () => {
    const limit = BACKUP_PART_LOG_LIMIT_INTERVALS * 10;
    for (let sequence = 0; sequence < limit - 5; sequence += 1) {
      expect(await writer.publish(command(`writer-${sequence}`))).toMatchObject({ outcome: "published" });
    }
    // Below the bound the part holds the writer's snapshot however long the store takes.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(writer.latestSnapshotIndex).toBe(0);
    expect(activity.writing).toBe(true);
    for (let sequence = limit - 5; sequence < limit + 5; sequence += 1) {
      expect(await writer.publish(command(`writer-${sequence}`))).toMatchObject({ outcome: "published" });
    }
    await waitFor(() => writer.latestSnapshotIndex >= limit, "the writer's snapshot is taken");
    expect(activity.writing).toBe(false);
    const givenUp = writerLogged.filter((line) => line.msg.startsWith("backup part given up"));
    expect(givenUp).toEqual([expect.objectContaining({ partitionId: 1, backupId: 1 })]);
    // The store answers at last: the part ends FAILED with the reason, though its write went through.
    release();
    await waitFor(() => ended.length === 1, "the part ends");
    expect(ended[0]).toMatchObject({ state: "FAILED", partitionId: 1 });
    expect(ended[0]?.failureReason).toMatch(/grew by \d+ entries while its part waited for the backup store/);
    expect((await store.manifests(1n)).map((part) => part.state)).toEqual(["FAILED"]);
  });

  it("past the writer's bound, give up only the running part: a later backup's reserved part fails saying why", async () => {
    // Backup 1's part waits in the store when it is given up, so that it ends only once the store answers: given up
    // before its first store call, it would end at once, before backup 2's.
    await waitFor(() => heldWrites() > 0, "the part's write hangs");
    await recordBackup(2n, 2);
    await writer.takeCheckpoint(2n);
    const limit = BACKUP_PART_LOG_LIMIT_INTERVALS * 10;
    for (let sequence = 0; sequence < limit + 5; sequence += 1) {
      expect(await writer.publish(command(`writer-${sequence}`))).toMatchObject({ outcome: "published" });
    }
    await waitFor(() => writer.latestSnapshotIndex >= limit, "the writer's snapshot is taken");
    // The log names the part it gave up, backup 1's; backup 2's part starts after the snapshot and fails at once.
    const givenUp = writerLogged.filter((line) => line.msg.startsWith("backup part given up"));
    expect(givenUp).toEqual([expect.objectContaining({ partitionId: 1, backupId: 1 })]);
    await waitFor(() => ended.length === 1, "the part of backup 2 ends");
    expect(ended[0]).toMatchObject({ backupId: 2n, partitionId: 1, state: "FAILED" });
    expect(ended[0]?.failureReason).toMatch(/snapshot at \d+ is past the checkpoint position/);
    release();
    await waitFor(() => ended.length === 2, "the part of backup 1 ends");
    expect(ended[1]).toMatchObject({ backupId: 1n, partitionId: 1, state: "FAILED" });
    expect(ended[1]?.failureReason).toMatch(/grew by \d+ entries while its part waited for the backup store/);
  });

  it("are taken once a part that failed ends", async () => {
    await publishToOther(15);
    failWrites = true;
    release();
    await waitFor(() => ended.length === 1, "the part ends");
    expect(ended[0]).toMatchObject({ state: "FAILED", partitionId: 1 });
    expect(ended[0]?.failureReason).toMatch(/the disk is full/);
    await waitFor(() => other.latestSnapshotIndex >= 15, "the deferred snapshot is taken");
    expect(activity.writing).toBe(false);
  });
});

describe("a part given up while the backup store admits it", () => {
  it("ends FAILED with the reason it was given up, not the snapshot taken meanwhile", async () => {
    const directory = await temporaryDirectory("backup-admission");
    const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    let releaseRecords = () => {};
    const recordsHeld = new Promise<void>((resolve) => {
      releaseRecords = resolve;
    });
    let recordReads = 0;
    const slowStore = delegatingStore(store, {
      backupRecords: async (backupId) => {
        recordReads += 1;
        await recordsHeld;
        return store.backupRecords(backupId);
      },
    });
    const logged: { msg: string; backupId?: number }[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => logged.push(JSON.parse(line)) });
    const replica = await openLeadingReplica(environment, 1, logger, { backups: backupOptions(slowStore) });
    try {
      await recordBackup(3n);
      await replica.takeCheckpoint(3n);
      await waitFor(() => recordReads > 0, "the part waits for its admission");
      const limit = BACKUP_PART_LOG_LIMIT_INTERVALS * 10;
      for (let sequence = 0; sequence < limit + 5; sequence += 1) {
        expect(await replica.publish(command(`admission-${sequence}`))).toMatchObject({ outcome: "published" });
      }
      await waitFor(() => replica.latestSnapshotIndex >= limit, "the snapshot is taken");
      expect(logged.filter((line) => line.msg.startsWith("backup part given up"))).toEqual([
        expect.objectContaining({ backupId: 3 }),
      ]);
      releaseRecords();
      await waitFor(() => ended.length === 1, "the part ends");
      expect(ended[0]).toMatchObject({ backupId: 3n, state: "FAILED" });
      expect(ended[0]?.failureReason).toMatch(/grew by \d+ entries while its part waited for the backup store/);
    } finally {
      releaseRecords();
      await replica.close();
      await environment.close();
      await removeDirectory(directory);
    }
  });
});

describe("a leader whose log stays past its bound", () => {
  /** A `ReplicaBackup` over a stand-in replica: a leader of term 1 whose applied index and store the test sets. */
  function standInReplica(store: Partial<BackupStore>) {
    const state = { applied: 0, latestCheckpoint: null as Checkpoint | null, logged: [] as string[] };
    const activity = new BackupActivity();
    const backup = new ReplicaBackup({
      partitionId: 1,
      memberId: 0,
      logger: pino({ level: "info" }, { write: (line: string) => state.logged.push(JSON.parse(line).msg) }),
      snapshotIntervalEntries: 10,
      backups: { store: delegatingStore(store as BackupStore, store), flowplaneVersion: "test", activity },
      storage: {} as never,
      now: () => Date.now(),
      sleep: async () => {},
      yieldTurn: async () => {},
      engine: () => ({ lastAppliedIndex: state.applied, latestCheckpoint: state.latestCheckpoint }) as never,
      snapshotIndex: () => 0,
      status: () => ({ role: "leader", term: 1 }) as never,
      closed: () => false,
      running: () => true,
      snapshotOnItsWay: () => false,
      nudge: () => {},
    });
    return { state, activity, backup };
  }

  /** One turn of the replica's driver, as `PartitionReplica` takes it. */
  function driverTurn(backup: ReplicaBackup): void {
    backup.maybeStart();
    backup.releasePastLogLimit();
    backup.endDeferralsOnceStarted();
  }

  it("starts no reserved part until its snapshot, says so once, and no longer defers the broker's snapshots", async () => {
    let admissions = 0;
    const { state, activity, backup } = standInReplica({
      backupRecords: () => {
        admissions += 1;
        return new Promise(() => {});
      },
    });
    await backup.proposeCheckpoint(async () => {});
    state.applied = BACKUP_PART_LOG_LIMIT_INTERVALS * 10 + 50;
    backup.reserve({ id: 7n, position: state.applied - 10 } as Checkpoint, true);
    for (let turn = 0; turn < 20; turn += 1) driverTurn(backup);
    expect(backup.running).toBe(false);
    expect(admissions).toBe(0);
    expect(backup.holdsSnapshots).toBe(false);
    expect(activity.writing).toBe(false);
    expect(state.logged).toEqual(["backup part waits for the replica's snapshot: the log is past its bound"]);
  });

  it("lets a look for an unfinished part that it gave up decide nothing when the store answers at last", async () => {
    const looks: ((manifests: BackupPartManifest[]) => void)[] = [];
    const { state, backup } = standInReplica({
      manifests: () => new Promise((resolve) => looks.push(resolve)),
      backupRecords: () => new Promise(() => {}),
    });
    const checkpoint = { id: 8n, position: 5 } as Checkpoint;
    state.latestCheckpoint = checkpoint;
    state.applied = 20;
    backup.considerTakeover(1);
    expect(backup.holdsSnapshots).toBe(true);
    state.applied = BACKUP_PART_LOG_LIMIT_INTERVALS * 10;
    driverTurn(backup);
    expect(state.logged).toEqual([expect.stringMatching(/^gave up looking for an unfinished backup part/)]);
    // The predecessor's part is unfinished; the answer comes after the look was given up.
    const unfinished = { backupId: 8n, partitionId: 1, brokerId: 2, state: "IN_PROGRESS" } as BackupPartManifest;
    looks[0]?.([unfinished]);
    await new Promise((resolve) => setImmediate(resolve));
    state.applied = 20;
    driverTurn(backup);
    expect(backup.running).toBe(false);
    expect(backup.holdsSnapshots).toBe(false);
  });
});

describe("a snapshot being taken when a backup part starts on its broker", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let replica: PartitionReplica;
  let activity: BackupActivity;
  /** The replica's backup store, whose writes wait for its `release`. */
  let held: HeldStore;
  let snapshots: SnapshotReport[];
  /** Ends the part another replica of the broker writes, if one is counted. */
  let endOtherPart: () => void;
  /** While set, the replica's turns between two steps of a snapshot wait for `releaseTurns`. */
  let holdTurns: boolean;
  let releaseTurns: () => void;
  let heldTurns: Promise<void>;
  /** Turns that waited for `releaseTurns`. */
  let turnsHeld: number;
  /** The replica's sleeps: a snapshot held for a backup part sleeps between two looks at whether it may go on. */
  let sleeps: number;
  const clock: ReplicaClock = {
    ...systemClock,
    yieldTurn: () => {
      if (!holdTurns) return systemClock.yieldTurn();
      turnsHeld += 1;
      return heldTurns;
    },
    sleep: (delayMs) => {
      sleeps += 1;
      return systemClock.sleep(delayMs);
    },
  };

  beforeEach(async () => {
    holdTurns = false;
    heldTurns = new Promise((resolve) => {
      releaseTurns = resolve;
    });
    turnsHeld = 0;
    sleeps = 0;
    snapshots = [];
    endOtherPart = () => {};
    activity = new BackupActivity();
    held = heldStore();
    directory = await temporaryDirectory("backup-held-snapshot");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    replica = await openLeadingReplica(environment, 1, pino({ level: "silent" }), {
      clock,
      backups: { ...backupOptions(held.store), activity },
      onSnapshot: (report) => snapshots.push(report),
    });
  });

  afterEach(async () => {
    holdTurns = false;
    releaseTurns();
    held.release();
    endOtherPart();
    // A part ends before its replica closes, so that it reports into this test's list, not the next one's.
    await waitFor(() => !activity.writing, "the part ends");
    await replica.close();
    await environment.close();
    await removeDirectory(directory);
  });

  /** Publishes until the replica takes a snapshot, which stops at its first turn (nothing else takes turns). */
  async function startHeldSnapshot(): Promise<void> {
    holdTurns = true;
    for (let sequence = 0; sequence < 12; sequence += 1) await replica.publish(command(`m-${sequence}`));
    await waitFor(() => turnsHeld > 0, "the snapshot waits for its turn");
    holdTurns = false;
  }

  /**
   * Lets the snapshot take its turns again, and waits until it either went on or held still for a few looks at
   * whether it may go on.
   */
  async function releaseTurnsAndWatch(): Promise<void> {
    const sleepsBefore = sleeps;
    releaseTurns();
    await waitFor(() => sleeps >= sleepsBefore + 3 || snapshots.length > 0, "the snapshot holds still or goes on");
  }

  it("holds still while the leader's own part is written from the snapshot and log before it, then is installed", async () => {
    await startHeldSnapshot();
    await recordBackup(1n);
    const checkpoint = await replica.takeCheckpoint(1n);
    if (checkpoint.kind !== "applied" || checkpoint.result.kind !== "checkpointed") throw new Error("no checkpoint");
    // The part does not wait for the snapshot being taken: it starts, and its write waits for the store.
    await waitFor(() => held.writesHeld > 0, "the part writes while the snapshot is held");
    await releaseTurnsAndWatch();
    expect(snapshots).toEqual([]);
    expect(replica.latestSnapshotIndex).toBe(0);
    held.release();
    await waitFor(() => ended.length === 1, "the part ends");
    expect(ended[0]).toMatchObject({ state: "COMPLETED", snapshot: null });
    expect((await rebuildEngine(store, ended[0] as BackupPartManifest)).bufferedMessageCount).toBe(12);
    await waitFor(() => replica.latestSnapshotIndex > 0, "the held snapshot is installed");
    expect(replica.latestSnapshotIndex).toBeLessThan(checkpoint.result.checkpoint.position);
    expect(snapshots).toHaveLength(1);
  });

  it("holds still while another replica of the broker writes a part, then goes on", async () => {
    await startHeldSnapshot();
    // Counted as a replica of another partition counts the part it writes.
    endOtherPart = activity.begin();
    await releaseTurnsAndWatch();
    expect(snapshots).toEqual([]);
    expect(replica.latestSnapshotIndex).toBe(0);
    endOtherPart();
    await waitFor(() => replica.latestSnapshotIndex > 0, "the held snapshot is installed once the part ends");
    expect(snapshots).toEqual([expect.objectContaining({ partitionId: 1 })]);
  });
});

describe("a part whose end report throws", () => {
  let directory: string;
  let environment: StorageEnvironment;
  let replica: PartitionReplica;
  let logged: { msg: string; reason?: string }[];

  beforeEach(async () => {
    logged = [];
    directory = await temporaryDirectory("backup-throwing-report");
    environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    const logger = pino({ level: "info" }, { write: (line: string) => logged.push(JSON.parse(line)) });
    replica = await openLeadingReplica(environment, 1, logger, {
      backups: {
        ...backupOptions(),
        onPartEnded: () => {
          throw new Error("the report failed");
        },
      },
    });
  });

  afterEach(async () => {
    await replica.close();
    await environment.close();
    await removeDirectory(directory);
  });

  it("ends the part, logs the error and writes the next backup's part", async () => {
    await replica.publish(command("in-the-part"));
    await recordBackup(1n);
    await replica.takeCheckpoint(1n);
    const unexpected = "backup part ended with an unexpected error";
    await waitFor(() => logged.some((line) => line.msg === unexpected), "the error is logged");
    expect(logged.find((line) => line.msg === unexpected)?.reason).toBe("the report failed");
    await recordBackup(2n);
    await replica.takeCheckpoint(2n);
    await waitFor(async () => (await store.manifests(2n)).some((part) => part.state === "COMPLETED"), "backup 2");
  });
});

describe("a leader change during a backup", () => {
  const memberIds = [0, 1, 2];
  let directories: string[] = [];
  let environments: StorageEnvironment[] = [];
  let replicas: PartitionReplica[] = [];
  const cut = new Set<string>();
  /** Holds every write to the store until released: the backup is "in the middle" meanwhile. */
  let release: (() => void) | null = null;
  let gate: Promise<void> = Promise.resolve();

  /** The store of this test (each test has its own), its writes held by `gate`. */
  const gatedStore = (): BackupStore =>
    delegatingStore(store, {
      createFile: async (part, name) => {
        const file = await store.createFile(part, name);
        return {
          ...file,
          write: async (bytes) => {
            await gate;
            await file.write(bytes);
          },
        };
      },
    });

  beforeEach(async () => {
    cut.clear();
    directories = await Promise.all(memberIds.map((memberId) => temporaryDirectory(`backup-group-${memberId}`)));
    environments = directories.map((directory) => StorageEnvironment.open({ directory, synchronousCommit: true }));
    replicas = await Promise.all(
      memberIds.map((memberId) =>
        PartitionReplica.open({
          partitionId: 1,
          memberId,
          environment: environments[memberId] as StorageEnvironment,
          bootstrap: memberIds.map((id) => ({ id, role: "voter" as const, priority: 1 })),
          heartbeatIntervalMs: 10,
          electionTimeoutMs: 60,
          snapshotIntervalEntries: 10_000,
          maxPendingProposals: 64,
          maxApplyLagEntries: 100,
          send: (to, message) => {
            if (!cut.has(`${memberId}→${to}`)) replicas[to]?.receive(detachedMessage(message));
          },
          onFailure: (error) => {
            throw error;
          },
          backups: backupOptions(gatedStore()),
          logger: pino({ level: "silent" }),
        }),
      ),
    );
  });

  afterEach(async () => {
    release?.();
    await Promise.all(replicas.map((replica) => replica.close()));
    await Promise.all(environments.map((environment) => environment.close()));
    await Promise.all(directories.map((directory) => removeDirectory(directory)));
  });

  async function leader(excluding?: number): Promise<number> {
    let found = -1;
    await waitFor(() => {
      found = replicas.findIndex((replica, memberId) => memberId !== excluding && replica.report().role === "leader");
      return found >= 0;
    }, "a leader");
    return found;
  }

  it("fails only that part, clearly reported, and the next backup completes from the new leader", async () => {
    const first = await leader();
    for (let sequence = 0; sequence < 5; sequence += 1) await replicas[first]?.publish(command(`m-${sequence}`));
    gate = new Promise((resolve) => {
      release = resolve;
    });
    await recordBackup(1n);
    expect(await replicas[first]?.takeCheckpoint(1n)).toMatchObject({ result: { kind: "checkpointed" } });
    await waitFor(async () => (await store.manifests(1n)).length === 1, "the part is in progress");
    expect((await store.manifests(1n))[0]).toMatchObject({ state: "IN_PROGRESS", brokerId: first });
    // The leader is cut off; the others elect a new leader and it steps down.
    for (const other of memberIds) {
      if (other === first) continue;
      cut.add(`${other}→${first}`);
      cut.add(`${first}→${other}`);
    }
    const second = await leader(first);
    await waitFor(() => replicas[first]?.report().role !== "leader", "the old leader steps down");
    release?.();
    // The old leader fails its part; the new one finds it unfinished in the store and writes its own.
    await waitFor(() => ended.length === 2, "both parts of backup 1 end");
    const byBroker = new Map(ended.map((part) => [part.brokerId, part]));
    expect(byBroker.get(first)).toMatchObject({
      state: "FAILED",
      failureReason: `broker ${first} lost the leadership of partition 1 during the backup`,
    });
    expect(byBroker.get(second)).toMatchObject({ state: "COMPLETED", backupId: 1n });
    expect((await rebuildEngine(store, byBroker.get(second) as BackupPartManifest)).bufferedMessageCount).toBe(5);

    // The next backup completes from the new leader.
    await recordBackup(2n);
    expect(await replicas[second]?.takeCheckpoint(2n)).toMatchObject({ result: { kind: "checkpointed" } });
    await waitFor(() => ended.length === 3, "the next part ends");
    expect(ended[2]).toMatchObject({ state: "COMPLETED", backupId: 2n, brokerId: second });
    const restored = await rebuildEngine(store, ended[2] as BackupPartManifest);
    expect(restored.bufferedMessageCount).toBe(5);
  });

  it("a new leader writes no part of a backup the store no longer holds", async () => {
    const first = await leader();
    await replicas[first]?.publish(command("m"));
    await recordBackup(1n);
    expect(await replicas[first]?.takeCheckpoint(1n)).toMatchObject({ result: { kind: "checkpointed" } });
    await waitFor(() => ended.length === 1, "the part ends");
    await store.deleteBackup(1n);
    for (const other of memberIds) {
      if (other === first) continue;
      cut.add(`${other}→${first}`);
      cut.add(`${first}→${other}`);
    }
    const second = await leader(first);
    // A publication committed by the new leader shows it has settled in; no part of the deleted backup appears.
    expect(await replicas[second]?.publish(command("n"))).toMatchObject({ outcome: "published" });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await store.manifests(1n)).toEqual([]);
    expect(ended).toHaveLength(1);
  });
});
