import { appendFileSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { crc32c } from "@node-rs/crc32";
import { type Database, open } from "lmdb";
import { describe, expect, it, vi } from "vitest";
import {
  encodeChunk,
  encodeEntry,
  encodeRecord,
  encodeSnapshotFrameHeader,
  SNAPSHOT_FRAME_HEADER_BYTES,
} from "../../../../src/cluster/raft/storage/codec.js";
import {
  JOURNAL_DIRECTORY_NAME,
  SNAPSHOT_FILES_DIRECTORY_NAME,
  StorageEnvironment,
} from "../../../../src/cluster/raft/storage/environment.js";
import { Journal } from "../../../../src/cluster/raft/storage/journal.js";
import {
  EntriesUnavailableError,
  MemberStorage,
  SnapshotChecksumMismatchError,
} from "../../../../src/cluster/raft/storage/member-storage.js";
import {
  type Entry,
  type HardState,
  type Snapshot,
  type SnapshotChunk,
  type SnapshotMetadata,
  StorageCorruptionError,
} from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

/** Bytes `offset` to `end` of `data` as the core hands them to the storage: with their CRC-32C, computed once. */
function receivedChunk(data: Uint8Array, offset: number, end: number): SnapshotChunk {
  const bytes = data.subarray(offset, end);
  return { offset, data: bytes, checksum: crc32c(bytes) >>> 0 };
}

function entry(index: number, term: number, text = `entry ${index}`): Entry {
  return { index, term, kind: "normal", data: new TextEncoder().encode(text) };
}

function entriesFrom(first: number, count: number, term: number): Entry[] {
  return Array.from({ length: count }, (_, offset) => entry(first + offset, term));
}

function makeSnapshot(index: number, term: number, sizeBytes: number): Snapshot {
  const data = new Uint8Array(sizeBytes).map((_, position) => (position * 31 + index) & 0xff);
  const metadata: SnapshotMetadata = {
    index,
    term,
    configuration: { members: [{ id: 1, role: "voter", priority: 2 }] },
    sizeBytes,
    checksum: crc32c(data),
  };
  return { metadata, data };
}

/**
 * An environment in `directory` whose writes of received chunks to snapshot files wait until the test starts them all
 * (`releaseHeld`) or fails one (`fail`, as a machine that stopped before they reached the disk).
 */
function environmentHoldingSnapshotFileWrites(directory: string) {
  const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
  const held: { readonly start: () => void; readonly fail: () => void }[] = [];
  const writeSnapshotFile = environment.writeSnapshotFile.bind(environment);
  environment.writeSnapshotFile = (scope, slot, chunks) =>
    new Promise<void>((resolve, reject) => {
      held.push({
        start: () => writeSnapshotFile(scope, slot, chunks).then(resolve, reject),
        fail: () => reject(new Error("the machine stopped")),
      });
    });
  const releaseHeld = async (): Promise<void> => {
    for (const write of held.splice(0)) write.start();
    await environment.chunkOperationsSettled();
  };
  return { environment, held, releaseHeld };
}

/** Opens storage in a fresh directory, runs `body`, and closes and removes everything afterwards. */
async function withStorage(
  body: (storage: MemberStorage, directory: string) => Promise<void>,
  snapshotChunkBytes = 1024,
): Promise<void> {
  await withTemporaryDirectory(async (directory) => {
    const storage = MemberStorage.open({ directory, snapshotChunkBytes });
    try {
      await body(storage, directory);
    } finally {
      await storage.close();
    }
  });
}

/** Views of `buffer` from `offset` on, one per size, back to back. */
function targetsIn(buffer: Uint8Array, offset: number, sizes: readonly number[]): Uint8Array[] {
  const targets: Uint8Array[] = [];
  let start = offset;
  for (const size of sizes) {
    targets.push(buffer.subarray(start, start + size));
    start += size;
  }
  return targets;
}

/**
 * Changes the storage's journal directly, bypassing the adapter, with the storage closed (a storage with an
 * environment of its own keeps its records under scope 0).
 */
async function writeRaw(directory: string, write: (journal: Journal) => void): Promise<void> {
  const journal = Journal.open({ directory: join(directory, JOURNAL_DIRECTORY_NAME) });
  journal.begin();
  write(journal);
  journal.seal();
  journal.commitSync();
  await journal.close();
}

describe("MemberStorage", () => {
  it("starts empty", async () => {
    await withStorage(async (storage) => {
      expect(await storage.load()).toEqual({
        hardState: { term: 0, votedFor: null, commitIndex: 0 },
        snapshot: null,
        firstIndex: 1,
        lastIndex: 0,
        incomingSnapshot: null,
      });
      expect(storage.term(0)).toBe(0);
      expect(storage.term(1)).toBeNull();
      expect(storage.snapshot()).toBeNull();
    });
  });

  it("appends entries and reads them back by range and by term", async () => {
    await withStorage(async (storage) => {
      const written = [...entriesFrom(1, 3, 1), { ...entry(4, 2), kind: "noop" as const, data: new Uint8Array() }];
      await storage.append(written, null);
      expect(storage.entries(1, 5)).toEqual(written);
      expect(storage.entries(2, 4)).toEqual(written.slice(1, 3));
      expect(storage.entries(3, 3)).toEqual([]);
      expect(storage.term(4)).toBe(2);
      expect(storage.term(5)).toBeNull();
      expect((await storage.load()).lastIndex).toBe(4);
    });
  });

  it("serves the newest entries from memory and older ones, beyond its cache, from disk", async () => {
    await withTemporaryDirectory(async (directory) => {
      // Room for about three of these entries: the first ones must come back from LMDB, decoded into copies.
      const storage = MemberStorage.open({ directory, entryCacheBytes: 3 * (64 + 16) });
      try {
        const written = entriesFrom(1, 6, 1);
        await storage.append(written, null);
        const read = storage.entries(1, 7);
        expect(read).toEqual(written);
        expect(read[5]).toBe(written[5]);
        expect(read[0]).not.toBe(written[0]);
        expect(storage.term(1)).toBe(1);
      } finally {
        await storage.close();
      }
    });
  });

  it("reads from disk only up to a byte budget: a prefix with at least one entry, then the cache is not consulted", async () => {
    await withTemporaryDirectory(async (directory) => {
      // No cache room at all: every entry comes from disk, so the budget is what bounds the reads.
      const storage = MemberStorage.open({ directory, entryCacheBytes: 0 });
      try {
        const written = entriesFrom(1, 6, 1);
        await storage.append(written, null);
        const size = written[0]?.data.byteLength ?? 0;
        // The entry that crosses the budget is the last one read.
        expect(storage.entries(1, 7, size * 2 + 1).map((read) => read.index)).toEqual([1, 2, 3]);
        expect(storage.entries(1, 7, 0).map((read) => read.index)).toEqual([1]);
        expect(storage.entries(1, 7).map((read) => read.index)).toEqual([1, 2, 3, 4, 5, 6]);
      } finally {
        await storage.close();
      }
    });
  });

  it("commits on the calling thread when asked, as durably", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory, synchronousCommit: true });
      const written = entriesFrom(1, 3, 2);
      await storage.append(written, { term: 2, votedFor: 1, commitIndex: 1 });
      await storage.close();
      const reopened = MemberStorage.open({ directory });
      expect((await reopened.load()).hardState).toEqual({ term: 2, votedFor: 1, commitIndex: 1 });
      expect(reopened.entries(1, 4)).toEqual(written);
      await reopened.close();
    });
  });

  it("throws on ranges beyond the last entry", async () => {
    await withStorage(async (storage) => {
      await storage.append(entriesFrom(1, 2, 1), null);
      expect(() => storage.entries(1, 4)).toThrow(EntriesUnavailableError);
    });
  });

  it("replaces the conflicting suffix when appending from an earlier index", async () => {
    await withStorage(async (storage) => {
      await storage.append(entriesFrom(1, 5, 1), null);
      await storage.append([entry(3, 2, "replacement")], null);
      expect((await storage.load()).lastIndex).toBe(3);
      expect(storage.entries(1, 4).map((stored) => stored.term)).toEqual([1, 1, 2]);
      expect(new TextDecoder().decode(storage.entries(3, 4)[0]?.data)).toBe("replacement");
      expect(() => storage.entries(4, 5)).toThrow(EntriesUnavailableError);
      expect(storage.term(4)).toBeNull();
    });
  });

  it("refuses appends that leave a gap or overwrite committed entries", async () => {
    await withStorage(async (storage) => {
      await storage.append(entriesFrom(1, 3, 1), { term: 1, votedFor: 1, commitIndex: 2 });
      await expect(storage.append([entry(5, 1)], null)).rejects.toThrow(/gap/);
      await expect(storage.append([entry(2, 2)], null)).rejects.toThrow(/overwrite committed entry 2/);
      await storage.append([entry(3, 2)], null);
      expect(storage.term(3)).toBe(2);
    });
  });

  it("persists the hard state and refuses a decreasing term or a changed vote", async () => {
    await withTemporaryDirectory(async (directory) => {
      const hardState: HardState = { term: 7, votedFor: 3, commitIndex: 0 };
      const storage = MemberStorage.open({ directory });
      await storage.append([], hardState);
      await expect(storage.append([], { term: 6, votedFor: null, commitIndex: 0 })).rejects.toThrow(/term/);
      await expect(storage.append([], { term: 7, votedFor: 2, commitIndex: 0 })).rejects.toThrow(/vote/);
      await storage.close();
      const reopened = MemberStorage.open({ directory });
      expect((await reopened.load()).hardState).toEqual(hardState);
      await reopened.close();
    });
  });

  it("persists a forced membership and the fenced members with the hard state, and refuses malformed ones", async () => {
    await withTemporaryDirectory(async (directory) => {
      const hardState: HardState = {
        term: 9,
        votedFor: 1,
        commitIndex: 0,
        forced: { configuration: { members: [{ id: 1, role: "voter", priority: 2 }] }, sinceTerm: 8 },
        fencedMembers: [3, 4],
      };
      const storage = MemberStorage.open({ directory });
      await storage.append([], hardState);
      await expect(storage.append([], { ...hardState, fencedMembers: [-1] } as unknown as HardState)).rejects.toThrow(
        /invalid hard state/,
      );
      await storage.close();
      const reopened = MemberStorage.open({ directory });
      expect((await reopened.load()).hardState).toEqual(hardState);
      await reopened.close();
    });
  });

  it("restores everything after a restart", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory, snapshotChunkBytes: 100 });
      const snapshot = makeSnapshot(4, 2, 250);
      await storage.append(entriesFrom(1, 6, 2), { term: 2, votedFor: 1, commitIndex: 5 });
      await storage.installSnapshot(snapshot);
      await storage.append([entry(7, 3)], { term: 3, votedFor: null, commitIndex: 6 });
      const entriesBefore = storage.entries(5, 8);
      await storage.close();

      const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 100 });
      expect(await reopened.load()).toEqual({
        hardState: { term: 3, votedFor: null, commitIndex: 6 },
        snapshot: snapshot.metadata,
        firstIndex: 5,
        lastIndex: 7,
        incomingSnapshot: null,
      });
      expect(reopened.entries(5, 8)).toEqual(entriesBefore);
      expect(reopened.term(4)).toBe(2);
      expect(reopened.snapshot()).toEqual({ metadata: snapshot.metadata, data: snapshot.data });
      await reopened.close();
    });
  });

  it("allows compaction only behind the stored snapshot", async () => {
    await withStorage(async (storage) => {
      await storage.append(entriesFrom(1, 5, 1), { term: 1, votedFor: null, commitIndex: 5 });
      await expect(storage.compact(2)).rejects.toThrow(/beyond the stored snapshot at 0/);
      await storage.installSnapshot(makeSnapshot(3, 1, 4));
      await storage.compact(3);
      await storage.compact(1);
      await expect(storage.compact(4)).rejects.toThrow(/beyond the stored snapshot at 3/);
      const state = await storage.load();
      expect([state.firstIndex, state.lastIndex]).toEqual([4, 5]);
      expect(storage.entries(4, 6)).toHaveLength(2);
      await expect(storage.append([entry(3, 1)], null)).rejects.toThrow(/compacted/);
    });
  });

  it("installs a snapshot matching its log: covered entries go, later entries stay", async () => {
    await withStorage(async (storage) => {
      await storage.append(entriesFrom(1, 8, 1), { term: 1, votedFor: null, commitIndex: 8 });
      const snapshot = makeSnapshot(5, 1, 3000);
      await storage.installSnapshot(snapshot);
      const state = await storage.load();
      expect([state.firstIndex, state.lastIndex]).toEqual([6, 8]);
      expect(state.snapshot).toEqual(snapshot.metadata);
      expect(storage.term(5)).toBe(1);
      expect(() => storage.entries(5, 6)).toThrow(EntriesUnavailableError);
      expect(storage.entries(6, 9)).toHaveLength(3);
      expect(storage.snapshot()?.data).toEqual(snapshot.data);
    });
  });

  it("installs a snapshot conflicting with its log: the whole log goes", async () => {
    await withStorage(async (storage) => {
      await storage.append(entriesFrom(1, 8, 1), null);
      await storage.installSnapshot(makeSnapshot(5, 3, 10));
      const state = await storage.load();
      expect([state.firstIndex, state.lastIndex]).toEqual([6, 5]);
      expect(storage.term(5)).toBe(3);
      expect(storage.term(6)).toBeNull();
      await storage.append([entry(6, 3)], null);
      expect(storage.entries(6, 7)).toHaveLength(1);
    });
  });

  it("refuses a snapshot whose data does not match its checksum and ignores one not newer than the stored one", async () => {
    await withStorage(async (storage) => {
      const snapshot = makeSnapshot(5, 1, 10);
      await expect(storage.installSnapshot({ ...snapshot, data: new Uint8Array(10) })).rejects.toThrow(/checksum/);
      await storage.installSnapshot(snapshot);
      await storage.installSnapshot(makeSnapshot(4, 1, 12));
      await storage.installSnapshot(makeSnapshot(5, 1, 14));
      expect(storage.snapshot()).toEqual(snapshot);
      expect((await storage.load()).firstIndex).toBe(6);
    });
  });

  it("keeps index order for indexes beyond 32 bits", async () => {
    await withStorage(async (storage) => {
      const start = 2 ** 32 - 2;
      await storage.installSnapshot(makeSnapshot(start, 4, 8));
      await storage.append(entriesFrom(start + 1, 4, 4), null);
      expect(storage.entries(start + 1, start + 5).map((stored) => stored.index)).toEqual([
        start + 1,
        start + 2,
        start + 3,
        start + 4,
      ]);
      expect((await storage.load()).lastIndex).toBe(start + 4);
    });
  });

  it("reports a damaged log entry as corruption instead of returning it", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory });
      await storage.append(entriesFrom(1, 3, 1), null);
      await storage.close();
      const damaged = encodeEntry(entry(2, 1));
      damaged[damaged.byteLength - 1] = (damaged[damaged.byteLength - 1] ?? 0) ^ 0xff;
      await writeRaw(directory, (journal) => journal.entries.put(0, 2, damaged));

      const reopened = MemberStorage.open({ directory });
      expect(reopened.entries(1, 2)).toHaveLength(1);
      expect(() => reopened.entries(1, 4)).toThrow(StorageCorruptionError);
      expect(() => reopened.term(2)).toThrow(/storage corruption at log entry 2/);
      await reopened.close();
    });
  });

  it("reads entries as they are stored (encodeEntry's bytes) into a buffer of the caller's, verifying each", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory });
      const written = [
        entry(1, 1),
        entry(2, 1, "x".repeat(300)),
        entry(3, 2),
        { ...entry(4, 2), kind: "noop" as const },
      ];
      await storage.append(written, null);
      const sizes = storage.storedEntrySizes(1, 5, Number.POSITIVE_INFINITY);
      expect(sizes).toEqual(written.map((stored) => encodeEntry(stored).byteLength));
      // After the first entry that passes the budget.
      expect(storage.storedEntrySizes(1, 5, (sizes[0] ?? 0) + 1)).toEqual(sizes.slice(0, 2));
      // Read into a dirty buffer at an offset: every byte is overwritten with the stored one.
      const buffer = new Uint8Array(1_000).fill(0xee);
      const targets = targetsIn(buffer, 3, sizes);
      storage.readStoredEntries(1, targets);
      for (const [position, target] of targets.entries()) {
        expect(Buffer.from(target)).toEqual(Buffer.from(encodeEntry(written[position] as Entry)));
      }
      expect(() => storage.readStoredEntries(1, [new Uint8Array((sizes[0] ?? 0) + 1)])).toThrow(/invariant violated/);
      expect(() => storage.readStoredEntries(3, targetsIn(new Uint8Array(1_000), 0, [1, 1, 1]))).toThrow(
        /last index is 4/,
      );
      expect(() => storage.storedEntrySizes(3, 6, 1_000)).toThrow(/last index is 4/);
      await storage.installSnapshot(makeSnapshot(2, 1, 10));
      expect(() => storage.storedEntrySizes(2, 4, 1_000)).toThrow(/compacted/);
      expect(() => storage.readStoredEntries(2, [new Uint8Array(sizes[1] ?? 0)])).toThrow(/compacted/);
      // The newest entry stays intact (opening verifies it).
      await storage.append([entry(5, 2)], null);
      await storage.close();

      // A damaged stored entry is refused, not copied.
      const damaged = encodeEntry(entry(3, 2));
      damaged[damaged.byteLength - 1] = (damaged[damaged.byteLength - 1] ?? 0) ^ 0xff;
      await writeRaw(directory, (journal) => journal.entries.put(0, 3, damaged));
      // Misdirected: entry 5's bytes stored at index 4.
      await writeRaw(directory, (journal) => journal.entries.put(0, 4, encodeEntry(entry(5, 2, "entry 4"))));
      const reopened = MemberStorage.open({ directory });
      // Refused in the middle of a range read, naming the entry, its journal file and the byte offset.
      const rangeSizes = reopened.storedEntrySizes(3, 6, 1_000);
      const rangeTargets = targetsIn(new Uint8Array(1_000), 0, rangeSizes);
      expect(() => reopened.readStoredEntries(3, rangeTargets)).toThrow(
        /storage corruption at log entry 3 \(.+\.journal at byte \d+\): checksum mismatch/,
      );
      expect(() => reopened.readStoredEntries(4, rangeTargets.slice(1))).toThrow(
        /log entry 4 \(.+\.journal at byte \d+\): value holds index 5/,
      );
      expect(() => reopened.readStoredEntries(5, rangeTargets.slice(2))).not.toThrow();
      await reopened.close();
    });
  });

  it("reports a damaged hard state on open and a damaged snapshot chunk on read", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
      await storage.append([], { term: 1, votedFor: null, commitIndex: 0 });
      await storage.installSnapshot(makeSnapshot(3, 1, 10));
      await storage.close();

      const root = open({ path: directory, maxDbs: 4, encoding: "binary" });
      const chunks = root.openDB({ name: "snapshotChunks", encoding: "binary" });
      const [chunkKey] = [...chunks.getKeys({ limit: 1 })];
      const chunk = chunks.getBinary(chunkKey!)!;
      chunk[chunk.byteLength - 1] = (chunk[chunk.byteLength - 1] ?? 0) ^ 1;
      await chunks.put(chunkKey!, chunk);
      await root.close();
      const withDamagedChunk = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
      expect(() => withDamagedChunk.snapshot()).toThrow(StorageCorruptionError);
      await withDamagedChunk.close();

      await writeRaw(directory, (journal) =>
        journal.records.put(0, "hardState", new Uint8Array([0, 0, 0, 0, 1, 2, 3])),
      );
      expect(() => MemberStorage.open({ directory })).toThrow(StorageCorruptionError);
    });
  });

  describe("reading the whole stored snapshot a chunk per turn", () => {
    it("yields a turn after every stored chunk and hands over the same verified chunks", async () => {
      await withStorage(async (storage) => {
        expect(await storage.readSnapshotInTurns(() => undefined)).toBeNull();
        const snapshot = makeSnapshot(10, 2, 10_000);
        await storage.installSnapshot(snapshot);
        const events: string[] = [];
        const pieces: Uint8Array[] = [];
        const metadata = await storage.readSnapshotInTurns(
          (data) => {
            events.push(`chunk ${data.byteLength}`);
            pieces.push(Uint8Array.from(data));
          },
          async () => {
            events.push("turn");
          },
        );
        expect(metadata).toEqual(snapshot.metadata);
        const sizes = [...Array(9).fill(1024), 10_000 - 9 * 1024];
        expect(events).toEqual(sizes.flatMap((size) => [`chunk ${size}`, "turn"]));
        expect(Buffer.concat(pieces)).toEqual(Buffer.from(snapshot.data));
      });
    });

    it("refuses to go on when the stored snapshot was replaced during a turn", async () => {
      await withStorage(async (storage) => {
        await storage.append(entriesFrom(1, 20, 2), null);
        await storage.installSnapshot(makeSnapshot(10, 2, 4096));
        let turns = 0;
        const reading = storage.readSnapshotInTurns(
          () => undefined,
          async () => {
            turns += 1;
            if (turns === 1) await storage.installSnapshot(makeSnapshot(15, 2, 4096));
          },
        );
        await expect(reading).rejects.toThrow(/replaced while it was being read/);
        expect(turns).toBe(1);
      });
    });

    type ChunkKey = [number, number, number];

    /**
     * Stores a snapshot of 4 chunks of 1,024 bytes in `directory`, lets `edit` change its chunks in LMDB directly
     * (given the chunk database and the keys of the 4 chunks), and reopens the storage over them.
     */
    async function storageWithEditedChunks(
      directory: string,
      edit: (chunks: Database<Uint8Array, ChunkKey>, keys: ChunkKey[]) => Promise<void>,
    ): Promise<MemberStorage> {
      const storage = MemberStorage.open({ directory, snapshotChunkBytes: 1024 });
      await storage.installSnapshot(makeSnapshot(10, 2, 4096));
      await storage.close();
      const database = open<Uint8Array, ChunkKey>({ path: directory, maxDbs: 4 });
      const chunks = database.openDB<Uint8Array, ChunkKey>({ name: "snapshotChunks", encoding: "binary" });
      await edit(chunks, [...chunks.getKeys()] as ChunkKey[]);
      await database.close();
      return MemberStorage.open({ directory, snapshotChunkBytes: 1024 });
    }

    it("throws a corruption error for a damaged chunk before handing it over", async () => {
      await withTemporaryDirectory(async (directory) => {
        const reopened = await storageWithEditedChunks(directory, async (chunks, keys) => {
          const key = keys[2] as ChunkKey;
          const damaged = Uint8Array.from(chunks.get(key) as Uint8Array);
          damaged[damaged.byteLength - 1] = (damaged[damaged.byteLength - 1] as number) ^ 0xff;
          await chunks.put(key, damaged);
        });
        const handedOver: number[] = [];
        await expect(reopened.readSnapshotInTurns((data) => handedOver.push(data.byteLength))).rejects.toThrow(
          StorageCorruptionError,
        );
        expect(handedOver).toEqual([1024, 1024]);
        await reopened.close();
      });
    });

    it("throws a corruption error for a chunk stored beyond the snapshot's end, as reading it whole does", async () => {
      await withTemporaryDirectory(async (directory) => {
        const reopened = await storageWithEditedChunks(directory, async (chunks, keys) => {
          const [scope, slot] = keys[0] as ChunkKey;
          await chunks.put([scope, slot, 4096], encodeChunk(new Uint8Array(16)));
        });
        expect(() => reopened.snapshot()).toThrow(/beyond the snapshot size/);
        await expect(reopened.readSnapshotInTurns(() => undefined)).rejects.toThrow(/beyond the snapshot size/);
        await reopened.close();
      });
    });

    it("throws a corruption error for a chunk that is intact but not the snapshot's, once every chunk was read", async () => {
      await withTemporaryDirectory(async (directory) => {
        // Another chunk of the same size with a valid checksum of its own (a write misdirected from elsewhere).
        const reopened = await storageWithEditedChunks(directory, async (chunks, keys) => {
          await chunks.put(keys[1] as ChunkKey, encodeChunk(new Uint8Array(1024).fill(42)));
        });
        const handedOver: number[] = [];
        await expect(reopened.readSnapshotInTurns((data) => handedOver.push(data.byteLength))).rejects.toThrow(
          /data checksum/,
        );
        expect(handedOver).toEqual([1024, 1024, 1024, 1024]);
        await reopened.close();
      });
    });
  });

  describe("reading the stored snapshot a range at a time", () => {
    it("reads any range, across stored chunk boundaries, with the CRC-32C of what it read, and nothing past the end", async () => {
      await withStorage(async (storage) => {
        const snapshot = makeSnapshot(7, 2, 10);
        await storage.installSnapshot(snapshot);
        expect(storage.snapshotMetadata()).toEqual(snapshot.metadata);
        for (let offset = 0; offset <= 10; offset += 1) {
          for (let length = 1; length <= 12; length += 1) {
            const expected = snapshot.data.subarray(offset, Math.min(10, offset + length));
            // Ranges of exactly one stored chunk (offset 0, 4 or 8) carry the stored checksum, others a computed one.
            expect(storage.snapshotChunk(snapshot.metadata, offset, length)).toEqual({
              data: expected,
              checksum: crc32c(expected) >>> 0,
            });
          }
        }
        expect(() => storage.snapshotChunk(snapshot.metadata, 11, 1)).toThrow(/beyond the snapshot size/);
      }, 4);
    });

    it("reads the next chunks into the buffers a sender handed back, and copies each out of LMDB", async () => {
      await withStorage(async (storage) => {
        const snapshot = makeSnapshot(7, 2, 64);
        await storage.installSnapshot(snapshot);
        const expected = (offset: number): Uint8Array => snapshot.data.subarray(offset, offset + 4);
        const chunkAt = (offset: number): Uint8Array => {
          const read = storage.snapshotChunk(snapshot.metadata, offset, 4);
          if (read === null) throw new Error(`no chunk at ${offset}`);
          return read.data;
        };
        // Chunks read without handing any back each have memory of their own, which later reads leave alone.
        const first = chunkAt(0);
        const second = chunkAt(4);
        expect(first.buffer).not.toBe(second.buffer);
        expect(first).toEqual(expected(0));
        expect(second).toEqual(expected(4));
        // A chunk handed back is filled by the next read.
        storage.recycleSnapshotChunk(first);
        const reused = chunkAt(8);
        expect(reused.buffer).toBe(first.buffer);
        expect(reused).toEqual(expected(8));
        expect(second).toEqual(expected(4));
        // A part of a chunk, a buffer it did not hand out, or a chunk handed back twice is not reused twice.
        storage.recycleSnapshotChunk(second.subarray(1));
        storage.recycleSnapshotChunk(new Uint8Array(4));
        storage.recycleSnapshotChunk(second);
        storage.recycleSnapshotChunk(second);
        const third = chunkAt(12);
        expect(third.buffer).toBe(second.buffer);
        expect(chunkAt(16).buffer).not.toBe(second.buffer);
        expect(third).toEqual(expected(12));
        // Ranges across stored chunks come from the same memory.
        storage.recycleSnapshotChunk(third);
        const across = chunkAt(2);
        expect(across.buffer).toBe(third.buffer);
        expect(across).toEqual(snapshot.data.subarray(2, 6));
      }, 4);
    });

    it("answers null for a snapshot that is no longer the stored one", async () => {
      await withStorage(async (storage) => {
        const older = makeSnapshot(7, 2, 10);
        await storage.installSnapshot(older);
        await storage.installSnapshot(makeSnapshot(9, 2, 10));
        expect(storage.snapshotChunk(older.metadata, 0, 4)).toBeNull();
        expect(storage.snapshotChunk({ ...older.metadata, index: 9, checksum: 1 }, 0, 4)).toBeNull();
        expect(storage.snapshotMetadata()?.index).toBe(9);
      }, 4);
    });

    it("reports corruption in a chunk it reads, and reads ranges that do not touch it", async () => {
      await withTemporaryDirectory(async (directory) => {
        const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        const snapshot = makeSnapshot(3, 1, 12);
        await storage.installSnapshot(snapshot);
        await storage.close();

        const root = open({ path: directory, maxDbs: 4, encoding: "binary" });
        const chunks = root.openDB({ name: "snapshotChunks", encoding: "binary" });
        const key = [...chunks.getKeys()].find((candidate) => (candidate as number[])[2] === 4);
        const chunk = chunks.getBinary(key!)!;
        chunk[chunk.byteLength - 1] = (chunk[chunk.byteLength - 1] ?? 0) ^ 1;
        await chunks.put(key!, chunk);
        await root.close();

        const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        expect(reopened.snapshotChunk(snapshot.metadata, 0, 4)?.data).toEqual(snapshot.data.subarray(0, 4));
        expect(reopened.snapshotChunk(snapshot.metadata, 8, 4)?.data).toEqual(snapshot.data.subarray(8, 12));
        expect(() => reopened.snapshotChunk(snapshot.metadata, 2, 4)).toThrow(StorageCorruptionError);
        expect(() => reopened.snapshotChunk(snapshot.metadata, 7, 1)).toThrow(StorageCorruptionError);
        await reopened.close();
      });
    });

    it("reports a missing chunk inside a range as corruption", async () => {
      await withTemporaryDirectory(async (directory) => {
        const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        const snapshot = makeSnapshot(3, 1, 12);
        await storage.installSnapshot(snapshot);
        await storage.close();

        const root = open({ path: directory, maxDbs: 4, encoding: "binary" });
        const chunks = root.openDB({ name: "snapshotChunks", encoding: "binary" });
        const key = [...chunks.getKeys()].find((candidate) => (candidate as number[])[2] === 8);
        await chunks.remove(key!);
        await root.close();

        const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        expect(() => reopened.snapshotChunk(snapshot.metadata, 6, 4)).toThrow(/chunk at 8: chunk is missing/);
        expect(() => reopened.snapshotChunk(snapshot.metadata, 9, 2)).toThrow(StorageCorruptionError);
        await reopened.close();
      });
    });
  });

  it("writes no snapshot chunk when installing a snapshot finds the log damaged, so the next install is intact", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory, snapshotChunkBytes: 16 });
      await storage.append(entriesFrom(1, 5, 1), null);
      await storage.close();
      await writeRaw(directory, (journal) => journal.entries.remove(0, 3));
      const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 16 });
      await expect(reopened.installSnapshot(makeSnapshot(3, 1, 48))).rejects.toThrow(/missing/);
      await reopened.installSnapshot(makeSnapshot(9, 2, 10));
      expect(reopened.snapshot()?.metadata.index).toBe(9);
      await reopened.close();
    });
  });

  it("never gives a new snapshot transfer the slot released in the same commit (whose chunks go next)", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
      const good = makeSnapshot(10, 2, 8);
      const wrong = { ...good.metadata, checksum: (good.metadata.checksum + 1) >>> 0 };
      const chunk = (offset: number, end: number) => receivedChunk(good.data, offset, end);
      await storage.receiveSnapshotChunks({ metadata: wrong, restart: true, chunks: [chunk(0, 4), chunk(4, 8)] });
      // The mismatch releases the transfer's slot while the next transfer's first chunks are being written.
      const finish = storage.finishSnapshotReceive();
      const first = storage.receiveSnapshotChunks({ metadata: good.metadata, restart: true, chunks: [chunk(0, 4)] });
      await expect(finish).rejects.toThrow(SnapshotChecksumMismatchError);
      await first;
      await storage.receiveSnapshotChunks({ metadata: good.metadata, restart: false, chunks: [chunk(4, 8)] });
      expect(await storage.finishSnapshotReceive()).toEqual(good.metadata);
      await storage.close();
      // The released slot's chunks were removed once that was durable; the installed snapshot's are all still there.
      const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
      expect(reopened.snapshot()?.data).toEqual(good.data);
      await reopened.close();
    });
  });

  it("reports a missing entry inside the log's bounds as corruption", async () => {
    await withTemporaryDirectory(async (directory) => {
      const storage = MemberStorage.open({ directory });
      await storage.append(entriesFrom(1, 3, 1), null);
      await storage.close();
      await writeRaw(directory, (journal) => journal.entries.remove(0, 2));
      const reopened = MemberStorage.open({ directory });
      expect(() => reopened.entries(1, 4)).toThrow(/entry is missing/);
      await reopened.close();
    });
  });

  it("coalesces concurrent appends into one durable transaction and acknowledges none before it", async () => {
    await withStorage(async (storage) => {
      await storage.append([entry(1, 1)], null);
      const before = storage.transactionCount;
      const acknowledged: number[] = [];
      const appends = Array.from({ length: 50 }, (_, offset) =>
        storage.append([entry(2 + offset, 1)], null).then(() => {
          // Nothing is acknowledged before the transaction that holds it has committed.
          acknowledged.push(storage.transactionCount - before);
        }),
      );
      await Promise.all(appends);
      expect(storage.transactionCount - before).toBe(1);
      expect(acknowledged).toEqual(Array.from({ length: 50 }, () => 1));
      expect((await storage.load()).lastIndex).toBe(51);
      expect(storage.entries(1, 52)).toHaveLength(51);
    });
  });

  it("puts appends issued while a commit is in flight into the single next transaction", async () => {
    await withStorage(async (storage) => {
      const first = storage.append([entry(1, 1)], null);
      await new Promise((resolve) => setImmediate(resolve));
      const followers = Array.from({ length: 20 }, (_, offset) => storage.append([entry(2 + offset, 1)], null));
      await Promise.all([first, ...followers]);
      expect(storage.transactionCount).toBeLessThanOrEqual(2);
      expect(storage.entries(1, 22)).toHaveLength(21);
    });
  });

  describe("snapshot received in chunks", () => {
    it("writes a receipt in one transaction, resumes it from load() after a restart, and verifies it without reading it back", async () => {
      await withTemporaryDirectory(async (directory) => {
        const snapshot = makeSnapshot(10, 2, 10);
        const chunk = (offset: number, end: number) => receivedChunk(snapshot.data, offset, end);
        const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        const before = storage.transactionCount;
        await storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: true,
          chunks: [chunk(0, 3), chunk(3, 6)],
        });
        expect(storage.transactionCount - before).toBe(1);
        // Chunks must continue the received bytes exactly, as the core tracks them.
        await expect(
          storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(8, 10)] }),
        ).rejects.toThrow(/does not continue at 6/);
        await expect(
          storage.receiveSnapshotChunks({ ...makeSnapshot(11, 2, 4), restart: false, chunks: [] }),
        ).rejects.toThrow(/not being received/);
        await storage.close();

        const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        expect((await reopened.load()).incomingSnapshot).toEqual({
          metadata: snapshot.metadata,
          receivedBytes: 6,
          receivedChecksum: crc32c(snapshot.data.subarray(0, 6)),
        });
        await expect(reopened.finishSnapshotReceive()).rejects.toThrow(/incomplete/);
        await reopened.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(6, 10)] });
        const readBack = vi.spyOn(reopened as unknown as { readChunks(): Uint8Array }, "readChunks");
        expect(await reopened.finishSnapshotReceive()).toEqual(snapshot.metadata);
        expect(readBack).not.toHaveBeenCalled();
        expect(reopened.snapshot()).toEqual(snapshot);
        // The sender's chunk boundaries (3, 6) are kept, and ranges across them read back exactly.
        expect(reopened.snapshotChunk(snapshot.metadata, 2, 5)?.data).toEqual(snapshot.data.subarray(2, 7));
        await reopened.close();
      });
    });

    it("resumes a receipt before a frame of its file that does not verify, cuts the rest off, and reports it as found on open", async () => {
      await withTemporaryDirectory(async (directory) => {
        const snapshot = makeSnapshot(10, 2, 16);
        const chunk = (offset: number, end: number) => receivedChunk(snapshot.data, offset, end);
        const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: true, chunks: [chunk(0, 4)] });
        await storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: false,
          chunks: [chunk(4, 8), chunk(8, 12)],
        });
        expect(storage.damageFoundOnOpen).toEqual([]);
        await storage.close();
        // Three frames of a header and 4 bytes each; the last data byte of the second one is flipped.
        const [file] = readdirSync(join(directory, SNAPSHOT_FILES_DIRECTORY_NAME));
        const path = join(directory, SNAPSHOT_FILES_DIRECTORY_NAME, file as string);
        const frameBytes = SNAPSHOT_FRAME_HEADER_BYTES + 4;
        expect(statSync(path).size).toBe(3 * frameBytes);
        const bytes = readFileSync(path);
        bytes[2 * frameBytes - 1] = (bytes[2 * frameBytes - 1] as number) ^ 0xff;
        writeFileSync(path, bytes);

        const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
        expect(reopened.damageFoundOnOpen).toEqual([
          expect.stringMatching(/incoming snapshot file of slot \d+: 56 bytes after byte 4 of the snapshot/),
        ]);
        expect(statSync(path).size).toBe(frameBytes);
        expect((await reopened.load()).incomingSnapshot?.receivedBytes).toBe(4);
        // The leader sends the bytes from 4 again; they are appended after the frame that verified.
        await reopened.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: false,
          chunks: [chunk(4, 8), chunk(8, 12), chunk(12, 16)],
        });
        expect(await reopened.finishSnapshotReceive()).toEqual(snapshot.metadata);
        expect(reopened.snapshot()).toEqual(snapshot);
        await reopened.close();
      });
    });

    it("stores every receipt's chunks intact though each receipt encodes into the memory of the one before", async () => {
      await withStorage(async (storage) => {
        const snapshot = makeSnapshot(12, 3, 40);
        const chunk = (offset: number, end: number) => receivedChunk(snapshot.data, offset, end);
        // Receipts of whole and partial chunks: sizes 4 | 4 3 | 1 | 4 2 | 4 4 4 | 4 4 2, 40 bytes in all.
        const receipts = [[4], [4, 3], [1], [4, 2], [4, 4, 4], [4, 4, 2]];
        let offset = 0;
        for (const [position, sizes] of receipts.entries()) {
          const chunks = sizes.map((size) => {
            offset += size;
            return chunk(offset - size, offset);
          });
          await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: position === 0, chunks });
        }
        expect(await storage.finishSnapshotReceive()).toEqual(snapshot.metadata);
        expect(storage.snapshot()).toEqual(snapshot);
      }, 4);
    });

    it("starts a receipt over when told to, even for the same snapshot", async () => {
      await withStorage(async (storage) => {
        const snapshot = makeSnapshot(10, 2, 8);
        const wrong = { ...snapshot.metadata, checksum: (snapshot.metadata.checksum + 1) >>> 0 };
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: true, chunks: [] });
        await storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: false,
          chunks: [receivedChunk(new Uint8Array(4), 0, 4)],
        });
        await storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: true,
          chunks: [receivedChunk(snapshot.data, 0, 8)],
        });
        expect(storage.incomingSnapshot()?.receivedBytes).toBe(8);
        expect(await storage.finishSnapshotReceive()).toEqual(snapshot.metadata);
        expect(storage.snapshot()?.data).toEqual(snapshot.data);
        // A checksum mismatch found by the running checksum discards the receipt.
        await storage.receiveSnapshotChunks({
          metadata: wrong,
          restart: true,
          chunks: [receivedChunk(snapshot.data, 0, 8)],
        });
        await expect(storage.finishSnapshotReceive()).rejects.toThrow(SnapshotChecksumMismatchError);
        expect(storage.incomingSnapshot()).toBeNull();
      });
    });

    it("appends a receipt's chunks to the snapshot's file with no transaction after the first and nothing in LMDB, and a restart resumes from the file, cutting a torn frame", async () => {
      await withTemporaryDirectory(async (directory) => {
        const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
        const storage = MemberStorage.openIn(environment, { scope: 1, snapshotChunkBytes: 4 });
        const snapshot = makeSnapshot(10, 2, 10);
        const chunk = (offset: number, end: number) => receivedChunk(snapshot.data, offset, end);
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: true, chunks: [chunk(0, 4)] });
        const commitsBefore = environment.transactionCount;
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(4, 8)] });
        // The frames in the file are the progress: no journal commit, and nothing ever reaches LMDB.
        expect(environment.transactionCount).toBe(commitsBefore);
        expect(environment.lmdbTransactionCount).toBe(0);
        expect(storage.incomingSnapshot()?.receivedBytes).toBe(8);
        await storage.close();
        await environment.close();
        // A crash while the next frame was being written: its header and one of its two bytes reached the file.
        const path = join(directory, SNAPSHOT_FILES_DIRECTORY_NAME, "1-1.snapshot");
        const torn = encodeSnapshotFrameHeader({
          offset: 8,
          dataBytes: 2,
          dataChecksum: crc32c(snapshot.data.subarray(8)),
        });
        appendFileSync(path, Buffer.concat([torn, snapshot.data.subarray(8, 9)]));

        const reopenedEnvironment = StorageEnvironment.open({ directory, synchronousCommit: true });
        const reopened = MemberStorage.openIn(reopenedEnvironment, { scope: 1, snapshotChunkBytes: 4 });
        expect((await reopened.load()).incomingSnapshot).toEqual({
          metadata: snapshot.metadata,
          receivedBytes: 8,
          receivedChecksum: crc32c(snapshot.data.subarray(0, 8)),
        });
        expect(reopened.damageFoundOnOpen).toEqual([expect.stringContaining("25 bytes after byte 8")]);
        await reopened.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(8, 10)] });
        expect(await reopened.finishSnapshotReceive()).toEqual(snapshot.metadata);
        expect(reopened.snapshot()?.data).toEqual(snapshot.data);
        expect([...reopenedEnvironment.chunks.getKeys({ start: [1, 0, 0], end: [2, 0, 0] })]).toEqual([]);
        await reopened.close();
        await reopenedEnvironment.close();
        // Installed, the file is read back whole after a restart: its frames are indexed from their headers.
        const again = MemberStorage.openIn(StorageEnvironment.open({ directory }), { scope: 1, snapshotChunkBytes: 4 });
        expect(again.snapshot()?.data).toEqual(snapshot.data);
        expect(again.snapshotChunk(snapshot.metadata, 3, 6)?.data).toEqual(snapshot.data.subarray(3, 9));
        await again.close();
      });
    });

    it("keeps a write made while an install waits for received chunks behind that install", async () => {
      await withTemporaryDirectory(async (directory) => {
        const { environment, held, releaseHeld } = environmentHoldingSnapshotFileWrites(directory);
        const storage = MemberStorage.openIn(environment, { scope: 1, snapshotChunkBytes: 4 });
        const snapshot = makeSnapshot(10, 2, 8);
        const first = storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: true,
          chunks: [receivedChunk(snapshot.data, 0, 4)],
        });
        await vi.waitFor(() => expect(held).toHaveLength(1));
        await releaseHeld();
        await first;
        await storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: false,
          chunks: [receivedChunk(snapshot.data, 4, 8)],
        });
        // Made right after the install, and continuing the log at the snapshot's index: had it reached the journal
        // before the install (whose chunks are not durable yet), it would leave a gap after the empty log.
        const install = storage.finishSnapshotReceive();
        const append = storage.append([entry(11, 2)], null);
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect(storage.snapshotMetadata()).toBeNull();
        await releaseHeld();
        expect(await install).toEqual(snapshot.metadata);
        await append;
        expect(storage.entries(11, 12)).toEqual([entry(11, 2)]);
        await storage.close();
        await environment.close();
      });
    });

    it("syncs a received snapshot's file once, before the record that installs it, and never for a receipt", async () => {
      await withTemporaryDirectory(async (directory) => {
        const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
        const syncs: { readonly slot: number; readonly release: () => void }[] = [];
        const syncSnapshotFile = environment.syncSnapshotFile.bind(environment);
        environment.syncSnapshotFile = (scope, slot) =>
          new Promise<void>((resolve, reject) => {
            syncs.push({ slot, release: () => void syncSnapshotFile(scope, slot).then(resolve, reject) });
          });
        const storage = MemberStorage.openIn(environment, { scope: 1, snapshotChunkBytes: 4 });
        const snapshot = makeSnapshot(10, 2, 12);
        const chunk = (offset: number, end: number) => receivedChunk(snapshot.data, offset, end);
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: true, chunks: [chunk(0, 4)] });
        await storage.receiveSnapshotChunks({
          metadata: snapshot.metadata,
          restart: false,
          chunks: [chunk(4, 8), chunk(8, 12)],
        });
        expect(syncs).toHaveLength(0);
        const install = storage.finishSnapshotReceive();
        await vi.waitFor(() => expect(syncs).toHaveLength(1));
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect(storage.snapshotMetadata()).toBeNull();
        syncs[0]?.release();
        expect(await install).toEqual(snapshot.metadata);
        expect(syncs).toHaveLength(1);
        await storage.close();
        await environment.close();
      });
    });

    it("acknowledges a receipt before its chunks are durable, with a bounded number in flight; installs only once all are durable; a crash loses only what was in flight", async () => {
      await withTemporaryDirectory(async (directory) => {
        const { environment, held, releaseHeld } = environmentHoldingSnapshotFileWrites(directory);
        const chunkBytes = 4;
        const storage = MemberStorage.openIn(environment, { scope: 1, snapshotChunkBytes: chunkBytes });
        // 32 chunks may be in flight (two windows of the broker's leader); this snapshot holds 40 beyond the first.
        const snapshot = makeSnapshot(10, 2, 41 * chunkBytes);
        const chunk = (index: number) => receivedChunk(snapshot.data, index * chunkBytes, (index + 1) * chunkBytes);
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: true, chunks: [chunk(0)] });
        expect(held).toHaveLength(1);
        await releaseHeld();

        for (let index = 1; index <= 32; index++) {
          await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(index)] });
        }
        expect({ held: held.length, received: storage.incomingSnapshot()?.receivedBytes }).toEqual({
          held: 32,
          received: 33 * chunkBytes,
        });
        // The 33rd chunk in flight is one too many: its receipt waits for the oldest write.
        let settled = false;
        const beyond = storage
          .receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(33)] })
          .then(() => {
            settled = true;
          });
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect(settled).toBe(false);
        await releaseHeld();
        await beyond;
        for (let index = 34; index < 40; index++) {
          await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(index)] });
        }
        // The last chunk completes the snapshot: its install waits until every chunk is written (and the file synced).
        await storage.receiveSnapshotChunks({ metadata: snapshot.metadata, restart: false, chunks: [chunk(40)] });
        let installed = false;
        const install = storage.finishSnapshotReceive().then(() => {
          installed = true;
        });
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect(installed).toBe(false);
        await releaseHeld();
        await install;
        expect(storage.snapshot()?.data).toEqual(snapshot.data);

        // The next receipt's writes never reach the disk (the machine stops): acknowledged, yet lost.
        const next = makeSnapshot(60, 3, 8 * chunkBytes);
        const nextChunk = (index: number) => receivedChunk(next.data, index * chunkBytes, (index + 1) * chunkBytes);
        await storage.receiveSnapshotChunks({ metadata: next.metadata, restart: true, chunks: [nextChunk(0)] });
        await releaseHeld();
        for (let index = 1; index < 4; index++) {
          await storage.receiveSnapshotChunks({ metadata: next.metadata, restart: false, chunks: [nextChunk(index)] });
        }
        for (const write of held.splice(0)) write.fail();
        // The failure surfaces at the storage's next receipt or install, and each throws it from then on.
        await new Promise((resolve) => setTimeout(resolve, 0));
        await expect(
          storage.receiveSnapshotChunks({ metadata: next.metadata, restart: false, chunks: [nextChunk(4)] }),
        ).rejects.toThrow("the machine stopped");
        await expect(storage.finishSnapshotReceive()).rejects.toThrow("the machine stopped");
        await storage.close();
        await environment.close();

        // What a restart finds is the prefix that reached the file: the first chunk; the leader is told that offset.
        const reopenedEnvironment = StorageEnvironment.open({ directory, synchronousCommit: true });
        const reopened = MemberStorage.openIn(reopenedEnvironment, { scope: 1, snapshotChunkBytes: chunkBytes });
        expect((await reopened.load()).incomingSnapshot).toEqual({
          metadata: next.metadata,
          receivedBytes: chunkBytes,
          receivedChecksum: crc32c(next.data.subarray(0, chunkBytes)),
        });
        expect(reopened.snapshot()?.data).toEqual(snapshot.data);
        await reopened.close();
        await reopenedEnvironment.close();
      });
    });

    it("starts over when a different snapshot is offered", async () => {
      await withStorage(async (storage) => {
        const older = makeSnapshot(10, 2, 8);
        const newer = makeSnapshot(20, 3, 8);
        await storage.receiveSnapshotChunks({
          metadata: older.metadata,
          restart: true,
          chunks: [receivedChunk(older.data, 0, 4)],
        });
        await storage.receiveSnapshotChunks({
          metadata: newer.metadata,
          restart: true,
          chunks: [receivedChunk(newer.data, 0, 8)],
        });
        expect(storage.incomingSnapshot()?.metadata).toEqual(newer.metadata);
        expect(await storage.finishSnapshotReceive()).toEqual(newer.metadata);
        expect(storage.snapshot()?.data).toEqual(newer.data);
      });
    });
  });
});

