/**
 * The backup store: where partition leaders write their part of a backup and where the management API and restore
 * read them. A backup `id` has one part per partition (and per broker that wrote one: a leader change during a
 * backup leaves the failed part of the old leader next to the new leader's). Each part is a set of files (the
 * reserved snapshot, the log up to the checkpoint) and a manifest naming them with their sizes and CRC-32C checksums;
 * the manifest is written first as IN_PROGRESS and last as COMPLETED or FAILED, so a part is never reported
 * COMPLETED unless every file was written and verified.
 *
 * Next to the parts, each backup has a record (`BackupRecord`) that the coordinator writes before it proposes the
 * backup's checkpoint: the partition count of the cut. A partition learns of a checkpoint only through records that
 * descend from that proposal, so the record exists whenever a checkpoint is legitimate; a leader writes no part of a
 * backup without one (it was deleted) or of a backup taken before its partition existed, and the count restore and
 * the management API use is the recorded one, never a leader's own view of the cluster (which may lag behind).
 * Backups written before records existed have none; their count is the lowest their parts recorded.
 *
 * Recording a backup also raises the store's highest backup id (`highestTakenBackupId`) durably, before the record is
 * written, and deleting a backup never lowers it: an id at or below it was used before (a backup was taken, or a take
 * was attempted whose record failed), even when no backup of it exists now, so the coordinator refuses it without
 * asking any partition (a partition's own refusal needs an answer from its first leader, which may not come).
 *
 * The interface is small so that an object store can implement it; `FilesystemBackupStore` is the default.
 */
import { exactInteger } from "../../json/exact-json.js";
import { isCheckpointId } from "../engine/index.js";

/** State of one partition's part of a backup. */
export type BackupPartState = "IN_PROGRESS" | "COMPLETED" | "FAILED";

/** Names one part: the backup, the partition and the broker whose leader replica wrote it. */
export interface BackupPartId {
  /** 0..2^63 − 1; JSON files write it as its exact digits (`stringifyJsonExactly`). */
  readonly backupId: bigint;
  readonly partitionId: number;
  readonly brokerId: number;
}

/**
 * A file of a part as its writer finished it: its name, size and the CRC-32C of its bytes (8 lowercase hexadecimal
 * digits, `fileChecksum`). CRC-32C is the checksum the brokers' own storage keeps of every log entry and snapshot, so
 * a snapshot's file checksum is the one its storage recorded; why not SHA-256: DEVELOPERS.md, "What a backup costs
 * the broker that writes it".
 */
export interface WrittenBackupFile {
  readonly name: string;
  readonly sizeBytes: number;
  readonly crc32c: string;
}

/**
 * One file of a part, as the manifest records it: parts written now carry the file's CRC-32C; parts written by
 * earlier builds carry a SHA-256 of its bytes (64 lowercase hexadecimal digits) instead, which verification still
 * checks, so backups taken before stay restorable.
 */
export type BackupFileEntry =
  | WrittenBackupFile
  | { readonly name: string; readonly sizeBytes: number; readonly sha256: string };

/** A CRC-32C as manifests write it: 8 lowercase hexadecimal digits. */
export function fileChecksum(crc32c: number): string {
  return (crc32c >>> 0).toString(16).padStart(8, "0");
}

