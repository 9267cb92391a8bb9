/**
 * What happens to brokers over their lives, with real in-process brokers: a broker whose disk was replaced rejoins
 * its partitions' groups instead of starting fresh ones; a broker gone for good is removed by force and its replicas,
 * when it comes back, are fenced and deleted; a change whose coordinator died can still be cancelled; a broker whose
 * storage is damaged starts without replicas and reports them dead; a replica that fails is restarted.
 */
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import type {
  BrokerRequest,
  ClusterChangeResponse,
  ClusterStatusResponse,
  PublishMessageCommand,
} from "../../../src/cluster/broker/protocol.js";
import { ReplicaHost } from "../../../src/cluster/broker/replica-host.js";
import { votersOf } from "../../../src/cluster/raft/index.js";
import { StorageEnvironment } from "../../../src/cluster/raft/storage/environment.js";
import { decodeConfiguration } from "../../../src/cluster/topology/index.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
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

describe("broker lifecycle", () => {
  let root: string;
  let brokers: Broker[];
  const client = new TransportClient<BrokerRequest, unknown>({ credentials: testClusterCredentials() });

  beforeEach(async () => {
    root = await temporaryDirectory("lifecycle");
    brokers = await startBrokers(root, 3);
    for (const partitionId of PARTITIONS) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }
  });

  afterEach(async () => {
    await Promise.all(brokers.map((broker) => broker.close()));
    await removeDirectory(root);
  });

  async function publish(partitionId: number, name: string): Promise<string> {
    const message: PublishMessageCommand = {
      name,
      correlationKey: name,
      timeToLiveMs: 600_000,
      variables: {},
      tenantId: "<default>",
    };
    return await publishThroughLeadingBroker(client, brokers, partitionId, message, {
      attempts: 300,
      timeoutMs: 5_000,
    });
  }

  async function restart(nodeId: number): Promise<Broker> {
    const others = brokers.filter((broker) => broker.nodeId !== nodeId);
    const broker = await Broker.start(
      testBrokerOptions(root, nodeId, { contactPoints: others.map((other) => other.clusterAddress) }),
    );
    brokers = [...others, broker].sort((left, right) => left.nodeId - right.nodeId);
    return broker;
  }

  async function stop(nodeId: number): Promise<Broker> {
    const broker = brokers.find((candidate) => candidate.nodeId === nodeId) as Broker;
    await broker.close();
    brokers = brokers.filter((candidate) => candidate !== broker);
    return broker;
  }

  it("a broker whose data directory was lost rejoins its groups and catches up instead of starting fresh ones", async () => {
    for (const partitionId of PARTITIONS) {
      for (let sequence = 0; sequence < 20; sequence += 1)
        await publish(partitionId, `before-${partitionId}-${sequence}`);
    }
    const lost = await stop(2);
    rmSync(lost.dataDirectory, { recursive: true, force: true });
    const replaced = await restart(2);
    // It took the running configuration rather than the first one of its own.
    expect(replaced.configuration.version).toBe(brokers[0]!.configuration.version);
    for (const partitionId of PARTITIONS) {
      // Removed from its group and added anew (its leader believed it still held what it had acknowledged), then
      // caught up and promoted: a voter of the same group again.
      await waitFor(
        () => votersOf(replaced.replica(partitionId)!.committedConfiguration()).length === 3,
        `broker 2 a voter of partition ${partitionId} again`,
      );
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled again`, 2_000);
      const leader = leaderOf(brokers, partitionId)!.replica(partitionId)!;
      await waitFor(
        () => replaced.replica(partitionId)!.report().appliedIndex >= leader.report().commitIndex,
        `broker 2 caught up on partition ${partitionId}`,
      );
      // It holds every message published before its data was lost.
      expect(replaced.replica(partitionId)!.bufferedMessageCount).toBe(leader.bufferedMessageCount);
      expect(leader.bufferedMessageCount).toBeGreaterThanOrEqual(20);
    }
  });

  it("a broker gone for good is removed by force; when it comes back it is fenced and deletes the replicas it lost", async () => {
    for (const partitionId of PARTITIONS) await publish(partitionId, `before-force-${partitionId}`);
    await stop(2);
    await waitFor(() => !brokers[0]!.isReachable(2), "broker 2 counted as unreachable", 2_000);
    const answer = (await client.request(
      brokers[0]!.clusterAddress,
      { type: "cluster-change", command: { kind: "brokers", body: [0, 1], force: true }, dryRun: false },
      { timeoutMs: 5_000 },
    )) as ClusterChangeResponse;
    if (answer.outcome !== "planned") throw new Error(JSON.stringify(answer));
    expect(answer.change.plannedChanges.map((operation) => operation.operation)).toEqual([
      "PARTITION_FORCE_RECONFIGURE",
      "PARTITION_FORCE_RECONFIGURE",
      "PARTITION_FORCE_RECONFIGURE",
      "BROKER_REMOVE",
    ]);
    await waitFor(
      () => brokers.every((broker) => broker.configuration.lastChange?.id === answer.change.changeId),
      "the forced change completed",
      3_000,
    );
    for (const partitionId of PARTITIONS) {
      const leader = leaderOf(brokers, partitionId)!.replica(partitionId)!;
      expect(votersOf(leader.committedConfiguration())).toEqual([0, 1]);
      await publish(partitionId, `after-force-${partitionId}`);
    }
    const terms = PARTITIONS.map((partitionId) => leaderOf(brokers, partitionId)!.replica(partitionId)!.report().term);
    // Broker 2 comes back with its old data: it learns the configuration first and deletes what it no longer hosts.
    const back = await restart(2);
    expect(back.configuration.members.has(2)).toBe(false);
    expect(back.replicaReports()).toEqual([]);
    expect(back.storedPartitions()).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(
      PARTITIONS.map((partitionId) => leaderOf(brokers, partitionId)!.replica(partitionId)!.report().term),
    ).toEqual(terms);
  });

  it("a change whose coordinator died is cancelled through the next broker", async () => {
    const newcomer = await Broker.start(
      testBrokerOptions(root, 3, { contactPoints: brokers.map((broker) => broker.clusterAddress) }),
    );
    brokers.push(newcomer);
    await waitFor(() => brokers[0]!.isReachable(3), "broker 0 hears from broker 3");
    const change = async (target: Broker, command: object): Promise<ClusterChangeResponse> =>
      (await client.request(
        target.clusterAddress,
        { type: "cluster-change", command, dryRun: false } as BrokerRequest,
        {
          timeoutMs: 5_000,
        },
      )) as ClusterChangeResponse;
    const added = await change(brokers[0]!, { kind: "add-broker", brokerId: 3 });
    if (added.outcome !== "planned") throw new Error(JSON.stringify(added));
    await waitFor(() => brokers[0]!.configuration.lastChange?.id === added.change.changeId, "broker 3 added");
    // Broker 3 stops; a join for it is recorded while the others still count it reachable: it cannot complete.
    await stop(3);
    const stuck = await change(brokers[0]!, { kind: "join", brokerId: 3, partitionId: 1, priority: 1 });
    if (stuck.outcome !== "planned") throw new Error(JSON.stringify(stuck));
    await stop(0);
    let cancelled: ClusterStatusResponse | undefined;
    await waitFor(
      async () => {
        cancelled = (await client.request(
          brokers[0]!.clusterAddress,
          { type: "cluster-cancel", changeId: stuck.change.changeId },
          { timeoutMs: 5_000 },
        )) as ClusterStatusResponse;
        return cancelled.outcome === "status";
      },
      "broker 1 acts as coordinator and cancels",
      300,
    );
    if (cancelled?.outcome !== "status") throw new Error("not cancelled");
    const configuration = decodeConfiguration(cancelled.configuration);
    expect(configuration.lastChange).toMatchObject({ id: stuck.change.changeId, status: "CANCELLED" });
    expect(configuration.pendingChange).toBeNull();
  });

  it("a broker whose storage is damaged starts without replicas and reports them dead", async () => {
    for (const partitionId of PARTITIONS) {
      for (let sequence = 0; sequence < 10; sequence += 1)
        await publish(partitionId, `damage-${partitionId}-${sequence}`);
    }
    const damaged = await stop(2);
    const journal = join(damaged.dataDirectory, "raft", "journal");
    const segment = join(
      journal,
      readdirSync(journal)
        .filter((name) => name.endsWith(".journal"))
        .sort()[0] as string,
    );
    const bytes = readFileSync(segment);
    // A byte inside the first record (after the 16-byte segment header and the 8-byte record header): intact records
    // follow it, so this is damage, not a torn write.
    bytes[16 + 8 + 2] = (bytes[16 + 8 + 2] ?? 0) ^ 0xff;
    writeFileSync(segment, bytes);
    const restarted = await restart(2);
    expect(restarted.replicaReports().map((report) => [report.partitionId, report.role, report.health])).toEqual(
      PARTITIONS.map((partitionId) => [partitionId, "inactive", "dead"]),
    );
    // The files are left as they were, and the others keep serving.
    expect(readFileSync(segment).equals(bytes)).toBe(true);
    for (const partitionId of PARTITIONS) await publish(partitionId, `after-damage-${partitionId}`);
  });
});

/** A replica host of member 0 on `environment`, ticking every 10 ms; `send` sees each partition's messages. */
function testReplicaHost(
  environment: StorageEnvironment,
  send: (partitionId: number) => void,
  onOpen: (partitionId: number) => void = () => undefined,
  beforeRestart?: () => Promise<void>,
): ReplicaHost {
  return new ReplicaHost({
    logger: pino({ level: "silent" }),
    restartBackoffMs: 50,
    maxRestartBackoffMs: 200,
    ...(beforeRestart === undefined ? {} : { beforeRestart }),
    replicaOptions: (partitionId, bootstrap, onFailure) => {
      onOpen(partitionId);
      return {
        environment,
        partitionId,
        memberId: 0,
        bootstrap,
        heartbeatIntervalMs: 10,
        electionTimeoutMs: 50,
        snapshotIntervalEntries: 1_000,
        maxPendingProposals: 16,
        maxApplyLagEntries: 100,
        send: () => send(partitionId),
        onFailure,
        logger: pino({ level: "silent" }),
      };
    },
  });
}

describe("ReplicaHost bootstrap after a restart", () => {
  it("opens an empty replica again with the first configuration its PARTITION_BOOTSTRAP asks for, and it leads", async () => {
    const directory = await temporaryDirectory("bootstrap-reopen");
    const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    const host = testReplicaHost(environment, () => undefined);
    try {
      // The broker restarted before the bootstrap wrote anything: it opens the hosted partition as a joiner.
      const joiner = await host.ensure(5, null);
      expect(joiner.membership().configuration.members).toEqual([]);
      const members = [{ id: 0, role: "voter" as const, priority: 3 }];
      const [first, second] = await Promise.all([host.ensure(5, members), host.ensure(5, members)]);
      expect(second).toBe(first);
      expect(first).not.toBe(joiner);
      await waitFor(() => first?.report().role === "leader", "the bootstrapped replica leads");
      // Once it holds its configuration, asking again with one changes nothing.
      expect(await host.ensure(5, members)).toBe(first);
      expect(await host.ensure(5, null)).toBe(first);
    } finally {
      await host.close();
      await environment.close();
      await removeDirectory(directory);
    }
  });
});

describe("ReplicaHost supervision", () => {
  it("does not open again a replica removed while its restart waited for the storage", async () => {
    const directory = await temporaryDirectory("supervision-removed");
    const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    let failing = true;
    let opens = 0;
    // One storage recovery, which every restart (and the removal) waits for until the test lets it end.
    let releaseStorage: () => void = () => undefined;
    const storageRecovered = new Promise<void>((resolve) => {
      releaseStorage = resolve;
    });
    let restartsWaiting = 0;
    const host = testReplicaHost(
      environment,
      (partitionId) => {
        if (partitionId === 1 && failing) throw new Error("the storage failed");
      },
      (partitionId) => {
        if (partitionId === 1) opens += 1;
      },
      () => {
        restartsWaiting += 1;
        return storageRecovered;
      },
    );
    try {
      const members = [
        { id: 0, role: "voter" as const, priority: 1 },
        { id: 1, role: "voter" as const, priority: 1 },
      ];
      await host.ensure(1, members);
      await waitFor(() => restartsWaiting === 1, "the restart waits for the storage");
      failing = false;
      const removal = host.remove(1);
      releaseStorage();
      await removal;
      await new Promise((resolve) => setTimeout(resolve, 300));
      // Opened once at first, once more by the removal (to delete its data), and never by the restart that waited.
      expect(opens).toBe(2);
      expect(host.partitionIds()).toEqual([]);
    } finally {
      await host.close();
      await environment.close();
      await removeDirectory(directory);
    }
  });

  it("keeps doubling the pause for a replica that fails again right after each restart", async () => {
    const directory = await temporaryDirectory("supervision-backoff");
    const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    let opens = 0;
    const host = testReplicaHost(
      environment,
      (partitionId) => {
        if (partitionId === 1) throw new Error("a cause that does not clear");
      },
      (partitionId) => {
        if (partitionId === 1) opens += 1;
      },
    );
    try {
      const members = [
        { id: 0, role: "voter" as const, priority: 1 },
        { id: 1, role: "voter" as const, priority: 1 },
      ];
      await host.ensure(1, members);
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      // Pauses of 50, 100 and then 200 ms (the longest), each plus an open that fails, fit 6 opens into 1.2 s; a
      // pause that went back to 50 ms after each open fit 10.
      expect(opens).toBeGreaterThanOrEqual(3);
      expect(opens).toBeLessThanOrEqual(8);
    } finally {
      await host.close();
      await environment.close();
      await removeDirectory(directory);
    }
  });

  it("reports a failed replica dead and opens it again after a backoff, while the others keep running", async () => {
    const directory = await temporaryDirectory("supervision");
    const environment = StorageEnvironment.open({ directory, synchronousCommit: true });
    let failNextSend = false;
    const host = testReplicaHost(environment, (partitionId) => {
      if (partitionId === 1 && failNextSend) {
        failNextSend = false;
        throw new Error("injected failure of the transport");
      }
    });
    try {
      // Two groups of two members whose second member never answers: the first still sends to it at every tick.
      const members = [
        { id: 0, role: "voter" as const, priority: 1 },
        { id: 1, role: "voter" as const, priority: 1 },
      ];
      await host.ensure(1, members);
      await host.ensure(2, members);
      failNextSend = true;
      await waitFor(() => host.isDead(1), "partition 1 failed");
      expect(host.reports().find((report) => report.partitionId === 1)).toMatchObject({ health: "dead" });
      expect(host.deadReason(1)).toBe("injected failure of the transport");
      expect(host.isDead(2)).toBe(false);
      await waitFor(() => !host.isDead(1) && host.get(1) !== undefined, "partition 1 opened again");
      expect(host.get(1)?.failed).toBe(false);
    } finally {
      await host.close();
      await environment.close();
      await removeDirectory(directory);
    }
  });
});
