import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { beginOperation, completeOperation, startChange } from "../../../src/cluster/topology/change.js";
import { toConfigurationDocument } from "../../../src/cluster/topology/codec.js";
import {
  type ClusterConfiguration,
  type ClusterOperation,
  initialConfiguration,
  replicasOf,
} from "../../../src/cluster/topology/configuration.js";
import {
  MAX_BROKER_ID,
  MAX_PARTITION_COUNT,
  MAX_REPLICA_COUNT,
  roundRobinReplicas,
} from "../../../src/cluster/topology/distribution.js";
import {
  checkReachability,
  computeScalePlan,
  normalizeBrokerIds,
  PlanningError,
  planAddBroker,
  planForcedRemoval,
  planJoinPartition,
  planLeavePartition,
  planRemoveBroker,
  planRequest,
  planScale,
  reachabilityProblems,
  resolveScaleRequest,
  simulatePlan,
  translateBrokersRequest,
  translatePatch,
} from "../../../src/cluster/topology/planner.js";
import { configurationOf, layoutOfConfiguration, notations, nowIso, roundRobinConfiguration } from "./fixtures.js";

/** The problems of the PlanningError `action` throws; fails the test when it throws nothing or something else. */
function problemsOf(action: () => unknown): readonly string[] {
  try {
    action();
  } catch (error) {
    if (error instanceof PlanningError) return error.problems;
    throw error;
  }
  throw new Error("expected a PlanningError, but nothing was thrown");
}

const patchOn = { force: false, partitionScalingEnabled: true };

/** The configuration after stepping through the change with the same functions the brokers use. */
function stepThrough(
  configuration: ClusterConfiguration,
  operations: readonly ClusterOperation[],
): ClusterConfiguration {
  let current = startChange(configuration, operations, nowIso);
  for (let index = 0; index < operations.length; index += 1) {
    current = completeOperation(beginOperation(current, nowIso), nowIso);
  }
  return current;
}

