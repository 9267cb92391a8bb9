/**
 * The backup file writer thread: chunks move to it without copies and their memory comes back for reuse, at most a
 * bounded amount is in flight, and a thread that dies fails its files (and a part written through it) with the
 * reason instead of hanging them; the next file starts a new thread.
 */
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { MAX_IN_FLIGHT_BYTES } from "../../../src/cluster/backup/file-writer-thread.js";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { writePartitionBackup } from "../../../src/cluster/backup/partition-backup.js";
import { fileChecksum } from "../../../src/cluster/backup/store.js";
import { snapshotChecksum } from "../../../src/cluster/raft/core/snapshot-transfer.js";
import type { SnapshotMetadata } from "../../../src/cluster/raft/index.js";
import { waitFor } from "../broker/support.js";
import { storedLog } from "./support.js";

const MiB = 1024 * 1024;
const part = { backupId: 4n, partitionId: 1, brokerId: 2 };

let base: string;
let store: FilesystemBackupStore;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "flowplane-backup-writer-"));
  store = new FilesystemBackupStore(join(base, "store"), { idleMs: 20 });
});

afterEach(async () => {
  await store.fileWriter.terminate();
  await rm(base, { recursive: true, force: true });
});

describe("FileWriterThread", () => {
  it("moves each chunk to the thread instead of copying it, and writes and checksums exactly the bytes handed over", async () => {
    const file = await store.createFile(part, "snapshot.bin");
    const chunk = new Uint8Array(MiB).map((_, index) => index % 253);
    const expected = fileChecksum(crc32c(chunk.subarray(0, 10), crc32c(chunk)));
    const copy = new Uint8Array(chunk);
    await file.write(chunk);
    // Moved: the broker's thread no longer holds the chunk's memory.
    expect(chunk.byteLength).toBe(0);
    // A small view of a larger buffer is copied, and the buffer stays usable.
    const large = new Uint8Array(copy);
    await file.write(large.subarray(0, 10));
    expect(large.byteLength).toBe(MiB);
    const entry = await file.finish();
    expect(entry).toEqual({ name: "snapshot.bin", sizeBytes: MiB + 10, crc32c: expected });
    const stored = await readFile(join(store.partDirectory(part), "snapshot.bin"));
    expect(fileChecksum(crc32c(stored))).toBe(expected);
  });

  it("records the CRC-32C (Castagnoli) of a file as 8 hexadecimal digits, leading zeros kept", async () => {
    const check = await store.createFile(part, "log.bin");
    await check.write(new TextEncoder().encode("1234"));
    await check.write(new TextEncoder().encode("56789"));
    // The standard check value of CRC-32C, written in two chunks.
    expect(await check.finish()).toEqual({ name: "log.bin", sizeBytes: 9, crc32c: "e3069283" });
    const empty = await store.createFile(part, "snapshot.bin");
    expect(await empty.finish()).toEqual({ name: "snapshot.bin", sizeBytes: 0, crc32c: "00000000" });
  });

  it("hands written chunks' memory back through `buffer`, so a long file reuses a bounded set of buffers", async () => {
    const file = await store.createFile(part, "log.bin");
    if (file.buffer === undefined) throw new Error("the filesystem store offers no buffers");
    // A new buffer is zeroed; one that came back still holds an earlier chunk's bytes (never zero here).
    let allocated = 0;
    let checksum = 0;
    for (let chunk = 0; chunk < 64; chunk += 1) {
      const bytes = file.buffer(MiB - chunk);
      if (bytes[0] === 0) allocated += 1;
      bytes.fill((chunk % 255) + 1);
      checksum = crc32c(bytes, checksum);
      await file.write(bytes);
    }
    const entry = await file.finish();
    expect(entry.crc32c).toBe(fileChecksum(checksum));
    // The buffers in flight plus those kept for reuse, not one per chunk.
    expect(allocated).toBeLessThanOrEqual(MAX_IN_FLIGHT_BYTES / MiB + 1);
  });

  it("fails the files of a thread that exits, with the reason, removes them on abort, and starts anew", async () => {
    const file = await store.createFile(part, "log.bin");
    await file.write(new Uint8Array(4096).fill(1));
    await store.fileWriter.terminate();
    await expect(file.write(new Uint8Array(16))).rejects.toThrow(/backup file writer thread exited with code 1/);
    await expect(file.finish()).rejects.toThrow(/backup file writer thread exited/);
    await file.abort();
    expect(await readdir(store.partDirectory(part))).toEqual([]);
    const next = await store.createFile(part, "log.bin");
    await next.write(new Uint8Array([1, 2, 3]));
    expect(await next.finish()).toMatchObject({ name: "log.bin", sizeBytes: 3 });
  });

  it("leaves no temporary file when the thread dies before finish, even without an abort", async () => {
    const file = await store.createFile(part, "snapshot.bin");
    await file.write(new Uint8Array(4096).fill(1));
    expect((await readdir(store.partDirectory(part))).filter((name) => name.endsWith(".tmp"))).toHaveLength(1);
    await store.fileWriter.terminate();
    await expect(file.finish()).rejects.toThrow(/backup file writer thread exited/);
    expect(await readdir(store.partDirectory(part))).toEqual([]);
  });

  it("reports a file system failure of the thread at finish and leaves no temporary file", async () => {
    const file = await store.createFile(part, "log.bin");
    await file.write(new Uint8Array(4096).fill(1));
    await rm(store.partDirectory(part), { recursive: true, force: true });
    await expect(file.finish()).rejects.toThrow(/ENOENT/);
  });

  it("stops the thread once no file was open for a while", async () => {
    const file = await store.createFile(part, "log.bin");
    expect(store.fileWriter.running).toBe(true);
    await file.finish();
    await waitFor(() => !store.fileWriter.running, "the idle thread stops");
  });

  it("ends a part FAILED naming the thread when it dies while the part is written", async () => {
    const data = new Uint8Array(4 * MiB).fill(9);
    const metadata: SnapshotMetadata = {
      index: 3,
      term: 1,
      configuration: { members: [] },
      sizeBytes: data.byteLength,
      checksum: snapshotChecksum(data),
    };
    let chunks = 0;
    const manifest = await writePartitionBackup(
      {
        snapshotMetadata: () => metadata,
        snapshotChunk: (_metadata, offset, maxBytes) => {
          chunks += 1;
          if (chunks === 2) void store.fileWriter.terminate();
          return data.slice(offset, offset + maxBytes);
        },
        ...storedLog(() => undefined),
        interruption: () => null,
        running: () => true,
        yieldTurn: () => new Promise((resolve) => setTimeout(resolve, 5)),
      },
      store,
      {
        ...part,
        checkpointPosition: 3,
        partitionCount: 1,
        flowplaneVersion: "1.0.0",
        now: () => "2026-01-01T00:00:00.000Z",
        sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
      },
    );
    expect(manifest).toMatchObject({ state: "FAILED" });
    expect(manifest.failureReason).toMatch(/backup file writer thread exited/);
    expect(await store.manifests(part.backupId)).toEqual([manifest]);
    expect((await readdir(store.partDirectory(part))).filter((name) => name.endsWith(".tmp"))).toEqual([]);
  });
});
