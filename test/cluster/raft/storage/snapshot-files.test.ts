import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { describe, expect, it } from "vitest";
import {
  decodeSnapshotFrameHeader,
  encodeSnapshotFrameHeader,
  SNAPSHOT_FRAME_HEADER_BYTES,
} from "../../../../src/cluster/raft/storage/codec.js";
import {
  MAX_SNAPSHOT_FRAME_DATA_BYTES,
  type SnapshotFileChunk,
  SnapshotFiles,
} from "../../../../src/cluster/raft/storage/snapshot-files.js";
import { StorageCorruptionError } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

const HEADER = SNAPSHOT_FRAME_HEADER_BYTES;

/** Sizes of the chunks most tests append: different sizes, including a single byte. */
const SIZES = [1000, 1, 4096, 333] as const;

/** `sizeBytes` bytes of snapshot data, varied enough that a flipped byte anywhere changes its checksum. */
function snapshotData(sizeBytes: number, seed = 1): Uint8Array {
  return new Uint8Array(sizeBytes).map((_, position) => (position * 131 + seed * 17 + (position >>> 8)) & 0xff);
}

/** Bytes `offset` to `end` of `data` as a received chunk: with the CRC-32C of its data. */
function chunk(data: Uint8Array, offset: number, end: number): SnapshotFileChunk {
  const bytes = data.subarray(offset, end);
  return { offset, data: bytes, checksum: crc32c(bytes) >>> 0 };
}

/** Chunks of `data` of the given sizes, back to back from `from` on. */
function chunksOf(data: Uint8Array, sizes: readonly number[], from = 0): SnapshotFileChunk[] {
  const chunks: SnapshotFileChunk[] = [];
  let offset = from;
  for (const size of sizes) {
    chunks.push(chunk(data, offset, offset + size));
    offset += size;
  }
  return chunks;
}

function sum(values: readonly number[]): number {
  return values.reduce((total, value) => total + value, 0);
}

/** File position of the header of frame `frameNumber` in a file of frames of the given data sizes. */
function framePosition(sizes: readonly number[], frameNumber: number): number {
  return sum(sizes.slice(0, frameNumber)) + frameNumber * HEADER;
}

/** The whole stored file of frames of the given data sizes. */
function fileBytes(sizes: readonly number[]): number {
  return framePosition(sizes, sizes.length);
}

/** Inverts the bits of the byte at `position` of the file at `path`, as damage on the disk would. */
function flipByte(path: string, position: number): void {
  const descriptor = openSync(path, "r+");
  try {
    const byte = new Uint8Array(1);
    expect(readSync(descriptor, byte, 0, 1, position)).toBe(1);
    byte[0] = (byte[0] as number) ^ 0xff;
    writeSync(descriptor, byte, 0, 1, position);
  } finally {
    closeSync(descriptor);
  }
}

/** Overwrites the bytes at `position` of the file at `path` with `bytes`. */
function overwrite(path: string, position: number, bytes: Uint8Array): void {
  const descriptor = openSync(path, "r+");
  try {
    writeSync(descriptor, bytes, 0, bytes.byteLength, position);
  } finally {
    closeSync(descriptor);
  }
}

/** A frame (header and data) as `SnapshotFiles` writes it, to append to a file by hand. */
function frameBytes(offset: number, data: Uint8Array): Uint8Array {
  const header = encodeSnapshotFrameHeader({ offset, dataBytes: data.byteLength, dataChecksum: crc32c(data) >>> 0 });
  const frame = new Uint8Array(HEADER + data.byteLength);
  frame.set(header);
  frame.set(data, HEADER);
  return frame;
}

/** Reads every indexed frame of a file back, in order, into one buffer. */
function readAll(files: SnapshotFiles, scope: number, slot: number): Uint8Array {
  const frames = files.frames(scope, slot);
  const read = new Uint8Array(sum(frames.map((frame) => frame.dataBytes)));
  frames.forEach((frame, frameNumber) => {
    const target = read.subarray(frame.offset, frame.offset + frame.dataBytes);
    expect(files.readFrame(scope, slot, frameNumber, target)).toEqual(frame);
  });
  return read;
}