/** The manifest of one part (`manifest.json`). */
export interface BackupPartManifest extends BackupPartId {
  readonly formatVersion: 1;
  readonly state: BackupPartState;
  /** Why the part failed; null unless FAILED. */
  readonly failureReason: string | null;
  /** The flowplane version of the broker that wrote it. */
  readonly flowplaneVersion: string;
  /**
   * Partitions the cluster had when the backup was taken; restore refuses a cluster with another count. A part with
   * `backupRecorded` copies it from the backup's record; an older broker's part recorded its leader's own view.
   */
  readonly partitionCount: number;
  /**
   * Present in parts written against the backup's record (see the module comment): a backup made only of such parts
   * exists only while its record does. Absent in parts written by brokers from before records.
   */
  readonly backupRecorded?: true;
  /**
   * Set by the store on a part whose manifest it could not read: the part is FAILED with the reason, and its other
   * fields are placeholders (its partition count counts for nothing). Never written.
   */
  readonly damaged?: true;
  /** The last log index of the partition that belongs to the backup. */
  readonly checkpointPosition: number;
  /** The reserved snapshot (at or before the checkpoint position) it holds, or null when the log starts at 1. */
  readonly snapshot: { readonly index: number; readonly term: number } | null;
  /** The log entries it holds: `firstIndex..lastIndex` (none when firstIndex > lastIndex). */
  readonly log: { readonly firstIndex: number; readonly lastIndex: number };
  /** Every file of the part; empty until the part is COMPLETED. */
  readonly files: readonly BackupFileEntry[];
  /** Bytes of the part's files written so far (updated while it is written, for progress). */
  readonly writtenBytes: number;
  readonly startedAt: string;
  /** When the part became COMPLETED or FAILED; null while IN_PROGRESS. */
  readonly finishedAt: string | null;
}

/** Largest cluster configuration a backup holds (the largest shape the product allows stays below it). */
export const MAX_BACKUP_CONFIGURATION_BYTES = 8 * 1024 * 1024;

/** A backup's record: what the coordinator knew of the cut before it proposed the checkpoint. */
export interface BackupRecord {
  readonly formatVersion: 1;
  readonly backupId: bigint;
  /** Partitions of the cluster configuration the coordinator took the backup in: the backup holds 1..partitionCount. */
  readonly partitionCount: number;
  /** When the coordinator took the backup (ISO 8601). */
  readonly takenAt: string;
  /** The flowplane version of the coordinator that took it. */
  readonly flowplaneVersion: string;
}

/** A backup's record as read from the store: the record, or what is wrong with the stored one. */
export type StoredBackupRecord =
  | { readonly backupId: bigint; readonly record: BackupRecord; readonly problem: null }
  | { readonly backupId: bigint; readonly record: null; readonly problem: string };

/** Writes one file of a part, a chunk at a time. */
export interface BackupFileWriter {
  /**
   * Appends `bytes` and takes them over: the caller must not use them, nor other views of their memory, afterwards
   * (a store may move that memory to another thread instead of copying it). Resolves once the store can take the
   * next chunk (the caller awaits it, which bounds memory); a failure may surface at a later call or at `finish`.
   */
  write(bytes: Uint8Array): Promise<void>;
  /**
   * A buffer of exactly `sizeBytes` to fill and hand to `write`, reusing the memory of chunks already written where
   * the store can; a store without it leaves the caller to allocate.
   */
  buffer?(sizeBytes: number): Uint8Array;
  /**
   * Finishes the file durably and resolves with its size and the CRC-32C of the bytes written; rejects when any write
   * failed, what the store holds differs from what was written, or the bytes' CRC-32C is not `expectedCrc32c` (when
   * given), and then keeps nothing of the file.
   */
  finish(expectedCrc32c?: number): Promise<WrittenBackupFile>;
  /** Gives up the file (nothing of it is kept). */
  abort(): Promise<void>;
}

