/**
 * A backup file as the writer thread writes it: the periodic syncs of its data run in the background while later
 * chunks are hashed and written, its unsynced bytes stay bounded, a failed sync fails the file, and the descriptor is
 * closed only once no sync is in flight.
 */
import { createHash } from "node:crypto";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  DiskFile,
  MAX_UNSYNCED_BYTES,
  SYNC_INTERVAL_BYTES,
  type SyncData,
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
  it("goes on hashing and writing while a sync is in flight, up to the bound, and waits for it beyond", async () => {
    const syncs = heldSyncs();
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, syncs.syncData);
    const hash = createHash("sha256");
    const chunk = (value: number): Uint8Array => new Uint8Array(MiB).fill(value);
    for (let written = 0; written < SYNC_INTERVAL_BYTES; written += MiB) {
      const bytes = chunk(written / MiB + 1);
      hash.update(bytes);
      await file.write(bytes);
    }
    expect(syncs.started()).toBe(1);
    expect(file.syncInFlight).toBe(true);
    // The sync in flight does not hold the next chunks back, up to the bound of unsynced bytes.
    for (let written = 0; written < MAX_UNSYNCED_BYTES; written += MiB) {
      const bytes = chunk(100);
      hash.update(bytes);
      await file.write(bytes);
    }
    const last = chunk(200);
    hash.update(last);
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
    const expected = hash.digest("hex");
    expect(finished).toEqual({ sizeBytes: SYNC_INTERVAL_BYTES + MAX_UNSYNCED_BYTES + MiB, sha256: expected });
    expect(
      createHash("sha256")
        .update(await readFile(join(directory, "log.bin")))
        .digest("hex"),
    ).toBe(expected);
  });

  it("fails the file when a background sync fails, and finish removes it naming the failure", async () => {
    const syncs = heldSyncs();
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, syncs.syncData);
    await file.write(new Uint8Array(SYNC_INTERVAL_BYTES));
    syncs.complete(new Error("EIO: i/o error, fdatasync"));
    await file.write(new Uint8Array(16));
    expect(file.failure).toMatch(/syncing the file failed: EIO/);
    await expect(file.finish("log.bin", join(directory, "log.bin"), directory)).rejects.toThrow(/EIO/);
    expect(await readdir(directory)).toEqual([]);
  });

  it("finishes and aborts only after the sync in flight, so the descriptor stays valid while it runs", async () => {
    const syncs = heldSyncs();
    const file = DiskFile.open(join(directory, ".log.tmp"), 0o600, syncs.syncData);
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
});