describe("planner: the spec's test vectors", () => {
  it("1. {0: P1(1) P2(1)}, brokers [0,1] → add 1, move P2", () => {
    const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
    expect(notations(planScale(configuration, { brokers: [0, 1] }))).toEqual([
      "BROKER_ADD 1",
      "JOIN(1,P2,1)",
      "LEAVE(0,P2)",
    ]);
  });

  it("2. the same with RF 2 → 4 operations, a join followed by its reconfiguration", () => {
    const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
    const plan = notations(planScale(configuration, { brokers: [0, 1], replicationFactor: 2 }));
    expect(plan).toHaveLength(4);
    expect(plan[0]).toBe("BROKER_ADD 1");
    expect(plan).toContain("JOIN(1,P2,2)");
    const join = plan.indexOf("JOIN(1,P1,1)");
    expect(join).toBeGreaterThan(0);
    expect(plan[join + 1]).toBe("RECONF(0,P1,2)");
  });

  it("3. RF 0 → 400; an empty broker list → 400", () => {
    const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1], replicationFactor: 0 }))).toEqual([
      "replicationFactor must be a positive integer, got 0",
    ]);
    expect(problemsOf(() => planScale(configuration, { brokers: [] }))).toEqual([
      "the broker list is empty: a cluster needs at least one broker",
    ]);
  });

  it("4. {0: P1(2) P2(1); 1: P1(1) P2(2)}, RF 1 → two leaves and two reconfigurations", () => {
    const configuration = configurationOf({ 0: { 1: 2, 2: 1 }, 1: { 1: 1, 2: 2 } });
    const plan = notations(planScale(configuration, { brokers: [0, 1], replicationFactor: 1 }));
    expect([...plan].sort()).toEqual(["LEAVE(0,P2)", "LEAVE(1,P1)", "RECONF(0,P1,1)", "RECONF(1,P2,1)"]);
  });

  it("5. force keeping [0,2] → force reconfigurations then removals; PATCH force remove [1,3] gives the same", () => {
    const configuration = configurationOf({ 0: { 1: 1 }, 1: { 1: 2 }, 2: { 2: 1 }, 3: { 2: 2 } });
    const expected = [
      "FORCE_RECONFIGURE(0,P1,[0])",
      "FORCE_RECONFIGURE(2,P2,[2])",
      "BROKER_REMOVE(0,[1])",
      "BROKER_REMOVE(0,[3])",
    ];
    expect(notations(planForcedRemoval(configuration, [0, 2]))).toEqual(expected);
    const patch = translatePatch(configuration, { brokers: { remove: [1, 3] } }, { ...patchOn, force: true });
    expect(patch).toEqual({ kind: "forcedRemoval", retainedBrokers: [0, 2] });
    expect(notations(planRequest(configuration, patch))).toEqual(expected);
    const posted = translateBrokersRequest(configuration, [0, "2"], { force: true });
    expect(notations(planRequest(configuration, posted))).toEqual(expected);
    const expectedConfiguration = simulatePlan(configuration, planRequest(configuration, patch), nowIso);
    expect(layoutOfConfiguration(expectedConfiguration)).toEqual({ 0: { 1: 1 }, 2: { 2: 1 } });
  });

  it("6. PATCH add [1] with partitions {count 3, RF 1} → move P2, then scale up to P3", () => {
    const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
    const request = translatePatch(
      configuration,
      { brokers: { add: [1] }, partitions: { count: 3, replicationFactor: 1 } },
      patchOn,
    );
    expect(request).toEqual({ kind: "scale", request: { brokers: [0, 1], replicationFactor: 1, partitionCount: 3 } });
    const plan = planRequest(configuration, request);
    expect(notations(plan)).toEqual([
      "BROKER_ADD 1",
      "JOIN(1,P2,1)",
      "LEAVE(0,P2)",
      "START_PARTITION_SCALE_UP(0)",
      "PARTITION_BOOTSTRAP(0,P3,1)",
      "AWAIT_REDISTRIBUTION(0)",
      "AWAIT_RELOCATION(0)",
    ]);
    const expected = simulatePlan(configuration, plan, nowIso);
    expect(layoutOfConfiguration(expected)).toEqual({ 0: { 1: 1, 3: 1 }, 1: { 2: 1 } });
    expect(expected.routing).toEqual({
      version: 4,
      requestHandling: { strategy: "AllPartitions", partitionCount: 3 },
      messageCorrelation: { strategy: "HashMod", partitionCount: 3 },
    });
  });

  it("7. {1: P1(1) P2(1); 2: —}, brokers [1,2] → move P2 to broker 2", () => {
    const configuration = configurationOf({ 1: { 1: 1, 2: 1 }, 2: {} });
    expect(notations(planScale(configuration, { brokers: [1, 2] }))).toEqual(["JOIN(2,P2,1)", "LEAVE(1,P2)"]);
  });

  it("8. 3 brokers, 3 partitions, RF 3 → brokers 0..5; broker 5 ends with no partitions", () => {
    const configuration = roundRobinConfiguration([0, 1, 2], 3, 3);
    const plan = planScale(configuration, { brokers: [0, 1, 2, 3, 4, 5] });
    expect(notations(plan)).toEqual([
      "BROKER_ADD 3",
      "BROKER_ADD 4",
      "BROKER_ADD 5",
      "JOIN(3,P2,1)",
      "LEAVE(0,P2)",
      "JOIN(3,P3,2)",
      "JOIN(4,P3,1)",
      "LEAVE(0,P3)",
      "LEAVE(1,P3)",
    ]);
    const expected = simulatePlan(configuration, plan, nowIso);
    expect(expected.members.get(5)).toMatchObject({ state: "ACTIVE", partitions: new Map() });
  });

  it("9. 2 brokers, 4 partitions, RF 1 → brokers 0..3", () => {
    const configuration = roundRobinConfiguration([0, 1], 4, 1);
    expect(notations(planScale(configuration, { brokers: [0, 1, 2, 3] }))).toEqual([
      "BROKER_ADD 2",
      "BROKER_ADD 3",
      "JOIN(2,P3,1)",
      "LEAVE(0,P3)",
      "JOIN(3,P4,1)",
      "LEAVE(1,P4)",
    ]);
  });

  it("10. property: the plan yields exactly the round robin of the target (new partitions too), joins before leaves, never below RF", () => {
    const brokerIds = fc.uniqueArray(fc.integer({ min: 0, max: 120 }), { minLength: 1, maxLength: 100 });
    fc.assert(
      fc.property(
        brokerIds,
        fc.integer({ min: 1, max: 100 }),
        fc.integer({ min: 1, max: 4 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 120 }), { minLength: 4, maxLength: 100 }),
        fc.option(fc.integer({ min: 1, max: 4 }), { nil: undefined }),
        fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 20 })),
        (currentBrokers, partitionCount, currentReplicationFactor, targetBrokers, replicationFactor, added) => {
          const configuration = roundRobinConfiguration(currentBrokers, partitionCount, currentReplicationFactor);
          const targetPartitionCount = partitionCount + added;
          const plan = planScale(configuration, {
            brokers: targetBrokers,
            ...(replicationFactor === undefined ? {} : { replicationFactor }),
            ...(added === 0 ? {} : { partitionCount: targetPartitionCount }),
          });
          const effectiveReplicationFactor =
            replicationFactor ?? Math.min(currentReplicationFactor, currentBrokers.length);
          const sortedTarget = [...targetBrokers].sort((left, right) => left - right);

          // Walk the plan on an independent model of the placements.
          const replicas = new Map<number, Map<number, number>>();
          for (let partitionId = 1; partitionId <= partitionCount; partitionId += 1) {
            replicas.set(
              partitionId,
              new Map(replicasOf(configuration, partitionId).map((replica) => [replica.brokerId, replica.priority])),
            );
          }
          const floor = new Map(
            [...replicas].map(([id, hosts]) => [id, Math.min(effectiveReplicationFactor, hosts.size)]),
          );
          const left = new Set<number>();
          for (const operation of plan) {
            const hosts = replicas.get(operation.partitionId ?? 0);
            if (operation.operation === "PARTITION_BOOTSTRAP") {
              expect(replicas.has(operation.partitionId!), "a bootstrap of an existing partition").toBe(false);
              replicas.set(operation.partitionId!, new Map([[operation.brokerId, operation.priority!]]));
            } else if (operation.operation === "PARTITION_JOIN") {
              expect(left.has(operation.partitionId!), "a join after a leave of the same partition").toBe(false);
              hosts!.set(operation.brokerId, operation.priority!);
            } else if (operation.operation === "PARTITION_LEAVE") {
              left.add(operation.partitionId!);
              hosts!.delete(operation.brokerId);
              expect(hosts!.size).toBeGreaterThanOrEqual(floor.get(operation.partitionId!)!);
            } else if (operation.operation === "PARTITION_RECONFIGURE_PRIORITY") {
              hosts!.set(operation.brokerId, operation.priority!);
            }
          }

          // The simulation (the product's own application of the plan) reaches exactly the round robin.
          const expected = simulatePlan(configuration, plan, nowIso);
          expect([...expected.members.keys()]).toEqual(sortedTarget);
          for (let partitionId = 1; partitionId <= targetPartitionCount; partitionId += 1) {
            const target = roundRobinReplicas(sortedTarget, partitionId, effectiveReplicationFactor)
              .map(({ brokerId, priority }) => ({ brokerId, priority, state: "ACTIVE" }))
              .sort((left, right) => left.brokerId - right.brokerId);
            expect(replicasOf(expected, partitionId)).toEqual(target);
            expect(
              [...replicas.get(partitionId)!].sort(([left], [right]) => left - right),
              "the model agrees",
            ).toEqual(target.map(({ brokerId, priority }) => [brokerId, priority]));
          }
          for (const member of expected.members.values()) expect(member.state).toBe("ACTIVE");
          expect(expected.routing.requestHandling).toEqual({
            strategy: "AllPartitions",
            partitionCount: targetPartitionCount,
          });
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe("planner: scale requests", () => {
  const configuration = roundRobinConfiguration([0, 1, 2], 3, 3);

  it("plans nothing when the cluster already has the target", () => {
    expect(planScale(configuration, { brokers: [2, 0, 1] })).toEqual([]);
  });

  it("removes the brokers that leave last, after their partitions moved", () => {
    const plan = notations(planScale(roundRobinConfiguration([0, 1, 2, 3], 4, 2), { brokers: [0, 1, 2] }));
    expect(plan.slice(-1)).toEqual(["BROKER_REMOVE 3"]);
    expect(plan.filter((text) => text.startsWith("BROKER_REMOVE"))).toHaveLength(1);
  });

  it("bootstraps each new partition on its primary, then joins its other replicas", () => {
    const plan = notations(planScale(configuration, { brokers: [0, 1, 2], partitionCount: 4 }));
    expect(plan).toEqual([
      "START_PARTITION_SCALE_UP(0)",
      "PARTITION_BOOTSTRAP(0,P4,3)",
      "JOIN(1,P4,1)",
      "JOIN(2,P4,2)",
      "AWAIT_REDISTRIBUTION(0)",
      "AWAIT_RELOCATION(0)",
    ]);
  });

  it("names the lowest member of the current configuration as coordinator", () => {
    const shifted = roundRobinConfiguration([3, 4], 2, 1);
    const plan = notations(planScale(shifted, { brokers: [1, 3, 4], partitionCount: 3 }));
    expect(plan).toContain("START_PARTITION_SCALE_UP(3)");
    expect(plan.at(-1)).toBe("AWAIT_RELOCATION(3)");
  });

  it("refuses ids that are not non-negative integers, repeated ids, and lists that are not arrays", () => {
    expect(problemsOf(() => planScale(configuration, { brokers: [0, -1, 1.5, "2" as unknown as number] }))).toEqual([
      "broker id -1 is not a non-negative integer",
      "broker id 1.5 is not a non-negative integer",
      'broker id "2" is not a non-negative integer',
    ]);
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 1, 2] }))).toEqual([
      "the broker list lists broker 1 more than once",
    ]);
    expect(problemsOf(() => planScale(configuration, { brokers: "0,1" as unknown as number[] }))).toEqual([
      "the broker list must be an array of broker ids",
    ]);
  });

  it("refuses a negative or fractional replication factor", () => {
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 2], replicationFactor: -1 }))).toEqual([
      "replicationFactor must be a positive integer, got -1",
    ]);
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 2], replicationFactor: 1.5 }))).toEqual([
      "replicationFactor must be a positive integer, got 1.5",
    ]);
  });

  it("refuses fewer brokers than the replication factor, given or derived", () => {
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 2], replicationFactor: 4 }))).toEqual([
      "3 broker(s) are fewer than the replication factor 4: every replica of a partition needs its own broker",
    ]);
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1] }))).toEqual([
      "2 broker(s) are fewer than the replication factor 3: every replica of a partition needs its own broker",
    ]);
  });

  it("refuses a partition count lower than today's or over the maximum, and non-integer counts", () => {
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 2], partitionCount: 2 }))).toEqual([
      "partition count 2 is lower than today's 3: the partition count never shrinks",
    ]);
    expect(
      problemsOf(() => planScale(configuration, { brokers: [0, 1, 2], partitionCount: MAX_PARTITION_COUNT + 1 })),
    ).toEqual([`partition count ${MAX_PARTITION_COUNT + 1} is over the maximum ${MAX_PARTITION_COUNT}`]);
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 2], partitionCount: 0 }))).toEqual([
      "partition count must be a positive integer, got 0",
    ]);
  });

  it("refuses a target of more replicas than a change may plan, before planning anything", () => {
    const brokers = Array.from({ length: MAX_BROKER_ID + 1 }, (_, id) => id);
    const request = { brokers, replicationFactor: 1024, partitionCount: MAX_PARTITION_COUNT };
    expect(problemsOf(() => planScale(configuration, request))).toEqual([
      `the cluster would hold 8387584 replicas (8191 partitions × replication factor 1024), over the maximum ${MAX_REPLICA_COUNT}`,
    ]);
    // At the bound: the most partitions at a replication factor of 3.
    const atBound = { brokers: brokers.slice(0, 8), replicationFactor: 3, partitionCount: MAX_PARTITION_COUNT };
    expect(resolveScaleRequest(configuration, atBound)).toMatchObject({ replicationFactor: 3, partitionCount: 8191 });
    expect(problemsOf(() => resolveScaleRequest(configuration, { ...atBound, replicationFactor: 4 }))).toEqual([
      `the cluster would hold 32764 replicas (8191 partitions × replication factor 4), over the maximum ${MAX_REPLICA_COUNT}`,
    ]);
  });

  it("lists every broken rule at once", () => {
    expect(
      problemsOf(() => planScale(configuration, { brokers: [0, -2], replicationFactor: 0, partitionCount: 1 })),
    ).toEqual([
      "broker id -2 is not a non-negative integer",
      "replicationFactor must be a positive integer, got 0",
      "partition count 1 is lower than today's 3: the partition count never shrinks",
    ]);
  });

  it("refuses adding partitions while the routing is still ActivePartitions (a cancelled scale-up)", () => {
    const stuck: ClusterConfiguration = {
      ...configuration,
      routing: {
        version: 2,
        requestHandling: {
          strategy: "ActivePartitions",
          basePartitionCount: 3,
          additionalActivePartitions: [],
          inactivePartitions: [4],
        },
        messageCorrelation: { strategy: "HashMod", partitionCount: 3 },
      },
    };
    expect(problemsOf(() => planScale(stuck, { brokers: [0, 1, 2], partitionCount: 5 }))[0]).toMatch(
      /routing has not finished/,
    );
  });

  it("refuses to derive a replication factor when no partition has a replica", () => {
    const empty = configurationOf({ 0: {} });
    expect(problemsOf(() => planScale(empty, { brokers: [0, 1] }))).toEqual([
      "no partition has a replica, so the replication factor cannot be derived; pass replicationFactor",
    ]);
  });

  it("resolves defaults; the unchecked computation gives the same plan", () => {
    const resolved = resolveScaleRequest(configuration, { brokers: [5, 0, 1, 2] });
    expect(resolved).toEqual({ brokers: [0, 1, 2, 5], replicationFactor: 3, partitionCount: 3 });
    expect(computeScalePlan(configuration, resolved)).toEqual(planScale(configuration, { brokers: [5, 0, 1, 2] }));
  });

  it("adds again a JOINING member left by a cancelled change, so its partitions can join", () => {
    const base = configurationOf({ 0: { 1: 1, 2: 1 } });
    const leftover: ClusterConfiguration = {
      ...base,
      members: new Map([
        ...base.members,
        [1, { state: "JOINING", version: 1, lastUpdatedAt: nowIso, partitions: new Map() }],
      ]),
    };
    const plan = planScale(leftover, { brokers: [0, 1] });
    expect(notations(plan)).toEqual(["BROKER_ADD 1", "JOIN(1,P2,1)", "LEAVE(0,P2)"]);
    expect(layoutOfConfiguration(simulatePlan(leftover, plan, nowIso))).toEqual({ 0: { 1: 1 }, 1: { 2: 1 } });
  });
});

