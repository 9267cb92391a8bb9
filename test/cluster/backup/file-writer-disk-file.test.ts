/**
 * A backup file as the writer thread writes it: the periodic syncs of its data run in the background while later
 * chunks are checksummed and written, its unsynced bytes stay bounded, a failed sync fails the file, the descriptor is
 * closed only once no sync is in flight, and a file whose bytes lack the expected CRC-32C is neither synced nor kept.
 */
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  DiskFile,
  MAX_UNSYNCED_BYTES,
  SYNC_INTERVAL_BYTES,
  type SyncData,
  SyncQueue,
} from "../../../src/cluster/backup/file-writer-disk-file.js";

const MiB = 1024 * 1024;

let directory: string;

beforeEach(async () => {
  directory = await mkdtemp(join(tmpdir(), "flowplane-backup-disk-file-"));
});

afterEach(async () => {
  await rm(directory, { recursive: true, force: true });
});

/** A sync that completes only when the test says so, counting the syncs started. */
function heldSyncs(): { syncData: SyncData; started: () => number; complete: (error?: Error) => void } {
  const pending: ((error: NodeJS.ErrnoException | null) => void)[] = [];
  let started = 0;
  return {
    syncData: (_descriptor, callback) => {
      started += 1;
      pending.push(callback);
    },
    started: () => started,
    complete: (error) => pending.shift()?.(error ?? null),
  };
}

