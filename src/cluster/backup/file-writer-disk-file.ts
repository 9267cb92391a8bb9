/**
 * One file of a backup part as the writer thread (file-writer-worker.ts) writes it: every chunk is checksummed
 * (CRC-32C) and written in order, the file's data is synced every `SYNC_INTERVAL_BYTES` in the background, and
 * `finish` syncs it, checks its size and renames it into place. It imports only Node.js modules and the CRC-32C addon
 * the storage uses, so that the thread starts fast.
 *
 * Why the periodic syncs: without them a part's whole file would reach the disk in one flush at its end, and the
 * brokers' journal writes (which wait for the disk) would queue behind it; several small flushes let them through in
 * between. Why in the background: the thread checksums and writes the next chunks while the disk flushes the earlier
 * ones, so the disk and the processor both work, instead of the thread waiting for each flush. The syncs run on
 * Node.js's thread pool, which the whole process shares (the broker's journal segment preparation, its commits when
 * they are not synchronous, its file reads): so the files of a writer thread sync one at a time (`SyncQueue`), and
 * several parts written at once never take more than one of the pool's threads. A file's bytes not covered by a
 * started sync stay bounded (`MAX_UNSYNCED_BYTES`), and the final sync in `finish` still covers every byte before
 * the file is renamed into place.
 */