describe("planner: forced removal", () => {
  const configuration = configurationOf({ 0: { 1: 1 }, 1: { 1: 2 }, 2: { 2: 1 }, 3: { 2: 2 } });

  it("refuses a removal that would leave a partition with no replica", () => {
    expect(problemsOf(() => planForcedRemoval(configuration, [0, 1]))).toEqual([
      "a forced removal would leave partition 2 with no replica: its replicas are on brokers 2, 3, none of them retained",
    ]);
  });

  it("refuses retained brokers that are not members, and bad lists", () => {
    expect(problemsOf(() => planForcedRemoval(configuration, [0, 2, 7]))).toEqual([
      "broker 7 to retain is not a member: a forced removal cannot add brokers",
    ]);
    expect(problemsOf(() => planForcedRemoval(configuration, []))).toEqual([
      "the list of retained brokers is empty: a cluster needs at least one broker",
    ]);
    expect(problemsOf(() => planForcedRemoval(configuration, [-1]))[0]).toBe(
      "broker id -1 is not a non-negative integer",
    );
  });

  it("reconfigures only partitions that lose a replica, by their lowest retained replica", () => {
    const wide = configurationOf({ 0: { 1: 3, 2: 1 }, 1: { 1: 2, 2: 3 }, 2: { 1: 1, 2: 2 }, 3: { 3: 1 }, 4: { 3: 2 } });
    expect(notations(planForcedRemoval(wide, [1, 2, 3]))).toEqual([
      "FORCE_RECONFIGURE(1,P1,[1,2])",
      "FORCE_RECONFIGURE(1,P2,[1,2])",
      "FORCE_RECONFIGURE(3,P3,[3])",
      "BROKER_REMOVE(1,[0])",
      "BROKER_REMOVE(1,[4])",
    ]);
    expect(planForcedRemoval(wide, [0, 1, 2, 3, 4])).toEqual([]);
  });
});

