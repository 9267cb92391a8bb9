import { describe, expect, it } from "vitest";
import type { BrokerDescription, ReplicaReport } from "../../../src/cluster/broker/protocol.js";
import {
  type AbsorbedText,
  activePartitionIds,
  assembleTopologyView,
  type TopologyView,
} from "../../../src/cluster/gateway/topology-view.js";
import {
  type ClusterConfiguration,
  encodeConfiguration,
  mergeConfigurations,
} from "../../../src/cluster/topology/index.js";
import { competingChanges } from "../topology/competing-changes.js";
import { threeBrokerConfiguration } from "./fake-broker.js";

function report(partitionId: number, role: ReplicaReport["role"], term = 1): ReplicaReport {
  return { partitionId, role, health: "healthy", term, commitIndex: 5, appliedIndex: 5, leaderId: null };
}

function description(
  nodeId: number,
  replicas: ReplicaReport[],
  configuration: ClusterConfiguration = threeBrokerConfiguration(),
): BrokerDescription {
  return {
    nodeId,
    host: "127.0.0.1",
    port: 26500 + nodeId,
    version: `v${nodeId}`,
    configuration: encodeConfiguration(configuration),
    brokers: [0, 1, 2].map((id) => ({ nodeId: id, host: "127.0.0.1", port: 26500 + id })),
    replicas,
  };
}

const empty = {
  previousAddresses: new Map(),
  askedAddresses: new Map(),
  previousVersions: new Map(),
  previousConfiguration: undefined,
  previousConfigurationTexts: new Map(),
  gatewayVersion: "0.1.0",
};

