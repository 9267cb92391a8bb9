/**
 * Restoring one broker from a backup (`flowplane restore --backup-id N`), run on every broker of the new cluster
 * with that broker's own configuration and an empty data directory, before the brokers start. For each partition the
 * broker hosts (the distribution of the cluster's first start, or of the configuration it is given), it verifies the partition's COMPLETED part (every
 * file against its size and checksum, every log entry against its own), rebuilds the partition's state at the
 * checkpoint position from the part's snapshot and log, and stores it as the replica's snapshot, with the new
 * cluster's replicas of that partition as its group. Every broker hosting a partition restores the same state, so
 * the broker count and the replication factor may differ from the backed-up cluster's; the partition count may not.
 *
 * Nothing is written unless every part this broker needs verifies: a failed, incomplete or damaged backup is refused
 * with the reason (the damaged file named), and the data directory stays empty. A restore that fails once it has
 * begun writing (a read or disk error, the backup deleted meanwhile) removes what it wrote, so the directory is
 * empty again and never holds some partitions restored beside others missing. A restore that is killed instead (an
 * out-of-memory kill while it rebuilds a partition, a power loss) cannot clean up: its first write is a marker
 * (`RESTORE_MARKER_FILE_NAME`) and its last the marker's removal, so a broker refuses to start on what it left, and
 * the same restore run again finds the marker, empties the directory and starts over.
 */
import { readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import {
  claimDataDirectory,
  holdsInterruptedRestore,
  markRestoreComplete,
  markRestoreIncomplete,
  openStorageEnvironment,
  PID_FILE_NAME,
  persistConfiguration,
} from "../broker/files.js";
import { snapshotChecksum } from "../raft/core/snapshot-transfer.js";
import type { Member } from "../raft/index.js";
import { MemberStorage } from "../raft/storage/member-storage.js";
import type { ClusterConfiguration, PartitionDistribution } from "../topology/index.js";
import { rebuildVerifiedState, verifyPart } from "./read-part.js";
import { type BackupPartManifest, type BackupStore, backupPartitionCount } from "./store.js";

/** Thrown when the backup cannot be restored here; the message says why. */
export class RestoreRefusedError extends Error {
  constructor(detail: string) {
    super(detail);
    this.name = "RestoreRefusedError";
  }
}

/** What `restoreBroker` needs. */
export interface RestoreOptions {
  readonly store: BackupStore;
  readonly backupId: bigint;
  readonly nodeId: number;
  /** The broker's data directory; it must be empty or absent, or hold what a restore that was killed left. */
  readonly dataDirectory: string;
  /** The new cluster's distribution of its first start (the broker computes the same one when it starts). */
  readonly distribution: PartitionDistribution;
  /**
   * The cluster configuration the broker starts with, stored in its data directory after the partitions: given when
   * the restored cluster keeps a shape scaling gave it (its brokers, partitions and replicas, `distribution` being
   * that configuration's), so the brokers do not take the first configuration of their settings when they start.
   */
  readonly configuration?: ClusterConfiguration;
  /** Called after each partition is restored (for progress). */
  readonly onPartitionRestored?: (partitionId: number, messages: number) => void;
}

/** What one broker's restore wrote. */
export interface RestoreReport {
  /** The partitions restored here, each with its checkpoint position and buffered messages. */
  readonly partitions: readonly { partitionId: number; position: number; messages: number }[];
}

/** Restores the broker's partitions from the backup (see the module comment). */
export async function restoreBroker(options: RestoreOptions): Promise<RestoreReport> {
  const existed = await requireRestorableDirectory(options.dataDirectory);
  const parts = await completedParts(options.store, options.backupId, options.distribution.size);
  const hosted = [...options.distribution.entries()]
    .filter(([, replicas]) => replicas.some((replica) => replica.brokerId === options.nodeId))
    .sort(([left], [right]) => left - right);
  // Every part is verified before the first write, so a refused restore leaves nothing behind; then one partition at
  // a time is rebuilt and stored, so that only one partition's state is in memory at once.
  for (const [partitionId] of hosted) await verifyPart(options.store, parts.get(partitionId) as BackupPartManifest);
  const restored: { partitionId: number; position: number; messages: number }[] = [];
  try {
    await writePartitions(options, parts, hosted, restored);
  } catch (error) {
    await removeWritten(options.dataDirectory, existed);
    throw error;
  }
  return { partitions: restored };
}

/** Rebuilds and stores each of `hosted` (see the module comment), appending each to `restored` once it is stored. */
async function writePartitions(
  options: RestoreOptions,
  parts: ReadonlyMap<number, BackupPartManifest>,
  hosted: readonly [number, readonly { brokerId: number; priority: number }[]][],
  restored: { partitionId: number; position: number; messages: number }[],
): Promise<void> {
  const release = await claimDataDirectory(options.dataDirectory);
  try {
    // Claimed first, so that what a killed restore left is emptied only when no live process holds the directory.
    if (await holdsInterruptedRestore(options.dataDirectory)) await emptyBesidePidFile(options.dataDirectory);
    await markRestoreIncomplete(options.dataDirectory);
    const environment = await openStorageEnvironment(options.dataDirectory, true);
    try {
      for (const [partitionId, replicas] of hosted) {
        const part = parts.get(partitionId) as BackupPartManifest;
        const { engine, term } = await rebuildVerifiedState(options.store, part);
        const data = engine.snapshot();
        const members: Member[] = replicas.map((replica) => ({
          id: replica.brokerId,
          role: "voter",
          priority: replica.priority,
        }));
        const storage = MemberStorage.openIn(environment, { scope: partitionId });
        try {
          await storage.load();
          await storage.installSnapshot({
            metadata: {
              index: part.checkpointPosition,
              term,
              configuration: { members },
              sizeBytes: data.byteLength,
              checksum: snapshotChecksum(data),
            },
            data,
          });
          await storage.append([], { term, votedFor: null, commitIndex: part.checkpointPosition });
        } finally {
          await storage.close();
        }
        restored.push({ partitionId, position: part.checkpointPosition, messages: engine.bufferedMessageCount });
        options.onPartitionRestored?.(partitionId, engine.bufferedMessageCount);
      }
      if (options.configuration !== undefined) await persistConfiguration(options.dataDirectory, options.configuration);
    } finally {
      await environment.close();
    }
    await markRestoreComplete(options.dataDirectory);
  } finally {
    await release();
  }
}

/** Empties `directory` of what a failed restore wrote, and removes it when it did not exist before. */
async function removeWritten(directory: string, existed: boolean): Promise<void> {
  if (!existed) {
    await rm(directory, { recursive: true, force: true });
    return;
  }
  for (const entry of await readdir(directory)) await rm(join(directory, entry), { recursive: true, force: true });
}

/** Empties `directory` of everything but the claim of this restore's process (`broker.pid`). */
async function emptyBesidePidFile(directory: string): Promise<void> {
  for (const entry of await readdir(directory)) {
    if (entry !== PID_FILE_NAME) await rm(join(directory, entry), { recursive: true, force: true });
  }
}

/**
 * Refuses a data directory that holds anything but what a restore that was killed left (its marker); answers whether
 * the directory exists.
 */
async function requireRestorableDirectory(directory: string): Promise<boolean> {
  let entries: string[];
  try {
    entries = await readdir(directory);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
  if (entries.length > 0 && !(await holdsInterruptedRestore(directory))) {
    throw new RestoreRefusedError(
      `restore needs an empty data directory, and ${directory} is not empty; restore into a new directory`,
    );
  }
  return true;
}

/**
 * The COMPLETED part of every partition of the backup, by partition id. Refuses a backup that is missing, failed or
 * incomplete, or whose partition count differs from the cluster's.
 */
async function completedParts(
  store: BackupStore,
  backupId: bigint,
  partitionCount: number,
): Promise<Map<number, BackupPartManifest>> {
  const [stored] = await store.backupRecords(backupId);
  const manifests = await store.manifests(backupId);
  // The count the backup's record holds: the partitions of the cut, whatever count a part's leader saw. A backup
  // from before records counts the lowest its parts recorded (a partition added after it may have written a part of
  // it with its own, higher count, but the backup does not hold that partition).
  const recordedCount = backupPartitionCount(stored, manifests);
  if (recordedCount === null) throw new RestoreRefusedError(`the backup store holds no backup ${backupId}`);
  if (typeof recordedCount === "string") {
    throw new RestoreRefusedError(`backup ${backupId} cannot be restored: ${recordedCount}`);
  }
  if (recordedCount !== partitionCount) {
    throw new RestoreRefusedError(
      `backup ${backupId} holds ${recordedCount} partitions but this cluster has ${partitionCount}; the partition counts must be equal`,
    );
  }
  const parts = new Map<number, BackupPartManifest>();
  const problems: string[] = [];
  for (let partitionId = 1; partitionId <= partitionCount; partitionId += 1) {
    const ofPartition = manifests.filter((part) => part.partitionId === partitionId);
    const completed = ofPartition.find((part) => part.state === "COMPLETED");
    if (completed !== undefined) {
      parts.set(partitionId, completed);
      continue;
    }
    const failed = ofPartition.find((part) => part.state === "FAILED");
    if (failed !== undefined) problems.push(`partition ${partitionId} FAILED: ${failed.failureReason ?? "no reason"}`);
    else if (ofPartition.length > 0) problems.push(`partition ${partitionId} is still IN_PROGRESS`);
    else problems.push(`partition ${partitionId} has no part`);
  }
  if (problems.length > 0) {
    throw new RestoreRefusedError(`backup ${backupId} is not complete and cannot be restored: ${problems.join("; ")}`);
  }
  return parts;
}
