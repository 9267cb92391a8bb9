/**
 * `MemberStorage.entries` for entries older than its cache: read from the journal with one system call per run of
 * neighbours (counted through a pass-through mock of `readSync`), each into memory of its own.
 */
import * as fs from "node:fs";
import { describe, expect, it, vi } from "vitest";
import { MemberStorage } from "../../../../src/cluster/raft/storage/member-storage.js";
import type { Entry } from "../../../../src/cluster/raft/types.js";
import { withTemporaryDirectory } from "./temp-directory.js";

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>();
  return { ...actual, readSync: vi.fn(actual.readSync) };
});

const readSync = vi.mocked(fs.readSync);

/** Six entries of a few hundred bytes each, which the journal stores next to each other. */
function writtenEntries(): Entry[] {
  return Array.from({ length: 6 }, (_, position) => ({
    index: position + 1,
    term: 1,
    kind: "normal" as const,
    data: new Uint8Array(300 + position).fill(position + 1),
  }));
}

/** Runs `body` with a storage that caches no entries, so every entry it hands out comes from disk. */
async function withUncachedStorage(body: (storage: MemberStorage) => Promise<void>): Promise<void> {
  await withTemporaryDirectory(async (directory) => {
    const storage = MemberStorage.open({ directory, entryCacheBytes: 0 });
    try {
      await body(storage);
    } finally {
      await storage.close();
    }
  });
}

describe("MemberStorage.entries from disk", () => {
  it("reads neighbouring entries with one system call, not one per entry", async () => {
    await withUncachedStorage(async (storage) => {
      const written = writtenEntries();
      await storage.append(written, null);
      readSync.mockClear();
      expect(storage.entries(1, 7)).toEqual(written);
      expect(readSync).toHaveBeenCalledTimes(1);
    });
  });

  it("reads each entry into memory of its own, so an entry kept holds none of its neighbours", async () => {
    await withUncachedStorage(async (storage) => {
      await storage.append(writtenEntries(), null);
      const read = storage.entries(1, 7);
      expect(new Set(read.map((entry) => entry.data.buffer)).size).toBe(read.length);
      // The entry's stored header at most besides its data: the engine keeps a message in the memory it arrived in.
      for (const entry of read) expect(entry.data.buffer.byteLength).toBeLessThanOrEqual(entry.data.byteLength + 24);
    });
  });
});