describe("planner: single-operation routes", () => {
  const configuration = configurationOf({ 0: { 1: 2, 2: 1 }, 1: { 1: 1 }, 2: {} });

  it("adds a broker that is not a member, and refuses one that is", () => {
    expect(notations(planAddBroker(configuration, 3))).toEqual(["BROKER_ADD 3"]);
    expect(problemsOf(() => planAddBroker(configuration, 1))).toEqual(["broker 1 is already a member of the cluster"]);
    expect(problemsOf(() => planAddBroker(configuration, -1))).toEqual(["broker id -1 is not a non-negative integer"]);
  });

  it("removes a broker that hosts nothing, and refuses one that hosts partitions or is not a member", () => {
    expect(notations(planRemoveBroker(configuration, 2))).toEqual(["BROKER_REMOVE 2"]);
    expect(problemsOf(() => planRemoveBroker(configuration, 0))).toEqual([
      "broker 0 still hosts partitions 1, 2: move them away first (scale to the brokers without it)",
    ]);
    expect(problemsOf(() => planRemoveBroker(configuration, 9))).toEqual(["broker 9 is not a member of the cluster"]);
  });

  it("joins a partition, and refuses a broker that is not ACTIVE, an unknown partition, a hosted one, a bad priority", () => {
    expect(notations(planJoinPartition(configuration, 2, 1, 3))).toEqual(["JOIN(2,P1,3)"]);
    expect(problemsOf(() => planJoinPartition(configuration, 9, 1, 1))).toEqual([
      "broker 9 is not an ACTIVE member (not a member)",
    ]);
    const joining: ClusterConfiguration = {
      ...configuration,
      members: new Map([
        ...configuration.members,
        [3, { state: "JOINING", version: 1, lastUpdatedAt: nowIso, partitions: new Map() }],
      ]),
    };
    expect(problemsOf(() => planJoinPartition(joining, 3, 1, 1))).toEqual([
      "broker 3 is not an ACTIVE member (JOINING)",
    ]);
    expect(problemsOf(() => planJoinPartition(configuration, 2, 7, 1))).toEqual(["partition 7 does not exist"]);
    expect(problemsOf(() => planJoinPartition(configuration, 1, 1, 3))).toEqual(["broker 1 already hosts partition 1"]);
    expect(problemsOf(() => planJoinPartition(configuration, 2, 1, 0))).toEqual([
      "priority must be an integer ≥ 1, got 0",
    ]);
    expect(problemsOf(() => planJoinPartition(configuration, 2, 0, 1))).toEqual([
      "partition id 0 is not a positive integer",
    ]);
  });

  it("refuses a broker id over the highest a broker can have, in every single operation", () => {
    const over = "broker id 1024 is over the maximum 1023";
    expect(notations(planAddBroker(configuration, 1023))).toEqual(["BROKER_ADD 1023"]);
    expect(problemsOf(() => planAddBroker(configuration, 1024))).toEqual([over]);
    expect(problemsOf(() => planRemoveBroker(configuration, 1024))).toEqual([over]);
    expect(problemsOf(() => planJoinPartition(configuration, 1024, 1, 1))).toEqual([over]);
    expect(problemsOf(() => planLeavePartition(configuration, 1024, 1))).toEqual([over]);
    expect(problemsOf(() => planAddBroker(configuration, 2 ** 53))).toEqual([
      "broker id 9007199254740992 is over the maximum 1023",
    ]);
  });

  it("leaves a partition, and refuses a broker that does not host it or its last replica", () => {
    expect(notations(planLeavePartition(configuration, 1, 1))).toEqual(["LEAVE(1,P1)"]);
    expect(problemsOf(() => planLeavePartition(configuration, 2, 1))).toEqual(["broker 2 does not host partition 1"]);
    expect(problemsOf(() => planLeavePartition(configuration, 0, 2))).toEqual([
      "partition 2 would be left with no replica: broker 0 hosts its only one",
    ]);
  });
});

