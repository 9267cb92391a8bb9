import { readdirSync } from "node:fs";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { open } from "lmdb";
import { describe, expect, it } from "vitest";
import { snapshotChecksum } from "../../../../src/cluster/raft/core/snapshot-transfer.js";
import { encodeEntry, encodeRecord } from "../../../../src/cluster/raft/storage/codec.js";
import {
  type CommitReport,
  JOURNAL_DIRECTORY_NAME,
  StorageEnvironment,
} from "../../../../src/cluster/raft/storage/environment.js";
import { MemberStorage, SNAPSHOT_PREPARE_SLICE_BYTES } from "../../../../src/cluster/raft/storage/member-storage.js";
import { MAX_SNAPSHOT_FRAME_DATA_BYTES } from "../../../../src/cluster/raft/storage/snapshot-files.js";
import type { Entry, Snapshot, SnapshotByteSource } from "../../../../src/cluster/raft/types.js";
import { entriesOpenToOthers } from "../../../support/file-modes.js";
import { withTemporaryDirectory } from "./temp-directory.js";

const encoder = new TextEncoder();

function entries(first: number, count: number, term: number, label: string): Entry[] {
  return Array.from({ length: count }, (_, offset) => ({
    index: first + offset,
    term,
    kind: "normal" as const,
    data: encoder.encode(`${label}-${first + offset}`),
  }));
}

function snapshot(index: number, term: number, text: string): Snapshot {
  const data = encoder.encode(text);
  return {
    metadata: {
      index,
      term,
      configuration: { members: [{ id: 1, role: "voter", priority: 1 }] },
      sizeBytes: data.byteLength,
      checksum: snapshotChecksum(data),
    },
    data,
  };
}

/** A source of `data` that records the largest read asked of it, and whether it was read past its end. */
function recordingSource(data: Uint8Array): SnapshotByteSource & { largestReadBytes: number; readsAtEnd: number } {
  let offset = 0;
  return {
    sizeBytes: data.byteLength,
    largestReadBytes: 0,
    readsAtEnd: 0,
    read(target) {
      this.largestReadBytes = Math.max(this.largestReadBytes, target.byteLength);
      const length = Math.min(target.byteLength, data.byteLength - offset);
      if (length === 0) this.readsAtEnd += 1;
      target.set(data.subarray(offset, offset + length));
      offset += length;
      return length;
    },
  };
}

/** Frames in the snapshot files of `scope`: what the snapshots its storage prepared or received hold. */
function frameCount(environment: StorageEnvironment, scope: number): number {
  const files = environment.snapshotFiles;
  return files.slots(scope).reduce((sum, slot) => sum + files.frames(scope, slot).length, 0);
}

