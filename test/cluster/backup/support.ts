/** Helpers for tests of backups: a partition's log as a backup reads it from a fake replica. */
import type { PartitionBackupSource } from "../../../src/cluster/backup/partition-backup.js";
import type { Entry } from "../../../src/cluster/raft/index.js";
import { encodedEntryBytes, encodeEntry } from "../../../src/cluster/raft/storage/codec.js";

/**
 * The raw log reads of a backup source (`storedEntrySizes`, `readStoredEntries`) over the log `entryAt` describes
 * (undefined: the log does not hold that index), answering what the storage would: `encodeEntry`'s bytes. Sizes stop
 * at the first index the log does not hold.
 */
export function storedLog(
  entryAt: (index: number) => Entry | undefined,
): Pick<PartitionBackupSource, "storedEntrySizes" | "readStoredEntries"> {
  return {
    storedEntrySizes: (fromIndex, toIndex, maxBytes) => {
      const sizes: number[] = [];
      let bytes = 0;
      for (let index = fromIndex; index < toIndex && bytes <= maxBytes; index += 1) {
        const entry = entryAt(index);
        if (entry === undefined) break;
        sizes.push(encodedEntryBytes(entry));
        bytes += encodedEntryBytes(entry);
      }
      return sizes;
    },
    readStoredEntries: (fromIndex, targets) => {
      for (const [position, target] of targets.entries()) {
        const entry = entryAt(fromIndex + position);
        if (entry === undefined) throw new Error(`the log does not hold entry ${fromIndex + position}`);
        target.set(encodeEntry(entry));
      }
    },
  };
}

/** A leader's replica without a snapshot whose log holds `lastIndex` no-op entries: the source of a small part. */
export function noopReplica(lastIndex: number): PartitionBackupSource {
  return {
    snapshotMetadata: () => null,
    snapshotChunk: () => null,
    ...storedLog((index) =>
      index <= lastIndex ? { index, term: 1, kind: "noop", data: new Uint8Array(0) } : undefined,
    ),
    interruption: () => null,
    running: () => true,
    yieldTurn: async () => {},
  };
}