describe("planner: PATCH translation", () => {
  const configuration = roundRobinConfiguration([0, 1, 2], 3, 1);

  it("adds and removes brokers relative to today's members; count means brokers 0..n-1", () => {
    expect(translatePatch(configuration, { brokers: { add: [4, 3], remove: [0] } }, patchOn)).toEqual({
      kind: "scale",
      request: { brokers: [1, 2, 3, 4] },
    });
    expect(translatePatch(configuration, { brokers: { add: [1] } }, patchOn)).toEqual({
      kind: "scale",
      request: { brokers: [0, 1, 2] },
    });
    expect(translatePatch(configuration, { brokers: { count: 5 } }, patchOn)).toEqual({
      kind: "scale",
      request: { brokers: [0, 1, 2, 3, 4] },
    });
    expect(translatePatch(configuration, {}, patchOn)).toEqual({ kind: "scale", request: { brokers: [0, 1, 2] } });
  });

  it("refuses a broker count or ids beyond the highest broker id before planning anything", () => {
    // A count of a billion became a list of a billion broker ids, which took the coordinator's memory and process.
    expect(problemsOf(() => translatePatch(configuration, { brokers: { count: 1_000_000_000 } }, patchOn))).toEqual([
      "/brokers/count 1000000000 is over the maximum 1024 (broker ids 0..1023)",
    ]);
    expect(translatePatch(configuration, { brokers: { count: 1024 } }, patchOn)).toMatchObject({
      request: { brokers: expect.arrayContaining([0, 1023]) },
    });
    expect(problemsOf(() => translatePatch(configuration, { brokers: { add: [3, 4096] } }, patchOn))).toEqual([
      "/brokers/add/1: broker id 4096 is over the maximum 1023",
    ]);
    expect(problemsOf(() => planScale(configuration, { brokers: [0, 1, 2, 1024] }))).toEqual([
      "broker id 1024 is over the maximum 1023",
    ]);
  });

  it("quotes at most 40 characters of a value it refuses", () => {
    const digits = "9".repeat(10_000);
    expect(problemsOf(() => normalizeBrokerIds([digits]))).toEqual([
      `/0: broker id "${"9".repeat(39)}… (10002 characters) is not a non-negative integer`,
    ]);
    expect(problemsOf(() => normalizeBrokerIds(["4096"]))).toEqual(["/0: broker id 4096 is over the maximum 1023"]);
    // A JSON number too large to be exact arrives rounded, and is still over the maximum.
    expect(problemsOf(() => normalizeBrokerIds(JSON.parse("[0, 1, 9223372036854775807]")))).toEqual([
      "/2: broker id 9223372036854776000 is over the maximum 1023",
    ]);
  });

  it("refuses count together with add or remove", () => {
    for (const brokers of [
      { count: 3, add: [3] },
      { count: 3, remove: [2] },
    ]) {
      expect(problemsOf(() => translatePatch(configuration, { brokers }, patchOn))).toEqual([
        "brokers.count cannot be combined with brokers.add or brokers.remove",
      ]);
    }
  });

  it("refuses the same id in add and remove, and removing a broker that is not a member", () => {
    expect(problemsOf(() => translatePatch(configuration, { brokers: { add: [3, 2], remove: [2] } }, patchOn))).toEqual(
      ["broker 2 is both in brokers.add and brokers.remove"],
    );
    expect(problemsOf(() => translatePatch(configuration, { brokers: { remove: [7] } }, patchOn))).toEqual([
      "broker 7 cannot be removed: it is not a member",
    ]);
  });

  it("refuses force together with partitions, with adding brokers, or with a count", () => {
    const force = { ...patchOn, force: true };
    expect(
      problemsOf(() =>
        translatePatch(
          configuration,
          { brokers: { remove: [2] }, partitions: { count: 3, replicationFactor: 1 } },
          force,
        ),
      ),
    ).toEqual([
      "force=true cannot be combined with partitions (replicationFactor or count): a forced removal only removes brokers",
    ]);
    expect(problemsOf(() => translatePatch(configuration, { brokers: { add: [3] } }, force))).toEqual([
      "force=true cannot be combined with adding brokers",
    ]);
    expect(problemsOf(() => translatePatch(configuration, { brokers: { count: 2 } }, force))).toEqual([
      "force=true cannot be combined with brokers.count",
    ]);
  });

  it("refuses partition scaling while the feature is off, but not a replication factor change", () => {
    const off = { force: false, partitionScalingEnabled: false };
    expect(
      problemsOf(() => translatePatch(configuration, { partitions: { count: 4, replicationFactor: 1 } }, off)),
    ).toEqual([
      "partition scaling is experimental and turned off; set SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLE_PARTITION_SCALING=true " +
        "(or SERVICE_BROKER_EXPERIMENTAL_FEATURES_ENABLEPARTITIONSCALING=true) on every broker to enable it",
    ]);
    expect(translatePatch(configuration, { partitions: { count: 3, replicationFactor: 2 } }, off)).toEqual({
      kind: "scale",
      request: { brokers: [0, 1, 2], replicationFactor: 2, partitionCount: 3 },
    });
  });

  it("refuses bodies of the wrong shape, naming where", () => {
    expect(problemsOf(() => translatePatch(configuration, [1, 2], patchOn))).toEqual([
      'the body must be a JSON object { "brokers"?: {…}, "partitions"?: {…} }',
    ]);
    expect(problemsOf(() => translatePatch(configuration, { brokers: { add: [-1, "x"] }, extra: 1 }, patchOn))).toEqual(
      [
        "/extra is not a known field (expected brokers, partitions)",
        "/brokers/add/0: broker id -1 is not a non-negative integer",
        '/brokers/add/1: broker id "x" is not a non-negative integer',
      ],
    );
    expect(problemsOf(() => translatePatch(configuration, { partitions: { count: 4 } }, patchOn))).toEqual([
      "/partitions/replicationFactor is required",
    ]);
    expect(problemsOf(() => translatePatch(configuration, { brokers: { count: -1 } }, patchOn))).toEqual([
      "/brokers/count must not be negative, got -1",
    ]);
    expect(problemsOf(() => translatePatch(configuration, { brokers: 3 }, patchOn))).toEqual([
      '/brokers must be an object { "add"?: [int], "remove"?: [int], "count"?: int }',
    ]);
  });

  it("passes replication factor and count to the planner, whose rules then apply", () => {
    const zero = translatePatch(configuration, { partitions: { count: 3, replicationFactor: 0 } }, patchOn);
    expect(problemsOf(() => planRequest(configuration, zero))).toEqual([
      "replicationFactor must be a positive integer, got 0",
    ]);
    const lower = translatePatch(configuration, { partitions: { count: 2, replicationFactor: 1 } }, patchOn);
    expect(problemsOf(() => planRequest(configuration, lower))).toEqual([
      "partition count 2 is lower than today's 3: the partition count never shrinks",
    ]);
    const none = translatePatch(configuration, { brokers: { count: 0 } }, patchOn);
    expect(problemsOf(() => planRequest(configuration, none))).toEqual([
      "the broker list is empty: a cluster needs at least one broker",
    ]);
  });
});