/** The error `body` throws, which must be a `StorageCorruptionError`. */
function corruptionFrom(body: () => unknown): StorageCorruptionError {
  try {
    body();
  } catch (error) {
    expect(error).toBeInstanceOf(StorageCorruptionError);
    return error as StorageCorruptionError;
  }
  throw new Error("expected a StorageCorruptionError, but nothing was thrown");
}

/** Runs `body` with snapshot files in a `snapshots` directory (not created yet) of a fresh temporary directory. */
async function withFiles(body: (files: SnapshotFiles, directory: string) => Promise<void>): Promise<void> {
  await withTemporaryDirectory(async (parent) => {
    const directory = join(parent, "snapshots");
    const files = SnapshotFiles.open(directory);
    try {
      await body(files, directory);
    } finally {
      await files.close();
    }
  });
}

/** Opens the snapshot files of `directory` again, runs `body` and closes them, whatever happens. */
async function reopened<T>(directory: string, body: (files: SnapshotFiles) => T | Promise<T>): Promise<T> {
  const files = SnapshotFiles.open(directory);
  try {
    return await body(files);
  } finally {
    await files.close();
  }
}

/** Writes a file of `scope` and `slot` holding `data` in frames of `sizes` and closes it, as a receipt that synced. */
async function writeFile(directory: string, scope: number, slot: number, data: Uint8Array, sizes: readonly number[]) {
  await reopened(directory, async (files) => {
    await files.append(scope, slot, chunksOf(data, sizes));
    await files.sync(scope, slot);
  });
}

