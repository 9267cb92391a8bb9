import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  DistributionError,
  fixedDistribution,
  type PartitionDistribution,
  roundRobinDistribution,
} from "../../../src/cluster/topology/distribution.js";

/** Writes a distribution in the spec's notation: `P1 0:3 1:2 2:1 · P2 …`. */
function notation(distribution: PartitionDistribution): string {
  return [...distribution.entries()]
    .map(
      ([partitionId, replicas]) =>
        `P${partitionId} ${replicas.map(({ brokerId, priority }) => `${brokerId}:${priority}`).join(" ")}`,
    )
    .join(" · ");
}

function problemsOf(action: () => unknown): readonly string[] {
  try {
    action();
  } catch (error) {
    if (error instanceof DistributionError) return error.problems;
    throw error;
  }
  return [];
}

describe("round-robin distribution", () => {
  it("matches the spec's example (4 brokers, 5 partitions, RF 3)", () => {
    expect(notation(roundRobinDistribution([3, 1, 0, 2], 5, 3))).toBe(
      "P1 0:3 1:2 2:1 · P2 1:3 2:2 3:1 · P3 2:3 3:2 0:1 · P4 3:3 0:2 1:1 · P5 0:3 1:1 2:2",
    );
  });

  it("sorts ids numerically and uses them, not their positions", () => {
    expect(notation(roundRobinDistribution([10, 2, 7], 2, 2))).toBe("P1 2:2 7:1 · P2 7:2 10:1");
  });

  it("uses every broker when there are fewer brokers than the replication factor", () => {
    expect(notation(roundRobinDistribution([0, 1], 2, 3))).toBe("P1 0:3 1:2 · P2 1:3 0:2");
  });

  it("refuses invalid input", () => {
    expect(problemsOf(() => roundRobinDistribution([], 1, 1))).toEqual(["at least one broker is needed"]);
    expect(problemsOf(() => roundRobinDistribution([0, 0], 1, 1))[0]).toMatch(/not distinct/);
    expect(problemsOf(() => roundRobinDistribution([-1], 1, 1))[0]).toMatch(/broker id -1/);
    expect(problemsOf(() => roundRobinDistribution([0], 0, 1))[0]).toMatch(/partition count/);
    expect(problemsOf(() => roundRobinDistribution([0], 1, 0))[0]).toMatch(/replication factor/);
  });

  it("gives every partition min(RF, n) distinct replicas, one primary, and spreads the load", () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 200 }), { minLength: 1, maxLength: 30 }),
        fc.integer({ min: 1, max: 100 }),
        fc.integer({ min: 1, max: 5 }),
        (memberIds, partitionCount, replicationFactor) => {
          const distribution = roundRobinDistribution(memberIds, partitionCount, replicationFactor);
          const replicaCount = Math.min(replicationFactor, memberIds.length);
          const load = new Map(memberIds.map((id) => [id, 0]));
          const primaries = new Map(memberIds.map((id) => [id, 0]));
          expect([...distribution.keys()]).toEqual(Array.from({ length: partitionCount }, (_, index) => index + 1));
          for (const replicas of distribution.values()) {
            expect(replicas).toHaveLength(replicaCount);
            expect(new Set(replicas.map((replica) => replica.brokerId)).size).toBe(replicaCount);
            expect(new Set(replicas.map((replica) => replica.priority)).size).toBe(replicaCount);
            expect(replicas.filter((replica) => replica.priority === replicationFactor)).toHaveLength(1);
            expect(replicas[0]?.priority).toBe(replicationFactor);
            for (const replica of replicas) {
              expect(replica.priority).toBeGreaterThanOrEqual(1);
              load.set(replica.brokerId, (load.get(replica.brokerId) ?? 0) + 1);
            }
            const primary = replicas[0]!.brokerId;
            primaries.set(primary, (primaries.get(primary) ?? 0) + 1);
          }
          // Replicas per broker differ by at most min(k, P mod n); primaries per broker by at most one.
          const spread = (counts: Map<number, number>) => Math.max(...counts.values()) - Math.min(...counts.values());
          expect(spread(load)).toBeLessThanOrEqual(Math.min(replicaCount, partitionCount % memberIds.length));
          expect(spread(primaries)).toBeLessThanOrEqual(1);
        },
      ),
    );
  });
});

describe("fixed distribution", () => {
  const sizes = { clusterSize: 3, partitionCount: 2, replicationFactor: 2 };

  it("accepts a complete scheme and keeps its order", () => {
    const distribution = fixedDistribution({
      ...sizes,
      partitions: [
        {
          partitionId: 2,
          brokers: [
            { brokerId: 2, priority: 1 },
            { brokerId: 0, priority: 5 },
          ],
        },
        {
          partitionId: 1,
          brokers: [
            { brokerId: 0, priority: 2 },
            { brokerId: 1, priority: 1 },
          ],
        },
      ],
    });
    expect(distribution.get(2)).toEqual([
      { brokerId: 2, priority: 1 },
      { brokerId: 0, priority: 5 },
    ]);
    expect(distribution.get(1)).toHaveLength(2);
  });

  it("names the partition and broker that are wrong", () => {
    const problems = problemsOf(() =>
      fixedDistribution({
        ...sizes,
        partitions: [
          {
            partitionId: 1,
            brokers: [
              { brokerId: 0, priority: 1 },
              { brokerId: 3, priority: 2 },
            ],
          },
          {
            partitionId: 1,
            brokers: [
              { brokerId: 0, priority: 1 },
              { brokerId: 1, priority: 2 },
            ],
          },
          {
            partitionId: 3,
            brokers: [
              { brokerId: 0, priority: 1 },
              { brokerId: 1, priority: 2 },
            ],
          },
        ],
      }),
    );
    expect(problems).toEqual([
      "partition 1 is listed more than once",
      "partition 1: broker 3 is outside 0..2",
      "partition 3 is outside 1..2",
      "partition 2 has no replicas assigned",
    ]);
  });

  it("refuses wrong replica counts, repeated brokers and bad or repeated priorities", () => {
    const problems = problemsOf(() =>
      fixedDistribution({
        ...sizes,
        partitions: [
          { partitionId: 1, brokers: [{ brokerId: 0, priority: 1 }] },
          {
            partitionId: 2,
            brokers: [
              { brokerId: 1, priority: 0 },
              { brokerId: 1, priority: 2 },
            ],
          },
        ],
      }),
    );
    expect(problems).toEqual([
      "partition 1 has 1 replicas, but the replication factor is 2",
      "partition 2: broker 1 has priority 0, which is not an integer ≥ 1",
      "partition 2: broker 1 is listed more than once",
    ]);
    expect(
      problemsOf(() =>
        fixedDistribution({
          ...sizes,
          partitions: [
            {
              partitionId: 1,
              brokers: [
                { brokerId: 0, priority: 1 },
                { brokerId: 1, priority: 1 },
              ],
            },
            {
              partitionId: 2,
              brokers: [
                { brokerId: 0, priority: 1 },
                { brokerId: 1, priority: 2 },
              ],
            },
          ],
        }),
      ),
    ).toEqual(["partition 1: priority 1 is used by more than one replica"]);
  });

  it("refuses sizes that cannot work", () => {
    expect(
      problemsOf(() => fixedDistribution({ clusterSize: 2, partitionCount: 1, replicationFactor: 3, partitions: [] })),
    ).toEqual(["replication factor 3 is larger than the cluster size 2"]);
  });
});
