/**
 * `flowplane restore --backup-id N`: takes the broker's own settings, restores the partitions it hosts into its empty
 * data directory, and refuses (exit 1, the reason printed, nothing written) a non-empty directory, another partition
 * count (the backup's being the count at its cut, not that of a partition added afterwards that wrote a part of it)
 * and a backup the store does not hold. With `--cluster-configuration`, the broker restores the partitions a
 * scaled cluster's configuration gives it (broker ids its first configuration does not have) and keeps that
 * configuration, and refuses a configuration it is not in, one in the middle of a change (also one a cancelled change
 * left halfway), another partition count, routing counts that are not the partitions', and a file that is not a
 * regular file (a FIFO is refused, not waited on). Started by a supervisor (the local provisioner), it aborts once
 * the supervisor is gone.
 */
import { execFileSync, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exitCodes } from "../../../src/cli/io.js";
import { runCli } from "../../../src/cli/main.js";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import { type PartitionBackupSource, writePartitionBackup } from "../../../src/cluster/backup/partition-backup.js";
import { readPersistedConfiguration } from "../../../src/cluster/broker/files.js";
import { encodeRecord } from "../../../src/cluster/engine/index.js";
import type { Entry } from "../../../src/cluster/raft/index.js";
import { decodeConfiguration, encodeConfiguration } from "../../../src/cluster/topology/index.js";
import { storedLog } from "../../cluster/backup/support.js";
import { childCommand } from "../../support/child-command.js";
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
    ...storedLog((index) => entries[index - 1]),
    interruption: () => null,
    running: () => true,
    yieldTurn: async () => {},
  };
}

/**
 * A configuration document of a cluster scaled to brokers 0, 2 and 3 with replication factor 2 and `partitionCount`
 * partitions (each on two brokers in turn), as `GET /actuator/cluster` answers it.
 */
