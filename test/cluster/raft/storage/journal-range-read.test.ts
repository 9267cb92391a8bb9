/**
 * `Journal.entries.readRangeInto`: entries stored close together are read with one system call (counted through a
 * pass-through mock of `readSync`), runs are bounded in bytes and broken at large gaps, large entries and segment
 * ends, and every target ends up with exactly its entry's bytes, also for entries of the running transaction.
 */
import * as fs from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  Journal,
  MAX_GROUPED_ENTRY_BYTES,
  MAX_RANGE_GAP_BYTES,
  MAX_RANGE_READ_BYTES,
} from "../../../../src/cluster/raft/storage/journal.js";
import { StorageCorruptionError } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>();
  return { ...actual, readSync: vi.fn(actual.readSync) };
});

const readSync = vi.mocked(fs.readSync);

afterEach(() => {
  readSync.mockClear();
});

/** A value of `sizeBytes` bytes that tells entry `index` of scope `scope` apart from every other. */
function entryValue(scope: number, index: number, sizeBytes: number): Uint8Array {
  const value = new Uint8Array(sizeBytes).fill((scope * 31 + index * 7) % 251);
  value.set([scope, index % 256, Math.floor(index / 256)].slice(0, sizeBytes));
  return value;
}

/** Targets for entries `fromIndex`.. of `scope`, sized as stored, in one dirty buffer. */
function targetsFor(journal: Journal, scope: number, fromIndex: number, count: number): Uint8Array[] {
  const sizes = Array.from(
    { length: count },
    (_, position) => journal.entries.sizeOf(scope, fromIndex + position) ?? 0,
  );
  const buffer = new Uint8Array(sizes.reduce((total, size) => total + size, 0)).fill(0xee);
  let offset = 0;
  return sizes.map((size) => {
    const target = buffer.subarray(offset, offset + size);
    offset += size;
    return target;
  });
}

function expectValues(targets: readonly Uint8Array[], scope: number, fromIndex: number): void {
  for (const [position, target] of targets.entries()) {
    // Compared as bytes, not element by element: some targets are MiBs long.
    const expected = Buffer.from(entryValue(scope, fromIndex + position, target.byteLength));
    expect(Buffer.from(target).equals(expected), `entry ${fromIndex + position} of scope ${scope}`).toBe(true);
  }
}

/** A journal in `directory` holding entries 1..`count` of scope 1, `sizeBytes` each, committed in one transaction. */
function journalHolding(directory: string, count: number, sizeBytes: number): Journal {
  const journal = Journal.open({ directory });
  journal.begin();
  for (let index = 1; index <= count; index += 1) journal.entries.put(1, index, entryValue(1, index, sizeBytes));
  journal.seal();
  journal.commitSync();
  return journal;
}

/** Reads the range and answers how many read system calls it took. */
function readsOf(journal: Journal, scope: number, fromIndex: number, targets: readonly Uint8Array[]): number {
  readSync.mockClear();
  journal.entries.readRangeInto(scope, fromIndex, targets);
  return readSync.mock.calls.length;
}

