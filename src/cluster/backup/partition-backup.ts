/**
 * Writes one partition's part of a backup, as its leader does in the background once it applied the backup's
 * checkpoint: the reserved snapshot (at or before the checkpoint position) and the log from that snapshot up to the
 * checkpoint position, streamed a chunk at a time into the backup store, with a manifest (ids, positions, files with
 * sizes and CRC-32C checksums, flowplane version). The snapshot file's checksum, computed over the bytes the store
 * wrote, must be the CRC-32C the storage recorded for the snapshot, and each log entry is verified against its own
 * checksum as it is read: what was written is what was stored.
 *
 * The part ends COMPLETED only when every file is written and verified; anything else (leadership lost, the snapshot
 * or log no longer there, a store error) ends it FAILED with the reason.
 *
 * A leader asks `admitPart` first: it writes a part only of a backup whose record the store holds, and only when its
 * partition is one of the record's (see store.ts), and the part records the record's partition count.
 */
import type { SnapshotMetadata } from "../raft/index.js";
import {
  BACKUP_FILE_NAMES,
  type BackupFileWriter,
  type BackupPartId,
  type BackupPartManifest,
  type BackupStore,
  fileChecksum,
  MAX_FAILURE_REASON_LENGTH,
  type StoredBackupRecord,
  type WrittenBackupFile,
} from "./store.js";

/** Bytes of snapshot or log read and written per chunk: what a backup holds in memory at once. */
export const BACKUP_CHUNK_BYTES = 1024 * 1024;

/** Bytes written between two updates of an IN_PROGRESS manifest's `writtenBytes` (progress for long uploads). */
export const PROGRESS_INTERVAL_BYTES = 16 * 1024 * 1024;

/** Bytes of the length prefix before each entry in `log.bin`. */
export const LOG_FRAME_HEADER_BYTES = 4;

/** What the writer reads of the partition's replica. */
export interface PartitionBackupSource {
  /** The stored snapshot's metadata, or null when the replica holds none. */
  snapshotMetadata(): SnapshotMetadata | null;
  /**
   * Bytes of the snapshot `metadata` describes, in memory the writer owns (it hands them to the store, which may move
   * them to another thread); null when another snapshot replaced it.
   */
  snapshotChunk(metadata: SnapshotMetadata, offset: number, maxBytes: number): Uint8Array | null;
  /**
   * The stored sizes of the entries in [fromIndex, toIndex) (`encodeEntry`'s layout), stopping after the first entry
   * once their total passes `maxBytes`; throws when they are not held.
   */
  storedEntrySizes(fromIndex: number, toIndex: number, maxBytes: number): number[];
  /**
   * Reads the entries from `fromIndex` on as stored (`encodeEntry`'s bytes) into `targets`, one entry each, exactly
   * its stored size, and verifies each (checksum, layout, index); throws when one is not held or damaged.
   */
  readStoredEntries(fromIndex: number, targets: readonly Uint8Array[]): void;
  /** Why the replica may no longer write this part (it lost leadership, it stopped), or null. */
  interruption(): string | null;
  /**
   * Whether the broker that writes the part still runs: a final manifest the store refused for longer than the
   * pauses allow is written again in the background (`LATER_FINAL_MANIFEST_INTERVAL_MS`) only while it does.
   */
  running(): boolean;
  /** Lets other work run between two chunks (`BackupPacer` lets the broker's own work go first). */
  yieldTurn(): Promise<void>;
}

/** Whether a leader writes its partition's part of a backup: with the recorded partition count, or why not. */
export type PartAdmission =
  | { readonly admitted: true; readonly partitionCount: number }
  /** `expected`: the backup was deleted or taken before the partition existed, rather than the store failing. */
  | { readonly admitted: false; readonly reason: string; readonly expected: boolean };

/**
 * Whether partition `partitionId` writes a part of backup `backupId` (see the module comment); never rejects. A
 * partition added after a backup takes the backup's checkpoint when a relocated record carries its id, and a
 * checkpoint may outlive its deleted backup in the log: neither writes a part.
 */
export async function admitPart(store: BackupStore, backupId: bigint, partitionId: number): Promise<PartAdmission> {
  let stored: StoredBackupRecord | undefined;
  try {
    [stored] = await store.backupRecords(backupId);
  } catch (error) {
    return { admitted: false, reason: `the backup store's record cannot be read: ${reasonOf(error)}`, expected: false };
  }
  if (stored === undefined) {
    return {
      admitted: false,
      reason:
        "the backup store holds no record of it (the backup was deleted, or a coordinator older than records took it)",
      expected: true,
    };
  }
  if (stored.record === null) return { admitted: false, reason: stored.problem, expected: false };
  if (stored.record.partitionCount < partitionId) {
    return {
      admitted: false,
      reason: `the backup holds partitions 1..${stored.record.partitionCount}; partition ${partitionId} was added after it`,
      expected: true,
    };
  }
  return { admitted: true, partitionCount: stored.record.partitionCount };
}