/** What a backup store does; see the module comment. */
export interface BackupStore {
  /** Writes (or replaces) a part's manifest atomically. */
  writeManifest(manifest: BackupPartManifest): Promise<void>;
  /**
   * Readies what writing parts needs (the filesystem store's writer thread) ahead of the first part, and keeps it
   * ready, so that a backup does not wait for it; a broker that may write parts calls it once it starts.
   */
  prepareWrites?(): void;
  /** Starts writing file `name` of a part; an earlier file of that name is replaced once it finishes. */
  createFile(part: BackupPartId, name: string): Promise<BackupFileWriter>;
  /** Reads file `name` of a part, a chunk at a time, each at most `maxChunkBytes`. */
  readFile(part: BackupPartId, name: string, maxChunkBytes: number): AsyncIterable<Uint8Array>;
  /**
   * The manifests of every part of `backupId`, or of every backup when it is undefined. A manifest that cannot be
   * read is returned as a FAILED part naming the problem, so a damaged store shows up instead of hiding a part.
   */
  manifests(backupId?: bigint): Promise<BackupPartManifest[]>;
  /**
   * Writes (or replaces) a backup's record durably and atomically, after raising the highest taken backup id to the
   * record's id (durably too), so that the id counts as taken even if the record never gets written.
   */
  writeBackupRecord(record: BackupRecord): Promise<void>;
  /**
   * Writes, durably and atomically, the cluster configuration backup `backupId` was taken in (`encodeConfiguration`'s
   * text, as `GET /actuator/cluster` shows it); the coordinator writes it just before the backup's record, so that a
   * backup holds its partitions and the configuration, and a restore can rebuild the cluster's shape from it.
   */
  writeBackupConfiguration(backupId: bigint, configuration: string): Promise<void>;
  /**
   * The cluster configuration backup `backupId` was taken in, as written; null when it holds none (taken by an
   * earlier version, or deleted). Throws when the stored one cannot be read or exceeds `MAX_BACKUP_CONFIGURATION_BYTES`.
   */
  backupConfiguration(backupId: bigint): Promise<string | null>;
  /**
   * The highest id this store ever recorded a backup of, deleted backups' included, or null when it recorded none (a
   * store written only by versions from before this mark). Backups the store still holds count through `backupIds`.
   */
  highestTakenBackupId(): Promise<bigint | null>;
  /**
   * The records of `backupId` (none or one), or of every backup when it is undefined, ascending. A record that
   * cannot be understood is returned with the problem, naming the file.
   */
  backupRecords(backupId?: bigint): Promise<StoredBackupRecord[]>;
  /** The ids of every backup the store holds a record or a part of, ascending (without reading any manifest). */
  backupIds(): Promise<bigint[]>;
  /**
   * Removes the backup's record first, so that no leader starts a part of it afterwards, then every part of it;
   * resolves with whether there was any. The highest taken backup id stays (and is raised to this one when a backup
   * of an older version, which raised none, is deleted), so the id is never taken again.
   */
  deleteBackup(backupId: bigint): Promise<boolean>;
}

/** Names of the files of a part. */
export const BACKUP_FILE_NAMES = {
  manifest: "manifest.json",
  snapshot: "snapshot.bin",
  log: "log.bin",
} as const;

/** Longest failure reason kept in a manifest, in characters (reasons can carry error messages). */
export const MAX_FAILURE_REASON_LENGTH = 1024;

function isNonNegativeInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** Whether `value` is a file entry with exactly one checksum: a CRC-32C, or an earlier version's SHA-256. */
function isFileEntry(value: unknown): value is BackupFileEntry {
  if (typeof value !== "object" || value === null) return false;
  const { name, sizeBytes, crc32c, sha256 } = value as Record<string, unknown>;
  if (typeof name !== "string" || !Object.values(BACKUP_FILE_NAMES).includes(name as never)) return false;
  if (!isNonNegativeInteger(sizeBytes)) return false;
  if (crc32c !== undefined) return sha256 === undefined && typeof crc32c === "string" && /^[0-9a-f]{8}$/.test(crc32c);
  return typeof sha256 === "string" && /^[0-9a-f]{64}$/.test(sha256);
}

/**
 * Checks a manifest read from the store (by `parseJsonExactly`) against `part`; returns it typed, or what is wrong
 * with it.
 */
