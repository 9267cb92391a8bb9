/**
 * `flowplane backups`: the text it prints, and take --wait, list, status, delete against a real gateway in front of
 * real in-process brokers with a filesystem backup store.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatBackup, formatBackupProgress, parseBackupId } from "../../../src/cli/commands/backups.js";
import { exitCodes } from "../../../src/cli/io.js";
import type { Backup } from "../../../src/client/backups.js";
import { FilesystemBackupStore } from "../../../src/cluster/backup/filesystem-store.js";
import type { Broker } from "../../../src/cluster/broker/broker.js";
import { type RunningGateway, startGateway } from "../../../src/cluster/gateway/index.js";
import { loadConfiguration } from "../../../src/config/load.js";
import {
  partitionSettled,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  waitFor,
} from "../../cluster/broker/support.js";
import { TEST_CLUSTER_SECRET } from "../../support/cluster-secret.js";
import { type CliFixture, startCliFixture } from "../support.js";

describe("backups display", () => {
  it("shows the state, partitions done and bytes, with one line per partition, escaping control characters", () => {
    const backup: Backup = {
      backupId: 7n,
      state: "FAILED",
      failureReason: "partition 2: broker 1 lost the leadership\u001b[31m",
      partitionCount: 2,
      details: [
        {
          partitionId: 1,
          state: "COMPLETED",
          brokerId: 0,
          failureReason: null,
          checkpointPosition: 42,
          createdAt: "t",
          lastUpdated: "t",
          brokerVersion: "1.0.0",
          sizeBytes: 3 * 1024 * 1024,
        },
        {
          partitionId: 2,
          state: "FAILED",
          brokerId: 1,
          failureReason: "broker 1 lost the leadership",
          checkpointPosition: 40,
          createdAt: "t",
          lastUpdated: "t",
          brokerVersion: "1.0.0",
          sizeBytes: 0,
        },
      ],
    };
    expect(formatBackupProgress(backup)).toBe("backup 7: FAILED, 2/2 partitions done, 3.0 MiB written");
    const text = formatBackup(backup);
    expect(text).toContain("partition 1 (broker 0): COMPLETED at position 42, 3.0 MiB");
    expect(text).toContain("partition 2 (broker 1): FAILED at position 40, 0 B: broker 1 lost the leadership");
    expect(text).not.toContain("\u001b");
  });

  it("accepts backup ids of 0..2^63 − 1, exactly", () => {
    expect(parseBackupId("0")).toBe(0n);
    expect(parseBackupId("9007199254740993")).toBe(9_007_199_254_740_993n);
    expect(parseBackupId("9223372036854775807")).toBe(2n ** 63n - 1n);
    expect(() => parseBackupId("9223372036854775808")).toThrow("a non-negative integer of at most 9223372036854775807");
    expect(() => parseBackupId("-1")).toThrow();
    expect(() => parseBackupId("1e3")).toThrow();
  });
});

describe("flowplane backups against a running cluster", () => {
  let fixture: CliFixture;
  let root: string;
  let storeDirectory: string;
  let brokers: Broker[];
  let gateway: RunningGateway;
  let environment: Record<string, string>;

  beforeAll(async () => {
    fixture = await startCliFixture();
    root = await temporaryDirectory("cli-backups");
    storeDirectory = await mkdtemp(join(tmpdir(), "flowplane-cli-backups-"));
    const store = new FilesystemBackupStore(storeDirectory);
    brokers = await startBrokers(root, 3, () => ({ backupStore: store }));
    for (const partitionId of [1, 2, 3]) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }
    gateway = await startGateway(
      loadConfiguration({
        environment: {},
        flags: {
          "service.gateway.port": 0,
          "service.management.port": 0,
          "service.cluster.secret": TEST_CLUSTER_SECRET,
          "service.gateway.issuerUrl": fixture.platform.issuerUrl,
          "service.gateway.contactPoints": brokers.map((broker) => `127.0.0.1:${broker.clusterAddress.port}`).join(","),
        },
      }),
      { logger: pino({ level: "silent" }), topologyRefreshIntervalMs: 100 },
    );
    environment = { ...fixture.clientEnvironment, SERVICE_CLUSTER_MANAGEMENT_URL: gateway.managementUrl };
  });

  afterAll(async () => {
    await gateway?.close();
    await Promise.all((brokers ?? []).map((broker) => broker.close()));
    if (root !== undefined) await removeDirectory(root);
    if (storeDirectory !== undefined) await rm(storeDirectory, { recursive: true, force: true });
    await fixture?.close();
  });

  it("take --wait follows the backup to COMPLETED; list, status and delete show and remove it", async () => {
    const taken = await fixture.cli(["backups", "take", "5", "--wait"], environment);
    expect(taken.stderr).toBe("");
    expect(taken.exitCode).toBe(exitCodes.ok);
    expect(taken.stdout).toMatch(/backup 5: COMPLETED, 3\/3 partitions done/);
    // The last progress line is the summary: the partitions follow it, and it is not printed again above them.
    expect(taken.stdout.match(/backup 5: COMPLETED/g)).toHaveLength(1);
    expect(taken.stdout).toMatch(/partition 3 \(broker \d\): COMPLETED at position \d+/);

    const list = await fixture.cli(["backups", "list"], environment);
    expect(list.stdout).toMatch(/^backup 5: COMPLETED/);
    const status = await fixture.cli(["backups", "status", "5", "--json"], environment);
    expect((JSON.parse(status.stdout) as Backup).state).toBe("COMPLETED");

    const again = await fixture.cli(["backups", "take", "5"], environment);
    expect(again.exitCode).toBe(exitCodes.failure);
    expect(again.stderr).toMatch(/above every earlier id.*\(HTTP 409\)/);

    const deleted = await fixture.cli(["backups", "delete", "5"], environment);
    expect(deleted.stdout).toBe("backup 5 deleted\n");
    const gone = await fixture.cli(["backups", "status", "5"], environment);
    expect(gone.exitCode).toBe(exitCodes.failure);
    expect(gone.stderr).toContain("(HTTP 404)");
    expect((await fixture.cli(["backups", "take", "abc"], environment)).exitCode).toBe(exitCodes.usage);

    // The largest id, 2^63 − 1, exactly: through the client, the management port, the checkpoint records, the store.
    const largest = "9223372036854775807";
    const takenLargest = await fixture.cli(["backups", "take", largest, "--wait"], environment);
    expect(takenLargest.stderr).toBe("");
    expect(takenLargest.stdout).toContain(`backup ${largest}: COMPLETED, 3/3 partitions done`);
    const listed = await fixture.cli(["backups", "list", "--json"], environment);
    expect(listed.stdout).toMatch(new RegExp(`"backupId": ${largest},`));
    expect((await fixture.cli(["backups", "delete", largest], environment)).stdout).toBe(`backup ${largest} deleted\n`);
  });
});