describe("SnapshotFiles", () => {
  describe("appending and reading frames", () => {
    it("indexes every appended chunk as a frame and reads each back intact across several appends", async () => {
      await withFiles(async (files) => {
        const data = snapshotData(sum(SIZES));
        await files.append(1, 2, chunksOf(data, SIZES.slice(0, 2)));
        await files.append(1, 2, chunksOf(data, SIZES.slice(2), SIZES[0] + SIZES[1]));

        expect(files.frames(1, 2)).toEqual([
          { offset: 0, dataBytes: 1000, dataChecksum: crc32c(data.subarray(0, 1000)) >>> 0 },
          { offset: 1000, dataBytes: 1, dataChecksum: crc32c(data.subarray(1000, 1001)) >>> 0 },
          { offset: 1001, dataBytes: 4096, dataChecksum: crc32c(data.subarray(1001, 5097)) >>> 0 },
          { offset: 5097, dataBytes: 333, dataChecksum: crc32c(data.subarray(5097)) >>> 0 },
        ]);
        expect(readAll(files, 1, 2)).toEqual(data);
        // Frames are read by number, in any order.
        const target = new Uint8Array(1);
        files.readFrame(1, 2, 1, target);
        expect(target[0]).toBe(data[1000]);
      });
    });

    it("stores each frame as its header followed by its data, back to back from byte 0 of the file", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(sum(SIZES));
        await files.append(3, 4, chunksOf(data, SIZES));
        const stored = readFileSync(join(directory, "3-4.snapshot"));
        expect(stored.byteLength).toBe(fileBytes(SIZES));
        for (const [frameNumber, frame] of files.frames(3, 4).entries()) {
          const position = framePosition(SIZES, frameNumber);
          const header = new Uint8Array(stored.subarray(position, position + HEADER));
          expect(decodeSnapshotFrameHeader(header, "test")).toEqual(frame);
          expect(new Uint8Array(stored.subarray(position + HEADER, position + HEADER + frame.dataBytes))).toEqual(
            data.subarray(frame.offset, frame.offset + frame.dataBytes),
          );
        }
      });
    });

    it("finds the frame holding a snapshot byte at frame starts and inside frames, and -1 past the end", async () => {
      await withFiles(async (files) => {
        const sizes = [5, 1, 300, 17];
        await files.append(1, 1, chunksOf(snapshotData(sum(sizes)), sizes));
        const holding = (offset: number) => files.frameHolding(1, 1, offset);
        expect([0, 5, 6, 306].map(holding)).toEqual([0, 1, 2, 3]);
        expect([1, 4, 100, 305, 307, 322].map(holding)).toEqual([0, 0, 2, 2, 3, 3]);
        expect([323, 10_000, -1].map(holding)).toEqual([-1, -1, -1]);
        // A file without frames holds no byte.
        expect(files.frameHolding(1, 9, 0)).toBe(-1);
      });
    });

    it("refuses a chunk that does not continue the file's bytes, before writing anything", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(100);
        await files.append(1, 1, [chunk(data, 0, 40)]);
        expect(() => files.append(1, 1, [chunk(data, 41, 60)])).toThrow(
          /invariant violated: a snapshot frame at 41 does not continue the file at 40/,
        );
        expect(() => files.append(1, 1, [chunk(data, 0, 40)])).toThrow(/does not continue the file at 40/);
        // A refused batch counts none of its chunks, even those before the one refused.
        expect(() => files.append(1, 1, [chunk(data, 40, 50), chunk(data, 51, 60)])).toThrow(
          /does not continue the file at 50/,
        );
        // Empty frames and frames a scan would refuse as too large are never written.
        expect(() => files.append(1, 1, [chunk(data, 40, 50), chunk(data, 50, 50)])).toThrow(
          `a snapshot frame must hold 1 to ${MAX_SNAPSHOT_FRAME_DATA_BYTES} bytes, got 0`,
        );
        const tooLarge = { offset: 40, data: new Uint8Array(MAX_SNAPSHOT_FRAME_DATA_BYTES + 1), checksum: 0 };
        expect(() => files.append(1, 1, [tooLarge])).toThrow(`got ${MAX_SNAPSHOT_FRAME_DATA_BYTES + 1}`);
        expect(files.frames(1, 1)).toHaveLength(1);
        expect(statSync(join(directory, "1-1.snapshot")).size).toBe(HEADER + 40);
        // The file still takes the chunk that continues it.
        await files.append(1, 1, [chunk(data, 40, 100)]);
        expect(readAll(files, 1, 1)).toEqual(data);
      });
    });

    it("refuses to read a frame into a target of another size, or a frame that is not indexed", async () => {
      await withFiles(async (files) => {
        await files.append(1, 1, chunksOf(snapshotData(30), [10, 20]));
        expect(() => files.readFrame(1, 1, 1, new Uint8Array(10))).toThrow(
          /invariant violated: a frame of 20 bytes read into 10/,
        );
        expect(() => files.readFrame(1, 1, 0, new Uint8Array(11))).toThrow(/a frame of 10 bytes read into 11/);
        expect(() => files.readFrame(1, 1, 2, new Uint8Array(1))).toThrow(
          /frame 2 of snapshot file 1-1 is not indexed/,
        );
        expect(() => files.readFrame(5, 5, 0, new Uint8Array(1))).toThrow(/not indexed/);
      });
    });
  });

  describe("files and directory", () => {
    it("creates its directory 0700 and each file 0600, named after its scope and slot", async () => {
      await withFiles(async (files, directory) => {
        expect(statSync(directory).mode & 0o777).toBe(0o700);
        await files.append(12, 34, chunksOf(snapshotData(10), [10]));
        const path = join(directory, "12-34.snapshot");
        expect(statSync(path).mode & 0o777).toBe(0o600);
        expect(statSync(path).size).toBe(HEADER + 10);
      });
    });

    it("lists the files it wrote and the ones a second opening of the directory finds, slots in numeric order", async () => {
      await withFiles(async (files, directory) => {
        expect(files.scopes()).toEqual([]);
        expect(files.slots(1)).toEqual([]);
        const data = snapshotData(8);
        for (const [scope, slot] of [
          [1, 100],
          [1, 2],
          [3, 0],
          [1, 10],
        ] as const) {
          await files.append(scope, slot, chunksOf(data, [8]));
        }
        expect(files.slots(1)).toEqual([2, 10, 100]);
        expect(files.slots(3)).toEqual([0]);
        expect(files.slots(2)).toEqual([]);
        expect(files.scopes().sort((left, right) => left - right)).toEqual([1, 3]);
        expect(files.has(1, 10)).toBe(true);
        expect(files.has(3, 1)).toBe(false);

        await reopened(directory, (second) => {
          expect(second.slots(1)).toEqual([2, 10, 100]);
          expect(second.slots(3)).toEqual([0]);
          expect(second.scopes().sort((left, right) => left - right)).toEqual([1, 3]);
          expect(second.has(3, 0)).toBe(true);
          expect(second.has(1, 3)).toBe(false);
          // Found files are indexed only once scanned.
          expect(second.frames(1, 2)).toEqual([]);
        });
      });
    });

    it("ignores names in its directory that are not `<scope>-<slot>.snapshot` with canonical numbers", async () => {
      await withTemporaryDirectory(async (directory) => {
        mkdirSync(directory, { recursive: true });
        for (const name of [
          "notes.txt",
          "01-2.snapshot",
          "1-02.snapshot",
          "1-2.snapshot.tmp",
          "a-1.snapshot",
          "1-2-3.snapshot",
          "1.snapshot",
          "-1-2.snapshot",
          "99999999999999999999-1.snapshot",
        ]) {
          writeFileSync(join(directory, name), "not a snapshot");
        }
        writeFileSync(join(directory, "7-8.snapshot"), "");
        await reopened(directory, (files) => {
          expect(files.scopes()).toEqual([7]);
          expect(files.slots(7)).toEqual([8]);
          expect(files.slots(1)).toEqual([]);
          expect(files.has(1, 2)).toBe(false);
        });
      });
    });
  });

  describe("damage found by reads", () => {
    it("reports a flipped data byte as corruption naming the file and the frame's position", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(sum(SIZES));
        await files.append(2, 5, chunksOf(data, SIZES));
        const path = join(directory, "2-5.snapshot");
        const position = framePosition(SIZES, 2);
        flipByte(path, position + HEADER + 1234);

        const error = corruptionFrom(() => files.readFrame(2, 5, 2, new Uint8Array(SIZES[2])));
        expect(error.message).toContain(path);
        expect(error.message).toContain(`at byte ${position}`);
        expect(error.message).toMatch(/data checksum mismatch/);
        expect(error.location).toBe(`snapshot file ${path} at byte ${position}`);
        // The frames around it still read intact.
        const target = new Uint8Array(SIZES[3]);
        files.readFrame(2, 5, 3, target);
        expect(target).toEqual(data.subarray(5097));
      });
    });

    it("reports a flipped header byte as corruption naming the file and the frame's position", async () => {
      await withFiles(async (files, directory) => {
        await files.append(2, 5, chunksOf(snapshotData(sum(SIZES)), SIZES));
        const path = join(directory, "2-5.snapshot");
        const position = framePosition(SIZES, 1);
        flipByte(path, position + 10);

        const error = corruptionFrom(() => files.readFrame(2, 5, 1, new Uint8Array(SIZES[1])));
        expect(error.message).toContain(path);
        expect(error.message).toContain(`at byte ${position}`);
        expect(error.message).toMatch(/checksum mismatch/);
      });
    });

    it("reports a valid header that differs from the indexed one, and a frame cut short, as corruption", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(sum(SIZES));
        await files.append(2, 5, chunksOf(data, SIZES));
        const path = join(directory, "2-5.snapshot");
        const position = framePosition(SIZES, 2);
        // A header that verifies, but names a different checksum than the one written there.
        overwrite(path, position, encodeSnapshotFrameHeader({ offset: 1001, dataBytes: 4096, dataChecksum: 7 }));
        const differs = corruptionFrom(() => files.readFrame(2, 5, 2, new Uint8Array(SIZES[2])));
        expect(differs.message).toContain(`${path} at byte ${position}`);
        expect(differs.message).toMatch(/frame header differs from the one written there/);

        truncateSync(path, fileBytes(SIZES) - 10);
        const cut = corruptionFrom(() => files.readFrame(2, 5, 3, new Uint8Array(SIZES[3])));
        expect(cut.message).toContain(`${path} at byte ${framePosition(SIZES, 3)}`);
        expect(cut.message).toMatch(/frame cut short/);
      });
    });
  });

  describe("scanning a snapshot still being received", () => {
    it("finds every byte of a complete file with its CRC-32C, cuts nothing, and indexes the frames", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        await reopened(directory, (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: data.byteLength,
            checksum: crc32c(data) >>> 0,
            cutBytes: 0,
          });
          expect(files.frames(1, 2).map((frame) => frame.dataBytes)).toEqual([...SIZES]);
          expect(readAll(files, 1, 2)).toEqual(data);
          // A file that holds fewer bytes than the snapshot is complete as far as it goes.
          expect(files.scanIncoming(1, 2, data.byteLength + 1000).cutBytes).toBe(0);
        });
        expect(statSync(join(directory, "1-2.snapshot")).size).toBe(fileBytes(SIZES));
      });
    });

    it("rebuilds the same index when the file is scanned by the object that wrote it", async () => {
      await withFiles(async (files) => {
        const data = snapshotData(sum(SIZES));
        await files.append(1, 2, chunksOf(data, SIZES));
        const written = [...files.frames(1, 2)];
        expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
          dataBytes: data.byteLength,
          checksum: crc32c(data) >>> 0,
          cutBytes: 0,
        });
        expect(files.frames(1, 2)).toEqual(written);
      });
    });

    it("cuts a torn last frame, a header with part of its data, off the file", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        const kept = SIZES.slice(0, 3);
        await writeFile(directory, 1, 2, data, kept);
        const path = join(directory, "1-2.snapshot");
        const last = data.subarray(sum(kept));
        appendFileSync(path, frameBytes(sum(kept), last).subarray(0, HEADER + 100));

        await reopened(directory, async (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: sum(kept),
            checksum: crc32c(data.subarray(0, sum(kept))) >>> 0,
            cutBytes: HEADER + 100,
          });
          expect(statSync(path).size).toBe(fileBytes(kept));
          expect(files.frames(1, 2)).toHaveLength(3);

          // Appending goes on at the verified end, and the next opening finds the whole snapshot.
          await files.append(1, 2, [chunk(data, sum(kept), data.byteLength)]);
          await files.sync(1, 2);
        });
        expect(statSync(path).size).toBe(fileBytes(SIZES));
        await reopened(directory, (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: data.byteLength,
            checksum: crc32c(data) >>> 0,
            cutBytes: 0,
          });
          expect(readAll(files, 1, 2)).toEqual(data);
        });
      });
    });

    it("cuts a torn header, shorter than a whole header, off the file", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES.slice(0, 2));
        const path = join(directory, "1-2.snapshot");
        appendFileSync(path, frameBytes(1001, data.subarray(1001, 5097)).subarray(0, HEADER - 1));
        await reopened(directory, (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: 1001,
            checksum: crc32c(data.subarray(0, 1001)) >>> 0,
            cutBytes: HEADER - 1,
          });
          expect(statSync(path).size).toBe(fileBytes(SIZES.slice(0, 2)));
        });
      });
    });

    it("cuts everything from a frame with a flipped data byte on, even the intact frames after it", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        const path = join(directory, "1-2.snapshot");
        flipByte(path, framePosition(SIZES, 1) + HEADER);

        await reopened(directory, async (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: SIZES[0],
            checksum: crc32c(data.subarray(0, SIZES[0])) >>> 0,
            cutBytes: fileBytes(SIZES) - fileBytes(SIZES.slice(0, 1)),
          });
          expect(statSync(path).size).toBe(HEADER + SIZES[0]);
          expect(files.frames(1, 2)).toHaveLength(1);

          await files.append(1, 2, chunksOf(data, SIZES.slice(1), SIZES[0]));
        });
        await reopened(directory, (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: data.byteLength,
            checksum: crc32c(data) >>> 0,
            cutBytes: 0,
          });
          expect(readAll(files, 1, 2)).toEqual(data);
        });
      });
    });

    it("cuts a frame whose snapshot offset does not continue the bytes before it", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        const kept = SIZES.slice(0, 2);
        await writeFile(directory, 1, 2, data, kept);
        const path = join(directory, "1-2.snapshot");
        // An intact frame, but of bytes 5 further on than the file holds.
        const skipping = frameBytes(sum(kept) + 5, data.subarray(sum(kept) + 5, sum(kept) + 55));
        appendFileSync(path, skipping);

        await reopened(directory, (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength)).toEqual({
            dataBytes: sum(kept),
            checksum: crc32c(data.subarray(0, sum(kept))) >>> 0,
            cutBytes: skipping.byteLength,
          });
          expect(statSync(path).size).toBe(fileBytes(kept));
        });
      });
    });

    it("cuts a frame extending beyond the snapshot's size", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        const path = join(directory, "1-2.snapshot");
        await reopened(directory, (files) => {
          expect(files.scanIncoming(1, 2, data.byteLength - 1)).toEqual({
            dataBytes: sum(SIZES.slice(0, 3)),
            checksum: crc32c(data.subarray(0, sum(SIZES.slice(0, 3)))) >>> 0,
            cutBytes: HEADER + SIZES[3],
          });
          expect(statSync(path).size).toBe(fileBytes(SIZES.slice(0, 3)));
        });
      });
    });

    it("finds nothing, and creates nothing, for a missing file", async () => {
      await withFiles(async (files, directory) => {
        expect(files.scanIncoming(4, 4, 1000)).toEqual({ dataBytes: 0, checksum: 0, cutBytes: 0 });
        expect(files.has(4, 4)).toBe(false);
        expect(existsSync(join(directory, "4-4.snapshot"))).toBe(false);
      });
    });
  });

  describe("scanning an installed snapshot", () => {
    it("accepts a complete file and indexes its frames for reading", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        await reopened(directory, (files) => {
          files.scanInstalled(1, 2, data.byteLength);
          expect(files.frames(1, 2).map((frame) => frame.offset)).toEqual([0, 1000, 1001, 5097]);
          expect(readAll(files, 1, 2)).toEqual(data);
        });
      });
    });

    it("accepts a file with damaged data, which the read of its frame then reports", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        flipByte(join(directory, "1-2.snapshot"), framePosition(SIZES, 2) + HEADER + 7);
        await reopened(directory, (files) => {
          files.scanInstalled(1, 2, data.byteLength);
          expect(() => files.readFrame(1, 2, 2, new Uint8Array(SIZES[2]))).toThrow(StorageCorruptionError);
        });
      });
    });

    it("reports a missing file as corruption", async () => {
      await withFiles(async (files, directory) => {
        const error = corruptionFrom(() => files.scanInstalled(1, 2, 10));
        expect(error.message).toContain(join(directory, "1-2.snapshot"));
        expect(error.message).toMatch(/is missing/);
      });
    });

    it("reports a file whose frames hold fewer bytes than the snapshot as corruption at its end", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        await reopened(directory, (files) => {
          const error = corruptionFrom(() => files.scanInstalled(1, 2, data.byteLength + 1));
          expect(error.message).toContain(`${join(directory, "1-2.snapshot")} at byte ${fileBytes(SIZES)}`);
          expect(error.message).toMatch(/frame header is missing, damaged or cut short/);
        });
      });
    });

    it("reports a damaged frame header as corruption at its position", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        const position = framePosition(SIZES, 2);
        flipByte(join(directory, "1-2.snapshot"), position + 17);
        await reopened(directory, (files) => {
          const error = corruptionFrom(() => files.scanInstalled(1, 2, data.byteLength));
          expect(error.message).toContain(`${join(directory, "1-2.snapshot")} at byte ${position}`);
          expect(error.message).toMatch(/frame header is missing, damaged or cut short/);
        });
      });
    });

    it("reports bytes after the last frame as corruption at the end of the frames", async () => {
      await withTemporaryDirectory(async (directory) => {
        const data = snapshotData(sum(SIZES));
        await writeFile(directory, 1, 2, data, SIZES);
        const path = join(directory, "1-2.snapshot");
        appendFileSync(path, new Uint8Array(3));
        await reopened(directory, (files) => {
          const error = corruptionFrom(() => files.scanInstalled(1, 2, data.byteLength));
          expect(error.message).toContain(`${path} at byte ${fileBytes(SIZES)}`);
          expect(error.message).toMatch(/bytes follow the snapshot's last frame/);
          // Unlike a scan of a snapshot being received, nothing is cut.
          expect(statSync(path).size).toBe(fileBytes(SIZES) + 3);
        });
      });
    });
  });

  describe("syncing, removing and closing", () => {
    it("syncs after appends, once the writes are done", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(sum(SIZES));
        let appended = false;
        void files.append(1, 2, chunksOf(data, SIZES.slice(0, 2))).then(() => {
          appended = true;
        });
        const appending = files.append(1, 2, chunksOf(data, SIZES.slice(2), 1001));
        await files.sync(1, 2);
        expect(appended).toBe(true);
        await appending;
        expect(statSync(join(directory, "1-2.snapshot")).size).toBe(fileBytes(SIZES));
      });
    });

    it("creates an empty file when syncing one that does not exist yet", async () => {
      await withFiles(async (files, directory) => {
        await files.sync(6, 1);
        const path = join(directory, "6-1.snapshot");
        expect(files.has(6, 1)).toBe(true);
        expect(statSync(path).size).toBe(0);
        expect(statSync(path).mode & 0o777).toBe(0o600);
        expect(files.frames(6, 1)).toEqual([]);
        // The empty file takes frames from byte 0.
        const data = snapshotData(20);
        await files.append(6, 1, chunksOf(data, [20]));
        expect(readAll(files, 6, 1)).toEqual(data);
      });
    });

    it("removes a file once the write in progress to it is done", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(8 * 1024 * 1024);
        const settled: string[] = [];
        const appending = files.append(1, 2, chunksOf(data, [data.byteLength])).then(() => settled.push("append"));
        const removing = files.remove(1, 2).then(() => settled.push("remove"));
        expect(files.has(1, 2)).toBe(false);
        await Promise.all([appending, removing]);
        expect(settled).toEqual(["append", "remove"]);
        expect(existsSync(join(directory, "1-2.snapshot"))).toBe(false);
        expect(files.frames(1, 2)).toEqual([]);
        expect(files.slots(1)).toEqual([]);
      });
    });

    it("removes a file once a sync in progress is done, and refuses to write it again meanwhile", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(8 * 1024 * 1024);
        await files.append(1, 3, chunksOf(data, [data.byteLength]));
        const settled: string[] = [];
        const syncing = files.sync(1, 3).then(() => settled.push("sync"));
        // Let the sync get past its wait for the writes (none), to its fdatasync on the thread pool.
        await Promise.resolve();
        await Promise.resolve();
        const removing = files.remove(1, 3).then(() => settled.push("remove"));
        expect(() => files.append(1, 3, chunksOf(data, [1]))).toThrow(/is being removed/);
        await Promise.all([syncing, removing]);
        expect(settled).toEqual(["sync", "remove"]);
        expect(existsSync(join(directory, "1-3.snapshot"))).toBe(false);
      });
    });

    it("removes a file it only found in its directory, and a missing one without failing", async () => {
      await withTemporaryDirectory(async (directory) => {
        await writeFile(directory, 1, 2, snapshotData(10), [10]);
        await reopened(directory, async (files) => {
          await files.remove(1, 2);
          await files.remove(9, 9);
          expect(files.has(1, 2)).toBe(false);
          expect(existsSync(join(directory, "1-2.snapshot"))).toBe(false);
        });
        await reopened(directory, (files) => expect(files.scopes()).toEqual([]));
      });
    });

    it("waits for the writes in progress when closing, then refuses further calls as closed", async () => {
      await withFiles(async (files, directory) => {
        const data = snapshotData(8 * 1024 * 1024);
        const settled: string[] = [];
        const appending = files.append(1, 2, chunksOf(data, [data.byteLength])).then(() => settled.push("append"));
        await files.close();
        settled.push("close");
        await appending;
        expect(settled).toEqual(["append", "close"]);
        expect(statSync(join(directory, "1-2.snapshot")).size).toBe(HEADER + data.byteLength);

        expect(() => files.append(1, 2, [chunk(data, data.byteLength - 1, data.byteLength)])).toThrow(/closed/);
        await expect(files.sync(1, 2)).rejects.toThrow(/closed/);
        expect(() => files.scanIncoming(1, 2, data.byteLength)).toThrow(/closed/);
        expect(() => files.scanInstalled(1, 2, data.byteLength)).toThrow(/closed/);
        expect(() => files.readFrame(1, 2, 0, new Uint8Array(data.byteLength))).toThrow(/closed/);
        // Queries too: an index emptied by the close would otherwise read as a file with no frames.
        expect(() => files.frames(1, 2)).toThrow(/closed/);
        expect(() => files.frameHolding(1, 2, 0)).toThrow(/closed/);
        expect(() => files.has(1, 2)).toThrow(/closed/);
        expect(() => files.slots(1)).toThrow(/closed/);
        expect(() => files.scopes()).toThrow(/closed/);
        // A removal after the close leaves the file alone: a storage opened again in the directory may be using it.
        await expect(files.remove(1, 2)).rejects.toThrow(/closed/);
        expect(existsSync(join(directory, "1-2.snapshot"))).toBe(true);
        // Closing again does nothing.
        await files.close();
      });
    });
  });
});