describe("planner: POST brokers translation", () => {
  const configuration = roundRobinConfiguration([0, 1, 2], 3, 1);

  it("accepts integers and strings of digits", () => {
    expect(normalizeBrokerIds([0, "1", "03", 4])).toEqual([0, 1, 3, 4]);
    expect(translateBrokersRequest(configuration, ["0", 1, "2", "3"], { force: false, replicationFactor: 2 })).toEqual({
      kind: "scale",
      request: { brokers: [0, 1, 2, 3], replicationFactor: 2 },
    });
  });

  it("refuses a body that is not an array and ids that are not non-negative integers", () => {
    expect(problemsOf(() => normalizeBrokerIds({ brokers: [1] }))).toEqual([
      "the body must be a JSON array of broker ids",
    ]);
    expect(problemsOf(() => normalizeBrokerIds([0, -1, "-1", "1.5", 1.5, "", "x", null, true]))).toEqual([
      "/1: broker id -1 is not a non-negative integer",
      '/2: broker id "-1" is not a non-negative integer',
      '/3: broker id "1.5" is not a non-negative integer',
      "/4: broker id 1.5 is not a non-negative integer",
      '/5: broker id "" is not a non-negative integer',
      '/6: broker id "x" is not a non-negative integer',
      "/7: broker id null is not a non-negative integer",
      "/8: broker id true is not a non-negative integer",
    ]);
    expect(problemsOf(() => normalizeBrokerIds([]))).toEqual([
      "the broker list is empty: a cluster needs at least one broker",
    ]);
    expect(problemsOf(() => normalizeBrokerIds(["3", 3]))).toEqual(["the broker list lists broker 3 more than once"]);
  });

  it("with force: the ids are the brokers to keep; refuses a replication factor and brokers to add", () => {
    expect(translateBrokersRequest(configuration, [0, 1], { force: true })).toEqual({
      kind: "forcedRemoval",
      retainedBrokers: [0, 1],
    });
    expect(
      problemsOf(() => translateBrokersRequest(configuration, [0, 1], { force: true, replicationFactor: 1 })),
    ).toEqual(["force=true cannot be combined with replicationFactor: a forced removal does not redistribute"]);
    expect(problemsOf(() => translateBrokersRequest(configuration, [0, 1, 5], { force: true }))).toEqual([
      "force=true cannot add brokers: 5 is not a member",
    ]);
  });
});

