import { appendFileSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import { encodeSnapshotFrameHeader, SNAPSHOT_FRAME_HEADER_BYTES } from "../../../../src/cluster/raft/storage/codec.js";
import { type SnapshotFileChunk, SnapshotFiles } from "../../../../src/cluster/raft/storage/snapshot-files.js";
import { StorageCorruptionError } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

/** Snapshot data whose bytes differ from position to position. */
function snapshotData(sizeBytes: number): Uint8Array {
  return new Uint8Array(sizeBytes).map((_, position) => (position * 37 + 11) & 0xff);
}

/** Chunks of `data` cut at `cuts` (the offsets where each chunk after the first starts). */
function chunksOf(data: Uint8Array, cuts: readonly number[]): SnapshotFileChunk[] {
  const bounds = [0, ...cuts, data.byteLength];
  return bounds.slice(0, -1).map((offset, position) => {
    const bytes = data.subarray(offset, bounds[position + 1]);
    return { offset, data: bytes, checksum: crc32c(bytes) >>> 0 };
  });
}

/** Opens snapshot files in `directory/snapshots`, runs `body`, and closes them. */
async function withFiles(
  directory: string,
  body: (files: SnapshotFiles, filesDirectory: string) => Promise<void>,
): Promise<void> {
  const filesDirectory = join(directory, "snapshots");
  const files = SnapshotFiles.open(filesDirectory);
  try {
    await body(files, filesDirectory);
  } finally {
    await files.close();
  }
}

/** The data of every frame of a file, read back and verified. */
function readAll(files: SnapshotFiles, scope: number, slot: number): Uint8Array {
  const frames = files.frames(scope, slot);
  const sizeBytes = frames.reduce((total, frame) => total + frame.dataBytes, 0);
  const data = new Uint8Array(sizeBytes);
  for (const [frameNumber, frame] of frames.entries()) {
    files.readFrame(scope, slot, frameNumber, data.subarray(frame.offset, frame.offset + frame.dataBytes));
  }
  return data;
}

const frameBytes = (dataBytes: number): number => SNAPSHOT_FRAME_HEADER_BYTES + dataBytes;

describe("SnapshotFiles", () => {
  describe("appending and reading frames", () => {
    it("indexes appended chunks as frames, finds the frame holding a byte, and reads each back verified", async () => {
      await withTemporaryDirectory(async (directory) => {
        await withFiles(directory, async (files) => {
          const data = snapshotData(20);
          const [first, second, third, fourth] = chunksOf(data, [3, 10, 12]);
          await files.append(1, 5, [first!, second!]);
          await files.append(1, 5, [third!, fourth!]);
          expect(files.frames(1, 5).map((frame) => [frame.offset, frame.dataBytes])).toEqual([
            [0, 3],
            [3, 7],
            [10, 2],
            [12, 8],
          ]);
          expect([0, 2, 3, 9, 10, 12, 19, 20].map((offset) => files.frameHolding(1, 5, offset))).toEqual([
            0, 0, 1, 1, 2, 3, 3, -1,
          ]);
          expect(readAll(files, 1, 5)).toEqual(data);
          expect(files.frames(1, 5)[1]?.dataChecksum).toBe(crc32c(data.subarray(3, 10)) >>> 0);
        });
      });
    });

    it("refuses a chunk that does not continue the file's bytes and a read into memory of another size", async () => {
      await withTemporaryDirectory(async (directory) => {
        await withFiles(directory, async (files) => {
          const [first, second] = chunksOf(snapshotData(8), [4]);
          await files.append(1, 1, [first!]);
          expect(() => files.append(1, 1, [{ ...second!, offset: 5 }])).toThrow(/does not continue the file at 4/);
          expect(() => files.readFrame(1, 1, 0, new Uint8Array(3))).toThrow(/a frame of 4 bytes read into 3/);
          expect(() => files.readFrame(1, 1, 1, new Uint8Array(4))).toThrow(/not indexed/);
        });
      });
    });
  });

  describe("files and directory", () => {
    it("creates owner-only files named after scope and slot in an owner-only directory, and finds them again", async () => {
      await withTemporaryDirectory(async (directory) => {
        await withFiles(directory, async (files, filesDirectory) => {
          await files.append(2, 9, chunksOf(snapshotData(4), []));
          await files.append(3, 1, chunksOf(snapshotData(4), []));
          writeFileSync(join(filesDirectory, "notes.txt"), "not a snapshot");
          writeFileSync(join(filesDirectory, "007-1.snapshot"), "not a name this class writes");
          expect(statSync(filesDirectory).mode & 0o777).toBe(0o700);
          expect(statSync(join(filesDirectory, "2-9.snapshot")).mode & 0o777).toBe(0o600);
          expect({ slots: files.slots(2), scopes: files.scopes().sort(), has: files.has(3, 1) }).toEqual({
            slots: [9],
            scopes: [2, 3],
            has: true,
          });
        });
        await withFiles(directory, async (files) => {
          expect({ two: files.slots(2), three: files.slots(3), seven: files.slots(7) }).toEqual({
            two: [9],
            three: [1],
            seven: [],
          });
          expect(files.has(2, 8)).toBe(false);
        });
      });
    });

    it("syncs appended bytes and creates an empty file for a sync of a file never written", async () => {
      await withTemporaryDirectory(async (directory) => {
        await withFiles(directory, async (files, filesDirectory) => {
          const written = files.append(1, 1, chunksOf(snapshotData(6), [2]));
          await files.sync(1, 1);
          await written;
          expect(statSync(join(filesDirectory, "1-1.snapshot")).size).toBe(frameBytes(2) + frameBytes(4));
          await files.sync(1, 2);
          expect(statSync(join(filesDirectory, "1-2.snapshot")).size).toBe(0);
          expect(files.has(1, 2)).toBe(true);
        });
      });
    });

    it("removes a file once the write in progress settled, and refuses every call once closed", async () => {
      await withTemporaryDirectory(async (directory) => {
        const filesDirectory = join(directory, "snapshots");
        const files = SnapshotFiles.open(filesDirectory);
        const data = snapshotData(64 * 1024);
        const written = files.append(4, 2, chunksOf(data, [32 * 1024]));
        let writeSettled = false;
        void written.then(() => {
          writeSettled = true;
        });
        const removed = files.remove(4, 2).then(() => writeSettled);
        expect(files.has(4, 2)).toBe(false);
        expect(await removed).toBe(true);
        expect(existsSync(join(filesDirectory, "4-2.snapshot"))).toBe(false);
        await files.close();
        expect(() => files.append(4, 3, chunksOf(data, []))).toThrow(/closed/);
        expect(() => files.scanIncoming(4, 3, 10)).toThrow(/closed/);
      });
    });
  });

  describe("damage found by a read", () => {
    it("names the file and the frame's position for a flipped data byte and for a flipped header byte", async () => {
      await withTemporaryDirectory(async (directory) => {
        await withFiles(directory, async (files, filesDirectory) => {
          const data = snapshotData(12);
          await files.append(1, 1, chunksOf(data, [4, 8]));
          const path = join(filesDirectory, "1-1.snapshot");
          const flip = (position: number): void => {
            const bytes = readFileSync(path);
            bytes[position] = (bytes[position] as number) ^ 0x01;
            writeFileSync(path, bytes);
          };
          flip(frameBytes(4) + SNAPSHOT_FRAME_HEADER_BYTES + 2);
          const read = (frameNumber: number) => () => files.readFrame(1, 1, frameNumber, new Uint8Array(4));
          expect(read(1)).toThrow(StorageCorruptionError);
          expect(read(1)).toThrow(new RegExp(`${path} at byte ${frameBytes(4)}: data checksum mismatch`));
          flip(2 * frameBytes(4) + 9);
          expect(read(2)).toThrow(new RegExp(`${path} at byte ${2 * frameBytes(4)}: checksum mismatch`));
          expect(read(0)).not.toThrow();
        });
      });
    });
  });

  describe("scanning the file of a snapshot being received", () => {
    /** Writes frames of `data` cut every 4 bytes to file (1, 1), closes, and returns the file's path. */
    async function writeFrames(directory: string, data: Uint8Array): Promise<string> {
      const cuts = Array.from({ length: Math.ceil(data.byteLength / 4) - 1 }, (_, position) => (position + 1) * 4);
      await withFiles(directory, async (files) => {
        await files.append(1, 1, chunksOf(data, cuts));
      });
      return join(directory, "snapshots", "1-1.snapshot");
    }

    it("keeps every frame of an intact file and yields their bytes and running checksum", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(16);
        await writeFrames(directory, data);
        await withFiles(directory, async (files) => {
          expect(files.scanIncoming(1, 1, 40)).toEqual({ dataBytes: 16, checksum: crc32c(data) >>> 0, cutBytes: 0 });
          expect(readAll(files, 1, 1)).toEqual(data);
          expect(files.scanIncoming(1, 2, 40)).toEqual({ dataBytes: 0, checksum: 0, cutBytes: 0 });
          expect(files.has(1, 2)).toBe(false);
        });
      });
    });

    it("cuts a torn last frame off the file, and appends after the frames it kept", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(16);
        const path = await writeFrames(directory, data.subarray(0, 8));
        const torn = encodeSnapshotFrameHeader({ offset: 8, dataBytes: 4, dataChecksum: crc32c(data.subarray(8, 12)) });
        appendFileSync(path, Buffer.concat([torn, data.subarray(8, 10)]));
        await withFiles(directory, async (files) => {
          const scan = files.scanIncoming(1, 1, 16);
          expect(scan).toEqual({ dataBytes: 8, checksum: crc32c(data.subarray(0, 8)) >>> 0, cutBytes: frameBytes(2) });
          expect(statSync(path).size).toBe(2 * frameBytes(4));
          await files.append(1, 1, chunksOf(data, [4, 8, 12]).slice(2));
        });
        await withFiles(directory, async (files) => {
          expect(files.scanIncoming(1, 1, 16)).toEqual({ dataBytes: 16, checksum: crc32c(data) >>> 0, cutBytes: 0 });
          expect(readAll(files, 1, 1)).toEqual(data);
        });
      });
    });

    it("cuts everything from a frame that does not verify, even intact frames after it", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(16);
        const path = await writeFrames(directory, data);
        const bytes = readFileSync(path);
        const damaged = frameBytes(4) + SNAPSHOT_FRAME_HEADER_BYTES + 1;
        bytes[damaged] = (bytes[damaged] as number) ^ 0x80;
        writeFileSync(path, bytes);
        await withFiles(directory, async (files) => {
          expect(files.scanIncoming(1, 1, 16)).toEqual({
            dataBytes: 4,
            checksum: crc32c(data.subarray(0, 4)) >>> 0,
            cutBytes: 3 * frameBytes(4),
          });
          expect(statSync(path).size).toBe(frameBytes(4));
        });
      });
    });

    it("cuts a frame whose offset does not continue the bytes before it, and one reaching beyond the snapshot's size", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(8);
        const path = await writeFrames(directory, data.subarray(0, 4));
        const skipping = encodeSnapshotFrameHeader({ offset: 6, dataBytes: 2, dataChecksum: crc32c(data.subarray(6)) });
        appendFileSync(path, Buffer.concat([skipping, data.subarray(6)]));
        await withFiles(directory, async (files) => {
          expect(files.scanIncoming(1, 1, 8).cutBytes).toBe(frameBytes(2));
        });
        const beyond = encodeSnapshotFrameHeader({ offset: 4, dataBytes: 4, dataChecksum: crc32c(data.subarray(4)) });
        appendFileSync(path, Buffer.concat([beyond, data.subarray(4)]));
        await withFiles(directory, async (files) => {
          // The snapshot is said to hold 6 bytes: a frame ending at byte 8 cannot belong to it.
          expect(files.scanIncoming(1, 1, 6)).toMatchObject({ dataBytes: 4, cutBytes: frameBytes(4) });
          expect(statSync(path).size).toBe(frameBytes(4));
        });
      });
    });
  });

  describe("scanning the file of an installed snapshot", () => {
    it("indexes a complete file from its headers, and refuses a missing, short, damaged or overlong one", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(12);
        const path = join(directory, "snapshots", "1-1.snapshot");
        await withFiles(directory, async (files) => {
          await files.append(1, 1, chunksOf(data, [4, 8]));
        });
        const complete = readFileSync(path);
        const scan = (sizeBytes: number) => async () =>
          withFiles(directory, async (files) => {
            files.scanInstalled(1, 1, sizeBytes);
          });
        await withFiles(directory, async (files) => {
          files.scanInstalled(1, 1, 12);
          expect(readAll(files, 1, 1)).toEqual(data);
          expect(() => files.scanInstalled(1, 2, 12)).toThrow(/the file of the installed snapshot is missing/);
        });
        await expect(scan(16)()).rejects.toThrow(/frame header is missing, damaged or cut short/);
        await expect(scan(8)()).rejects.toThrow(/bytes follow the snapshot's last frame/);
        const damaged = Uint8Array.from(complete);
        damaged[frameBytes(4) + 12] = (damaged[frameBytes(4) + 12] as number) ^ 0x01;
        writeFileSync(path, damaged);
        await expect(scan(12)()).rejects.toThrow(StorageCorruptionError);
        await expect(scan(12)()).rejects.toThrow(new RegExp(`at byte ${frameBytes(4)}: frame header`));
      });
    });
  });
});
