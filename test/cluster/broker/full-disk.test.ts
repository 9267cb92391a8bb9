/**
 * A broker whose disk fills up, with real in-process brokers and a small tmpfs as one broker's disk (which needs
 * root): its replicas fail and are reported dead with the reason while the other brokers keep every partition
 * serving, and once space is freed the broker opens its storage again from the disk and its replicas rejoin their
 * groups, without a restart of the process.
 */
import { rmSync, statSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import type {
  BrokerRequest,
  ClusterChangeResponse,
  GetMessageResponse,
  PublishMessageCommand,
} from "../../../src/cluster/broker/protocol.js";
import { partitionsOf } from "../../../src/cluster/topology/index.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import { canMountSmallDisk, fillDisk, mountSmallDisk } from "../../support/small-disk.js";
import {
  leaderOf,
  partitionSettled,
  publishThroughLeadingBroker,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  testBrokerOptions,
  waitFor,
} from "./support.js";

const PARTITIONS = [1, 2, 3];
if (!canMountSmallDisk) {
  console.warn("[flowplane tests] full-disk.test.ts needs root to mount a tmpfs; skipped outside CI");
}

describe.runIf(canMountSmallDisk)("a broker whose disk fills up", () => {
  const client = new TransportClient<BrokerRequest, unknown>({ credentials: testClusterCredentials() });
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function publish(brokers: Broker[], partitionId: number, name: string, paddingBytes = 4_096): Promise<string> {
    // Variables of a few kilobytes, so that the full disk is met within a few dozen writes.
    const message: PublishMessageCommand = {
      name,
      correlationKey: name,
      timeToLiveMs: 600_000,
      variables: { padding: "x".repeat(paddingBytes) },
      tenantId: "<default>",
    };
    return await publishThroughLeadingBroker(client, brokers, partitionId, message, {
      attempts: 500,
      timeoutMs: 2_000,
    });
  }

  /** Reads a message by its key from its partition's leader, asking again when leadership moved meanwhile. */
  async function read(brokers: Broker[], partitionId: number, key: string): Promise<GetMessageResponse | null> {
    let answer: GetMessageResponse | null = null;
    for (let attempt = 0; attempt < 100; attempt += 1) {
      const leader = leaderOf(brokers, partitionId);
      if (leader !== undefined) {
        answer = (await client
          .request(leader.clusterAddress, { type: "get-message", partitionId, key }, { timeoutMs: 2_000 })
          .catch(() => null)) as GetMessageResponse | null;
        if (answer !== null && answer.outcome !== "not-leader") return answer;
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return answer;
  }

  it("reports its replicas dead with the reason, and brings them back by itself once space is freed", async () => {
    const root = await temporaryDirectory("full-disk");
    cleanups.push(() => removeDirectory(root));
    const disk = join(root, "brokers", "0");
    cleanups.push(mountSmallDisk(disk, 64));
    // Snapshots often, so that the chunk store (LMDB) meets the full disk as well as the journal.
    const brokers = await startBrokers(root, 3, () => ({ snapshotIntervalEntries: 20 }));
    cleanups.push(async () => {
      await Promise.all(brokers.map((broker) => broker.close()));
    });
    const [full] = brokers as [Broker, Broker, Broker];
    for (const partitionId of PARTITIONS) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }

    const acknowledged: { partitionId: number; key: string }[] = [];
    const ballast = join(disk, "ballast");
    fillDisk(ballast);
    for (let sequence = 0; sequence < 300 && full.replicaReports().every((report) => report.health !== "dead"); ) {
      for (const partitionId of PARTITIONS) {
        acknowledged.push({ partitionId, key: await publish(brokers, partitionId, `full-${partitionId}-${sequence}`) });
      }
      sequence += 1;
    }
    const dead = full.replicaReports().filter((report) => report.health === "dead");
    expect(dead.length).toBeGreaterThan(0);
    const health = (await (await fetch(`${full.managementUrl}/actuator/health`)).json()) as {
      components: Record<string, { details: { reason?: string } }>;
    };
    expect(health.components[`partition-${dead[0]?.partitionId}`]?.details.reason).toMatch(/ENOSPC|no space/i);
    // The other two brokers keep every partition writable meanwhile.
    for (const partitionId of PARTITIONS) {
      acknowledged.push({ partitionId, key: await publish(brokers, partitionId, `meanwhile-${partitionId}`) });
    }

    rmSync(ballast);
    // The replicas restart after their pause, on the storage opened again from the disk, and catch up.
    for (const partitionId of PARTITIONS) {
      await waitFor(
        () => partitionSettled(brokers, partitionId, 3),
        `partition ${partitionId} settled again on all three brokers`,
        3_000,
      );
    }
    for (const partitionId of PARTITIONS) {
      acknowledged.push({ partitionId, key: await publish(brokers, partitionId, `after-${partitionId}`) });
    }
    for (const { partitionId, key } of acknowledged) {
      expect(await read(brokers, partitionId, key)).toMatchObject({ outcome: "found" });
    }
  });

  /** Starts broker 3 on a tmpfs of `sizeMiB` as its disk, once the coordinator hears from it. */
  async function startNewcomerOnSmallDisk(root: string, brokers: Broker[], sizeMiB: number): Promise<Broker> {
    cleanups.push(mountSmallDisk(join(root, "brokers", "3"), sizeMiB));
    const newcomer = await Broker.start(
      testBrokerOptions(root, 3, { contactPoints: brokers.map((broker) => broker.clusterAddress) }),
    );
    brokers.push(newcomer);
    await waitFor(() => brokers[0]?.isReachable(3) === true, "the coordinator hears from broker 3");
    return newcomer;
  }

  /** Asks the coordinator to add broker 3 to the cluster and answers the change it planned. */
  async function addBrokerThree(brokers: Broker[]): Promise<ClusterChangeResponse & { outcome: "planned" }> {
    const planned = (await client.request(
      brokers[0]!.clusterAddress,
      { type: "cluster-change", command: { kind: "brokers", body: [0, 1, 2, 3], force: false }, dryRun: false },
      { timeoutMs: 5_000 },
    )) as ClusterChangeResponse;
    if (planned.outcome !== "planned") throw new Error(JSON.stringify(planned));
    return planned;
  }

  /** Waits up to `timeoutMs` for broker 3's running join to name its full disk as the last error. */
  async function expectJoinNamesFullDisk(newcomer: Broker, timeoutMs: number): Promise<void> {
    await waitFor(
      () => /ENOSPC|no space/i.test(newcomer.describe().changeProgress?.lastError ?? ""),
      "the joining broker's operation shows the full disk as its last error",
      timeoutMs,
    );
    const progress = newcomer.describe().changeProgress;
    expect(progress?.operation.operation).toBe("PARTITION_JOIN");
    expect(progress?.lastError).toMatch(/^the replica of partition \d+ on broker 3 failed: /);
  }

  it("a broker joining partitions onto a full disk shows why in its running operation, and completes once space is freed", async () => {
    const root = await temporaryDirectory("full-disk-join");
    cleanups.push(() => removeDirectory(root));
    // Snapshots often, so that each join receives a snapshot of a few MiB.
    const brokers = await startBrokers(root, 3, () => ({ snapshotIntervalEntries: 20 }));
    cleanups.push(async () => {
      await Promise.all(brokers.map((broker) => broker.close()));
    });
    for (const partitionId of PARTITIONS) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }
    const acknowledged: { partitionId: number; key: string }[] = [];
    for (let sequence = 0; sequence < 100; sequence += 1) {
      for (const partitionId of PARTITIONS) {
        const key = await publish(brokers, partitionId, `before-${partitionId}-${sequence}`, 32 * 1024);
        acknowledged.push({ partitionId, key });
      }
    }

    const newcomer = await startNewcomerOnSmallDisk(root, brokers, 32);
    // Room for the configuration's few KiB, not for the snapshots of 3 MiB the joins receive.
    const ballast = join(root, "brokers", "3", "ballast");
    fillDisk(ballast);
    truncateSync(ballast, Math.max(0, statSync(ballast).size - 1024 * 1024));

    const planned = await addBrokerThree(brokers);
    // The failed replica is named at once: before, the attempt waited for the leader's answers to stall (a minute).
    await expectJoinNamesFullDisk(newcomer, 1_000);

    rmSync(ballast);
    await waitFor(
      () => brokers.every((broker) => broker.configuration.lastChange?.id === planned.change.changeId),
      "the change completed on every broker",
      4_000,
    );
    expect(brokers[0]!.configuration.lastChange?.status).toBe("COMPLETED");
    const hosted = partitionsOf(brokers[0]!.configuration, 3).map((partition) => partition.partitionId);
    expect(hosted.length).toBeGreaterThan(0);
    expect(newcomer.storedPartitions()).toEqual(hosted);
    for (const { partitionId, key } of acknowledged) {
      expect(await read(brokers, partitionId, key)).toMatchObject({ outcome: "found" });
    }
  }, 120_000);

  it("a broker joining onto a disk smaller than one journal segment shows why in its running operation at once", async () => {
    const root = await temporaryDirectory("tiny-disk-join");
    cleanups.push(() => removeDirectory(root));
    const brokers = await startBrokers(root, 3);
    cleanups.push(async () => {
      await Promise.all(brokers.map((broker) => broker.close()));
    });
    for (const partitionId of PARTITIONS) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
      await publish(brokers, partitionId, `before-${partitionId}`);
    }
    // 8 MiB: room for the broker's configuration, not for a journal's first segment of 16 MiB.
    const newcomer = await startNewcomerOnSmallDisk(root, brokers, 8);
    await addBrokerThree(brokers);
    // Noted on 2026-11-30 as a minute of `lastError: null` (the attempt waited for the promotion to stall).
    await expectJoinNamesFullDisk(newcomer, 5_000);
  }, 60_000);
});