describe("StorageEnvironment committing on the calling thread", () => {
  it("opens an LMDB transaction only for writes that declare chunk writes", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 6, 1, "log"), null);
      const before = environment.lmdbTransactionCount;
      await storage.append(entries(7, 2, 1, "log"), { term: 1, votedFor: 1, commitIndex: 3 });
      expect(environment.lmdbTransactionCount).toBe(before);
      // A snapshot nobody prepared writes its chunks in its own transaction, in the order of the calls.
      await storage.installSnapshot(snapshot(4, 1, "unprepared"));
      expect(environment.lmdbTransactionCount).toBe(before + 1);
      expect(new TextDecoder().decode(storage.snapshot()?.data)).toBe("unprepared");
      await storage.close();
      await environment.close();
    });
  });

  it("does not count a chunk-writing write that was refused before it ran", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({
        directory,
        synchronousCommit: true,
        groupCommit: { maxOperationsPerTransaction: 4, maxPendingOperations: 1 },
      });
      const first = environment.submit(() => {}, { writesChunks: true });
      await expect(environment.submit(() => {}, { writesChunks: true })).rejects.toThrow(/queue is full/);
      await first;
      const before = environment.lmdbTransactionCount;
      for (let round = 0; round < 3; round += 1) await environment.submit(() => {});
      expect(environment.lmdbTransactionCount).toBe(before);
      await environment.close();
    });
  });

  it("refuses a chunk size larger than a snapshot file's frame may hold", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory });
      const tooLarge = MAX_SNAPSHOT_FRAME_DATA_BYTES + 1;
      expect(() => MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: tooLarge })).toThrow(
        `snapshotChunkBytes must be an integer from 1 to ${MAX_SNAPSHOT_FRAME_DATA_BYTES}, got ${tooLarge}`,
      );
      const largest = MemberStorage.openIn(environment, {
        scope: 4,
        snapshotChunkBytes: MAX_SNAPSHOT_FRAME_DATA_BYTES,
      });
      await largest.close();
      await environment.close();
    });
  });

  it("removes chunks a crash left without an LMDB transaction on this thread", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 3, 1, "log"), null);
      await storage.close();
      await environment.close();
      const root = open({ path: directory, maxDbs: 4, encoding: "binary" });
      await root.openDB({ name: "snapshotChunks", encoding: "binary" }).put([4, 7, 0], new Uint8Array([1, 2, 3]));
      await root.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit: true });
      const again = MemberStorage.openIn(reopened, { scope: 4, snapshotChunkBytes: 4 });
      await again.append(entries(4, 1, 1, "log"), null);
      await reopened.chunkOperationsSettled();
      expect(reopened.lmdbTransactionCount).toBe(0);
      expect([...reopened.chunks.getKeys({ start: [4, 0, 0], end: [5, 0, 0] })]).toEqual([]);
      // A snapshot prepared now takes a slot above every slot present at open.
      const prepared = snapshot(4, 1, "after the crash");
      await again.prepareSnapshot(prepared.data);
      await again.installSnapshot(prepared);
      expect(reopened.snapshotFiles.slots(4)).toEqual([8]);
      await again.close();
      await reopened.close();
    });
  });
});

