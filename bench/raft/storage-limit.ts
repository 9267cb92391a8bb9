/**
 * The storage limit: how fast entries can be made durable by LMDB alone, with the same settings and the same
 * encoded entries the Raft storage adapter uses, and through the adapter itself for one member.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { open } from "lmdb";
import { encodeEntry } from "../../src/cluster/raft/storage/codec.js";
import { LmdbRaftStorage } from "../../src/cluster/raft/storage/lmdb-storage.js";
import type { Entry } from "../../src/cluster/raft/types.js";
import { type Measurement, measureClosedLoop } from "./harness.js";

/** One benchmark configuration. */
export interface LoadShape {
  readonly concurrency: number;
  readonly entryBytes: number;
  readonly warmupMs: number;
  readonly durationMs: number;
}

/** Runs `body` with a fresh temporary directory that is removed afterwards. */
export async function withTemporaryDirectory<T>(body: (directory: string) => Promise<T>): Promise<T> {
  const directory = await mkdtemp(join(tmpdir(), "flowplane-bench-raft-"));
  try {
    return await body(directory);
  } finally {
    await rm(directory, { recursive: true, force: true });
  }
}

/** An entry payload of `entryBytes` bytes with varied content. */
export function payload(entryBytes: number): Uint8Array {
  return new Uint8Array(entryBytes).map((_, position) => (position * 131) & 0xff);
}

/** Plain durable LMDB puts of encoded entries, one per operation, batched by LMDB within an event turn. */
export function measureRawLmdb(shape: LoadShape): Promise<Measurement> {
  return withTemporaryDirectory(async (directory) => {
    // The same durability settings as the adapter: each put resolves only after its transaction is synced.
    const root = open({ path: directory, maxDbs: 4, encoding: "binary", overlappingSync: false, noSync: false });
    const log = root.openDB<Uint8Array, number>({ name: "log", encoding: "binary" });
    const data = payload(shape.entryBytes);
    let nextIndex = 1;
    try {
      return await measureClosedLoop(shape.concurrency, shape.warmupMs, shape.durationMs, async () => {
        const index = nextIndex;
        nextIndex += 1;
        await log.put(index, encodeEntry({ index, term: 1, kind: "normal", data }));
      });
    } finally {
      await root.close();
    }
  });
}

/** Appends through the Raft storage adapter of a single member (group commit, checksums, invariant checks). */
export function measureAdapter(shape: LoadShape): Promise<Measurement> {
  return withTemporaryDirectory(async (directory) => {
    const storage = LmdbRaftStorage.open({ directory });
    const data = payload(shape.entryBytes);
    let nextIndex = 1;
    try {
      return await measureClosedLoop(shape.concurrency, shape.warmupMs, shape.durationMs, async () => {
        const entry: Entry = { index: nextIndex, term: 1, kind: "normal", data };
        nextIndex += 1;
        await storage.append([entry], null);
      });
    } finally {
      await storage.close();
    }
  });
}