describe("planner: reachability", () => {
  const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
  const plan = planScale(configuration, { brokers: [0, 1] });

  it("refuses a broker to be added that is not reachable, even with force", () => {
    for (const force of [false, true]) {
      expect(reachabilityProblems(plan, { reachableBrokers: new Set([0]), force })).toEqual([
        "broker 1 is to be added but is not running and reachable; start it first",
      ]);
    }
    expect(reachabilityProblems(plan, { reachableBrokers: new Set([0, 1]), force: false })).toEqual([]);
  });

  it("refuses an unreachable broker that must apply an operation unless force is set", () => {
    expect(problemsOf(() => checkReachability(plan, { reachableBrokers: new Set([1]), force: false }))).toEqual([
      "broker 0 is unreachable but must apply PARTITION_LEAVE by broker 0 (partition 2)",
    ]);
    const forced = planForcedRemoval(configurationOf({ 0: { 1: 1 }, 1: { 1: 2 } }), [0]);
    expect(() => checkReachability(forced, { reachableBrokers: new Set([0]), force: true })).not.toThrow();
  });
});

describe("planner: simulation", () => {
  it("gives the expected topology of a dry run; an empty plan expects the current one", () => {
    const configuration = configurationOf({ 0: { 1: 1, 2: 1 } });
    const plan = planScale(configuration, { brokers: [0, 1] });
    const expected = toConfigurationDocument(simulatePlan(configuration, plan, nowIso)).brokers;
    const exporters = { exporting: { exporters: [{ id: "records-file", state: "ENABLED" }] } };
    expect(expected).toEqual([
      {
        id: 0,
        state: "ACTIVE",
        version: 2,
        lastUpdatedAt: nowIso,
        partitions: [{ id: 1, state: "ACTIVE", priority: 1, config: exporters }],
      },
      {
        id: 1,
        state: "ACTIVE",
        version: 4,
        lastUpdatedAt: nowIso,
        partitions: [{ id: 2, state: "ACTIVE", priority: 1, config: exporters }],
      },
    ]);
    expect(simulatePlan(configuration, [], nowIso)).toBe(configuration);
    expect(toConfigurationDocument(simulatePlan(configuration, [], nowIso))).toEqual(
      toConfigurationDocument(configuration),
    );
  });

  it("equals stepping through the change the way the brokers do", () => {
    const cases: [ClusterConfiguration, readonly ClusterOperation[]][] = [
      [
        roundRobinConfiguration([0, 1, 2], 3, 3),
        planScale(roundRobinConfiguration([0, 1, 2], 3, 3), { brokers: [0, 1, 2, 3, 4, 5] }),
      ],
      [
        roundRobinConfiguration([0, 1, 2, 3], 6, 2),
        planScale(roundRobinConfiguration([0, 1, 2, 3], 6, 2), {
          brokers: [1, 2, 4],
          partitionCount: 8,
          replicationFactor: 3,
        }),
      ],
      [
        configurationOf({ 0: { 1: 1 }, 1: { 1: 2 }, 2: { 2: 1 }, 3: { 2: 2 } }),
        planForcedRemoval(configurationOf({ 0: { 1: 1 }, 1: { 1: 2 }, 2: { 2: 1 }, 3: { 2: 2 } }), [0, 2]),
      ],
    ];
    for (const [configuration, plan] of cases) {
      expect(plan.length).toBeGreaterThan(0);
      expect(simulatePlan(configuration, plan, nowIso)).toEqual(stepThrough(configuration, plan));
    }
  });

  it("refuses a plan that cannot apply: the plan fails its simulation", () => {
    const configuration = configurationOf({ 0: { 1: 1 }, 1: { 2: 1 } });
    expect(
      problemsOf(() => simulatePlan(configuration, [{ operation: "BROKER_REMOVE", brokerId: 1 }], nowIso)),
    ).toEqual([
      "the plan fails its simulation: BROKER_REMOVE by broker 1 cannot apply: broker 1 still hosts partitions 2 [broker-hosts-partitions]",
    ]);
  });

  it("works for the product's maximum partition count through the validated entry point", () => {
    const memberIds = Array.from({ length: 10 }, (_, index) => index);
    const configuration = initialConfiguration({
      clusterSize: 10,
      partitionCount: MAX_PARTITION_COUNT - 1,
      replicationFactor: 3,
      distribution: new Map(
        Array.from({ length: MAX_PARTITION_COUNT - 1 }, (_, index) => [
          index + 1,
          roundRobinReplicas(memberIds, index + 1, 3),
        ]),
      ),
      nowIso,
    });
    const plan = planScale(configuration, { brokers: [...memberIds, 10], partitionCount: MAX_PARTITION_COUNT });
    const expected = simulatePlan(configuration, plan, nowIso);
    expect(expected.routing.requestHandling).toEqual({
      strategy: "AllPartitions",
      partitionCount: MAX_PARTITION_COUNT,
    });
    expect(replicasOf(expected, MAX_PARTITION_COUNT)).toHaveLength(3);
  });
});
