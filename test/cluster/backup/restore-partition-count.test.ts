/**
 * Which partition count restore holds a backup to, with a real filesystem store and real restores: the backup's
 * record wins over a lower count a part recorded (its leader's view of the cluster lagged behind), a backup written
 * before records (an older broker's store) still restores by the lowest count its parts recorded, and a backup the
 * store holds only stray parts of (deleted) is not restored.
 */
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { writePartitionBackup } from "../../../src/cluster/backup/partition-backup.js";
import { RestoreRefusedError, restoreBroker } from "../../../src/cluster/backup/restore.js";
import type { BackupPartManifest } from "../../../src/cluster/backup/store.js";
import { roundRobinDistribution } from "../../../src/cluster/topology/index.js";
import { noopReplica } from "./support.js";

let base: string;
let store: FilesystemBackupStore;
let restores = 0;

beforeEach(async () => {
  base = await mkdtemp(join(tmpdir(), "flowplane-restore-count-"));
  store = new FilesystemBackupStore(join(base, "store"));
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

/** Writes partition `partitionId`'s COMPLETED part of `backupId`, its manifest recording `partitionCount`. */
async function writePart(backupId: bigint, partitionId: number, partitionCount: number): Promise<BackupPartManifest> {
  const manifest = await writePartitionBackup(noopReplica(4), store, {
    backupId,
    partitionId,
    brokerId: 0,
    checkpointPosition: 4,
    partitionCount,
    flowplaneVersion: "0.0.0-test",
    now: () => "2026-01-01T00:00:00.000Z",
    sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
  });
  expect(manifest.state).toBe("COMPLETED");
  return manifest;
}

/** Rewrites a part's manifest as a broker from before backup records wrote it. */
async function asOlderBroker(manifest: BackupPartManifest): Promise<void> {
  const { backupRecorded: _, ...older } = manifest;
  await store.writeManifest(older);
}

/** Restores broker 0 of a one-broker cluster with `partitionCount` partitions; resolves with the partitions restored. */
async function restore(backupId: bigint, partitionCount: number): Promise<number[]> {
  restores += 1;
  const report = await restoreBroker({
    store,
    backupId,
    nodeId: 0,
    dataDirectory: join(base, `data-${restores}`),
    distribution: roundRobinDistribution([0], partitionCount, 1),
  });
  return report.partitions.map((partition) => partition.partitionId);
}

describe("the partition count restore holds a backup to", () => {
  it("is the recorded one, not the lower count a lagging leader recorded in its part", async () => {
    await store.writeBackupRecord({
      formatVersion: 1,
      backupId: 5n,
      partitionCount: 3,
      takenAt: "2026-01-01T00:00:00.000Z",
      flowplaneVersion: "0.0.0-test",
    });
    await writePart(5n, 1, 2);
    await writePart(5n, 2, 3);
    await writePart(5n, 3, 3);
    expect(await restore(5n, 3)).toEqual([1, 2, 3]);
    // A cluster with the lagging leader's count would lose partition 3's data: refused, naming both counts.
    await expect(restore(5n, 2)).rejects.toThrow(
      new RestoreRefusedError("backup 5 holds 3 partitions but this cluster has 2; the partition counts must be equal"),
    );
    expect(await readdir(join(base, `data-${restores}`)).catch(() => [])).toEqual([]);
  });

  it("is the lowest a part recorded for a backup an older broker wrote without a record", async () => {
    await asOlderBroker(await writePart(2n, 1, 2));
    await asOlderBroker(await writePart(2n, 2, 2));
    // Partition 3 was added after the backup and wrote a part of it (older brokers did) with its own count.
    await asOlderBroker(await writePart(2n, 3, 3));
    expect(await restore(2n, 2)).toEqual([1, 2]);
    await expect(restore(2n, 3)).rejects.toThrow("backup 2 holds 2 partitions but this cluster has 3");
  });

  it("refuses a backup the store holds only stray parts of (its record was deleted)", async () => {
    await writePart(7n, 1, 1);
    await expect(restore(7n, 1)).rejects.toThrow(new RestoreRefusedError("the backup store holds no backup 7"));
  });

  it("does not take a damaged manifest's placeholder as a count: an older backup stays whole, strays stay deleted", async () => {
    await asOlderBroker(await writePart(3n, 1, 3));
    await asOlderBroker(await writePart(3n, 2, 3));
    await asOlderBroker(await writePart(3n, 3, 3));
    await damage({ backupId: 3n, partitionId: 3, brokerId: 0 });
    // Three partitions still, and partition 3's damaged part fails the restore, naming it; one partition is no option.
    await expect(restore(3n, 1)).rejects.toThrow("backup 3 holds 3 partitions but this cluster has 1");
    await expect(restore(3n, 3)).rejects.toThrow(/partition 3.*manifest\.json/);
    // The strays of a deleted backup, one of them damaged, are no backup.
    await writePart(8n, 1, 2);
    await writePart(8n, 2, 2);
    await damage({ backupId: 8n, partitionId: 2, brokerId: 0 });
    await expect(restore(8n, 1)).rejects.toThrow(new RestoreRefusedError("the backup store holds no backup 8"));
  });
});

/** Overwrites a part's manifest with bytes that are not JSON. */
async function damage(part: { backupId: bigint; partitionId: number; brokerId: number }): Promise<void> {
  await writeFile(join(store.partDirectory(part), "manifest.json"), "{damaged");
}
