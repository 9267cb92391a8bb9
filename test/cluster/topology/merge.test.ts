import { describe, expect, it } from "vitest";
import { encodeConfiguration } from "../../../src/cluster/topology/codec.js";
import {
  type ClusterConfiguration,
  initialConfiguration,
  type MemberState,
} from "../../../src/cluster/topology/configuration.js";
import { roundRobinDistribution } from "../../../src/cluster/topology/distribution.js";
import { mergeConfigurations } from "../../../src/cluster/topology/merge.js";

const nowIso = "2026-11-21T10:15:00.123Z";
const laterIso = "2026-11-21T10:16:00.000Z";

function base(): ClusterConfiguration {
  return initialConfiguration({
    clusterSize: 3,
    partitionCount: 3,
    replicationFactor: 3,
    distribution: roundRobinDistribution([0, 1, 2], 3, 3),
    nowIso,
  });
}

function withMember(configuration: ClusterConfiguration, brokerId: number, member: MemberState): ClusterConfiguration {
  const members = new Map(configuration.members);
  members.set(brokerId, member);
  return { ...configuration, members };
}

function inChange(completedCount: number): ClusterConfiguration {
  const operations = [
    { operation: "BROKER_ADD" as const, brokerId: 3 },
    { operation: "PARTITION_JOIN" as const, brokerId: 3, partitionId: 1, priority: 1 },
    { operation: "PARTITION_LEAVE" as const, brokerId: 0, partitionId: 1 },
  ];
  return {
    ...base(),
    version: 2,
    pendingChange: {
      id: 2,
      status: "IN_PROGRESS",
      startedAt: nowIso,
      completed: operations.slice(0, completedCount).map((operation) => ({ ...operation, completedAt: laterIso })),
      pending: operations.slice(completedCount),
    },
  };
}