/** The part to write and what its manifest records. */
export interface PartitionBackupRequest extends BackupPartId {
  readonly checkpointPosition: number;
  /** The backup's recorded partition count (`admitPart`). */
  readonly partitionCount: number;
  readonly flowplaneVersion: string;
  /** The current time as ISO 8601 text. */
  readonly now: () => string;
  /** Waits `delayMs` (the replica's clock), between attempts at the final manifest. */
  readonly sleep: (delayMs: number) => Promise<void>;
}

/**
 * The part's IN_PROGRESS manifests: the first one (`start`), then the bytes written every `PROGRESS_INTERVAL_BYTES`.
 * Each is written in the background (one at a time), so the part's files do not wait for their syncs; a progress
 * manifest is skipped while the previous one is on its way, `settle` waits for the last one before the final manifest
 * replaces it, and a failed one fails the part (at the next chunk, or at `settle`).
 */
class Progress {
  private writtenBytes = 0;
  private reportedBytes = 0;
  private writing: Promise<void> | null = null;
  private failure: unknown = null;

  constructor(
    private readonly store: BackupStore,
    private readonly base: BackupPartManifest,
  ) {}

  get bytes(): number {
    return this.writtenBytes;
  }

  /** Starts writing the part's first manifest. */
  start(): void {
    this.track(this.store.writeManifest(this.base));
  }

  add(bytes: number): void {
    if (this.failure !== null) throw this.failure;
    this.writtenBytes += bytes;
    if (this.writtenBytes - this.reportedBytes < PROGRESS_INTERVAL_BYTES || this.writing !== null) return;
    this.reportedBytes = this.writtenBytes;
    this.track(this.store.writeManifest({ ...this.base, writtenBytes: this.writtenBytes }));
  }

  /** Waits for the manifest being written; throws when one failed. */
  async settle(): Promise<void> {
    await this.writing;
    if (this.failure !== null) throw this.failure;
  }

  private track(writing: Promise<void>): void {
    this.writing = writing
      .catch((error: unknown) => {
        this.failure ??= error;
      })
      .finally(() => {
        this.writing = null;
      });
  }
}

/** Thrown inside the writer to end the part FAILED with `message` as the reason. */
class PartFailure extends Error {}

/** Thrown when the replica's snapshot was replaced meanwhile; the part starts over from the new one. */
class SnapshotReplaced extends PartFailure {}

/**
 * Attempts at writing the part when the replica's snapshot is replaced meanwhile: a snapshot that was being taken
 * when the checkpoint arrived may still be installed (later ones wait for the backup), so one more attempt suffices.
 */
const MAX_ATTEMPTS = 3;

/**
 * Pauses before the attempts at writing a part's final manifest after the first. Until it lands the store shows the
 * part IN_PROGRESS, written by a broker that runs, and the coordinator then counts the backup as in progress (no
 * other backup, no cluster change, no deletion) until that broker restarts: a transient store error (EIO, a
 * moment of a full disk, a network file system's hiccup) must not do that. Six seconds in all.
 */
const FINAL_MANIFEST_RETRY_PAUSES_MS = [200, 400, 800, 1_600, 3_200];

/**
 * After those, the part is reported FAILED at once in the broker's logs and metrics (its caller must not wait on a
 * broken store), and its final manifest, COMPLETED or FAILED as the part ended, is written again in the background
 * for as long as the broker runs: every 30 s for the first hour, every 5 minutes after it. A store that comes back
 * then settles the part without the broker's restart, however long it was away; until then the store shows the part
 * IN_PROGRESS, which holds up backups and cluster changes (an earlier version stopped after an hour, and the part
 * stayed IN_PROGRESS until its broker restarted; a restart still settles it, with `failAbandonedParts`).
 */
const LATER_FINAL_MANIFEST_INTERVAL_MS = 30_000;
const LATER_FINAL_MANIFEST_FREQUENT_ATTEMPTS = 120;
const LATER_FINAL_MANIFEST_SLOW_INTERVAL_MS = 300_000;