describe.each([false, true])("StorageEnvironment (synchronous commit: %s)", (synchronousCommit) => {
  it("keeps the records of members in different scopes apart, across a reopen", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const partitionOne = MemberStorage.openIn(environment, { scope: 1 });
      const partitionTwo = MemberStorage.openIn(environment, { scope: 2 });
      await partitionOne.append(entries(1, 5, 1, "one"), { term: 1, votedFor: 1, commitIndex: 3 });
      await partitionTwo.append(entries(1, 2, 4, "two"), { term: 4, votedFor: null, commitIndex: 0 });
      await partitionOne.installSnapshot(snapshot(3, 1, "state of one"));
      await partitionOne.close();
      await partitionTwo.close();
      await environment.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit });
      const one = MemberStorage.openIn(reopened, { scope: 1 });
      const two = MemberStorage.openIn(reopened, { scope: 2 });
      const three = MemberStorage.openIn(reopened, { scope: 3 });
      expect(await one.load()).toMatchObject({ firstIndex: 4, lastIndex: 5, hardState: { term: 1, commitIndex: 3 } });
      expect(one.entries(4, 6)).toEqual(entries(4, 2, 1, "one"));
      expect(new TextDecoder().decode(one.snapshot()?.data)).toBe("state of one");
      expect(await two.load()).toMatchObject({ firstIndex: 1, lastIndex: 2, hardState: { term: 4, votedFor: null } });
      expect(two.entries(1, 3)).toEqual(entries(1, 2, 4, "two"));
      expect(two.snapshot()).toBeNull();
      expect(await three.load()).toMatchObject({ firstIndex: 1, lastIndex: 0, snapshot: null });
      for (const storage of [one, two, three]) await storage.close();
      await reopened.close();
    });
  });

  it("destroying one member removes its entries, records and chunks durably and leaves the others intact", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit, journalSegmentBytes: 4096 });
      const leaving = MemberStorage.openIn(environment, { scope: 1, snapshotChunkBytes: 8 });
      const staying = MemberStorage.openIn(environment, { scope: 2, snapshotChunkBytes: 8 });
      // Many small transactions, so the member's entries spread over several journal segments.
      for (let first = 1; first <= 400; first += 10) {
        await leaving.append(entries(first, 10, 1, "leaving"), { term: 1, votedFor: 1, commitIndex: first - 1 });
      }
      await leaving.installSnapshot(snapshot(100, 1, "state of the leaving replica"));
      await staying.append(entries(1, 3, 2, "staying"), { term: 2, votedFor: null, commitIndex: 3 });
      const chunksOf = (scope: number): number =>
        [...environment.chunks.getKeys({ start: [scope, 0, 0], end: [scope + 1, 0, 0] })].length;
      expect(chunksOf(1)).toBeGreaterThan(1);
      const segments = (): number =>
        readdirSync(join(directory, JOURNAL_DIRECTORY_NAME)).filter((name) => name.endsWith(".journal")).length;
      const segmentsBefore = segments();
      expect(segmentsBefore).toBeGreaterThan(2);
      await leaving.destroy();
      // A segment goes one record after the record that left it dead (the journal's torn-tail rule needs that), at
      // most two per record.
      for (let index = 4; index <= 6; index += 1) await staying.append(entries(index, 1, 2, "staying"), null);
      expect(segments()).toBeLessThan(segmentsBefore);
      await environment.chunkOperationsSettled();
      expect(chunksOf(1)).toBe(0);
      // The journal keeps no entry of the destroyed member, so the segments only it kept alive can go.
      expect(environment.log.bounds(1)).toBeNull();
      await staying.close();
      await environment.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit, journalSegmentBytes: 4096 });
      const again = MemberStorage.openIn(reopened, { scope: 1 });
      expect(await again.load()).toMatchObject({
        hardState: { term: 0, votedFor: null, commitIndex: 0 },
        snapshot: null,
        firstIndex: 1,
        lastIndex: 0,
      });
      expect(again.incomingSnapshot()).toBeNull();
      const other = MemberStorage.openIn(reopened, { scope: 2 });
      expect(other.entries(1, 5)).toEqual(entries(1, 4, 2, "staying"));
      await again.close();
      await other.close();
      await reopened.close();
    });
  });

  it("commits writes of several members submitted in one turn together, durably for each", async () => {
    await withTemporaryDirectory(async (directory) => {
      const commits: CommitReport[] = [];
      const onCommit = (commit: CommitReport): void => {
        commits.push(commit);
      };
      const environment = StorageEnvironment.open({ directory, synchronousCommit, onCommit });
      const members = [1, 2, 3].map((scope) => MemberStorage.openIn(environment, { scope }));
      // A first write to have a transaction in flight (the writer thread's commits coalesce behind it).
      await members[0]?.append(entries(1, 1, 1, "warm"), null);
      const before = environment.transactionCount;
      await Promise.all(
        members.map((member, position) => member.append(entries(position === 0 ? 2 : 1, 3, 1, `m${position}`), null)),
      );
      expect(environment.transactionCount - before).toBe(1);
      expect(commits.map((commit) => commit.writes)).toEqual([1, 3]);
      expect(commits.every((commit) => commit.durationMs >= 0)).toBe(true);
      for (const member of members) await member.close();
      await environment.close();
    });
  });

  it("refuses writes once closed", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      await environment.close();
      await expect(environment.submit(() => {})).rejects.toThrow(/closed/);
    });
  });

  it("removes the chunks of a replaced snapshot once the replacement is durable, not before", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      const chunkSlots = (): number[] => [
        ...new Set([...environment.chunks.getKeys({ start: [4, 0, 0], end: [5, 0, 0] })].map((key) => key[1])),
      ];
      await storage.append(entries(1, 6, 1, "log"), null);
      await storage.installSnapshot(snapshot(2, 1, "first state"));
      const [firstSlot] = chunkSlots();
      // A replacement that fails leaves the first snapshot current: its chunks stay.
      await expect(
        storage.installSnapshot({ ...snapshot(4, 1, "broken"), data: encoder.encode("other bytes") }),
      ).rejects.toThrow(/bytes but its metadata says|checksum/);
      await environment.chunkOperationsSettled();
      expect(chunkSlots()).toEqual([firstSlot]);
      await storage.installSnapshot(snapshot(4, 1, "second state"));
      await environment.chunkOperationsSettled();
      expect(chunkSlots()).not.toContain(firstSlot);
      expect(chunkSlots()).toHaveLength(1);
      expect(new TextDecoder().decode(storage.snapshot()?.data)).toBe("second state");
      await storage.close();
      await environment.close();
    });
  });

  it("installs a prepared snapshot from its file written ahead, and discards one that is given up", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      const frames = (): number => frameCount(environment, 4);
      await storage.append(entries(1, 6, 1, "log"), null);
      const prepared = snapshot(3, 1, "prepared state");
      await storage.prepareSnapshot(prepared.data);
      // Durable before any record refers to them: four frames of at most 4 bytes in the slot's file.
      expect(frames()).toBe(4);
      expect(storage.snapshot()).toBeNull();
      const lmdbTransactions = environment.lmdbTransactionCount;
      await storage.installSnapshot(prepared);
      expect(environment.lmdbTransactionCount).toBe(lmdbTransactions);
      expect(frames()).toBe(4);
      expect(new TextDecoder().decode(storage.snapshot()?.data)).toBe("prepared state");

      const givenUp = snapshot(5, 1, "never installed");
      await storage.prepareSnapshot(givenUp.data);
      expect(frames()).toBe(8);
      await storage.discardPreparedSnapshot(givenUp.data);
      await environment.chunkOperationsSettled();
      expect(frames()).toBe(4);
      await storage.close();
      await environment.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit });
      const again = MemberStorage.openIn(reopened, { scope: 4, snapshotChunkBytes: 4 });
      expect(new TextDecoder().decode(again.snapshot()?.data)).toBe("prepared state");
      expect(await again.load()).toMatchObject({ firstIndex: 4, lastIndex: 6 });
      await again.close();
      await reopened.close();
    });
  });

  it("sends a prepared snapshot from its file: any range with the CRC-32C of what it read, frames into handed-back buffers", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 6, 1, "log"), null);
      const prepared = snapshot(3, 1, "state of ten");
      await storage.prepareSnapshot(prepared.data);
      await storage.installSnapshot(prepared);
      const size = prepared.data.byteLength;
      for (let offset = 0; offset <= size; offset += 1) {
        for (let length = 1; length <= 9; length += 1) {
          const expected = prepared.data.subarray(offset, Math.min(size, offset + length));
          const read = storage.snapshotChunk(prepared.metadata, offset, length);
          expect(read).toEqual({ data: expected, checksum: crc32c(expected) >>> 0 });
          if (read !== null && read.data.byteLength > 0) storage.recycleSnapshotChunk(read.data);
        }
      }
      // A leader's usual read, one whole frame, fills the buffer its previous chunk's message handed back.
      const first = storage.snapshotChunk(prepared.metadata, 0, 4);
      if (first === null) throw new Error("no chunk at 0");
      storage.recycleSnapshotChunk(first.data);
      const next = storage.snapshotChunk(prepared.metadata, 4, 4);
      expect(next?.data.buffer).toBe(first.data.buffer);
      expect(next?.data).toEqual(prepared.data.subarray(4, 8));
      expect([...environment.chunks.getKeys({ start: [4, 0, 0], end: [5, 0, 0] })]).toEqual([]);
      await storage.close();
      await environment.close();
    });
  });

  it("prepares and installs a snapshot of no bytes with no file, and reads it back after a reopen", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 3, 1, "log"), null);
      const empty = snapshot(2, 1, "");
      expect(await storage.prepareSnapshot(empty.data)).toMatchObject({ sizeBytes: 0 });
      await storage.installSnapshot(empty);
      expect(environment.snapshotFiles.slots(4)).toEqual([]);
      await storage.close();
      await environment.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit });
      const again = MemberStorage.openIn(reopened, { scope: 4, snapshotChunkBytes: 4 });
      expect(again.snapshot()).toEqual(empty);
      const consumed: number[] = [];
      expect(await again.readSnapshotInTurns((data) => consumed.push(data.byteLength))).toEqual(empty.metadata);
      expect(consumed.reduce((sum, bytes) => sum + bytes, 0)).toBe(0);
      await again.close();
      await reopened.close();
    });
  });

  it("cuts a large prepared snapshot into frames a slice at a time, with a turn for other work after each slice", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const chunkBytes = SNAPSHOT_PREPARE_SLICE_BYTES / 4;
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: chunkBytes });
      await storage.append(entries(1, 6, 1, "log"), null);
      const data = new Uint8Array(4 * SNAPSHOT_PREPARE_SLICE_BYTES + 1).map((_, position) => position % 251);
      const large: Snapshot = {
        metadata: { ...snapshot(3, 1, "").metadata, sizeBytes: data.byteLength, checksum: snapshotChecksum(data) },
        data,
      };
      // Other work: an append that commits while the chunks are being cut.
      let turns = 0;
      const appended: Promise<void>[] = [];
      const digest = await storage.prepareSnapshot(large.data, async () => {
        turns += 1;
        if (turns === 1) appended.push(storage.append(entries(7, 1, 1, "log"), null));
        await new Promise((resolve) => setImmediate(resolve));
      });
      // One turn after each full slice, none after the last bytes.
      expect(turns).toBe(4);
      // The checksum computed while cutting, for the core's compaction, which then need not read the data again.
      expect(digest).toEqual({ sizeBytes: data.byteLength, checksum: large.metadata.checksum });
      expect(await storage.prepareSnapshot(large.data)).toEqual(digest);
      await Promise.all(appended);
      await storage.installSnapshot(large);
      expect(Buffer.from(storage.snapshot()?.data ?? []).equals(Buffer.from(data))).toBe(true);
      expect(await storage.load()).toMatchObject({ firstIndex: 4, lastIndex: 7 });

      // Prepared data is installed only under the checksum of the bytes its chunks hold.
      const other = Uint8Array.from(data);
      await storage.prepareSnapshot(other);
      const wrong: Snapshot = {
        metadata: { ...large.metadata, index: 5, checksum: (large.metadata.checksum ^ 1) >>> 0 },
        data: other,
      };
      await expect(storage.installSnapshot(wrong)).rejects.toThrow(/does not match the checksum/);
      expect(storage.snapshot()?.metadata.index).toBe(3);
      await storage.close();
      await environment.close();
    });
  });

  it("prepares a snapshot read from a source straight into the frames of its file, a few batches in memory at a time", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const chunkBytes = 64 * 1024;
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: chunkBytes });
      await storage.append(entries(1, 6, 1, "log"), null);
      const data = new Uint8Array(100 * chunkBytes + 17).map((_, position) => (position * 7) % 253);
      // Counts the appends to the snapshot file not yet written, at most, and the syncs of the file.
      let pendingWrites = 0;
      let mostPendingWrites = 0;
      let syncs = 0;
      const writeSnapshotFile = environment.writeSnapshotFile.bind(environment);
      environment.writeSnapshotFile = async (scope, slot, chunks) => {
        pendingWrites += 1;
        mostPendingWrites = Math.max(mostPendingWrites, pendingWrites);
        try {
          return await writeSnapshotFile(scope, slot, chunks);
        } finally {
          pendingWrites -= 1;
        }
      };
      const syncSnapshotFile = environment.syncSnapshotFile.bind(environment);
      environment.syncSnapshotFile = (scope, slot) => {
        syncs += 1;
        return syncSnapshotFile(scope, slot);
      };
      const reusedBefore = environment.chunkBuffers.reusedBuffers;
      const source = recordingSource(data);
      const prepared = await storage.prepareSnapshotFrom(source);
      expect(prepared).toEqual({ sizeBytes: data.byteLength, checksum: snapshotChecksum(data) });
      // Read a chunk at a time into the chunk's own memory, and checked for bytes beyond its size once.
      expect(source.largestReadBytes).toBe(chunkBytes);
      expect(source.readsAtEnd).toBe(1);
      // Bounded memory: two batches of chunks not yet durable at most, their buffers reused by the next batches (only
      // the first two batches of 8 chunks, and the short last chunk, take memory of their own).
      expect(mostPendingWrites).toBeLessThanOrEqual(2);
      expect(environment.chunkBuffers.reusedBuffers - reusedBefore).toBeGreaterThanOrEqual(101 - 2 * 8 - 1);
      // In a file of its own, synced once before anything refers to it, and nothing in LMDB's chunks.
      expect(syncs).toBe(1);
      expect([...environment.snapshotFiles.slots(4)]).toHaveLength(1);
      expect([...environment.chunks.getKeys({ start: [4, 0, 0], end: [5, 0, 0] })]).toEqual([]);
      expect(storage.snapshot()).toBeNull();
      const metadata = { ...snapshot(3, 1, "").metadata, sizeBytes: prepared.sizeBytes, checksum: prepared.checksum };
      await storage.installSnapshot({ metadata, data: prepared });
      expect(Buffer.from(storage.snapshot()?.data ?? []).equals(Buffer.from(data))).toBe(true);
      // A handle is installed once; one this storage never prepared is refused.
      await expect(storage.installSnapshot({ metadata, data: prepared })).rejects.toThrow(/did not prepare/);
      await expect(
        storage.installSnapshot({ metadata, data: { sizeBytes: prepared.sizeBytes, checksum: prepared.checksum } }),
      ).rejects.toThrow(/did not prepare/);
      await storage.close();
      await environment.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit });
      const again = MemberStorage.openIn(reopened, { scope: 4, snapshotChunkBytes: chunkBytes });
      expect(Buffer.from(again.snapshot()?.data ?? []).equals(Buffer.from(data))).toBe(true);
      await again.close();
      await reopened.close();
    });
  });

  it("fails to prepare a source that ends before its size or goes on after it, and discards a handle given up", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      const frames = (): number => frameCount(environment, 4);
      await storage.append(entries(1, 6, 1, "log"), null);
      const data = encoder.encode("fourteen bytes");
      await expect(storage.prepareSnapshotFrom({ ...recordingSource(data), sizeBytes: 20 })).rejects.toThrow(
        /of 20 bytes gave 14 bytes/,
      );
      await expect(storage.prepareSnapshotFrom({ ...recordingSource(data), sizeBytes: 10 })).rejects.toThrow(
        /of 10 bytes has more bytes/,
      );
      await environment.chunkOperationsSettled();
      const givenUp = await storage.prepareSnapshotFrom(recordingSource(data));
      await environment.chunkOperationsSettled();
      const written = frames();
      expect(written).toBeGreaterThanOrEqual(4);
      await storage.discardPreparedSnapshot(givenUp);
      await environment.chunkOperationsSettled();
      expect(frames()).toBe(written - 4);
      await storage.close();
      await environment.close();
    });
  });

  it("removes the file a preparation wrote when it fails after some batches were written", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const chunkBytes = SNAPSHOT_PREPARE_SLICE_BYTES / 4;
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: chunkBytes });
      const frames = (): number => frameCount(environment, 4);
      await storage.append(entries(1, 6, 1, "log"), null);
      const data = new Uint8Array(12 * SNAPSHOT_PREPARE_SLICE_BYTES).fill(5);
      let turns = 0;
      // The replica stops after 8 slices (32 chunks, 4 batches written): its next turn ends the preparation.
      const preparation = storage.prepareSnapshotFrom(recordingSource(data), async () => {
        turns += 1;
        if (turns === 8) {
          await environment.chunkOperationsSettled();
          expect(frames()).toBeGreaterThanOrEqual(16);
          throw new Error("the replica stopped");
        }
      });
      await expect(preparation).rejects.toThrow(/the replica stopped/);
      await environment.chunkOperationsSettled();
      expect(frames()).toBe(0);
      await storage.close();
      await environment.close();
    });
  });

  it("installs prepared data only under the checksum of the bytes its chunks hold, even if the data changed since", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 6, 1, "log"), null);
      const prepared = snapshot(3, 1, "prepared bytes");
      await storage.prepareSnapshot(prepared.data);
      // The data changes after its chunks were cut; metadata made from the changed bytes must not install the old
      // chunks under a checksum they do not have.
      prepared.data[0] = (prepared.data[0] as number) ^ 0xff;
      const changed: Snapshot = {
        metadata: { ...prepared.metadata, checksum: snapshotChecksum(prepared.data) },
        data: prepared.data,
      };
      await expect(storage.installSnapshot(changed)).rejects.toThrow(/does not match the checksum/);
      expect(storage.snapshot()).toBeNull();
      await storage.close();
      await environment.close();
    });
  });

  it("prepares the same data once when asked twice at once", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: SNAPSHOT_PREPARE_SLICE_BYTES });
      await storage.append(entries(1, 6, 1, "log"), null);
      const data = new Uint8Array(3 * SNAPSHOT_PREPARE_SLICE_BYTES).fill(7);
      const [first, second] = await Promise.all([storage.prepareSnapshot(data), storage.prepareSnapshot(data)]);
      expect(second).toEqual(first);
      await environment.chunkOperationsSettled();
      expect(frameCount(environment, 4)).toBe(3);
      await storage.close();
      await environment.close();
    });
  });

  // The replica leaves its group (destroy), or stops to be restarted while the broker's other replicas go on (close),
  // while its snapshot is being cut, after two batches of 8 chunks were written to its file.
  it.each([
    ["destroying", (storage: MemberStorage) => storage.destroy(), /destroyed|closed/, false],
    ["closing", (storage: MemberStorage) => storage.close(), /closed/, true],
  ] as const)(
    "%s a member while a snapshot is being prepared leaves nothing of that snapshot",
    async (_, stop, refusal, keepsScope) => {
      await withTemporaryDirectory(async (directory) => {
        const environment = StorageEnvironment.open({ directory, synchronousCommit });
        const storage = MemberStorage.openIn(environment, {
          scope: 4,
          snapshotChunkBytes: SNAPSHOT_PREPARE_SLICE_BYTES / 16,
        });
        await storage.append(entries(1, 6, 1, "log"), null);
        const data = new Uint8Array(3 * SNAPSHOT_PREPARE_SLICE_BYTES).fill(9);
        let stopped: Promise<void> | null = null;
        const preparation = storage.prepareSnapshot(data, async () => {
          expect(environment.snapshotFiles.slots(4)).toHaveLength(1);
          stopped ??= stop(storage);
          await new Promise((resolve) => setImmediate(resolve));
        });
        await expect(preparation).rejects.toThrow(refusal);
        await stopped;
        // The environment stays open: the file goes now, not at the scope's next write or the next start.
        await environment.chunkOperationsSettled();
        expect([...environment.chunks.getKeys({ start: [4, 0, 0], end: [5, 0, 0] })]).toHaveLength(0);
        expect(readdirSync(join(directory, "snapshots"))).toEqual([]);
        expect(environment.snapshotFiles.slots(4)).toEqual([]);
        // A destroyed member leaves nothing at all; a closed one keeps its log and records.
        expect(environment.scopes().includes(4)).toBe(keepsScope);
        await environment.close();
      });
    },
  );

  it("releases the chunks of a prepared snapshot that an installed newer one already covers", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 6, 1, "log"), null);
      await storage.installSnapshot(snapshot(5, 1, "newer"));
      const older = snapshot(3, 1, "older");
      await storage.prepareSnapshot(older.data);
      await storage.installSnapshot(older);
      await environment.chunkOperationsSettled();
      expect(new TextDecoder().decode(storage.snapshot()?.data)).toBe("newer");
      expect([...environment.chunks.getKeys({ start: [4, 0, 0], end: [5, 0, 0] })]).toHaveLength(2);
      await storage.close();
      await environment.close();
    });
  });

  it("clears chunks no record refers to (left by a crash) with a storage's first write", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 3, 1, "log"), null);
      await storage.installSnapshot(snapshot(2, 1, "current"));
      await storage.close();
      await environment.close();
      const root = open({ path: directory, maxDbs: 4, encoding: "binary" });
      await root.openDB({ name: "snapshotChunks", encoding: "binary" }).put([4, 9, 0], new Uint8Array([1, 2, 3]));
      await root.close();

      const reopened = StorageEnvironment.open({ directory, synchronousCommit });
      const again = MemberStorage.openIn(reopened, { scope: 4, snapshotChunkBytes: 4 });
      await again.append(entries(4, 1, 1, "log"), null);
      await reopened.chunkOperationsSettled();
      expect([...reopened.chunks.getKeys({ start: [4, 9, 0], end: [4, 10, 0] })]).toEqual([]);
      expect(new TextDecoder().decode(again.snapshot()?.data)).toBe("current");
      await again.close();
      await reopened.close();
    });
  });
});