describe("assembleTopologyView", () => {
  it("returns undefined when no broker ever answered", () => {
    expect(assembleTopologyView({ ...empty, descriptions: [] })).toBeUndefined();
  });

  it("lists brokers by node id with their own reports and the cluster's sizes", () => {
    const view = assembleTopologyView({
      ...empty,
      descriptions: [
        description(2, [report(3, "leader"), report(1, "follower"), report(2, "follower")]),
        description(0, [report(1, "leader"), report(2, "follower"), report(3, "follower")]),
        description(1, [report(2, "leader"), report(1, "follower"), report(3, "follower")]),
      ],
    });
    expect(view?.document).toEqual({
      brokers: [0, 1, 2].map((nodeId) => ({
        nodeId,
        host: "127.0.0.1",
        port: 26500 + nodeId,
        version: `v${nodeId}`,
        partitions: [1, 2, 3].map((partitionId) => ({
          partitionId,
          role: partitionId === nodeId + 1 ? "leader" : "follower",
          health: "healthy",
        })),
      })),
      clusterSize: 3,
      partitionsCount: 3,
      replicationFactor: 3,
      gatewayVersion: "0.1.0",
      lastCompletedChangeId: "-1",
    });
    expect(view?.leaders.get(2)).toEqual({ nodeId: 1, term: 1 });
    expect([...(view?.reachable ?? [])].sort()).toEqual([0, 1, 2]);
  });

  it("skips an answer only when merging its text again would give back the very configuration it gave before", () => {
    const older = threeBrokerConfiguration();
    const newer: ClusterConfiguration = { ...older, version: older.version + 1 };
    const first = assembleTopologyView({ ...empty, descriptions: [description(0, [], older)] });
    expect(first?.configurationTexts).toEqual(
      new Map([[0, { text: encodeConfiguration(older), mergedInto: first?.configuration }]]),
    );
    const round = (texts: ReadonlyMap<number, AbsorbedText>) =>
      assembleTopologyView({
        ...empty,
        descriptions: [description(0, [], older), description(1, [], newer)],
        previousConfiguration: first?.configuration,
        previousConfigurationTexts: texts,
      });
    // Broker 1's newer configuration is decoded and wins; broker 0's repeated text is skipped.
    const second = round(first?.configurationTexts ?? new Map());
    expect(second?.configuration.version).toBe(newer.version);
    expect(second?.configurationTexts.get(1)).toEqual({
      text: encodeConfiguration(newer),
      mergedInto: second?.configuration,
    });
    // Broker 0's text was merged into the configuration the newer one replaced: it can never be skipped again.
    expect(second?.configurationTexts.has(0)).toBe(false);
    // What proves the skip: texts claiming that merging broker 1's newer text gave the previous configuration itself.
    const text = encodeConfiguration(newer);
    const claimed = new Map([...(first?.configurationTexts ?? []), [1, { text, mergedInto: first?.configuration }]]);
    expect(round(claimed)?.configuration.version).toBe(older.version);
    // The same text merged into a configuration that has moved on since is merged again.
    const movedOn = new Map([
      ...(first?.configurationTexts ?? []),
      [1, { text, mergedInto: threeBrokerConfiguration() }],
    ]);
    expect(round(movedOn)?.configuration.version).toBe(newer.version);
    // An answer that cannot be decoded is remembered as ignored, and the view keeps what it had.
    const brokenRound = (previous: TopologyView | undefined) =>
      assembleTopologyView({
        ...empty,
        descriptions: [{ ...description(2, []), configuration: "{not json" }],
        previousConfiguration: previous?.configuration,
        previousConfigurationTexts: previous?.configurationTexts ?? new Map(),
      });
    const broken = brokenRound(second);
    expect(broken?.configuration).toBe(second?.configuration);
    expect(broken?.configurationTexts.get(2)).toEqual({ text: "{not json", mergedInto: undefined });
    // Only the brokers that answered the round are remembered: a silent one costs one decoding when it is back.
    expect([...(broken?.configurationTexts.keys() ?? [])]).toEqual([2]);
    expect(brokenRound(broken)?.configurationTexts.get(2)).toBe(broken?.configurationTexts.get(2));
  });

  it("settles, like the brokers, on the configuration that wins when two coordinators recorded different changes", () => {
    // The first round keeps broker 0's change, and a later one must give it up (see `competingChanges`).
    const { ownChange, otherChange, ownChangeBegun } = competingChanges();
    const describeBoth = (broker0: ClusterConfiguration) => [
      { ...description(1, []), configuration: encodeConfiguration(otherChange) },
      { ...description(0, []), configuration: encodeConfiguration(broker0) },
    ];
    let view = assembleTopologyView({ ...empty, descriptions: describeBoth(ownChange) });
    for (let round = 0; round < 3; round += 1) {
      view = assembleTopologyView({
        ...empty,
        descriptions: describeBoth(ownChangeBegun),
        previousConfiguration: view?.configuration,
        previousConfigurationTexts: view?.configurationTexts ?? new Map(),
      });
    }
    const settled = mergeConfigurations(ownChangeBegun, otherChange).configuration;
    expect(view?.configuration.pendingChange?.pending).toEqual(settled.pendingChange?.pending);
    expect(view?.configuration.pendingChange?.pending[0]?.brokerId).toBe(1);
  });

  it("lists a broker that does not answer with its configured partitions as inactive and dead", () => {
    const first = assembleTopologyView({
      ...empty,
      descriptions: [description(0, [report(1, "leader")]), description(1, [report(2, "leader")])],
    });
    const second = assembleTopologyView({
      descriptions: [description(0, [report(1, "leader")])],
      previousAddresses: first?.addresses ?? new Map(),
      askedAddresses: first?.addresses ?? new Map(),
      previousVersions: first?.versions ?? new Map(),
      previousConfiguration: first?.configuration,
      previousConfigurationTexts: first?.configurationTexts ?? new Map(),
      gatewayVersion: "0.1.0",
    });
    const broker1 = second?.document.brokers.find((broker) => broker.nodeId === 1);
    expect(broker1).toEqual({
      nodeId: 1,
      host: "127.0.0.1",
      port: 26501,
      version: "v1",
      partitions: [1, 2, 3].map((partitionId) => ({ partitionId, role: "inactive", health: "dead" })),
    });
    expect(second?.leaders.has(2)).toBe(false);
    expect(second?.document.clusterSize).toBe(3);
    expect([...(second?.silent ?? [])].sort((left, right) => left - right)).toEqual([1, 2]);
  });

  it("counts a broker as silent only once a round asked it: one first heard of in this round's answers is not", () => {
    // Broker 0 tells of brokers 1 and 2, which no round has asked yet (a broker just added to the cluster).
    const first = assembleTopologyView({ ...empty, descriptions: [description(0, [report(1, "leader")])] });
    expect([...(first?.reachable ?? [])]).toEqual([0]);
    expect([...(first?.silent ?? [])]).toEqual([]);
    expect([...(first?.addresses.keys() ?? [])].sort((left, right) => left - right)).toEqual([0, 1, 2]);
    // The next round asks all three; broker 2 answers, broker 1 does not.
    const second = assembleTopologyView({
      ...empty,
      descriptions: [description(0, [report(1, "leader")]), description(2, [report(1, "follower")])],
      previousAddresses: first?.addresses ?? new Map(),
      askedAddresses: first?.addresses ?? new Map(),
      previousConfiguration: first?.configuration,
      previousConfigurationTexts: first?.configurationTexts ?? new Map(),
    });
    expect([...(second?.reachable ?? [])].sort((left, right) => left - right)).toEqual([0, 2]);
    expect([...(second?.silent ?? [])]).toEqual([1]);
  });

  it("does not count a broker silent when an answer of the same round gives it another address", () => {
    const first = assembleTopologyView({ ...empty, descriptions: [description(0, [report(1, "leader")])] });
    // Broker 0 now tells of broker 1 at another port (restarted there); broker 1 did not answer at its old one.
    const moved = description(0, [report(1, "leader")]);
    const second = assembleTopologyView({
      ...empty,
      descriptions: [
        {
          ...moved,
          brokers: moved.brokers.map((address) => (address.nodeId === 1 ? { ...address, port: 27501 } : address)),
        },
      ],
      previousAddresses: first?.addresses ?? new Map(),
      askedAddresses: first?.addresses ?? new Map(),
      previousConfiguration: first?.configuration,
      previousConfigurationTexts: first?.configurationTexts ?? new Map(),
    });
    expect(second?.addresses.get(1)?.port).toBe(27501);
    expect([...(second?.silent ?? [])]).toEqual([2]);
  });

  it("takes the leader with the highest term when two replicas claim leadership", () => {
    const view = assembleTopologyView({
      ...empty,
      descriptions: [description(0, [report(1, "leader", 3)]), description(1, [report(1, "leader", 4)])],
    });
    expect(view?.leaders.get(1)).toEqual({ nodeId: 1, term: 4 });
  });

  it("uses the configuration with the highest version and leaves out brokers that left", () => {
    const base = threeBrokerConfiguration();
    const members = new Map(base.members);
    const member2 = members.get(2);
    if (member2 === undefined) throw new Error("fixture has broker 2");
    members.set(2, { ...member2, state: "LEFT", partitions: new Map() });
    const newer: ClusterConfiguration = { ...base, version: base.version + 2, members };
    const view = assembleTopologyView({
      ...empty,
      descriptions: [description(0, [], newer), description(1, [], base)],
    });
    expect(view?.configuration.version).toBe(base.version + 2);
    expect(view?.document.brokers.map((broker) => broker.nodeId)).toEqual([0, 1]);
    expect(view?.document.clusterSize).toBe(2);
  });

  it("ignores an answer whose configuration cannot be decoded", () => {
    const broken = { ...description(1, [report(2, "leader")]), configuration: "{not json" };
    const view = assembleTopologyView({ ...empty, descriptions: [description(0, []), broken] });
    expect(view?.configuration.version).toBe(threeBrokerConfiguration().version);
    expect(view?.leaders.get(2)?.nodeId).toBe(1);
  });
});

describe("activePartitionIds", () => {
  it("counts base and additional active partitions while partitions are added", () => {
    const base = threeBrokerConfiguration();
    const scaling: ClusterConfiguration = {
      ...base,
      routing: {
        ...base.routing,
        requestHandling: {
          strategy: "ActivePartitions",
          basePartitionCount: 3,
          additionalActivePartitions: [5],
          inactivePartitions: [4],
        },
      },
    };
    expect(activePartitionIds(base)).toEqual([1, 2, 3]);
    expect(activePartitionIds(scaling)).toEqual([1, 2, 3, 5]);
  });
});
