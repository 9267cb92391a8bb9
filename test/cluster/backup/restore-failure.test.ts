/**
 * A restore that fails once it has begun writing (here a read error of the second partition's log, after every part
 * verified) removes what it wrote: the data directory is empty again, and the same restore succeeds afterwards.
 */
import { mkdir, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { writePartitionBackup } from "../../../src/cluster/backup/partition-backup.js";
import { restoreBroker } from "../../../src/cluster/backup/restore.js";
import type { BackupStore } from "../../../src/cluster/backup/store.js";
import { roundRobinDistribution } from "../../../src/cluster/topology/index.js";
import { delegatingStore } from "../../support/backup-store.js";
import { noopReplica } from "./support.js";

describe("a restore that fails while it writes", () => {
  let base: string;
  let store: FilesystemBackupStore;

  beforeEach(async () => {
    base = await mkdtemp(join(tmpdir(), "flowplane-restore-failure-"));
    store = new FilesystemBackupStore(join(base, "store"));
    await store.writeBackupRecord({
      formatVersion: 1,
      backupId: 1n,
      partitionCount: 2,
      takenAt: "2026-01-01T00:00:00.000Z",
      flowplaneVersion: "test",
    });
    for (const partitionId of [1, 2]) {
      const manifest = await writePartitionBackup(noopReplica(4), store, {
        backupId: 1n,
        partitionId,
        brokerId: 0,
        checkpointPosition: 4,
        partitionCount: 2,
        flowplaneVersion: "test",
        now: () => "2026-01-01T00:00:00.000Z",
        sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
      });
      expect(manifest.state).toBe("COMPLETED");
    }
  });

  afterEach(async () => {
    await store.fileWriter.terminate();
    await rm(base, { recursive: true, force: true });
  });

  /** `store`, whose second read of partition 2's log fails: verification passes, the rebuild does not. */
  function failingOnRebuild(): BackupStore {
    let reads = 0;
    return delegatingStore(store, {
      readFile: (part, name, maxBytes) => {
        if (part.partitionId === 2 && name === "log.bin" && ++reads > 1) {
          const error = Object.assign(new Error("EIO: i/o error"), { code: "EIO" });
          return { [Symbol.asyncIterator]: () => ({ next: () => Promise.reject(error) }) };
        }
        return store.readFile(part, name, maxBytes);
      },
    });
  }

  for (const existed of [true, false]) {
    it(`removes what it wrote (a data directory that ${existed ? "existed empty stays" : "did not exist is gone"}), and the restore succeeds after`, async () => {
      const dataDirectory = join(base, "data");
      if (existed) await mkdir(dataDirectory);
      const request = { backupId: 1n, nodeId: 0, dataDirectory, distribution: roundRobinDistribution([0], 2, 1) };
      const restored: number[] = [];
      await expect(
        restoreBroker({
          ...request,
          store: failingOnRebuild(),
          onPartitionRestored: (partitionId) => restored.push(partitionId),
        }),
      ).rejects.toThrow(/EIO/);
      // Partition 1 had been stored when partition 2 failed.
      expect(restored).toEqual([1]);
      if (existed) expect(await readdir(dataDirectory)).toEqual([]);
      else await expect(readdir(dataDirectory)).rejects.toMatchObject({ code: "ENOENT" });
      const report = await restoreBroker({ ...request, store });
      expect(report.partitions.map((partition) => partition.partitionId)).toEqual([1, 2]);
    });
  }
});