/** Writes the part (see the module comment) and resolves with its final manifest; never rejects. */
export async function writePartitionBackup(
  source: PartitionBackupSource,
  store: BackupStore,
  request: PartitionBackupRequest,
): Promise<BackupPartManifest> {
  for (let attempt = 1; ; attempt += 1) {
    const manifest = await writePartOnce(source, store, request, attempt < MAX_ATTEMPTS);
    if (manifest !== null) return manifest;
  }
}

/** One attempt at the part; null when the snapshot was replaced and `mayRetry` allows another attempt. */
async function writePartOnce(
  source: PartitionBackupSource,
  store: BackupStore,
  request: PartitionBackupRequest,
  mayRetry: boolean,
): Promise<BackupPartManifest | null> {
  const metadata = source.snapshotMetadata();
  const base: BackupPartManifest = {
    formatVersion: 1,
    backupId: request.backupId,
    partitionId: request.partitionId,
    brokerId: request.brokerId,
    state: "IN_PROGRESS",
    failureReason: null,
    flowplaneVersion: request.flowplaneVersion,
    partitionCount: request.partitionCount,
    backupRecorded: true,
    checkpointPosition: request.checkpointPosition,
    snapshot: metadata === null ? null : { index: metadata.index, term: metadata.term },
    log: { firstIndex: (metadata?.index ?? 0) + 1, lastIndex: request.checkpointPosition },
    files: [],
    writtenBytes: 0,
    startedAt: request.now(),
    finishedAt: null,
  };
  // The first manifest is written while the files are: they do not wait for its syncs, and the final manifest waits
  // for it (a crash before it lands leaves a part without a manifest, as a crash just before writing it would).
  const progress = new Progress(store, base);
  progress.start();
  let final: BackupPartManifest;
  try {
    const files: WrittenBackupFile[] = [];
    try {
      // An interruption that came first (the part given up while the store admitted it) is its reason, not the
      // snapshot it let the replica take past the checkpoint.
      checkInterruption(source);
      if (metadata !== null && metadata.index > request.checkpointPosition) {
        throw new PartFailure(
          `the replica's snapshot at ${metadata.index} is past the checkpoint position ${request.checkpointPosition}`,
        );
      }
      if (metadata !== null) files.push(await writeSnapshot(source, store, request, metadata, progress));
      files.push(await writeLog(source, store, request, base.log.firstIndex, progress));
    } finally {
      // The final manifest must not be replaced by the first or a progress manifest still on its way.
      await progress.settle().catch(() => undefined);
    }
    await progress.settle();
    // A leader change during the backup fails the part, even when what was written is whole: operators are told
    // plainly, and the next backup is taken by the new leader.
    checkInterruption(source);
    const writtenBytes = files.reduce((total, file) => total + file.sizeBytes, 0);
    final = { ...base, state: "COMPLETED", files, writtenBytes, finishedAt: request.now() };
  } catch (error) {
    if (error instanceof SnapshotReplaced && mayRetry) return null;
    final = { ...base, state: "FAILED", failureReason: reasonOf(error), finishedAt: request.now() };
  }
  // Bounded by the pauses: one attempt more than there are pauses.
  for (let attempt = 0; ; attempt += 1) {
    try {
      await store.writeManifest(final);
      return final;
    } catch (error) {
      const pauseMs = FINAL_MANIFEST_RETRY_PAUSES_MS[attempt];
      if (pauseMs === undefined) {
        void writeLater(source, store, request, final);
        return {
          ...final,
          state: "FAILED",
          failureReason: reasonOf(new Error(`the final manifest could not be written: ${reasonOf(error)}`)),
        };
      }
      await request.sleep(pauseMs);
    }
  }
}

/**
 * Writes `final`, the part's final manifest, in the background until the store takes it (see
 * `LATER_FINAL_MANIFEST_INTERVAL_MS`); never rejects. Only while the part is still missing or IN_PROGRESS in the
 * store: a write the store reported failed may have landed after all, and the part may have been settled since (a
 * restarted broker marks its abandoned parts FAILED).
 */
