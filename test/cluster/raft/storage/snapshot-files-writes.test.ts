/**
 * What `SnapshotFiles` asks of the file system when a write or a sync is not the plain case: a write the kernel took
 * only part of, a disk that fills up, and a file found present at open whose directory entry no sync of this process
 * covered. The system calls are Node's own, counted (and cut short where a test says) through a mock of `node:fs`.
 */
import { crc32c } from "@node-rs/crc32";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type SnapshotFileChunk, SnapshotFiles } from "../../../../src/cluster/raft/storage/snapshot-files.js";
import { withTemporaryDirectory } from "./temp-directory.js";

/** What the next `writev` calls do: write everything, write only this many bytes, or fail as a full disk does. */
const writeFaults = vi.hoisted(() => ({ next: [] as ({ writeBytes: number } | "full")[], calls: 0 }));
/** Descriptors of directories synced so far. */
const directorySyncs = vi.hoisted(() => ({ count: 0 }));

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>();
  // Imported here: the factory runs before the file's own imports are initialized.
  const { promisify } = await import("node:util");
  const writevAsync = promisify(actual.writev);
  type WriteResult = { bytesWritten: number; buffers: NodeJS.ArrayBufferView[] };
  const writev = (..._: unknown[]): never => {
    throw new Error("the module under test calls writev through promisify");
  };
  // The module promisifies `writev` at load; Node's own carries a custom form resolving to `{ bytesWritten }`.
  Object.assign(writev, {
    [promisify.custom]: async (
      descriptor: number,
      buffers: NodeJS.ArrayBufferView[],
      position: number,
    ): Promise<WriteResult> => {
      writeFaults.calls += 1;
      const fault = writeFaults.next.shift();
      if (fault === "full") {
        throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
      }
      if (fault === undefined) return writevAsync(descriptor, buffers, position);
      let room = fault.writeBytes;
      const taken: Uint8Array[] = [];
      for (const buffer of buffers as Uint8Array[]) {
        if (room === 0) break;
        const part = buffer.subarray(0, Math.min(room, buffer.byteLength));
        taken.push(part);
        room -= part.byteLength;
      }
      return writevAsync(descriptor, taken, position);
    },
  });
  const fsync = (descriptor: number, callback: (error: NodeJS.ErrnoException | null) => void): void => {
    if (actual.fstatSync(descriptor).isDirectory()) directorySyncs.count += 1;
    actual.fsync(descriptor, callback);
  };
  return { ...actual, writev, fsync };
});

afterEach(() => {
  writeFaults.next = [];
  writeFaults.calls = 0;
  directorySyncs.count = 0;
});

/** `sizeBytes` varied bytes. */
function snapshotData(sizeBytes: number): Uint8Array {
  return new Uint8Array(sizeBytes).map((_, position) => (position * 31 + (position >>> 7)) & 0xff);
}

/** Chunks of `data` of `chunkBytes` each, with their CRC-32C. */
function chunksOf(data: Uint8Array, chunkBytes: number): SnapshotFileChunk[] {
  const chunks: SnapshotFileChunk[] = [];
  for (let offset = 0; offset < data.byteLength; offset += chunkBytes) {
    const bytes = data.subarray(offset, Math.min(data.byteLength, offset + chunkBytes));
    chunks.push({ offset, data: bytes, checksum: crc32c(bytes) >>> 0 });
  }
  return chunks;
}

/** The data of every frame of a file, read back and verified. */
function readAll(files: SnapshotFiles, scope: number, slot: number): Uint8Array {
  const parts = files.frames(scope, slot).map((frame, frameNumber) => {
    const target = new Uint8Array(frame.dataBytes);
    files.readFrame(scope, slot, frameNumber, target);
    return target;
  });
  return new Uint8Array(Buffer.concat(parts));
}

describe("SnapshotFiles writes", () => {
  it("writes the rest again after a short write, so the frames are whole", async () => {
    await withTemporaryDirectory(async (directory) => {
      const files = SnapshotFiles.open(directory);
      const data = snapshotData(10_000);
      // Cut in the middle of the second frame's header, then in the middle of the third frame's data.
      writeFaults.next = [{ writeBytes: 3_000 + 10 }, { writeBytes: 4_000 }];
      await files.append(2, 1, chunksOf(data, 3_000));
      // The two short writes and the one that finished: no more calls than that, and no fewer.
      expect(writeFaults.calls).toBe(3);
      await files.sync(2, 1);
      await files.close();

      const reopened = SnapshotFiles.open(directory);
      reopened.scanInstalled(2, 1, data.byteLength);
      expect(readAll(reopened, 2, 1)).toEqual(data);
      await reopened.close();
    });
  });

  it("fails a write that fills the disk with the disk's own error, not a count of bytes", async () => {
    await withTemporaryDirectory(async (directory) => {
      const files = SnapshotFiles.open(directory);
      const data = snapshotData(4_096);
      writeFaults.next = [{ writeBytes: 1_000 }, "full"];
      await expect(files.append(2, 1, chunksOf(data, 1_024))).rejects.toThrow(/ENOSPC/);
      expect(writeFaults.calls).toBe(2);
      await files.close();
    });
  });

  it("syncs the directory at the first sync of a file it created, and of a file found present at open", async () => {
    await withTemporaryDirectory(async (directory) => {
      const data = snapshotData(6_000);
      const chunks = chunksOf(data, 1_000);
      const files = SnapshotFiles.open(directory);
      await files.append(2, 1, chunks.slice(0, 3));
      await files.sync(2, 1);
      await files.sync(2, 1);
      expect(directorySyncs.count).toBe(1);
      // A process that wrote a receipt's first chunks and crashed before any sync: the next one resumes the file.
      await files.append(2, 2, chunks.slice(0, 3));
      await files.close();
      directorySyncs.count = 0;

      const resumed = SnapshotFiles.open(directory);
      expect(resumed.scanIncoming(2, 2, data.byteLength)).toMatchObject({ dataBytes: 3_000, cutBytes: 0 });
      await resumed.append(2, 2, chunks.slice(3));
      await resumed.sync(2, 2);
      await resumed.sync(2, 2);
      // Once: the process that created the file never synced its directory entry, so this one does.
      expect(directorySyncs.count).toBe(1);
      expect(readAll(resumed, 2, 2)).toEqual(data);
      await resumed.close();
    });
  });
});
