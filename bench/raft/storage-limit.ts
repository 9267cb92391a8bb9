/**
 * The storage limit: how fast entries can be made durable by LMDB alone (durable commits of the same encoded entries
 * the Raft storage adapter writes: the reference point for one durable write on this disk, and the layout the adapter
 * used before its journal); and the adapter itself for one member.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { open } from "lmdb";
import { encodeEntry } from "../../src/cluster/raft/storage/codec.js";
import { MemberStorage } from "../../src/cluster/raft/storage/member-storage.js";

/** A setup under load: one operation makes one entry durable (or committed); `close` releases everything. */
export interface OpenSetup {
  readonly operation: () => Promise<void>;
  close(): Promise<void>;
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
export function openRawLmdb(directory: string, entryBytes: number): OpenSetup {
  // The adapter's durability settings: a put resolves only after the transaction holding it is synced.
  const root = open({ path: directory, maxDbs: 4, encoding: "binary", overlappingSync: false, noSync: false });
  const log = root.openDB<Uint8Array, number>({ name: "log", encoding: "binary" });
  const data = payload(entryBytes);
  let nextIndex = 1;
  return {
    operation: async () => {
      const index = nextIndex;
      nextIndex += 1;
      await log.put(index, encodeEntry({ index, term: 1, kind: "normal", data }));
    },
    close: () => root.close(),
  };
}

/** Appends one entry per operation through the storage adapter of a single member (group commit, checksums). */
export function openAdapter(directory: string, entryBytes: number): OpenSetup {
  const storage = MemberStorage.open({ directory });
  const data = payload(entryBytes);
  let nextIndex = 1;
  return {
    operation: async () => {
      const index = nextIndex;
      nextIndex += 1;
      await storage.append([{ index, term: 1, kind: "normal", data }], null);
    },
    close: () => storage.close(),
  };
}