async function writeLater(
  source: PartitionBackupSource,
  store: BackupStore,
  request: PartitionBackupRequest,
  final: BackupPartManifest,
): Promise<void> {
  // Ends when the store takes the manifest, the part is settled otherwise, or the broker stops.
  for (let attempt = 0; ; attempt += 1) {
    const pauseMs =
      attempt < LATER_FINAL_MANIFEST_FREQUENT_ATTEMPTS
        ? LATER_FINAL_MANIFEST_INTERVAL_MS
        : LATER_FINAL_MANIFEST_SLOW_INTERVAL_MS;
    await request.sleep(pauseMs).catch(() => undefined);
    if (!source.running()) return;
    try {
      // A backup deleted meanwhile (its record goes first) must not get this part back.
      if ((await store.backupRecords(final.backupId)).length === 0) return;
      const stored = (await store.manifests(final.backupId)).find(
        (part) => part.partitionId === final.partitionId && part.brokerId === final.brokerId,
      );
      if (stored !== undefined && stored.state !== "IN_PROGRESS") return;
      await store.writeManifest(final);
      return;
    } catch {
      // Still broken: the next attempt comes after the interval.
    }
  }
}

function reasonOf(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.slice(0, MAX_FAILURE_REASON_LENGTH);
}

function checkInterruption(source: PartitionBackupSource): void {
  const interruption = source.interruption();
  if (interruption !== null) throw new PartFailure(interruption);
}

/**
 * Streams `write` into a new file of the part; aborts the file on any failure. With `expectedCrc32c`, the store keeps
 * the file only when its bytes have that CRC-32C.
 */
async function writeFile(
  store: BackupStore,
  part: BackupPartId,
  name: string,
  write: (file: BackupFileWriter) => Promise<void>,
  expectedCrc32c?: number,
): Promise<WrittenBackupFile> {
  const file = await store.createFile(part, name);
  try {
    await write(file);
  } catch (error) {
    await file.abort();
    throw error;
  }
  return file.finish(expectedCrc32c);
}

async function writeSnapshot(
  source: PartitionBackupSource,
  store: BackupStore,
  part: BackupPartId,
  metadata: SnapshotMetadata,
  progress: Progress,
): Promise<WrittenBackupFile> {
  // The store checksums the bytes it writes and keeps the file only when they have the CRC-32C the storage recorded
  // for the snapshot: that one comparison covers reading, handing over and writing them, so the broker's thread does
  // not checksum the snapshot a second time.
  const written = await writeFile(
    store,
    part,
    BACKUP_FILE_NAMES.snapshot,
    async (file) => {
      // Bounded: every pass reads at least one byte of a snapshot of fixed size (or stops).
      for (let offset = 0; offset < metadata.sizeBytes; ) {
        checkInterruption(source);
        const chunk = source.snapshotChunk(metadata, offset, BACKUP_CHUNK_BYTES);
        if (chunk === null || chunk.byteLength === 0) {
          throw new SnapshotReplaced(`the snapshot at ${metadata.index} was replaced while it was backed up`);
        }
        // Read before `write`, which takes the chunk over (its memory may move to another thread).
        const chunkBytes = chunk.byteLength;
        await file.write(chunk);
        progress.add(chunkBytes);
        offset += chunkBytes;
        await source.yieldTurn();
      }
    },
    metadata.checksum,
  );
  // A store must refuse such a file (`BackupFileWriter.finish`); one that did not would leave a part unverified.
  if (written.crc32c !== fileChecksum(metadata.checksum)) {
    throw new Error(`invariant violated: the store kept snapshot.bin with CRC-32C ${written.crc32c}`);
  }
  return written;
}

async function writeLog(
  source: PartitionBackupSource,
  store: BackupStore,
  request: PartitionBackupRequest,
  firstIndex: number,
  progress: Progress,
): Promise<WrittenBackupFile> {
  return writeFile(store, request, BACKUP_FILE_NAMES.log, async (file) => {
    // Bounded: every pass writes at least one entry of a fixed range (or stops).
    for (let index = firstIndex; index <= request.checkpointPosition; ) {
      checkInterruption(source);
      let frames: Uint8Array;
      let entryCount: number;
      try {
        const sizes = source.storedEntrySizes(index, request.checkpointPosition + 1, BACKUP_CHUNK_BYTES);
        if (sizes.length === 0) throw new PartFailure(`the log from ${index} is no longer held`);
        frames = copyLogFrames(source, index, sizes, file.buffer?.bind(file));
        entryCount = sizes.length;
      } catch (error) {
        if (error instanceof PartFailure) throw error;
        // A snapshot installed meanwhile compacted the log: the part starts over from that snapshot.
        if ((source.snapshotMetadata()?.index ?? 0) !== firstIndex - 1) {
          throw new SnapshotReplaced(`the snapshot was replaced while the log from ${index} was backed up`);
        }
        throw new PartFailure(`the log from ${index} is no longer held: ${reasonOf(error)}`);
      }
      const framesBytes = frames.byteLength;
      await file.write(frames);
      progress.add(framesBytes);
      index += entryCount;
      await source.yieldTurn();
    }
  });
}