export function parseManifest(value: unknown, part: BackupPartId): BackupPartManifest | string {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return "the manifest is not an object";
  const manifest = value as Record<string, unknown>;
  if (manifest.formatVersion !== 1) return `the manifest has format version ${String(manifest.formatVersion)}`;
  if (
    exactInteger(manifest.backupId) !== part.backupId ||
    manifest.partitionId !== part.partitionId ||
    manifest.brokerId !== part.brokerId
  ) {
    return "the manifest names another backup, partition or broker than its location";
  }
  const { state, failureReason, flowplaneVersion, partitionCount, checkpointPosition, snapshot, log, files } = manifest;
  if (manifest.backupRecorded !== undefined && manifest.backupRecorded !== true) return "backupRecorded is malformed";
  if (state !== "IN_PROGRESS" && state !== "COMPLETED" && state !== "FAILED") return "the manifest's state is unknown";
  if (!(failureReason === null || typeof failureReason === "string")) return "the failure reason is malformed";
  if (typeof flowplaneVersion !== "string" || !isNonNegativeInteger(partitionCount) || partitionCount < 1) {
    return "the manifest's version or partition count is malformed";
  }
  if (!isNonNegativeInteger(checkpointPosition)) return "the checkpoint position is malformed";
  if (snapshot !== null) {
    const { index, term } = (typeof snapshot === "object" ? snapshot : {}) as Record<string, unknown>;
    if (!isNonNegativeInteger(index) || !isNonNegativeInteger(term) || index > checkpointPosition) {
      return "the snapshot is malformed";
    }
  }
  const { firstIndex, lastIndex } = (typeof log === "object" && log !== null ? log : {}) as Record<string, unknown>;
  if (!isNonNegativeInteger(firstIndex) || !isNonNegativeInteger(lastIndex) || lastIndex > checkpointPosition) {
    return "the log range is malformed";
  }
  // A part holds the state at its checkpoint position: its snapshot and the log from right after it to that position.
  const snapshotIndex = snapshot === null ? 0 : ((snapshot as { index: number }).index ?? 0);
  if (firstIndex !== snapshotIndex + 1 || lastIndex !== checkpointPosition) {
    return (
      `the log range ${firstIndex}..${lastIndex} does not start right after the snapshot (entry ${snapshotIndex}) ` +
      `and end at the checkpoint position ${checkpointPosition}`
    );
  }
  if (!Array.isArray(files) || !files.every(isFileEntry)) return "the file list is malformed";
  // A part's files are written by one build, so they carry one kind of checksum.
  if (new Set(files.map((file: BackupFileEntry) => ("crc32c" in file ? "crc32c" : "sha256"))).size > 1) {
    return "the file list mixes checksums";
  }
  if (!isNonNegativeInteger(manifest.writtenBytes)) return "the bytes written are malformed";
  if (
    typeof manifest.startedAt !== "string" ||
    !(manifest.finishedAt === null || typeof manifest.finishedAt === "string")
  ) {
    return "the manifest's times are malformed";
  }
  if (!isCheckpointId(part.backupId)) return "the backup id is malformed";
  return { ...manifest, backupId: part.backupId } as unknown as BackupPartManifest;
}

/**
 * Checks a backup record read from the store (by `parseJsonExactly`) against the id its location names; returns it
 * typed, or the problem.
 */
export function parseBackupRecord(value: unknown, backupId: bigint): BackupRecord | string {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return "the record is not an object";
  const record = value as Record<string, unknown>;
  if (record.formatVersion !== 1) return `the record has format version ${String(record.formatVersion)}`;
  if (exactInteger(record.backupId) !== backupId || !isCheckpointId(backupId)) {
    return "the record names another backup than its location";
  }
  if (!isNonNegativeInteger(record.partitionCount) || record.partitionCount < 1) {
    return "the record's partition count is malformed";
  }
  if (typeof record.takenAt !== "string" || typeof record.flowplaneVersion !== "string") {
    return "the record's time or version is malformed";
  }
  return { ...record, backupId } as unknown as BackupRecord;
}

/**
 * The partition count of a backup's cut, from what the store holds of it: the recorded count; for a backup written
 * before records existed (a part without `backupRecorded`), the lowest count its parts recorded (a partition added
 * after such a backup may have written a part of it with its own, higher count); the problem when its record is
 * damaged; null when the store holds no such backup (no record, and only parts written against a record: strays of a
 * deleted backup, which a writer that read the record just before the delete may still have left).
 */
export function backupPartitionCount(
  stored: StoredBackupRecord | undefined,
  manifests: readonly BackupPartManifest[],
): number | string | null {
  if (stored !== undefined) return stored.record?.partitionCount ?? stored.problem;
  // A damaged manifest tells neither its count nor whether a record stood behind it: it counts for nothing here
  // (it still fails its partition), so it can neither shrink an older backup's count nor bring back a deleted one.
  const older = manifests.filter((part) => part.backupRecorded !== true && part.damaged !== true);
  if (older.length === 0) return null;
  return older.reduce((lowest, part) => Math.min(lowest, part.partitionCount), Number.POSITIVE_INFINITY);
}
