/**
 * `flowplane restore --backup-id N`: takes the broker's own settings, restores the partitions it hosts into its empty
 * data directory, and refuses (exit 1, the reason printed, nothing written) a non-empty directory, another partition
 * count and a backup the store does not hold.
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { runCli } from "../../../src/cli/main.js";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { type PartitionBackupSource, writePartitionBackup } from "../../../src/cluster/backup/partition-backup.js";
import { encodeRecord } from "../../../src/cluster/engine/index.js";
import type { Entry } from "../../../src/cluster/raft/index.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { captureIo } from "../support.js";

let directory: string;
let storeDirectory: string;

/** A leader's log of `messages` publications and nothing else, as the writer reads it. */
function source(messages: number): PartitionBackupSource {
  const entries: Entry[] = Array.from({ length: messages }, (_, position) => ({
    index: position + 1,
    term: 1,
    kind: "normal",
    data: encodeRecord({
      kind: "publishMessage",
      name: "m",
      correlationKey: `k-${position}`,
      timeToLiveMs: 60_000,
      variables: {},
      tenantId: "<default>",
      publishedAtMs: 1_000,
    }),
  }));
  return {
    snapshotMetadata: () => null,
    snapshotChunk: () => null,
    entries: (fromIndex, toIndex) => entries.slice(fromIndex - 1, toIndex - 1),
    interruption: () => null,
    yieldTurn: async () => {},
  };
}

async function restore(nodeId: number, dataDirectory: string, extra: string[] = []) {
  const { io, output } = captureIo({ SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET }, directory);
  const exitCode = await runCli(
    [
      "restore",
      "--backup-id",
      "4",
      "--set",
      `service.broker.cluster.nodeId=${nodeId}`,
      "--set",
      `service.broker.dataDirectory=${dataDirectory}`,
      "--set",
      `service.backup.filesystem.basePath=${storeDirectory}`,
      ...extra,
    ],
    io,
  );
  return { exitCode, ...output };
}

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), "flowplane-cli-restore-"));
  storeDirectory = join(directory, "store");
  const store = new FilesystemBackupStore(storeDirectory);
  for (const partitionId of [1, 2, 3]) {
    const manifest = await writePartitionBackup(source(partitionId * 2), store, {
      backupId: 4,
      partitionId,
      brokerId: 0,
      checkpointPosition: partitionId * 2,
      partitionCount: 3,
      flowplaneVersion: "0.0.0-test",
      now: () => "2026-01-01T00:00:00.000Z",
    });
    expect(manifest.state).toBe("COMPLETED");
  }
});

afterAll(async () => {
  if (directory !== undefined) await rm(directory, { recursive: true, force: true });
});

describe("flowplane restore", () => {
  it("restores the broker's partitions into its empty data directory, then refuses to write over them", async () => {
    const target = join(directory, "broker-1");
    const result = await restore(1, target);
    expect(result.stderr).toBe("");
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).toContain("partition 1 verified and rebuilt: 2 buffered messages");
    expect(result.stdout).toContain("partition 3 verified and rebuilt: 6 buffered messages");
    expect(result.stdout).toContain("broker 1 restored 3 partitions; start it with flowplane broker");
    expect(await readdir(target)).toContain("raft");

    const again = await restore(1, target);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toMatch(/restore refused: restore needs an empty data directory/);
  });

  it("refuses another partition count naming both, and a backup the store does not hold", async () => {
    const target = join(directory, "broker-2");
    const counts = await restore(2, target, ["--set", "service.broker.cluster.partitionsCount=4"]);
    expect(counts.exitCode).toBe(exitCodes.failure);
    expect(counts.stderr).toContain("backup 4 holds 3 partitions but this cluster has 4");
    const missing = await restore(2, target, ["--backup-id", "9"]);
    expect(missing.stderr).toContain("the backup store holds no backup 9");
    await expect(readdir(target)).rejects.toThrow();
  });
});