function scaledConfiguration(partitionCount: number, extra: Record<string, unknown> = {}): string {
  const brokerIds = [0, 2, 3];
  const at = "2026-01-02T00:00:00.000Z";
  const brokers = brokerIds.map((id, position) => ({
    id,
    state: "ACTIVE",
    version: 3,
    lastUpdatedAt: at,
    partitions: Array.from({ length: partitionCount }, (_, index) => index + 1)
      .filter((partitionId) => [partitionId - 1, partitionId].map((slot) => slot % 3).includes(position))
      .map((partitionId) => ({
        id: partitionId,
        state: "ACTIVE",
        priority: (partitionId - 1) % 3 === position ? 2 : 1,
        config: { exporting: { exporters: [] } },
      })),
  }));
  return JSON.stringify({
    version: 9,
    brokers,
    lastChange: { id: 4, status: "COMPLETED", startedAt: at, completedAt: at },
    routing: {
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount },
      messageCorrelation: { strategy: "HashMod", partitionCount },
    },
    ...extra,
  });
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
  await store.writeBackupRecord({
    formatVersion: 1,
    backupId: 4n,
    partitionCount: 3,
    takenAt: "2026-01-01T00:00:00.000Z",
    flowplaneVersion: "0.0.0-test",
  });
  for (const partitionId of [1, 2, 3]) {
    const manifest = await writePartitionBackup(source(partitionId * 2), store, {
      backupId: 4n,
      partitionId,
      brokerId: 0,
      checkpointPosition: partitionId * 2,
      partitionCount: 3,
      flowplaneVersion: "0.0.0-test",
      now: () => "2026-01-01T00:00:00.000Z",
      sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
    });
    expect(manifest.state).toBe("COMPLETED");
  }
  // A part of a partition added after the backup (older brokers wrote one when a relocated record carried the
  // backup's id) is not the backup's: it holds the 3 partitions its record names.
  const late = await writePartitionBackup(source(1), store, {
    backupId: 4n,
    partitionId: 4,
    brokerId: 0,
    checkpointPosition: 1,
    partitionCount: 4,
    flowplaneVersion: "0.0.0-test",
    now: () => "2026-01-01T00:01:00.000Z",
    sleep: (delayMs: number) => new Promise<void>((resolve) => setTimeout(resolve, delayMs)),
  });
  expect(late.state).toBe("COMPLETED");
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

  it("restores into a scaled cluster's configuration: the partitions it gives the broker, kept as its configuration", async () => {
    const file = join(directory, "scaled.json");
    const document = scaledConfiguration(3);
    await writeFile(file, document);
    const target = join(directory, "broker-3");
    // Broker 3 is no broker of the first configuration of its settings (three brokers, 0 to 2).
    const result = await restore(3, target, ["--cluster-configuration", file]);
    expect(result.stderr).toBe("");
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).not.toContain("partition 1 verified");
    expect(result.stdout).toContain("partition 2 verified and rebuilt: 4 buffered messages");
    expect(result.stdout).toContain("partition 3 verified and rebuilt: 6 buffered messages");
    expect(result.stdout).toContain("broker 3 restored 2 partitions");
    const persisted = await readPersistedConfiguration(target);
    expect(persisted === null ? null : encodeConfiguration(persisted)).toBe(
      encodeConfiguration(decodeConfiguration(document)),
    );
  });

  it("restores into the configuration the backup holds, and says when a backup of an earlier version holds none", async () => {
    const store = new FilesystemBackupStore(storeDirectory);
    const target = join(directory, "broker-3-from-backup");
    // Backup 4 was recorded as an earlier version did: without its configuration.
    const none = await restore(3, target, ["--configuration-of-backup"]);
    expect(none.exitCode).toBe(exitCodes.failure);
    expect(none.stderr).toContain(
      "restore refused: backup 4 holds no cluster configuration (an earlier version took it, or it does not exist)",
    );
    await store.writeBackupConfiguration(4n, scaledConfiguration(3));
    const result = await restore(3, target, ["--configuration-of-backup"]);
    expect(result.stderr).toBe("");
    expect(result.exitCode).toBe(exitCodes.ok);
    expect(result.stdout).toContain("broker 3 restored 2 partitions");
    const persisted = await readPersistedConfiguration(target);
    expect(persisted === null ? null : encodeConfiguration(persisted)).toBe(
      encodeConfiguration(decodeConfiguration(scaledConfiguration(3))),
    );
    // Not a member of it, or a damaged file in the backup: refused, naming the backup (no usage error).
    const notMember = await restore(1, join(directory, "broker-1-from-backup"), ["--configuration-of-backup"]);
    expect(notMember.exitCode).toBe(exitCodes.failure);
    expect(notMember.stderr).toContain(
      "restore refused: broker 1 is not a member of the cluster configuration of backup 4 (its brokers: 0, 2, 3)",
    );
    await store.writeBackupConfiguration(4n, "{");
    const damaged = await restore(3, join(directory, "broker-3-damaged"), ["--configuration-of-backup"]);
    expect(damaged.exitCode).toBe(exitCodes.failure);
    expect(damaged.stderr).toMatch(/restore refused: the cluster configuration of backup 4: /);
    await store.writeBackupConfiguration(4n, scaledConfiguration(3));
    const both = await restore(3, join(directory, "broker-3-both"), [
      "--configuration-of-backup",
      "--cluster-configuration",
      join(directory, "scaled.json"),
    ]);
    expect(both.stderr).toContain("give --cluster-configuration or --configuration-of-backup, not both");
  });

  it("refuses a configuration without the broker, with a change pending, another partition count, or malformed", async () => {
    const target = join(directory, "broker-refused");
    const refused = async (nodeId: number, document: string) => {
      const file = join(directory, "refused.json");
      await writeFile(file, document);
      return await restore(nodeId, target, ["--cluster-configuration", file]);
    };
    const notMember = await refused(1, scaledConfiguration(3));
    expect(notMember.exitCode).toBe(exitCodes.failure);
    expect(notMember.stderr).toContain(
      `restore refused: broker 1 is not a member of --cluster-configuration ${join(directory, "refused.json")} (its brokers: 0, 2, 3)`,
    );
    const at = "2026-01-03T00:00:00.000Z";
    const pending = await refused(
      0,
      scaledConfiguration(3, {
        pendingChange: { id: 5, status: "IN_PROGRESS", startedAt: at, completed: [], pending: [] },
      }),
    );
    expect(pending.stderr).toContain("restore refused: the cluster configuration has change 5 in progress");
    const fourPartitions = await refused(0, scaledConfiguration(4));
    expect(fourPartitions.stderr).toContain("backup 4 holds 3 partitions but this cluster has 4");
    const malformed = await refused(0, '{"version":0}');
    expect(malformed.exitCode).toBe(exitCodes.usage);
    expect(malformed.stderr).toContain("refused.json: malformed cluster configuration");
    const missing = await restore(0, target, ["--cluster-configuration", join(directory, "missing.json")]);
    expect(missing.exitCode).toBe(exitCodes.usage);
    expect(missing.stderr).toContain("missing.json cannot be read (ENOENT)");
    await expect(readdir(target)).rejects.toThrow();
  });

  it("refuses a shape a cancelled change left halfway, routing counts that are not the partitions', and a file that is not a regular file", async () => {
    const target = join(directory, "broker-halfway");
    const refused = async (document: string) => {
      const file = join(directory, "halfway.json");
      await writeFile(file, document);
      return await restore(0, target, ["--cluster-configuration", file]);
    };
    const joining = JSON.parse(scaledConfiguration(3)) as {
      brokers: { state: string; partitions: { id: number; state: string }[] }[];
    };
    const replica = joining.brokers[1]?.partitions[0];
    if (replica === undefined) throw new Error("the scaled configuration has no replica on broker 2");
    replica.state = "JOINING";
    const cancelled = await refused(JSON.stringify(joining));
    expect(cancelled.exitCode).toBe(exitCodes.failure);
    expect(cancelled.stderr).toContain(
      `restore refused: the replica of partition ${replica.id} on broker 2 is JOINING`,
    );
    const leaving = JSON.parse(scaledConfiguration(3)) as typeof joining;
    if (leaving.brokers[2] !== undefined) leaving.brokers[2].state = "LEAVING";
    expect((await refused(JSON.stringify(leaving))).stderr).toContain(
      "restore refused: broker 3 of the cluster configuration is LEAVING",
    );
    const routing = (requestCount: number, correlationCount: number) => ({
      routing: {
        version: 2,
        requestHandling: { strategy: "AllPartitions", partitionCount: requestCount },
        messageCorrelation: { strategy: "HashMod", partitionCount: correlationCount },
      },
    });
    expect((await refused(scaledConfiguration(3, routing(2, 3)))).stderr).toContain(
      "restore refused: the cluster configuration's routing sends requests to 2 partitions but it has 3",
    );
    expect((await refused(scaledConfiguration(3, routing(3, 2)))).stderr).toContain(
      "restore refused: the cluster configuration's routing correlates messages over 2 partitions but it has 3",
    );

    // A directory and a FIFO (which a plain open would wait on for a writer) are usage errors naming the file.
    const folder = join(directory, "a-folder");
    await mkdir(folder, { recursive: true });
    const fromFolder = await restore(0, target, ["--cluster-configuration", folder]);
    expect(fromFolder.exitCode).toBe(exitCodes.usage);
    expect(fromFolder.stderr).toContain("a-folder is not a regular file");
    const fifo = join(directory, "a-fifo");
    execFileSync("mkfifo", [fifo]);
    const fromFifo = await restore(0, target, ["--cluster-configuration", fifo]);
    expect(fromFifo.exitCode).toBe(exitCodes.usage);
    expect(fromFifo.stderr).toContain("a-fifo is not a regular file");
    await expect(readdir(target)).rejects.toThrow();
  });

  it("started by a supervisor, restores and exits with the channel open, and aborts once the supervisor is gone", async () => {
    const command = childCommand();
    /** Runs the command line as the local provisioner does: an IPC channel and FLOWPLANE_SUPERVISOR=ipc. */
    const supervised = (nodeId: number, dataDirectory: string) => {
      const child = spawn(
        process.execPath,
        [
          ...command.nodeArguments,
          command.entry,
          "restore",
          "--backup-id",
          "4",
          "--set",
          `service.broker.cluster.nodeId=${nodeId}`,
          "--set",
          `service.broker.dataDirectory=${dataDirectory}`,
          "--set",
          `service.backup.filesystem.basePath=${storeDirectory}`,
        ],
        {
          env: { ...process.env, SERVICE_CLUSTER_SECRET: TEST_CLUSTER_SECRET, FLOWPLANE_SUPERVISOR: "ipc" },
          stdio: ["ignore", "ignore", "pipe", "ipc"],
        },
      );
      const output = { stderr: "" };
      child.stderr?.on("data", (chunk: Buffer) => {
        output.stderr += chunk.toString("utf8");
      });
      const exitCode = once(child, "exit").then(([code]) => code as number | null);
      return { child, output, exitCode };
    };
    // The open channel keeps nothing waiting: the restore ends by itself.
    const finished = supervised(0, join(directory, "broker-supervised"));
    expect(await finished.exitCode).toBe(exitCodes.ok);
    expect(await readdir(join(directory, "broker-supervised"))).toContain("raft");

    const orphaned = supervised(1, join(directory, "broker-orphaned"));
    // The supervisor goes away as a killed one does: the channel closes.
    orphaned.child.disconnect();
    expect(await orphaned.exitCode).toBe(exitCodes.failure);
    expect(orphaned.output.stderr).toContain("the process that started this restore is gone; aborting");
  }, 60_000);
});