describe("gossip merge", () => {
  it("takes the higher version", () => {
    const local = base();
    const remote = { ...base(), version: 3 };
    expect(mergeConfigurations(local, remote)).toEqual({ configuration: remote, changed: true, conflicts: [] });
    const result = mergeConfigurations(remote, local);
    expect(result.configuration).toBe(remote);
    expect(result.changed).toBe(false);
  });

  it("keeps local for an equal configuration at the same version", () => {
    const local = base();
    const result = mergeConfigurations(local, base());
    expect(result.configuration).toBe(local);
    expect(result).toMatchObject({ changed: false, conflicts: [] });
  });

  it("takes, at the same version, the member entries with higher member versions from either side", () => {
    const local = base();
    const member1 = local.members.get(1)!;
    const newer1: MemberState = { ...member1, version: 1, lastUpdatedAt: laterIso, state: "LEAVING" };
    const member2 = local.members.get(2)!;
    const newer2: MemberState = { ...member2, version: 4, lastUpdatedAt: laterIso };
    const joining: MemberState = { state: "JOINING", version: 1, lastUpdatedAt: laterIso, partitions: new Map() };
    const localWithNewer2 = withMember(local, 2, newer2);
    const remote = withMember(withMember(local, 1, newer1), 3, joining);
    const result = mergeConfigurations(localWithNewer2, remote);
    expect(result.changed).toBe(true);
    expect(result.conflicts).toEqual([]);
    expect(result.configuration.members.get(1)).toEqual(newer1);
    expect(result.configuration.members.get(2)).toEqual(newer2);
    expect(result.configuration.members.get(3)).toEqual(joining);
    expect([...result.configuration.members.keys()]).toEqual([0, 1, 2, 3]);
    // Merging is symmetric in content.
    expect(mergeConfigurations(remote, localWithNewer2).configuration).toEqual(result.configuration);
  });

  it("takes the pending change that has completed more operations", () => {
    const behind = inChange(1);
    const ahead = inChange(2);
    expect(mergeConfigurations(behind, ahead)).toMatchObject({ changed: true, conflicts: [] });
    expect(mergeConfigurations(behind, ahead).configuration.pendingChange).toEqual(ahead.pendingChange);
    expect(mergeConfigurations(ahead, behind)).toMatchObject({ changed: false, conflicts: [] });
  });

  it("keeps the earlier instant of an operation two brokers both completed, whichever way they merge", () => {
    const first = inChange(2);
    const pending = first.pendingChange!;
    const second: ClusterConfiguration = {
      ...first,
      pendingChange: {
        ...pending,
        completed: pending.completed.map((operation, position) =>
          position === 1 ? { ...operation, completedAt: nowIso } : operation,
        ),
      },
    };
    const ahead = inChange(3);
    for (const [local, remote] of [
      [first, second],
      [second, first],
    ] as const) {
      const result = mergeConfigurations(local, remote);
      expect(result.conflicts).toEqual([]);
      expect(result.configuration.pendingChange?.completed.map((operation) => operation.completedAt)).toEqual([
        laterIso,
        nowIso,
      ]);
    }
    // With one side further on, the longer progress is taken, with the earlier instant of the operation both hold.
    const merged = mergeConfigurations(second, ahead);
    expect(merged.conflicts).toEqual([]);
    expect(merged.configuration.pendingChange?.completed.map((operation) => operation.completedAt)).toEqual([
      laterIso,
      nowIso,
      laterIso,
    ]);
    expect(mergeConfigurations(ahead, second).configuration.pendingChange).toEqual(merged.configuration.pendingChange);
  });

  it("keeps the earlier end of a change two brokers both ended by completing its last operation, whichever way they merge", () => {
    const ended = (completedAt: string): ClusterConfiguration => ({
      ...base(),
      version: 3,
      lastChange: { id: 2, status: "COMPLETED", startedAt: nowIso, completedAt },
    });
    const earlier = ended(nowIso);
    const later = ended(laterIso);
    for (const [local, remote] of [
      [earlier, later],
      [later, earlier],
    ] as const) {
      const result = mergeConfigurations(local, remote);
      expect(result.conflicts).toEqual([]);
      expect(result.configuration.lastChange?.completedAt).toBe(nowIso);
      expect(result.changed).toBe(local === later);
    }
    // The same change ended another way (cancelled on one side) is a different end: one whole configuration wins.
    const cancelled: ClusterConfiguration = { ...earlier, lastChange: { ...earlier.lastChange!, status: "CANCELLED" } };
    expect(mergeConfigurations(earlier, cancelled).conflicts[0]).toMatch(/two different changes were recorded/);
  });

  it("keeps the earlier of two member entries that two brokers edited alike at different instants", () => {
    const local = base();
    const member2 = local.members.get(2)!;
    const removedAt = (lastUpdatedAt: string): ClusterConfiguration =>
      withMember(local, 2, { ...member2, state: "LEFT", version: member2.version + 1, lastUpdatedAt });
    const earlier = removedAt(nowIso);
    const later = removedAt(laterIso);
    for (const [left, right] of [
      [earlier, later],
      [later, earlier],
    ] as const) {
      const result = mergeConfigurations(left, right);
      expect(result.conflicts).toEqual([]);
      expect(result.configuration.members.get(2)?.lastUpdatedAt).toBe(nowIso);
    }
  });

  it("takes the routing state with the higher routing version", () => {
    const local = base();
    const remote: ClusterConfiguration = {
      ...local,
      routing: { ...local.routing, version: 2, messageCorrelation: { strategy: "HashMod", partitionCount: 4 } },
    };
    const result = mergeConfigurations(local, remote);
    expect(result.configuration.routing).toEqual(remote.routing);
    expect(result.conflicts).toEqual([]);
  });

  it("reports contradictions at the same version and keeps local", () => {
    const local = base();
    const member0 = local.members.get(0)!;
    const sameVersionOther = withMember(local, 0, { ...member0, state: "LEAVING" });
    const result = mergeConfigurations(local, sameVersionOther);
    expect(result.conflicts).toEqual(["broker 0 has member version 0 on both sides with different contents"]);
    expect(result.configuration).toBe(local);
    expect(result.changed).toBe(false);

    expect(
      mergeConfigurations(local, {
        ...local,
        routing: { ...local.routing, messageCorrelation: { strategy: "HashMod", partitionCount: 9 } },
      }).conflicts,
    ).toEqual(["routing has version 1 on both sides with different contents"]);
  });
});