describe("StorageEnvironment data layout", () => {
  it("moves a log and records kept in LMDB by earlier versions into the journal, once", async () => {
    await withTemporaryDirectory(async (directory) => {
      const root = open({ path: directory, maxDbs: 4, encoding: "binary" });
      const log = root.openDB({ name: "log", encoding: "binary" });
      const state = root.openDB({ name: "state", encoding: "binary" });
      for (const entry of entries(1, 3, 2, "legacy")) await log.put([5, entry.index], encodeEntry(entry));
      await state.put([5, "hardState"], encodeRecord({ term: 2, votedFor: 1, commitIndex: 2 }));
      await root.close();

      for (let opening = 0; opening < 2; opening += 1) {
        const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
        const storage = MemberStorage.openIn(environment, { scope: 5 });
        expect(await storage.load()).toMatchObject({
          firstIndex: 1,
          lastIndex: 3,
          hardState: { term: 2, votedFor: 1, commitIndex: 2 },
        });
        expect(storage.entries(1, 4)).toEqual(entries(1, 3, 2, "legacy"));
        await storage.close();
        await environment.close();
      }
      const after = open({ path: directory, maxDbs: 4, encoding: "binary" });
      expect(after.openDB({ name: "log", encoding: "binary" }).getKeysCount()).toBe(0);
      expect(after.openDB({ name: "state", encoding: "binary" }).getKeysCount()).toBe(0);
      await after.close();
    });
  });
});

describe("StorageEnvironment files", () => {
  it("keeps its directory, LMDB's files and the journal's segments owner-only", async () => {
    await withTemporaryDirectory(async (root) => {
      const directory = join(root, "raft");
      const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
      const storage = MemberStorage.openIn(environment, { scope: 4, snapshotChunkBytes: 4 });
      await storage.append(entries(1, 3, 1, "log"), { term: 1, votedFor: 1, commitIndex: 1 });
      await storage.installSnapshot(snapshot(2, 1, "chunks"));
      await storage.close();
      await environment.close();
      const journalFiles = readdirSync(join(directory, JOURNAL_DIRECTORY_NAME));
      expect(journalFiles.length).toBeGreaterThan(0);
      expect(readdirSync(directory)).toEqual(expect.arrayContaining(["data.mdb", "lock.mdb"]));
      expect(entriesOpenToOthers(directory)).toEqual({});
    });
  });
});