describe("Journal.entries.readRangeInto", () => {
  it("reads entries stored close together with one system call, across the records of several commits", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory });
      // Two scopes interleaved, small entries, several transactions: the gaps are headers and the other scope's.
      for (let index = 1; index <= 60; index += 10) {
        journal.begin();
        for (let offset = 0; offset < 10; offset += 1) {
          journal.entries.put(1, index + offset, entryValue(1, index + offset, 300));
          journal.entries.put(2, index + offset, entryValue(2, index + offset, 200));
        }
        journal.seal();
        journal.commitSync();
      }
      const targets = targetsFor(journal, 1, 1, 60);
      expect(readsOf(journal, 1, 1, targets)).toBe(1);
      expectValues(targets, 1, 1);
      const middle = targetsFor(journal, 2, 17, 30);
      expect(readsOf(journal, 2, 17, middle)).toBe(1);
      expectValues(middle, 2, 17);
      await journal.close();
    });
  });

  it("reads across a large gap, past the byte bound or a segment's end with separate system calls", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = Journal.open({ directory, segmentBytes: 4 * MAX_RANGE_READ_BYTES });
      const transact = (write: () => void): void => {
        journal.begin();
        write();
        journal.seal();
        journal.commitSync();
      };
      // Entries 1-2 close together, then another scope's entry larger than the gap bound, then entries 3-4.
      transact(() => {
        journal.entries.put(1, 1, entryValue(1, 1, 100));
        journal.entries.put(1, 2, entryValue(1, 2, 100));
      });
      transact(() => journal.entries.put(2, 1, entryValue(2, 1, MAX_RANGE_GAP_BYTES + 1)));
      transact(() => {
        journal.entries.put(1, 3, entryValue(1, 3, 100));
        journal.entries.put(1, 4, entryValue(1, 4, 100));
      });
      const gapped = targetsFor(journal, 1, 1, 4);
      expect(readsOf(journal, 1, 1, gapped)).toBe(2);
      expectValues(gapped, 1, 1);
      // Entries 5-204 of the largest grouped size, adjacent: no read covers more than the bound.
      transact(() => {
        for (let index = 5; index <= 204; index += 1) {
          journal.entries.put(1, index, entryValue(1, index, MAX_GROUPED_ENTRY_BYTES));
        }
      });
      readSync.mockClear();
      const bounded = targetsFor(journal, 1, 5, 200);
      journal.entries.readRangeInto(1, 5, bounded);
      const lengths = readSync.mock.calls.map((call) => (call as unknown[])[3] as number);
      expect(lengths.length).toBeGreaterThanOrEqual(Math.ceil((200 * MAX_GROUPED_ENTRY_BYTES) / MAX_RANGE_READ_BYTES));
      expect(lengths.length).toBeLessThan(20);
      for (const length of lengths) expect(length).toBeLessThanOrEqual(MAX_RANGE_READ_BYTES);
      expectValues(bounded, 1, 5);
      // A larger entry between small ones is read on its own, straight into its target.
      transact(() => {
        journal.entries.put(1, 205, entryValue(1, 205, MAX_GROUPED_ENTRY_BYTES + 1));
        journal.entries.put(1, 206, entryValue(1, 206, 100));
      });
      const mixed = targetsFor(journal, 1, 204, 3);
      expect(readsOf(journal, 1, 204, mixed)).toBe(3);
      expect(readSync.mock.calls.some((call) => call[1] === mixed[1])).toBe(true);
      expectValues(mixed, 1, 204);
      // The segment is full: entry 13 goes into the next one, and the range is read from both.
      transact(() => journal.entries.put(1, 207, entryValue(1, 207, 3 * MAX_RANGE_READ_BYTES)));
      transact(() => journal.entries.put(1, 208, entryValue(1, 208, 100)));
      expect(journal.segmentCount).toBeGreaterThan(1);
      const acrossSegments = targetsFor(journal, 1, 200, 9);
      journal.entries.readRangeInto(1, 200, acrossSegments);
      expectValues(acrossSegments, 1, 200);
      await journal.close();
    });
  });

  it("names the entry a file cut short ends inside, not the last entry of the run", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = journalHolding(directory, 6, 300);
      const targets = targetsFor(journal, 1, 1, 6);
      const [, path, offset] = /^(.*) at byte (\d+)$/.exec(journal.entries.locate(1, 3) ?? "") ?? [];
      // Damage from outside while the journal is open: the segment now ends in the middle of entry 3.
      fs.truncateSync(path as string, Number(offset) + 100);
      expect(() => journal.entries.readRangeInto(1, 1, targets)).toThrow(
        /log entry 3: the journal ends inside the entry/,
      );
      await journal.close();
    });
  });

  it("takes entries of the running transaction from memory and refuses a missing entry or a target of another size", async () => {
    await withTemporaryDirectory(async (directory) => {
      const journal = journalHolding(directory, 3, 50);
      journal.begin();
      journal.entries.put(1, 3, entryValue(1, 30, 50));
      journal.entries.put(1, 4, entryValue(1, 4, 50));
      const targets = targetsFor(journal, 1, 1, 4);
      journal.entries.readRangeInto(1, 1, targets);
      expectValues(targets.slice(0, 2), 1, 1);
      expect(Buffer.from(targets[2] as Uint8Array).equals(Buffer.from(entryValue(1, 30, 50)))).toBe(true);
      expectValues(targets.slice(3), 1, 4);
      journal.abort();
      expect(() =>
        journal.entries.readRangeInto(1, 2, targetsFor(journal, 1, 2, 2).concat([new Uint8Array(50)])),
      ).toThrow(StorageCorruptionError);
      expect(() => journal.entries.readRangeInto(1, 1, [new Uint8Array(50), new Uint8Array(49)])).toThrow(
        /invariant violated: log entry 2 is 50 bytes, the target 49/,
      );
      expect(journal.entries.locate(1, 2)).toMatch(/\.journal at byte \d+$/);
      expect(journal.entries.locate(1, 9)).toBeUndefined();
      await journal.close();
    });
  });
});