describe("DiskFile", () => {
  it("goes on checksumming and writing while a sync is in flight, up to the bound, and waits for it beyond", async () => {
    const syncs = heldSyncs();
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, syncs.syncData, new SyncQueue());
    let checksum = 0;
    const chunk = (value: number): Uint8Array => new Uint8Array(MiB).fill(value);
    for (let written = 0; written < SYNC_INTERVAL_BYTES; written += MiB) {
      const bytes = chunk(written / MiB + 1);
      checksum = crc32c(bytes, checksum);
      await file.write(bytes);
    }
    expect(syncs.started()).toBe(1);
    expect(file.syncInFlight).toBe(true);
    // The sync in flight does not hold the next chunks back, up to the bound of unsynced bytes.
    for (let written = 0; written < MAX_UNSYNCED_BYTES; written += MiB) {
      const bytes = chunk(100);
      checksum = crc32c(bytes, checksum);
      await file.write(bytes);
    }
    const last = chunk(200);
    checksum = crc32c(last, checksum);
    let lastWritten = false;
    const writing = file.write(last).then(() => {
      lastWritten = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(lastWritten).toBe(false);
    syncs.complete();
    await writing;
    // The bytes written while the first sync was in flight start the next one.
    expect(syncs.started()).toBe(2);
    syncs.complete();
    const finished = await file.finish("log.bin", join(directory, "log.bin"), directory);
    expect(finished).toEqual({ sizeBytes: SYNC_INTERVAL_BYTES + MAX_UNSYNCED_BYTES + MiB, crc32c: checksum >>> 0 });
    expect(crc32c(await readFile(join(directory, "log.bin"))) >>> 0).toBe(checksum >>> 0);
  });

  it("fails the file when a background sync fails, and finish removes it naming the failure", async () => {
    const syncs = heldSyncs();
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, syncs.syncData, new SyncQueue());
    await file.write(new Uint8Array(SYNC_INTERVAL_BYTES));
    syncs.complete(new Error("EIO: i/o error, fdatasync"));
    await file.write(new Uint8Array(16));
    expect(file.failure).toMatch(/syncing the file failed: EIO/);
    await expect(file.finish("log.bin", join(directory, "log.bin"), directory)).rejects.toThrow(/EIO/);
    expect(await readdir(directory)).toEqual([]);
  });

  it("keeps a file only when its bytes have the expected CRC-32C, removing it before any sync otherwise", async () => {
    const syncs = heldSyncs();
    const bytes = new TextEncoder().encode("123456789");
    const wrong = DiskFile.open(join(directory, ".snapshot.tmp"), 0o600, syncs.syncData, new SyncQueue());
    await wrong.write(bytes);
    await expect(wrong.finish("snapshot.bin", join(directory, "snapshot.bin"), directory, 0xe3069282)).rejects.toThrow(
      "snapshot.bin was written with CRC-32C e3069283, not the expected e3069282",
    );
    expect(await readdir(directory)).toEqual([]);
    const right = DiskFile.open(join(directory, ".snapshot.tmp"), 0o600, syncs.syncData, new SyncQueue());
    await right.write(bytes);
    expect(await right.finish("snapshot.bin", join(directory, "snapshot.bin"), directory, 0xe3069283)).toEqual({
      sizeBytes: 9,
      crc32c: 0xe3069283,
    });
    expect(await readdir(directory)).toEqual(["snapshot.bin"]);
    expect(syncs.started()).toBe(0);
  });

  it("finishes and aborts only after the sync in flight, so the descriptor stays valid while it runs", async () => {
    const syncs = heldSyncs();
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, syncs.syncData, new SyncQueue());
    await file.write(new Uint8Array(SYNC_INTERVAL_BYTES).fill(3));
    let removed = false;
    const aborting = file.closeAndRemove().then(() => {
      removed = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(removed).toBe(false);
    expect(await readdir(directory)).toEqual([".log.tmp"]);
    syncs.complete();
    await aborting;
    expect(await readdir(directory)).toEqual([]);
  });

  it("syncs the files of one queue one at a time, and each file's bound still holds while it waits its turn", async () => {
    const syncs = heldSyncs();
    const queue = new SyncQueue();
    const first = DiskFile.open(join(directory, ".first.tmp"), 0o600, syncs.syncData, queue);
    const second = DiskFile.open(join(directory, ".second.tmp"), 0o600, syncs.syncData, queue);
    await first.write(new Uint8Array(SYNC_INTERVAL_BYTES));
    await second.write(new Uint8Array(SYNC_INTERVAL_BYTES));
    // The second file's sync waits for the first's: one sync at a time takes one of the shared pool's threads.
    expect(syncs.started()).toBe(1);
    expect(second.syncInFlight).toBe(true);
    let secondWritten = false;
    const writing = second.write(new Uint8Array(MAX_UNSYNCED_BYTES)).then(() => second.write(new Uint8Array(16)));
    void writing.then(() => {
      secondWritten = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(secondWritten).toBe(false);
    syncs.complete();
    await new Promise((resolve) => setImmediate(resolve));
    expect(syncs.started()).toBe(2);
    syncs.complete();
    await writing;
    // Both files finish once their syncs ran (the second's bytes beyond the bound queued a third sync).
    for (let pending = syncs.started() - 2; pending > 0; pending -= 1) syncs.complete();
    const finishing = Promise.all([
      first.finish("first.bin", join(directory, "first.bin"), directory),
      second.finish("second.bin", join(directory, "second.bin"), directory),
    ]);
    await new Promise((resolve) => setImmediate(resolve));
    syncs.complete();
    const [firstFinished, secondFinished] = await finishing;
    expect(firstFinished.sizeBytes).toBe(SYNC_INTERVAL_BYTES);
    expect(secondFinished.sizeBytes).toBe(SYNC_INTERVAL_BYTES + MAX_UNSYNCED_BYTES + 16);
  });

  it("keeps syncing when a sync calls back before it returns, and fails the file when a sync throws", async () => {
    let started = 0;
    const immediate: SyncData = (_descriptor, callback) => {
      started += 1;
      callback(null);
    };
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, immediate, new SyncQueue());
    for (let round = 1; round <= 3; round += 1) {
      await file.write(new Uint8Array(SYNC_INTERVAL_BYTES));
      await new Promise((resolve) => setImmediate(resolve));
      // The sync that called back at once is over: the file is not left "syncing" for ever.
      expect(file.syncInFlight).toBe(false);
      expect(started).toBe(round);
    }
    expect((await file.finish("log.bin", join(directory, "log.bin"), directory)).sizeBytes).toBe(
      3 * SYNC_INTERVAL_BYTES,
    );
    const throwing = DiskFile.open(
      join(directory, ".other.tmp"),
      0o600,
      () => {
        throw new Error("EBADF: bad file descriptor");
      },
      new SyncQueue(),
    );
    await throwing.write(new Uint8Array(SYNC_INTERVAL_BYTES));
    await throwing.write(new Uint8Array(16));
    expect(throwing.failure).toMatch(/syncing the file failed: EBADF/);
    await throwing.closeAndRemove();
  });
});
