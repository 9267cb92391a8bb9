import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ConfigurationDecodeError,
  decodeConfiguration,
  encodeConfiguration,
  toConfigurationDocument,
} from "../../../src/cluster/topology/codec.js";
import {
  type ClusterConfiguration,
  initialConfiguration,
  MAX_EARLIER_CHANGES,
} from "../../../src/cluster/topology/configuration.js";
import { roundRobinDistribution } from "../../../src/cluster/topology/distribution.js";

const nowIso = "2026-11-21T10:15:00.123Z";

function inChange(): ClusterConfiguration {
  const base = initialConfiguration({
    clusterSize: 3,
    partitionCount: 3,
    replicationFactor: 2,
    distribution: roundRobinDistribution([0, 1, 2], 3, 2),
    nowIso,
    exporterIds: ["records-file"],
  });
  return {
    ...base,
    version: 5,
    lastChange: { id: 3, status: "CANCELLED", startedAt: nowIso, completedAt: nowIso },
    earlierChanges: [{ id: 2, status: "COMPLETED", startedAt: nowIso, completedAt: nowIso }],
    pendingChange: {
      id: 5,
      status: "IN_PROGRESS",
      startedAt: nowIso,
      completed: [{ operation: "BROKER_ADD", brokerId: 3, brokers: [], completedAt: nowIso }],
      pending: [
        { operation: "PARTITION_JOIN", brokerId: 3, partitionId: 2, priority: 1 },
        { operation: "PARTITION_LEAVE", brokerId: 0, partitionId: 2 },
      ],
    },
  };
}

function decodeProblems(text: string): readonly string[] {
  try {
    decodeConfiguration(text);
  } catch (error) {
    if (error instanceof ConfigurationDecodeError) return error.problems;
    throw error;
  }
  return [];
}

describe("configuration codec", () => {
  it("round-trips a configuration with a pending change", () => {
    const configuration = inChange();
    const decoded = decodeConfiguration(encodeConfiguration(configuration));
    expect(decoded).toEqual(configuration);
    expect(encodeConfiguration(decoded)).toBe(encodeConfiguration(configuration));
  });

  it("round-trips every initial configuration", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 12 }),
        (clusterSize, partitionCount, replicationSeed) => {
          const replicationFactor = 1 + (replicationSeed % clusterSize);
          const ids = Array.from({ length: clusterSize }, (_, index) => index);
          const configuration = initialConfiguration({
            clusterSize,
            partitionCount,
            replicationFactor,
            distribution: roundRobinDistribution(ids, partitionCount, replicationFactor),
            nowIso,
          });
          expect(decodeConfiguration(encodeConfiguration(configuration))).toEqual(configuration);
        },
      ),
    );
  });

  it("writes the monitoring response's shape, sorted, without absent changes", () => {
    const configuration = inChange();
    const document = toConfigurationDocument({
      ...configuration,
      lastChange: null,
      earlierChanges: [],
      pendingChange: null,
    });
    expect(Object.keys(document)).toEqual(["version", "brokers", "routing"]);
    expect(Object.keys(toConfigurationDocument(configuration))).toEqual([
      "version",
      "brokers",
      "lastChange",
      "earlierChanges",
      "pendingChange",
      "routing",
    ]);
    expect(document.brokers.map((broker) => broker.id)).toEqual([0, 1, 2]);
    expect(document.brokers[0]).toEqual({
      id: 0,
      state: "ACTIVE",
      version: 0,
      lastUpdatedAt: nowIso,
      partitions: [
        {
          id: 1,
          state: "ACTIVE",
          priority: 2,
          config: { exporting: { exporters: [{ id: "records-file", state: "ENABLED" }] } },
        },
        {
          id: 3,
          state: "ACTIVE",
          priority: 1,
          config: { exporting: { exporters: [{ id: "records-file", state: "ENABLED" }] } },
        },
      ],
    });
  });

  it("encodes equal configurations to equal text whatever the map insertion order", () => {
    const configuration = inChange();
    const reversed: ClusterConfiguration = {
      ...configuration,
      members: new Map([...configuration.members.entries()].reverse()),
    };
    expect(encodeConfiguration(reversed)).toBe(encodeConfiguration(configuration));
  });

  it("takes the history another version wrote: an empty one, or a longer one cut to what this version keeps", () => {
    const document = JSON.parse(encodeConfiguration(inChange()));
    expect(decodeConfiguration(JSON.stringify({ ...document, earlierChanges: [] })).earlierChanges).toEqual([]);
    const change = (id: number) => ({ id, status: "COMPLETED", startedAt: nowIso, completedAt: nowIso });
    const { pendingChange: _pendingChange, ...ended } = document;
    const longer = {
      ...ended,
      lastChange: change(100),
      earlierChanges: Array.from({ length: 30 }, (_, i) => change(99 - i)),
    };
    const decoded = decodeConfiguration(JSON.stringify(longer));
    expect(decoded.earlierChanges.map((earlier) => earlier.id)).toEqual([99, 98, 97, 96, 95, 94, 93, 92, 91]);
    expect(decoded.earlierChanges).toHaveLength(MAX_EARLIER_CHANGES);
  });

  it("rejects malformed input with the place that is wrong", () => {
    const valid = JSON.parse(encodeConfiguration(inChange()));
    const variant = (change: (document: typeof valid) => void): string => {
      const copy = structuredClone(valid);
      change(copy);
      return JSON.stringify(copy);
    };
    expect(decodeProblems("{")[0]).toMatch(/^not JSON/);
    expect(decodeProblems("[]")[0]).toMatch(/^\//);
    expect(decodeProblems(variant((document) => (document.version = 0))).join()).toMatch(/\/version/);
    expect(decodeProblems(variant((document) => (document.brokers[1].id = 0)))).toEqual([
      "/brokers/1: broker 0 appears more than once",
    ]);
    expect(decodeProblems(variant((document) => (document.brokers[0].partitions[0].priority = 0))).join()).toMatch(
      /\/brokers\/0\/partitions\/0\/priority/,
    );
    expect(decodeProblems(variant((document) => (document.brokers[0].state = "GONE"))).join()).toMatch(
      /\/brokers\/0\/state/,
    );
    expect(
      decodeProblems(variant((document) => document.brokers[0].partitions.push(document.brokers[0].partitions[0]))),
    ).toEqual(["/brokers/0: broker 0 lists partition 1 more than once"]);
    expect(decodeProblems(variant((document) => (document.brokers[2].lastUpdatedAt = "yesterday")))).toEqual([
      '/brokers/2/lastUpdatedAt "yesterday" is not an ISO time',
    ]);
    expect(decodeProblems(variant((document) => (document.pendingChange.id = 3)))).toEqual([
      "/pendingChange/id 3 is not higher than the last change id 3",
    ]);
    expect(decodeProblems(variant((document) => (document.earlierChanges[0].id = 3)))).toEqual([
      "/earlierChanges/0/id 3 is not lower than the newer change's id 3",
    ]);
    expect(decodeProblems(variant((document) => delete document.lastChange))).toEqual([
      "/earlierChanges is present without a lastChange",
    ]);
    expect(
      decodeProblems(
        variant(
          (document) => (document.earlierChanges = Array.from({ length: 101 }, () => document.earlierChanges[0])),
        ),
      )[0],
    ).toMatch(/\/earlierChanges/);
    expect(
      decodeProblems(variant((document) => (document.pendingChange.pending[0].operation = "EXPLODE"))).join(),
    ).toMatch(/\/pendingChange\/pending\/0\/operation/);
    expect(decodeProblems(variant((document) => delete document.routing)).join()).toMatch(/routing/);
  });
});
