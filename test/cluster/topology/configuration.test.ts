import { describe, expect, it } from "vitest";
import {
  brokerIdsOf,
  type ClusterConfiguration,
  clusterSizeOf,
  initialConfiguration,
  lastCompletedChangeId,
  partitionCountOf,
  partitionIdsOf,
  partitionsOf,
  replicasOf,
  replicationFactorOf,
} from "../../../src/cluster/topology/configuration.js";
import { DistributionError, roundRobinDistribution } from "../../../src/cluster/topology/distribution.js";

const nowIso = "2026-11-21T10:15:00.123Z";

function specExample(): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: 4,
    partitionCount: 5,
    replicationFactor: 3,
    distribution: roundRobinDistribution([0, 1, 2, 3], 5, 3),
    nowIso,
    exporterIds: ["records-file"],
  });
}

describe("initial configuration", () => {
  it("is version 1 with every broker and replica ACTIVE and all partitions routed", () => {
    const configuration = specExample();
    expect(configuration.version).toBe(1);
    expect(configuration.lastChange).toBeNull();
    expect(configuration.pendingChange).toBeNull();
    expect(configuration.routing).toEqual({
      version: 1,
      requestHandling: { strategy: "AllPartitions", partitionCount: 5 },
      messageCorrelation: { strategy: "HashMod", partitionCount: 5 },
    });
    expect(brokerIdsOf(configuration)).toEqual([0, 1, 2, 3]);
    for (const member of configuration.members.values()) {
      expect(member).toMatchObject({ state: "ACTIVE", version: 0, lastUpdatedAt: nowIso });
      for (const replica of member.partitions.values()) {
        expect(replica.state).toBe("ACTIVE");
        expect(replica.config).toEqual({ exporting: { exporters: [{ id: "records-file", state: "ENABLED" }] } });
      }
    }
  });

  it("places the spec example's replicas with their priorities", () => {
    const configuration = specExample();
    expect(replicasOf(configuration, 5)).toEqual([
      { brokerId: 0, priority: 3, state: "ACTIVE" },
      { brokerId: 1, priority: 1, state: "ACTIVE" },
      { brokerId: 2, priority: 2, state: "ACTIVE" },
    ]);
    expect(partitionsOf(configuration, 3)).toEqual([
      { partitionId: 2, priority: 1, state: "ACTIVE" },
      { partitionId: 3, priority: 2, state: "ACTIVE" },
      { partitionId: 4, priority: 3, state: "ACTIVE" },
    ]);
    expect(partitionsOf(configuration, 0).map((partition) => partition.partitionId)).toEqual([1, 3, 4, 5]);
  });

  it("refuses a distribution that does not fit the sizes, and a bad time", () => {
    const distribution = roundRobinDistribution([0, 1, 2], 3, 3);
    expect(() =>
      initialConfiguration({ clusterSize: 3, partitionCount: 4, replicationFactor: 3, distribution, nowIso }),
    ).toThrow(/partition 4 has no replicas assigned/);
    expect(() =>
      initialConfiguration({ clusterSize: 2, partitionCount: 3, replicationFactor: 2, distribution, nowIso }),
    ).toThrow(DistributionError);
    expect(() =>
      initialConfiguration({ clusterSize: 3, partitionCount: 3, replicationFactor: 3, distribution, nowIso: "now" }),
    ).toThrow(/not an ISO time/);
  });
});

describe("topology views", () => {
  it("report sizes, replication factor and partition count", () => {
    const configuration = specExample();
    expect(clusterSizeOf(configuration)).toBe(4);
    expect(replicationFactorOf(configuration)).toBe(3);
    expect(partitionCountOf(configuration)).toBe(5);
    expect(partitionIdsOf(configuration)).toEqual([1, 2, 3, 4, 5]);
    expect(lastCompletedChangeId(configuration)).toBe("-1");
  });

  it("take the smallest replica count as the replication factor and skip LEFT brokers in the size", () => {
    const base = specExample();
    const member0 = base.members.get(0)!;
    const partitions = new Map(member0.partitions);
    partitions.delete(1);
    const members = new Map(base.members);
    members.set(0, { ...member0, partitions });
    members.set(7, { state: "LEFT", version: 3, lastUpdatedAt: nowIso, partitions: new Map() });
    const configuration: ClusterConfiguration = { ...base, members };
    expect(replicationFactorOf(configuration)).toBe(2);
    expect(clusterSizeOf(configuration)).toBe(4);
    expect(partitionsOf(configuration, 7)).toEqual([]);
    expect(partitionsOf(configuration, 99)).toEqual([]);
    expect(replicasOf(configuration, 42)).toEqual([]);
    // The input is untouched: views and updates never mutate.
    expect(replicationFactorOf(base)).toBe(3);
  });

  it("count partitions taking requests during partition scaling, and report the last change id", () => {
    const configuration: ClusterConfiguration = {
      ...specExample(),
      lastChange: { id: 4, status: "COMPLETED", startedAt: nowIso, completedAt: nowIso },
      routing: {
        version: 2,
        requestHandling: {
          strategy: "ActivePartitions",
          basePartitionCount: 3,
          additionalActivePartitions: [4],
          inactivePartitions: [5],
        },
        messageCorrelation: { strategy: "HashMod", partitionCount: 3 },
      },
    };
    expect(partitionCountOf(configuration)).toBe(4);
    expect(lastCompletedChangeId(configuration)).toBe("4");
    expect(replicationFactorOf({ ...configuration, members: new Map() })).toBe(0);
  });
});