/**
 * The entries from `firstIndex` with stored sizes `sizes` as `log.bin` holds them: each a big-endian 32-bit length
 * followed by the checksummed entry (`encodeEntry`'s bytes). They are read from the storage as they are stored,
 * without decoding and encoding them again, straight into their places in one buffer of `allocate` (a store's
 * recycled chunk memory), entries stored close together with one read, and verified there by their own checksums:
 * the bytes written are the bytes stored, and a backup copies no entry twice on the broker's thread.
 */
export function copyLogFrames(
  source: Pick<PartitionBackupSource, "readStoredEntries">,
  firstIndex: number,
  sizes: readonly number[],
  allocate: (sizeBytes: number) => Uint8Array = (sizeBytes) => new Uint8Array(sizeBytes),
): Uint8Array {
  let totalBytes = 0;
  for (const size of sizes) totalBytes += LOG_FRAME_HEADER_BYTES + size;
  const bytes = allocate(totalBytes);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const targets: Uint8Array[] = [];
  let offset = 0;
  for (const size of sizes) {
    view.setUint32(offset, size);
    const start = offset + LOG_FRAME_HEADER_BYTES;
    targets.push(bytes.subarray(start, start + size));
    offset = start + size;
  }
  source.readStoredEntries(firstIndex, targets);
  return bytes;
}

/** What `BackupPacer` needs of a clock (the replica's `ReplicaClock`, with a finer `now`, fits). */
export interface PacingClock {
  /** Milliseconds, with a resolution well below one millisecond. */
  now(): number;
  sleep(delayMs: number): Promise<void>;
  yieldTurn(): Promise<void>;
}

/** A turn of the event loop at least this long means the broker had other work waiting: the backup steps back. */
export const BUSY_TURN_MS = 1;

/** The shortest step back while the broker is busy. */
export const BUSY_PAUSE_MS = 10;

/** The longest step back after one busy turn. */
export const MAX_BUSY_PAUSE_MS = 50;

/**
 * How long one chunk waits at most for the broker to become idle, so that a backup still moves on under constant
 * load: at one chunk per this, and the turns between.
 */
export const MAX_CHUNK_WAIT_MS = 100;

/**
 * Paces a backup's chunks so that the broker's Raft and apply work always goes first (see `pause`). The chunks it
 * holds back also hold back the writer thread and the disk, so a busy broker's backup takes their time only slowly.
 */
export class BackupPacer {
  private lastActivity: number;

  /**
   * @param activity a number that changes whenever the partition did work (its last applied index): a partition
   *   taking writes is busy even when each turn of the event loop is short.
   * @param overdue whether the backup must stop stepping back: the partition takes no snapshot while its backup
   *   runs, so under a steady load the log grows for as long as the backup gives way; past a bound, finishing the
   *   backup matters more than the writes' throughput.
   */
  constructor(
    private readonly clock: PacingClock,
    private readonly activity: () => number,
    private readonly overdue: () => boolean = () => false,
  ) {
    this.lastActivity = activity();
  }

  /**
   * Yields between two chunks: one turn of the event loop, timed. The broker is busy when that turn took
   * `BUSY_TURN_MS` or longer (requests, replication or journal writes were waiting; a journal write that waited for
   * the disk makes a long turn) or the partition applied entries since the last look; the backup then steps back for
   * twice that turn (at least `BUSY_PAUSE_MS`, at most `MAX_BUSY_PAUSE_MS`) and looks again, until the broker is idle
   * or the chunk waited `MAX_CHUNK_WAIT_MS`.
   */
  async pause(): Promise<void> {
    if (this.overdue()) return await this.clock.yieldTurn();
    const startedAtMs = this.clock.now();
    // Bounded: every pass sleeps at least BUSY_PAUSE_MS, until MAX_CHUNK_WAIT_MS have passed.
    for (;;) {
      const turnStartedAtMs = this.clock.now();
      await this.clock.yieldTurn();
      const turnMs = this.clock.now() - turnStartedAtMs;
      const activity = this.activity();
      const busy = turnMs >= BUSY_TURN_MS || activity !== this.lastActivity;
      this.lastActivity = activity;
      if (!busy || this.clock.now() - startedAtMs >= MAX_CHUNK_WAIT_MS) return;
      await this.clock.sleep(Math.min(MAX_BUSY_PAUSE_MS, Math.max(BUSY_PAUSE_MS, 2 * turnMs)));
    }
  }
}