import { closeSync, fdatasync, fstatSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { crc32c } from "@node-rs/crc32";

/** Bytes written between two background syncs of a file's data while it is written. */
export const SYNC_INTERVAL_BYTES = 8 * 1024 * 1024;

/**
 * Bytes written and not covered by a started sync beyond which a write waits for that sync: a disk slower than the
 * checksums does not let a file's unflushed data grow without bound (the bytes the started sync flushes come on top).
 */
export const MAX_UNSYNCED_BYTES = 2 * SYNC_INTERVAL_BYTES;

/** Syncs a file's data (`fs.fdatasync`'s signature; tests pass their own). */
export type SyncData = (descriptor: number, callback: (error: NodeJS.ErrnoException | null) => void) => void;

/** Runs background syncs one after another; see the module comment. */
export class SyncQueue {
  private tail: Promise<void> = Promise.resolve();

  /** Runs `sync` once the syncs queued before it ended; `sync` must never reject. */
  run(sync: () => Promise<void>): Promise<void> {
    const next = this.tail.then(sync);
    this.tail = next;
    return next;
  }
}

/** The syncs of this thread's files (a module is loaded once per thread). */
const threadSyncs = new SyncQueue();

/** What a finished file holds. */
export interface FinishedDiskFile {
  readonly sizeBytes: number;
  /** CRC-32C of the bytes written, as a number (the store writes it as `fileChecksum` gives). */
  readonly crc32c: number;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A CRC-32C as 8 lowercase hexadecimal digits (store.ts's `fileChecksum`, which this thread does not import). */
function hexadecimal(crc32c: number): string {
  return (crc32c >>> 0).toString(16).padStart(8, "0");
}

function syncDirectory(directory: string): void {
  const descriptor = openSync(directory, "r");
  try {
    fsyncSync(descriptor);
  } finally {
    closeSync(descriptor);
  }
}

/** See the module comment. */
export class DiskFile {
  /** CRC-32C of the bytes written so far (that of no bytes is 0). */
  private checksum = 0;
  private sizeBytes = 0;
  /** Bytes written since the last sync was queued. */
  private unsyncedBytes = 0;
  /** The background sync queued or in flight, if any; it never rejects (a failure fails the file). */
  private syncing: Promise<void> | null = null;
  private closed = false;
  /** Why the file can no longer be finished (a write or a sync failed); every later write is skipped. */
  failure: string | null = null;

  private constructor(
    private readonly descriptor: number,
    private readonly temporaryPath: string,
    private readonly syncData: SyncData,
    private readonly syncs: SyncQueue,
  ) {}

  /** Creates `temporaryPath` with `mode`; throws when it exists. Its syncs queue in `syncs` (default: the thread's). */
  static open(
    temporaryPath: string,
    mode: number,
    syncData: SyncData = fdatasync,
    syncs: SyncQueue = threadSyncs,
  ): DiskFile {
    return new DiskFile(openSync(temporaryPath, "wx", mode), temporaryPath, syncData, syncs);
  }

  /** Whether a background sync is in flight. */
  get syncInFlight(): boolean {
    return this.syncing !== null;
  }

  /**
   * Checksums and writes `bytes` after the bytes written before; records a failure in `failure` instead of throwing.
   * Waits first for the sync in flight when `MAX_UNSYNCED_BYTES` are not covered by one yet.
   */
  async write(bytes: Uint8Array): Promise<void> {
    // Bounded: waits for at most one sync, after which none is in flight.
    while (this.unsyncedBytes >= MAX_UNSYNCED_BYTES && this.syncing !== null) await this.syncing;
    if (this.failure !== null) return;
    try {
      this.checksum = crc32c(bytes, this.checksum);
      // Bounded: writes until every byte is written (a short write leaves the rest for the next pass).
      for (let offset = 0; offset < bytes.byteLength; ) {
        offset += writeSync(this.descriptor, bytes, offset, bytes.byteLength - offset);
      }
    } catch (error) {
      this.failure = messageOf(error);
      return;
    }
    this.sizeBytes += bytes.byteLength;
    this.unsyncedBytes += bytes.byteLength;
    if (this.unsyncedBytes >= SYNC_INTERVAL_BYTES) this.startSync();
  }

  /**
   * Checks the bytes' CRC-32C against `expectedCrc32c` (unless null), syncs the file, checks that the synced size is
   * the count of bytes written, and renames it to `targetPath` in `directory` (then syncs the directory); on any
   * failure the temporary file is removed and the failure thrown.
   */
  async finish(
    name: string,
    targetPath: string,
    directory: string,
    expectedCrc32c: number | null = null,
  ): Promise<FinishedDiskFile> {
    try {
      await this.syncing;
      if (this.failure !== null) throw new Error(this.failure);
      // Before the sync and the rename: a file known to be wrong is neither flushed nor put in place.
      if (expectedCrc32c !== null && this.checksum >>> 0 !== expectedCrc32c >>> 0) {
        throw new Error(
          `${name} was written with CRC-32C ${hexadecimal(this.checksum)}, not the expected ${hexadecimal(expectedCrc32c)}`,
        );
      }
      fsyncSync(this.descriptor);
      // The file is not read back and checksummed again: right after the sync that read would come from the page
      // cache, not the disk, so it would only repeat the checksum of the same bytes. The checksum is that of the bytes
      // handed to the file, every write is completed (short writes are continued), and the synced size must match
      // their count; the bytes on the disk are checked against the manifest's checksum whenever a part is verified or
      // restored.
      const storedBytes = fstatSync(this.descriptor).size;
      if (storedBytes !== this.sizeBytes) {
        throw new Error(`${name} holds ${storedBytes} bytes in the backup store, not the ${this.sizeBytes} written`);
      }
      this.closed = true;
      closeSync(this.descriptor);
      renameSync(this.temporaryPath, targetPath);
      syncDirectory(directory);
      return { sizeBytes: this.sizeBytes, crc32c: this.checksum >>> 0 };
    } catch (error) {
      try {
        await this.closeAndRemove();
      } catch {
        // The temporary file is gone or is removed by the broker's thread when it aborts.
      }
      throw error;
    }
  }

  /** Closes the file once no sync is in flight (its descriptor must stay valid until then) and removes it. */
  async closeAndRemove(): Promise<void> {
    await this.syncing;
    try {
      if (!this.closed) {
        this.closed = true;
        closeSync(this.descriptor);
      }
    } finally {
      rmSync(this.temporaryPath, { force: true });
    }
  }

  private startSync(): void {
    if (this.syncing !== null) return;
    this.unsyncedBytes = 0;
    const synced = this.syncs.run(
      () =>
        new Promise<void>((resolve) => {
          try {
            this.syncData(this.descriptor, (error) => {
              if (error !== null) this.failure ??= `syncing the file failed: ${error.message}`;
              resolve();
            });
          } catch (error) {
            this.failure ??= `syncing the file failed: ${messageOf(error)}`;
            resolve();
          }
        }),
    );
    // Cleared in a later microtask than this assignment, however soon the sync calls back.
    const tracked: Promise<void> = synced.then(() => {
      if (this.syncing === tracked) this.syncing = null;
    });
    this.syncing = tracked;
  }
}
