/**
 * Cluster changes between real in-process brokers: a broker new to the cluster discovers it without inventing a
 * configuration, the coordinator plans and records a scale-up to it and back, the brokers apply the operations in
 * order while messages are published, and the data of a partition that moved away is deleted; a change is recorded
 * only once a majority of the brokers accepted it.
 */
import { rmSync } from "node:fs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Broker } from "../../../src/cluster/broker/broker.js";
import { readChangeAcceptance } from "../../../src/cluster/broker/files.js";
import type {
  BrokerRequest,
  ClusterChangeCommand,
  ClusterChangeResponse,
  ClusterStatusResponse,
  PublishMessageCommand,
  PublishMessageResponse,
} from "../../../src/cluster/broker/protocol.js";
import { partitionOfKey } from "../../../src/cluster/engine/index.js";
import { partitionsOf, replicasOf } from "../../../src/cluster/topology/index.js";
import { TransportClient } from "../../../src/cluster/transport/index.js";
import { testClusterCredentials } from "../../support/cluster-secret.js";
import {
  leaderOf,
  partitionSettled,
  removeDirectory,
  startBrokers,
  temporaryDirectory,
  testBrokerOptions,
  waitFor,
} from "./support.js";

describe("cluster changes between in-process brokers", () => {
  let root: string;
  let brokers: Broker[];
  const client = new TransportClient<BrokerRequest, unknown>({ credentials: testClusterCredentials() });

  beforeEach(async () => {
    root = await temporaryDirectory("change");
    brokers = await startBrokers(root, 3);
    for (const partitionId of [1, 2, 3]) {
      await waitFor(() => partitionSettled(brokers, partitionId, 3), `partition ${partitionId} settled`, 2_000);
    }
  });

  afterEach(async () => {
    await Promise.all(brokers.map((broker) => broker.close()));
    await removeDirectory(root);
  });

  async function startNewBroker(nodeId: number): Promise<Broker> {
    const broker = await Broker.start(
      testBrokerOptions(root, nodeId, { contactPoints: brokers.map((running) => running.clusterAddress) }),
    );
    brokers.push(broker);
    return broker;
  }

  async function change(command: ClusterChangeCommand, dryRun = false): Promise<ClusterChangeResponse> {
    return (await client.request(
      brokers[0]!.clusterAddress,
      { type: "cluster-change", command, dryRun },
      { timeoutMs: 5_000 },
    )) as ClusterChangeResponse;
  }

  async function waitForCompletion(changeId: number): Promise<void> {
    await waitFor(
      () => brokers.every((broker) => broker.configuration.lastChange?.id === changeId),
      `change ${changeId} completed on every broker`,
      3_000,
    );
    for (const broker of brokers) expect(broker.configuration.lastChange?.status).toBe("COMPLETED");
  }

  /** Publishes on `partitionId` through its leader, retrying redirects like a gateway; returns the key. */
  async function publish(partitionId: number, name: string): Promise<string> {
    const message: PublishMessageCommand = {
      name,
      correlationKey: name,
      timeToLiveMs: 600_000,
      variables: {},
      tenantId: "<default>",
    };
    for (let attempt = 0; attempt < 200; attempt += 1) {
      const leader = leaderOf(brokers, partitionId);
      if (leader !== undefined) {
        const answer = (await client.request(
          leader.clusterAddress,
          { type: "publish-message", partitionId, message },
          { timeoutMs: 5_000 },
        )) as PublishMessageResponse;
        if (answer.outcome === "published") return answer.key;
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`could not publish ${name}`);
  }

  it("a new broker learns the running configuration instead of inventing one, and is reachable but not a member", async () => {
    const newcomer = await startNewBroker(3);
    expect(newcomer.configuration.version).toBe(brokers[0]!.configuration.version);
    expect(newcomer.configuration.members.has(3)).toBe(false);
    expect(newcomer.replicaReports()).toEqual([]);
    await waitFor(
      () => brokers[0]!.liveness().some((peer) => peer.nodeId === 3 && peer.reachable),
      "broker 0 hears from broker 3",
    );
  });

  it("scales 3 → 4 brokers and back while messages are published; the moved replica's data is deleted", async () => {
    const before = new Map<string, number>();
    for (const partitionId of [1, 2, 3]) before.set(await publish(partitionId, `before-${partitionId}`), partitionId);
    const newcomer = await startNewBroker(3);
    await waitFor(() => brokers[0]!.isReachable(3), "the coordinator hears from broker 3");

    const dryRun = await change({ kind: "brokers", body: [0, 1, 2, 3], force: false }, true);
    expect(dryRun.outcome).toBe("planned");
    expect(brokers[0]!.configuration.pendingChange).toBeNull();

    const planned = await change({ kind: "brokers", body: ["0", "1", "2", 3], force: false });
    if (planned.outcome !== "planned") throw new Error(JSON.stringify(planned));
    expect(planned.change.plannedChanges[0]).toEqual({ operation: "BROKER_ADD", brokerId: 3 });
    expect(await change({ kind: "add-broker", brokerId: 5 })).toMatchObject({ outcome: "refused", status: 409 });
    const during: string[] = [];
    let publishing = true;
    const publisher = (async () => {
      for (let sequence = 0; publishing; sequence += 1)
        during.push(await publish(1 + (sequence % 3), `during-${sequence}`));
    })();
    await waitForCompletion(planned.change.changeId);
    publishing = false;
    await publisher;
    const hosted = partitionsOf(brokers[0]!.configuration, 3).map((partition) => partition.partitionId);
    expect(hosted.length).toBeGreaterThan(0);
    expect(newcomer.storedPartitions()).toEqual(hosted);
    for (const partitionId of hosted) {
      await waitFor(
        () => partitionSettled(brokers, partitionId, 3),
        `partition ${partitionId} settled on its new replicas`,
      );
      expect(newcomer.replica(partitionId)?.report().role).not.toBe("inactive");
    }
    // Every replica set is the round robin of four brokers.
    for (const partitionId of [1, 2, 3]) {
      expect(replicasOf(brokers[0]!.configuration, partitionId).every((replica) => replica.state === "ACTIVE")).toBe(
        true,
      );
    }

    const back = await change({ kind: "brokers", body: [0, 1, 2], force: false });
    if (back.outcome !== "planned") throw new Error(JSON.stringify(back));
    await waitForCompletion(back.change.changeId);
    expect(brokers[0]!.configuration.members.has(3)).toBe(false);
    expect(newcomer.replicaReports()).toEqual([]);
    // Its storage holds nothing of the partitions it left.
    expect(newcomer.storedPartitions()).toEqual([]);
    for (const partitionId of [1, 2, 3])
      await waitFor(() => partitionSettled(brokers.slice(0, 3), partitionId, 3), "settled");
    // Every acknowledged message is still readable.
    for (const [key, partitionId] of [...before, ...during.map((key) => [key, partitionOfKey(key)] as const)]) {
      const leader = leaderOf(brokers, partitionId);
      const answer = (await client.request(
        leader!.clusterAddress,
        { type: "get-message", partitionId, key },
        { timeoutMs: 5_000 },
      )) as { outcome: string };
      expect(answer.outcome, `message ${key}`).toBe("found");
    }
  });

  it("records a change only once a majority of the brokers accepted it, and they keep their word across a restart", async () => {
    const version = brokers[0]!.configuration.version;
    const port = brokers[1]!.clusterAddress.port;
    await brokers[1]!.close();
    await brokers[2]!.close();
    // Broker 0 alone is no majority of three, so nothing is recorded, whatever broker 0 itself promised.
    expect(await change({ kind: "leave", brokerId: 0, partitionId: 1 })).toEqual({
      outcome: "refused",
      status: 409,
      detail:
        "the change must be accepted by a majority of the 3 brokers (2), and only 1 answered; send the request " +
        "again once most brokers run and are reachable",
    });
    expect(brokers[0]!.configuration.version).toBe(version);
    expect(brokers[0]!.configuration.pendingChange).toBeNull();
    expect(await readChangeAcceptance(brokers[0]!.dataDirectory)).toMatchObject({
      version: version + 1,
      promised: { brokerId: 0 },
      accepted: null,
    });
    // With broker 1 back, two of three accept: the change is recorded and reaches broker 1 too.
    brokers[1] = await Broker.start(
      testBrokerOptions(root, 1, { clusterPort: port, contactPoints: [brokers[0]!.clusterAddress] }),
    );
    // Sent again, as the answer says, until broker 0's link to the restarted broker 1 is up again.
    let planned = await change({ kind: "leave", brokerId: 0, partitionId: 1 });
    for (let attempt = 0; attempt < 50 && planned.outcome === "refused"; attempt++) {
      expect(planned).toMatchObject({ status: 409, detail: expect.stringMatching(/must be accepted by a majority/) });
      await new Promise((resolve) => setTimeout(resolve, 100));
      planned = await change({ kind: "leave", brokerId: 0, partitionId: 1 });
    }
    if (planned.outcome !== "planned") throw new Error(JSON.stringify(planned));
    expect(planned.change.changeId).toBe(version + 1);
    expect(await readChangeAcceptance(brokers[1]!.dataDirectory)).toMatchObject({
      version: version + 1,
      accepted: { ballot: { brokerId: 0 } },
    });
    await waitFor(
      () =>
        brokers[1]!.configuration.pendingChange?.id === version + 1 || brokers[1]!.configuration.version > version + 1,
      "broker 1 holds the change",
    );
    // Broker 2 comes back without its data: it cannot know what it promised for the next version, so it abstains.
    rmSync(brokers[2]!.dataDirectory, { recursive: true, force: true });
    brokers[2] = await Broker.start(testBrokerOptions(root, 2, { contactPoints: [brokers[0]!.clusterAddress] }));
    const learned = brokers[2]!.configuration.version;
    expect(learned).toBeGreaterThan(version);
    expect(await readChangeAcceptance(brokers[2]!.dataDirectory)).toMatchObject({
      version: learned + 1,
      accepted: null,
      abstaining: true,
    });
  });

  it("refuses what the spec refuses and answers the status", async () => {
    expect(await change({ kind: "brokers", body: [], force: false })).toMatchObject({
      outcome: "refused",
      status: 400,
    });
    expect(await change({ kind: "brokers", body: [0, 1, 2, 4], force: false })).toMatchObject({
      outcome: "refused",
      status: 400,
      detail: expect.stringMatching(/broker 4 is to be added but is not running and reachable/),
    });
    // A dry run previews the same scale-up before broker 4 is started.
    const preview = await change({ kind: "brokers", body: [0, 1, 2, 4], force: false }, true);
    expect(preview.outcome).toBe("planned");
    expect(preview.outcome === "planned" ? preview.change.plannedChanges[0] : undefined).toMatchObject({
      operation: "BROKER_ADD",
      brokerId: 4,
    });
    expect(await change({ kind: "brokers", body: [0, 1, 2], replicationFactor: 0, force: false })).toMatchObject({
      outcome: "refused",
      status: 400,
    });
    const status = (await client.request(
      brokers[0]!.clusterAddress,
      { type: "cluster-status" },
      { timeoutMs: 5_000 },
    )) as ClusterStatusResponse;
    expect(status.outcome).toBe("status");
    // Broker 1 is not the coordinator while broker 0 runs.
    expect(
      await client.request(
        brokers[1]!.clusterAddress,
        { type: "cluster-change", command: { kind: "add-broker", brokerId: 3 }, dryRun: true },
        { timeoutMs: 5_000 },
      ),
    ).toEqual({ outcome: "not-coordinator", coordinatorId: 0 });
  });
});