describe("MemberStorage's files of received snapshots", () => {
  /** Receives and installs `snapshot` in receipts of one chunk each, and returns the slot's file path. */
  async function receiveWhole(storage: MemberStorage, snapshot: Snapshot, chunkBytes: number): Promise<void> {
    for (let offset = 0; offset < snapshot.data.byteLength; offset += chunkBytes) {
      const end = Math.min(snapshot.data.byteLength, offset + chunkBytes);
      await storage.receiveSnapshotChunks({
        metadata: snapshot.metadata,
        restart: offset === 0,
        chunks: [receivedChunk(snapshot.data, offset, end)],
      });
    }
    expect(await storage.finishSnapshotReceive()).toEqual(snapshot.metadata);
  }

  const filesIn = (directory: string): string[] => readdirSync(join(directory, SNAPSHOT_FILES_DIRECTORY_NAME)).sort();

  it("reads an installed file back through every reader, hands out whole frames with their own checksum, and refuses to open once the file is damaged", async () => {
    await withTemporaryDirectory(async (directory) => {
      const snapshot = makeSnapshot(10, 2, 10);
      const storage = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
      await receiveWhole(storage, snapshot, 4);
      await storage.close();
      const [name] = filesIn(directory);
      const path = join(directory, SNAPSHOT_FILES_DIRECTORY_NAME, name as string);

      const reopened = MemberStorage.open({ directory, snapshotChunkBytes: 4 });
      expect(reopened.snapshot()).toEqual(snapshot);
      const frame = reopened.snapshotChunk(snapshot.metadata, 4, 4);
      expect(frame).toEqual({ data: snapshot.data.subarray(4, 8), checksum: crc32c(snapshot.data.subarray(4, 8)) });
      expect(reopened.snapshotChunk(snapshot.metadata, 8, 4)?.data).toEqual(snapshot.data.subarray(8, 10));
      const parts: number[][] = [];
      expect(await reopened.readSnapshotInTurns((data) => parts.push([...data]))).toEqual(snapshot.metadata);
      expect(parts).toEqual([
        [...snapshot.data.subarray(0, 4)],
        [...snapshot.data.subarray(4, 8)],
        [...snapshot.data.subarray(8)],
      ]);
      // A flipped byte of data is found by the read that touches it, naming the file and the frame's position.
      const bytes = readFileSync(path);
      const flipped = SNAPSHOT_FRAME_HEADER_BYTES + 4 + SNAPSHOT_FRAME_HEADER_BYTES;
      bytes[flipped] = (bytes[flipped] as number) ^ 0xff;
      writeFileSync(path, bytes);
      expect(() => reopened.snapshotChunk(snapshot.metadata, 4, 4)).toThrow(
        new RegExp(`${name}.* at byte ${SNAPSHOT_FRAME_HEADER_BYTES + 4}: data checksum mismatch`),
      );
      expect(reopened.snapshotChunk(snapshot.metadata, 0, 4)?.data).toEqual(snapshot.data.subarray(0, 4));
      await reopened.close();
      // A file shorter than the frames an installed snapshot needs refuses to open: it was synced complete.
      writeFileSync(path, readFileSync(path).subarray(0, 2 * (SNAPSHOT_FRAME_HEADER_BYTES + 4)));
      expect(() => MemberStorage.open({ directory, snapshotChunkBytes: 4 })).toThrow(StorageCorruptionError);
    });
  });

  it("removes a replaced snapshot's file once the install is durable, an orphan file at the first write, and every file on destroy", async () => {
    await withTemporaryDirectory(async (directory) => {
      const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
      const storage = MemberStorage.openIn(environment, { scope: 3, snapshotChunkBytes: 4 });
      await receiveWhole(storage, makeSnapshot(10, 2, 8), 4);
      expect(filesIn(directory)).toEqual(["3-1.snapshot"]);
      await receiveWhole(storage, makeSnapshot(20, 2, 8), 4);
      await environment.chunkOperationsSettled();
      expect(filesIn(directory)).toEqual(["3-2.snapshot"]);
      // A receipt begun but never recorded (a crash before its record): its file has no record.
      await environment.writeSnapshotFile(3, 7, [receivedChunk(new Uint8Array(4), 0, 4)]);
      await storage.close();
      await environment.close();

      const reopenedEnvironment = StorageEnvironment.open({ directory, synchronousCommit: true });
      expect(reopenedEnvironment.scopes()).toEqual([3]);
      const reopened = MemberStorage.openIn(reopenedEnvironment, { scope: 3, snapshotChunkBytes: 4 });
      expect(filesIn(directory)).toEqual(["3-2.snapshot", "3-7.snapshot"]);
      await reopened.append([entry(21, 2)], null);
      await reopenedEnvironment.chunkOperationsSettled();
      expect(filesIn(directory)).toEqual(["3-2.snapshot"]);
      // Slots are never reused: the next receipt takes one above the orphan's.
      await reopened.receiveSnapshotChunks({ ...makeSnapshot(30, 2, 8), restart: true, chunks: [] });
      await reopened.receiveSnapshotChunks({
        metadata: makeSnapshot(30, 2, 8).metadata,
        restart: false,
        chunks: [receivedChunk(makeSnapshot(30, 2, 8).data, 0, 4)],
      });
      await reopenedEnvironment.chunkOperationsSettled();
      expect(filesIn(directory)).toEqual(["3-2.snapshot", "3-8.snapshot"]);
      await reopened.destroy();
      await reopenedEnvironment.chunkOperationsSettled();
      expect(filesIn(directory)).toEqual([]);
      expect(reopenedEnvironment.scopes()).toEqual([]);
      await reopenedEnvironment.close();
    });
  });

  it("resumes a receipt an earlier version kept in LMDB from its file, which holds nothing, and removes its LMDB chunks", async () => {
    await withTemporaryDirectory(async (directory) => {
      const snapshot = makeSnapshot(10, 2, 8);
      const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
      // What an earlier version left: the record of a receipt in slot 4 and its first chunk in LMDB.
      await environment.chunks.put([2, 4, 0], encodeChunk(snapshot.data.subarray(0, 4)));
      const record = {
        metadata: snapshot.metadata,
        slot: 4,
        receivedBytes: 4,
        receivedChecksum: crc32c(snapshot.data.subarray(0, 4)),
      };
      await environment.submit(() => environment.state.put(2, "incomingSnapshot", encodeRecord(record)));
      const storage = MemberStorage.openIn(environment, { scope: 2, snapshotChunkBytes: 4 });
      expect(storage.incomingSnapshot()).toEqual({
        metadata: snapshot.metadata,
        receivedBytes: 0,
        receivedChecksum: 0,
      });
      await storage.receiveSnapshotChunks({
        metadata: snapshot.metadata,
        restart: false,
        chunks: [receivedChunk(snapshot.data, 0, 4), receivedChunk(snapshot.data, 4, 8)],
      });
      expect(await storage.finishSnapshotReceive()).toEqual(snapshot.metadata);
      expect(storage.snapshot()).toEqual(snapshot);
      await environment.chunkOperationsSettled();
      expect([...environment.chunks.getKeys({ start: [2, 0, 0], end: [3, 0, 0] })]).toEqual([]);
      expect(filesIn(directory)).toEqual(["2-4.snapshot"]);
      await storage.close();
      await environment.close();
    });
  });
});