describe("gossip merge of two different changes recorded at the same version", () => {
  it("converges: both sides take the same whole configuration, whichever way they merge", () => {
    const local = base();
    const otherPlan = inChange(1);
    const diverged: ClusterConfiguration = {
      ...otherPlan,
      pendingChange: { ...otherPlan.pendingChange!, pending: [] },
    };
    const completed: ClusterConfiguration = {
      ...local,
      lastChange: { id: 1, status: "COMPLETED", startedAt: nowIso, completedAt: nowIso },
    };
    for (const [left, right] of [
      [inChange(1), diverged],
      [inChange(1), { ...inChange(1), pendingChange: null }],
      [local, completed],
    ] as [ClusterConfiguration, ClusterConfiguration][]) {
      const leftWins = mergeConfigurations(left, right);
      const rightWins = mergeConfigurations(right, left);
      expect(leftWins.conflicts).toHaveLength(1);
      expect(leftWins.conflicts[0]).toMatch(/two different changes were recorded at version/);
      expect(encodeConfiguration(leftWins.configuration)).toBe(encodeConfiguration(rightWins.configuration));
      expect([left, right]).toContain(leftWins.configuration);
      expect(leftWins.changed).toBe(leftWins.configuration !== left);
    }
  });
});

describe("gossip merge of the history of earlier changes", () => {
  const earlier = { id: 1, status: "COMPLETED", startedAt: nowIso, completedAt: nowIso } as const;
  const withHistory = (configuration: ClusterConfiguration): ClusterConfiguration => ({
    ...configuration,
    version: 5,
    lastChange: { id: 3, status: "CANCELLED", startedAt: nowIso, completedAt: nowIso },
    earlierChanges: [earlier],
    pendingChange: configuration.pendingChange === null ? null : { ...configuration.pendingChange, id: 5 },
  });

  it("takes the longer history from a broker that kept none, and still merges the running change's progress", () => {
    // A broker of an older version keeps no history but applied more of the running change.
    const local = withHistory(inChange(1));
    const olderBroker: ClusterConfiguration = { ...withHistory(inChange(2)), earlierChanges: [] };
    const merged = mergeConfigurations(local, olderBroker);
    expect(merged.conflicts).toEqual([]);
    expect(merged.changed).toBe(true);
    expect(merged.configuration.pendingChange).toEqual(olderBroker.pendingChange);
    expect(merged.configuration.earlierChanges).toEqual([earlier]);
    const other = mergeConfigurations(olderBroker, local);
    expect(other.conflicts).toEqual([]);
    expect(other.configuration.earlierChanges).toEqual([earlier]);
    expect(other.configuration.pendingChange).toEqual(olderBroker.pendingChange);
  });

  it("reports histories that contradict each other and keeps the local one", () => {
    const local = withHistory(base());
    const remote: ClusterConfiguration = { ...local, earlierChanges: [{ ...earlier, status: "CANCELLED" }] };
    const merged = mergeConfigurations(local, remote);
    expect(merged.conflicts).toEqual(["the histories of earlier changes differ before the same last change"]);
    expect(merged.configuration).toBe(local);
  });
});

describe("gossip merge equality", () => {
  it("does not see a conflict in equal values built in a different order", () => {
    const local = base();
    const member0 = local.members.get(0)!;
    const reordered: MemberState = {
      partitions: new Map([...member0.partitions.entries()].reverse()),
      lastUpdatedAt: member0.lastUpdatedAt,
      version: member0.version,
      state: member0.state,
    };
    const result = mergeConfigurations(local, withMember(local, 0, reordered));
    expect(result).toMatchObject({ changed: false, conflicts: [] });
    expect(result.configuration).toBe(local);
  });
});
